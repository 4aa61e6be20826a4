"""Real inputs tried by hand as a data engineer would (issue 15): CSV files joined with `cat`,
a JSON field only in records that end up quarantined. Each case checks the reason, the accounting
identity, and that nothing outside the dataset changed."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

import gpuetl


def _run(tmp_path, source: dict, **extra):
    spec = {"version": 1, "name": "t", "source": source, "sink": {"path": "out", "mode": "overwrite"}, **extra}
    return gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")


def _balanced(result) -> bool:
    c = result.counts
    return c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]


def _quarantine(out) -> list[dict]:
    return pq.read_table(out / "_quarantine").to_pylist() if (out / "_quarantine").exists() else []


@pytest.mark.parametrize("blocksize", [8, 64, "1MiB"])
@pytest.mark.parametrize("typed", [False, True])
def test_csv_header_repeated_inside_a_file_is_quarantined(tmp_path, surroundings, blocksize, typed):
    """`cat a.csv b.csv > all.csv`: the second header was a data row, kept silently when every
    column is a string. A quoted repeat counts too; a row that only resembles it stays."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "all.csv").write_bytes(
        b'id,name\n1,"a\nb"\n2,name\nid,name\n3,c\n"id","name"\n4,d\n')
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = _run(tmp_path, {"type": "csv", "path": "in/*.csv", "blocksize": blocksize},
                      **({"columns": {"id": "int64"}} if typed else {}))
    assert _balanced(result) and result.counts["rows_in"] == 6 and result.counts["quarantined"] == 2
    rows = pq.read_table(out, columns=["id", "name"]).to_pylist()
    assert [str(r["id"]) for r in rows] == ["1", "2", "3", "4"] and rows[0]["name"] == "a\nb"
    bad = _quarantine(out)
    assert [r["_raw"] for r in bad] == [b"id,name", b'"id","name"']
    assert all("repeats the header" in r["_reason"] for r in bad)


def test_csv_files_with_their_own_header_order_each_catch_their_repeat(tmp_path, surroundings):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.csv").write_bytes(b"id,name\n1,a\n")
    (tmp_path / "in" / "b.csv").write_bytes(b"name,id\nb,2\nname,id\nc,3\n")
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = _run(tmp_path, {"type": "csv", "path": "in/*.csv"})
    assert _balanced(result) and result.counts["rows_out"] == 3 and result.counts["quarantined"] == 1
    assert _quarantine(out)[0]["_raw"] == b"name,id"


def test_a_field_only_in_quarantined_records_is_not_said_to_be_missing(tmp_path, surroundings):
    """The warning for a declared column null in every row said 'no record has the field' when
    the records that had it were quarantined."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"n": "12x", "service.name": "svc"}\n{"n": 5}\n')
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = _run(tmp_path, {"type": "jsonl", "path": "in/*.jsonl"},
                      columns={"n": "int64", "service.name": "string"})
    assert _balanced(result) and result.counts["quarantined"] == 1
    (note,) = [n for n in result.manifest["notes"] if "null in every row" in n]
    assert "no record has the field" not in note and "quarantined or filtered out" in note


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_number_past_the_float_range_is_a_bad_value_not_infinity(tmp_path, surroundings, kind):
    """Text "1e400" in a float64 column (or "1e39" in float32) became inf silently; "inf" said
    so and stays."""
    (tmp_path / "in").mkdir()
    values = ["1e400", "-1e400", "inf", "-Infinity", "1e308", "1e39"]
    if kind == "csv":
        (tmp_path / "in" / "a.csv").write_text("x,y\n" + "".join(f"{v},{v}\n" for v in values[:5]) + "1,1e39\n")
    else:
        (tmp_path / "in" / "a.jsonl").write_text("".join(f'{{"x": "{v}", "y": "{v}"}}\n' for v in values[:5])
                                                 + '{"x": "1", "y": "1e39"}\n')
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = _run(tmp_path, {"type": kind, "path": f"in/*.{kind}"}, columns={"x": "float64", "y": "float32"})
    assert _balanced(result) and result.counts["rows_out"] == 2 and result.counts["quarantined"] == 4
    rows = pq.read_table(out).to_pylist()
    assert [r["x"] for r in rows] == [float("inf"), float("-inf")]
    assert all("not a valid float" in r["_reason"] for r in _quarantine(out))


def test_a_log_file_named_with_bytes_that_are_not_utf8_keeps_its_quarantine(tmp_path, surroundings):
    """Writing the quarantine's `_file` of such a file was an internal UnicodeEncodeError."""
    folder = tmp_path / "in"
    folder.mkdir()
    with open(os.path.join(os.fsencode(folder), b"\xff.log"), "wb") as fh:
        fh.write(b"good\n\xff\xfe\n")
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = _run(tmp_path, {"type": "text", "path": "in/*.log"})
    assert _balanced(result) and result.counts["rows_out"] == 1 and result.counts["quarantined"] == 1
    (bad,) = _quarantine(out)
    assert bad["_file"] == "in/\ufffd.log" and bad["_raw"] == b"\xff\xfe"


def test_a_declared_path_differing_only_in_case_suggests_that_path(tmp_path, surroundings):
    """`user.ID` was answered with "did you mean 'user'?" (difflib's nearest string)."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"user": {"id": 1}, "duration_ms": 3}\n')
    with surroundings(tmp_path):
        with pytest.raises(gpuetl.errors.SpecError, match=r"columns\.user\.ID: .*did you mean 'user\.id'\?"):
            _run(tmp_path, {"type": "jsonl", "path": "in/*.jsonl"}, columns={"user.ID": "int64"})
    assert not (tmp_path / "out").exists()
