"""Quarantine reasons grouped by kind (gpuetl/runtime/reasons.py)."""

from __future__ import annotations

import pytest

from gpuetl.runtime.reasons import group_reasons, reason_kind


@pytest.mark.parametrize("reason, kind", [
    ("int16: '99999' is out of range", "int16: <value> is out of range"),
    ("column 'n': value is not a valid uint8", "column 'n': value is not a valid uint8"),   # a name stays
    ("field 'n': expected int64, got \"4\"", "field 'n': expected int64, got <value>"),
    ("field 'n': expected int64, got 2.5", "field 'n': expected int64, got <n>"),
    ("invalid JSON: Expecting ',' delimiter: line 1 column 5 (char 4)",
     "invalid JSON: Expecting <value> delimiter: line <n> column <n> (char <n>)"),
    ("cannot read /data/in/x.png (3 bytes)", "cannot read <path> (<n> bytes)"),
    ("b.log:12: it's odd", "<path>:<n>: it's odd"),
    ("line does not match the regex", "line does not match the regex"),
    ("'unterminated", "'unterminated"),
    ("invalid UTF-8", "invalid UTF-8"),                                  # a name's number stays
    ("field 'n': expected int64, got -3", "field 'n': expected int64, got <n>"),
])
def test_reason_kind_normalises_values_numbers_and_paths(reason, kind):
    assert reason_kind(reason) == kind


def test_group_reasons_counts_every_reason_and_keeps_the_commonest_example():
    tallies = {f"int16: '{v}' is out of range": 1 for v in range(70000, 70425)}
    tallies["int16: '99999' is out of range"] = 5
    tallies["line does not match the regex"] = 3
    kinds = group_reasons(tallies)
    assert list(kinds) == ["int16: <value> is out of range", "line does not match the regex"]
    assert kinds["int16: <value> is out of range"] == {"count": 430, "example": "int16: '99999' is out of range"}
    assert sum(k["count"] for k in kinds.values()) == sum(tallies.values())


def test_a_run_groups_all_reasons_in_the_manifest_beyond_the_top_50(tmp_path):
    """80 distinct bad values: bad_records keeps its top 50, bad_record_kinds counts all 80."""
    lines = [f'{{"n": "{i}", "b": true}}' for i in range(80)] + ['{"n": 1, "b": 1}', '{"n": 2, "b": true}']
    (tmp_path / "e.jsonl").write_text("\n".join(lines) + "\n")
    spec = {"version": 1, "name": "j", "source": {"type": "jsonl", "path": "e.jsonl"},
            "columns": {"n": "int64", "b": "bool"}, "strict": True,     # strict: "0" is not an int64
            "sink": {"path": "out"}}
    from gpuetl import Pipeline

    result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    c = result.counts
    assert c["rows_in"] == c["rows_out"] + c["quarantined"] == 82 and c["quarantined"] == 81
    assert len(result.bad_records) == 50
    kinds = result.manifest["bad_record_kinds"]
    assert kinds == {"field 'n': expected int64, got <value>": {"count": 80, "example": "field 'n': expected int64, got \"0\""},
                     "field 'b': expected bool, got <n>": {"count": 1, "example": "field 'b': expected bool, got 1"}}
    import json

    assert json.loads((tmp_path / "out" / "_manifest.json").read_text())["bad_record_kinds"] == kinds
