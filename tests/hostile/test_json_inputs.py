"""Hostile JSON lines (#15): typos, nested and mislabelled values, schemas that drift across
files, huge and deep nesting, a byte-order mark. Each case checks the clear error or the
quarantine row, the accounting identity, and that nothing outside the dataset changed."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.errors import SpecError

from .test_sources import assert_identity


def spec(columns=None, path="*.jsonl", **over) -> dict:
    s = {"version": 1, "name": "t", "source": {"type": "jsonl", "path": path, "provenance": True},
         "sink": {"path": "out", "mode": "overwrite"}, **over}
    if columns is not None:
        s["columns"] = columns
    return s


def run(base, s):
    result = gpuetl.Pipeline.from_dict(s, base_dir=base).run(backend="cpu", scheduler="sync")
    assert_identity(result)
    return result


def rows(result):
    return pq.read_table(result.out_dir / "part-00000.parquet").to_pylist()


def quarantined(result):
    files = sorted((result.out_dir / "_quarantine").glob("*.parquet"))
    return {r["_raw"].decode("utf-8", "replace"): r["_reason"] for f in files for r in pq.read_table(f).to_pylist()}


def lines(*records) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def test_a_typo_in_columns_stops_validate_with_the_real_name(tmp_path, surroundings):
    (tmp_path / "a.jsonl").write_text(lines({"duration_ms": 5, "user": {"id": 1}}))
    with surroundings(tmp_path):
        with pytest.raises(SpecError, match="did you mean 'duration_ms'"):
            gpuetl.Pipeline.from_dict(spec({"duraton_ms": "int64"}), base_dir=tmp_path).plan()
    assert not (tmp_path / "out").exists()


def test_mislabelled_values_are_cast_or_quarantined_with_their_reason(tmp_path, surroundings):
    (tmp_path / "a.jsonl").write_text(lines(
        {"status": "190", "ok": True, "ms": "1e3"}, {"status": "12x", "ok": True}, {"status": 1.0},
        {"status": 200, "ok": "true"}, {"status": True}, {"status": [200]}, {"status": {"code": 200}},
        {"status": "99999999999999999999"}, {"status": " 7 ", "ms": 2}))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"status": "int16", "ok": "bool", "ms": "float64"}))
    assert [(r["status"], r["ok"], r["ms"]) for r in rows(result)] == [(190, True, 1000.0), (7, None, 2.0)]
    reasons = quarantined(result)
    assert reasons['{"status": "12x", "ok": true}'] == "field 'status': \"12x\" is not a valid int16"
    assert reasons['{"status": 1.0}'] == "field 'status': expected int16, got 1.0"
    assert reasons['{"status": 200, "ok": "true"}'] == "field 'ok': expected bool, got \"true\""
    assert reasons['{"status": true}'].startswith("field 'status': expected int16")
    assert reasons['{"status": [200]}'].startswith("field 'status': expected int16")
    assert reasons['{"status": "99999999999999999999"}'].endswith("is not a valid int16")
    assert len(reasons) == 7


def test_nested_paths_through_wrong_kinds_are_quarantined_not_nulled(tmp_path, surroundings):
    (tmp_path / "a.jsonl").write_text(lines(
        {"user": {"id": 1}, "items": [{"sku": "a"}]}, {"user": [1], "items": [{"sku": "b"}]},
        {"user": {"id": 3}, "items": {"sku": "c"}}, {"user": {"id": 4}, "items": ["d"]},
        {"user": {"id": {"deep": 1}}}, {"service.name": "flat", "user": {"id": 6}}))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"user.id": "int64", "items[0].sku": "string"}))
    assert [(r["user.id"], r["items[0].sku"]) for r in rows(result)] == [(1, "a"), (6, None)]
    assert sorted(quarantined(result).values()) == [
        "field 'items[0].sku': items is an object, not an array",
        "field 'items[0].sku': items[0] is a string, not an object",
        "field 'user.id': expected int64, got {\"deep\": 1}",
        "field 'user.id': user is an array, not an object"]


def test_schema_drift_across_files_is_named_in_the_plan_and_kept_as_source_text(tmp_path, surroundings):
    (tmp_path / "a.jsonl").write_text(lines({"id": 1, "geo": {"lat": 1.0}}))
    (tmp_path / "b.jsonl").write_text(lines({"id": 2}) * 100 + lines({"id": 3, "geo": "52.1,4.3"}))
    with surroundings(tmp_path):
        notes = gpuetl.Pipeline.from_dict(spec(), base_dir=tmp_path).plan().notes
    assert any("'geo' is an object in a.jsonl (byte 0) and a scalar in b.jsonl (byte 1000)" in n for n in notes)
    inferred = run(tmp_path, spec())
    assert [r["geo"] for r in rows(inferred) if r["geo"]] == ['{"lat": 1.0}', '"52.1,4.3"']
    (tmp_path / "out").rename(tmp_path / "inferred")
    # declared as text, the same inputs run: the object kept as its JSON text
    result = run(tmp_path, spec({"id": "int64", "geo": "string"}))
    assert [r["geo"] for r in rows(result) if r["geo"]] == ['{"lat": 1.0}', "52.1,4.3"]


def test_types_widening_across_files(tmp_path):
    (tmp_path / "a.jsonl").write_text(lines({"n": 1, "f": 1, "b": True}))
    (tmp_path / "b.jsonl").write_text(lines({"n": 2, "f": 2.5, "b": 0}))
    result = run(tmp_path, spec())
    assert result.manifest["inferred_schema"] == {"n": "int64", "f": "float64", "b": "string"}
    assert [(r["n"], r["f"], r["b"]) for r in rows(result)] == [(1, 1.0, "true"), (2, 2.5, "0")]


def test_deep_and_huge_nesting_never_crash_the_run(tmp_path, surroundings):
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    wide = json.dumps({"a": 1, "big": {f"k{i}": i for i in range(1000)}})
    long_list = json.dumps({"a": 2, "xs": list(range(20_000))})
    (tmp_path / "a.jsonl").write_text(lines({"a": 0, "xs": [1], "big": {"k0": 0}}, deep, wide, long_list))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec())
    schema = result.manifest["inferred_schema"]
    assert schema["xs"] == "list<int64>" and schema["big"].startswith("struct<k0: int64")
    out = rows(result)
    assert [r["a"] for r in out] == [0, 1, 2]
    assert len(out[2]["xs"]) == 20_000 and out[1]["big"]["k999"] == 999
    assert list(quarantined(result).values()) == ["invalid JSON: nested too deeply to read"]


def test_deep_objects_past_the_inference_depth_stay_json_text(tmp_path):
    nested = {"v": 1}
    for _ in range(12):
        nested = {"n": nested}
    (tmp_path / "a.jsonl").write_text(lines({"id": 1, "tree": nested}))
    result = run(tmp_path, spec())
    assert result.manifest["inferred_schema"]["tree"].count("struct<") == 8
    value, expected = rows(result)[0]["tree"], nested
    for _ in range(8):
        value, expected = value["n"], expected["n"]
    assert json.loads(value) == expected


def test_byte_order_mark_on_the_first_line(tmp_path, surroundings):
    (tmp_path / "a.jsonl").write_bytes(b'\xef\xbb\xbf{"a": 1}\n{"a": "\xef\xbb\xbfx"}\n')
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"a": "string"}))
    assert [r["a"] for r in rows(result)] == ["1", "\ufeffx"]


def test_keys_that_look_like_bookkeeping_or_paths(tmp_path):
    (tmp_path / "a.jsonl").write_text(lines({"_id": 1, "a.b": 2, "a": {"b": 3}, "x[0]": "flat"}))
    result = run(tmp_path, spec({"_id": "int64", "a.b": "int64", "x[0]": "string"}))
    assert rows(result) == [{"_id": 1, "a.b": 2, "x[0]": "flat", "_file": "a.jsonl", "_offset": 0}]
    with pytest.raises(SpecError, match="_extra"):
        gpuetl.Pipeline.from_dict(spec({"_extra": "string"}), base_dir=tmp_path).plan()


def test_extra_fields_keep_holds_exactly_the_other_keys(tmp_path, surroundings):
    (tmp_path / "a.jsonl").write_text(lines({"a": 1, "b": {"c": [1, None]}, "d": "\u00e9"}, {"a": 2}, "not json"))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"a": "int64"}, extra_fields="keep"))
    assert [(r["a"], r["_extra"]) for r in rows(result)] == [(1, '{"b": {"c": [1, null]}, "d": "é"}'), (2, None)]
    assert result.counts["quarantined"] == 1


def _drifting_records(n=3000):
    """Numbers that drift to strings now and then (valid and not), one nested, a bad record, a
    record with white space around it and one with an escaped key: the block reader refuses
    every batch of them as a whole."""
    out = []
    for i in range(n):
        rec = {"ms": i, "user": {"id": i}, "tag": f"t{i}"}
        if i % 37 == 5:
            rec["ms"] = str(i)                       # a number written as a string: cast
        if i % 101 == 7:
            rec["user"]["id"] = f"{i}"               # the same, nested
        if i % 211 == 9:
            rec["tag"] = i                           # a number in a string column: its text
        out.append(json.dumps(rec))
    out[1500] = '{"ms": "12x", "user": {"id": 1}, "tag": "a"}'
    out[1700] = '{"ms": 1, "user": {"id": 1}, "tag": "a"'
    out[2000] = '  {"ms": 2000, "user": {"id": 2000}, "tag": "t2000"}  '
    out[2100] = '{"m\\u0073": "2100", "user": {"id": 2100}, "tag": "t2100"}'
    return "".join(line + "\n" for line in out)


@pytest.mark.parametrize("blocksize", [1 << 20, 8 << 10])
def test_values_drifting_to_strings_leave_the_other_records_to_the_block_reader(tmp_path, surroundings, blocksize,
                                                                                monkeypatch):
    """A batch the block reader refuses is not read record by record whole: only the records
    the refusal points at are, and the rows are those of reading every record carefully."""
    from gpuetl.backends import cpu_json

    (tmp_path / "a.jsonl").write_text(_drifting_records())
    s = spec({"ms": "int64", "user.id": "int64", "tag": "string"})
    s["source"]["blocksize"] = blocksize
    careful_records = []
    read_carefully = cpu_json._read_carefully
    monkeypatch.setattr(cpu_json, "_read_carefully", lambda backend, arr, *rest:
                        careful_records.append(len(arr)) or read_carefully(backend, arr, *rest))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, s)
    got = rows(result)
    assert result.counts["quarantined"] == 2 and len(got) == 2998
    assert set(quarantined(result).values()) == {"field 'ms': \"12x\" is not a valid int64",
                                                 "invalid JSON: Expecting ',' delimiter"}
    by_ms = {r["ms"]: r for r in got}
    assert by_ms[5] == {"ms": 5, "user.id": 5, "tag": "t5", "_file": "a.jsonl", "_offset": by_ms[5]["_offset"]}
    assert by_ms[9]["tag"] == "9" and by_ms[7]["user.id"] == 7 and by_ms[2100]["ms"] == 2100
    assert sum(careful_records) < 3000 // 8            # the block reader read the rest

    monkeypatch.setattr(cpu_json, "_read_blocks", lambda arr, careful, read: (None, careful | True))
    careful_records.clear()
    (tmp_path / "out").rename(tmp_path / "fast")
    every = run(tmp_path, s)
    assert sum(careful_records) == 3000
    assert rows(every) == got


def test_bad_records_the_reader_cannot_name_are_found_in_short_runs(monkeypatch):
    """A refusal that names no field (invalid JSON, an integer too large for int64): the
    refused runs are read again in pieces, and only short runs around the bad records, or a
    run mostly refused, go to the careful reader."""
    import pandas as pd

    from gpuetl.backends import cpu_json
    from gpuetl.backends.cpu import CpuBackend
    from gpuetl.sources.json_fields import JsonColumn, JsonRead

    lines = [json.dumps({"a": i}) for i in range(4000)]
    lines[100], lines[3000] = '{"a": 1', '{"a": 99999999999999999999}'
    careful = []
    read_carefully = cpu_json._read_carefully
    monkeypatch.setattr(cpu_json, "_read_carefully",
                        lambda backend, arr, *rest: careful.append(len(arr)) or read_carefully(backend, arr, *rest))
    b = CpuBackend()
    cols, ok, reasons = b.parse_json(b.series(pd.Series(lines), "string"), JsonRead((JsonColumn("a", "int64", None),)))
    assert sum(careful) <= 2 * cpu_json.SMALL_RUN
    assert np.flatnonzero(~ok.to_numpy()).tolist() == [100, 3000]
    assert cols["a"].tolist()[:3] == [0, 1, 2] and cols["a"].tolist()[3999] == 3999
    assert reasons[100].startswith("invalid JSON") and "int64" in reasons[3000]

    careful.clear()
    dense = [line if i % 3 else '{"a" 1}' for i, line in enumerate(lines)]     # a third refused, unnamed
    cols, ok, reasons = b.parse_json(b.series(pd.Series(dense), "string"), JsonRead((JsonColumn("a", "int64", None),)))
    assert careful == [4000]
    assert np.flatnonzero(~ok.to_numpy()).tolist() == [i for i in range(4000) if i % 3 == 0 or i == 100]


def test_a_lone_surrogate_escape_is_a_bad_record_not_a_crash(tmp_path, surroundings):
    r"""`"\ud800"` is valid JSON text but no character: Python's json reads it, UTF-8 cannot hold
    it. The record is quarantined; a proper pair (an emoji) is read."""
    (tmp_path / "a.jsonl").write_text('{"a": "x\\ud800y", "n": 1}\n{"a": "\\ud83d\\ude00", "n": 2}\n'
                                      '{"a": "ok", "n": 3}\n{"b": {"k\\uDC00": 1}, "n": 4}\n')
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"a": "string", "n": "int64"}, extra_fields="keep"))
    assert [(r["a"], r["n"]) for r in rows(result)] == [("\U0001F600", 2), ("ok", 3)]
    assert set(quarantined(result).values()) == {
        "invalid JSON: a \\u escape is half of a surrogate pair, not a character"}
    assert result.counts["quarantined"] == 2
