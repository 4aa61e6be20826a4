"""jsonl and csv sources: typed and sampled fields, header lines, bad records with reasons."""

from __future__ import annotations

import gzip
import json

import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.errors import SpecError
from gpuetl.samples import write_app_events


def run(tmp_path, source, columns=None, out="out", **over):
    s = {"version": 1, "name": "t", "source": {"blocksize": 1 << 20, **source},
         "sink": {"path": out, "mode": "overwrite"}, **over}
    if columns is not None:
        s["columns"] = columns
    result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    c = result.counts
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    return result


def table(result):
    return pq.read_table(result.out_dir / "part-00000.parquet")


def quarantine(result):
    files = sorted((result.out_dir / "_quarantine").glob("part-*.parquet"))
    return sorted((r for f in files for r in pq.read_table(f).to_pylist()), key=lambda r: (r["_file"], r["_offset"]))


# -- jsonl -----------------------------------------------------------------------------------------

JSONL = (
    '{"id": 1, "name": "a", "score": 1.5, "ok": true, "tags": [1, 2], "ts": "2024-01-01T00:00:00Z"}\n'
    '{"id": 2, "name": null, "score": 2}\r\n'
    'not json\n'
    '[1, 2]\n'
    '{"id": "three", "name": "c"}\n'
    '{"id": 4.5}\n'
    '{"id": 5, "extra": {"x": 1}}\n'
    '\n'
    '{"id": 6, "ok": "yes"}\n'
    '{"id": 7, "score": 1e400}\n'          # out of float64 range: bad (json.loads reads inf, JSON has none)
    '{"id":'
)
JSON_COLUMNS = {"id": "int64", "name": "string", "score": "float64", "ok": "bool", "ts": "timestamp"}


def _offsets(text: str) -> dict[str, int]:
    out, pos = {}, 0
    for line in text.encode().split(b"\n"):
        out[line.decode().rstrip("\r")] = pos
        pos += len(line) + 1
    return out


@pytest.mark.parametrize("blocksize", [9, 1 << 20])
def test_jsonl_typed_columns(tmp_path, blocksize):
    (tmp_path / "a.jsonl").write_text(JSONL)
    result = run(tmp_path, {"type": "jsonl", "path": "a.jsonl", "provenance": True, "blocksize": blocksize},
                 JSON_COLUMNS)
    t = table(result)
    assert t.schema.names == ["id", "name", "score", "ok", "ts", "_file", "_offset"]
    assert str(t.schema.field("ts").type) == "timestamp[us, tz=UTC]"
    assert str(t.schema.field("id").type) == "int64"
    rows = t.to_pylist()
    assert [(r["id"], r["name"], r["score"], r["ok"]) for r in rows] == [
        (1, "a", 1.5, True), (2, None, 2.0, None), (5, None, None, None)]
    assert rows[0]["ts"].isoformat() == "2024-01-01T00:00:00+00:00"
    off = _offsets(JSONL)
    assert [r["_offset"] for r in rows] == [0, off['{"id": 2, "name": null, "score": 2}'],
                                            off['{"id": 5, "extra": {"x": 1}}']]
    q = quarantine(result)
    reasons = {r["_raw"].decode(): r["_reason"] for r in q}
    assert reasons["not json"].startswith("invalid JSON")
    assert reasons["[1, 2]"] == "expected a JSON object, got an array"
    assert reasons['{"id": "three", "name": "c"}'] == "field 'id': \"three\" is not a valid int64"
    assert reasons['{"id": 4.5}'] == "field 'id': expected int64, got 4.5"
    assert reasons['{"id": 6, "ok": "yes"}'].startswith("field 'ok': expected bool")
    assert reasons['{"id":'].startswith("invalid JSON")
    assert reasons['{"id": 7, "score": 1e400}'] == "field 'score': 1e400 is out of float64's range"
    assert all(r["_offset"] == off[r["_raw"].decode()] for r in q)
    assert result.counts["rows_in"] == 10
    assert result.counts["quarantined"] == len(q) == 7


def test_jsonl_sampled_fields(tmp_path):
    lines = [{"id": 1, "name": "a", "score": 1, "ok": True, "nested": {"k": [1]}},
             {"id": 2, "name": None, "score": 2.5, "ok": False},
             {"id": 3, "mixed": 1}, {"id": 4, "mixed": "x"}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + "oops\n")
    result = run(tmp_path, {"type": "jsonl", "path": "a.jsonl"})
    t = table(result)
    assert {f.name: str(f.type) for f in t.schema} == {
        "id": "int64", "name": "string", "score": "double", "ok": "bool",
        "nested": "struct<k: list<element: int64>>", "mixed": "string"}
    assert t.to_pylist() == [
        {"id": 1, "name": "a", "score": 1.0, "ok": True, "nested": {"k": [1]}, "mixed": None},
        {"id": 2, "name": None, "score": 2.5, "ok": False, "nested": None, "mixed": None},
        {"id": 3, "name": None, "score": None, "ok": None, "nested": None, "mixed": "1"},
        {"id": 4, "name": None, "score": None, "ok": None, "nested": None, "mixed": "x"},
    ]
    assert [(r["_raw"], r["_reason"][:12]) for r in quarantine(result)] == [(b"oops", "invalid JSON")]


def test_jsonl_fast_and_slow_paths_agree(tmp_path):
    """One bad record sends a block to the record-by-record parser; the good records of that
    block must come out exactly as they do from the whole-block reader."""
    good = [{"id": i, "name": f"n{i}", "score": i / 4, "ok": i % 2 == 0, "ts": "2024-05-06T07:08:09+02:00"}
            for i in range(20)]
    body = "".join(json.dumps(x) + "\n" for x in good)
    (tmp_path / "clean").mkdir()
    (tmp_path / "dirty").mkdir()
    (tmp_path / "clean" / "a.jsonl").write_text(body)
    (tmp_path / "dirty" / "a.jsonl").write_text(body + "{broken\n")
    clean = table(run(tmp_path, {"type": "jsonl", "path": "clean/a.jsonl"}, JSON_COLUMNS, out="o1"))
    dirty = run(tmp_path, {"type": "jsonl", "path": "dirty/a.jsonl"}, JSON_COLUMNS, out="o2")
    assert table(dirty).equals(clean)
    assert dirty.counts["quarantined"] == 1


def test_jsonl_gzip_and_sample_generator(tmp_path):
    write_app_events(tmp_path / "ev.jsonl", lines=300)
    raw = (tmp_path / "ev.jsonl").read_bytes()
    (tmp_path / "gz").mkdir()
    (tmp_path / "gz" / "ev.jsonl.gz").write_bytes(gzip.compress(raw))
    plain = run(tmp_path, {"type": "jsonl", "path": "ev.jsonl", "blocksize": 4096}, out="o1")
    packed = run(tmp_path, {"type": "jsonl", "path": "gz/*.gz"}, out="o2")
    assert plain.counts == packed.counts
    assert plain.counts["rows_in"] == len([x for x in raw.split(b"\n") if x.strip()])
    assert table(plain).equals(table(packed))


def test_jsonl_with_no_objects_to_sample(tmp_path):
    (tmp_path / "a.jsonl").write_text("1\n[2]\nnope\n")
    with pytest.raises(SpecError, match="no JSON objects"):
        run(tmp_path, {"type": "jsonl", "path": "a.jsonl"})


def test_jsonl_invalid_utf8(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(b'{"id": 1}\n{"id": 2, "name": "\xff"}\n')
    result = run(tmp_path, {"type": "jsonl", "path": "a.jsonl"}, {"id": "int64", "name": "string"})
    assert table(result).column("id").to_pylist() == [1]
    assert [(r["_offset"], r["_reason"]) for r in quarantine(result)] == [(10, "invalid UTF-8")]


# -- csv -------------------------------------------------------------------------------------------

def _csv_files(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "1.csv").write_bytes(
        b'a,b,c\r\n1,x,"q,uoted"\r\n2,y\r\n3,"z""q",w\r\n4,u,v,extra\r\n6,,\r\n')
    (tmp_path / "in" / "2.csv").write_bytes(b"a,b,c\n7,p,q\n8,r,s")
    (tmp_path / "in" / "3.csv").write_bytes(b"a,b,c\n")          # header only
    (tmp_path / "in" / "4.csv").write_bytes(b"a,b,c\n" + b"".join(b"%d,k%d,v\n" % (i, i) for i in range(10, 20)))


@pytest.mark.parametrize("blocksize", [1, 6, 64, 1 << 20])
def test_csv_header_never_becomes_a_row(tmp_path, blocksize):
    _csv_files(tmp_path)
    result = run(tmp_path, {"type": "csv", "path": "in/*.csv", "provenance": True, "blocksize": blocksize},
                 {"a": "int32"})
    rows = table(result).to_pylist()
    assert [(r["a"], r["b"], r["c"]) for r in rows][:6] == [
        (1, "x", "q,uoted"), (3, 'z"q', "w"), (6, None, None), (7, "p", "q"), (8, "r", "s"), (10, "k10", "v")]
    assert [r["a"] for r in rows] == [1, 3, 6, 7, 8] + list(range(10, 20))
    assert all(r["_offset"] > 0 for r in rows)
    q = quarantine(result)
    assert [(r["_file"], r["_offset"], r["_raw"], r["_reason"]) for r in q] == [
        ("in/1.csv", 22, b"2,y", "CSV record does not have 3 fields"),
        ("in/1.csv", 39, b"4,u,v,extra", "CSV record does not have 3 fields"),
    ]
    assert result.counts["rows_in"] == 15 + 2
    plan = gpuetl.Pipeline.from_dict(
        {"version": 1, "name": "t", "source": {"type": "csv", "path": "in/*.csv", "blocksize": blocksize},
         "sink": {"path": "out"}}, base_dir=tmp_path).plan()
    assert len(plan.partitions) >= (4 if blocksize < 64 else 1)


def test_csv_semicolon_delimiter_and_gzip(tmp_path):
    body = b"x;y\n1;a,b\n2;c\n"
    (tmp_path / "a.csv.gz").write_bytes(gzip.compress(body))
    result = run(tmp_path, {"type": "csv", "path": "a.csv.gz", "delimiter": ";"}, {"x": "int8"})
    assert table(result).to_pylist() == [{"x": 1, "y": "a,b"}, {"x": 2, "y": "c"}]


def test_csv_unknown_column_is_a_spec_error(tmp_path):
    (tmp_path / "a.csv").write_text("alpha,beta\n1,2\n")
    with pytest.raises(SpecError, match="did you mean 'alpha'"):
        run(tmp_path, {"type": "csv", "path": "a.csv"}, {"alpah": "int32"})


def test_csv_empty_first_file_is_a_spec_error(tmp_path):
    (tmp_path / "a.csv").write_text("")
    with pytest.raises(SpecError, match="no header line"):
        run(tmp_path, {"type": "csv", "path": "a.csv"})


def test_csv_header_after_leading_blank_line(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"\na,b\n1,2\n")
    result = run(tmp_path, {"type": "csv", "path": "a.csv"})
    assert table(result).to_pylist() == [{"a": "1", "b": "2"}]


def test_csv_header_with_byte_order_mark(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"\xef\xbb\xbfa,b\n1,2\n")
    result = run(tmp_path, {"type": "csv", "path": "a.csv"}, {"a": "int32"})
    assert table(result).to_pylist() == [{"a": 1, "b": "2"}]


def test_csv_unterminated_quote_is_quarantined(tmp_path):
    """RFC 4180: a quote that never closes holds the rest of the file; that one record is bad."""
    (tmp_path / "a.csv").write_bytes(b'a,b,c\n1,2,3\n4,u,v,extra\n5,"open,w\n  \n6,,\n')
    result = run(tmp_path, {"type": "csv", "path": "a.csv", "provenance": True})
    assert [(r["a"], r["b"], r["c"]) for r in table(result).to_pylist()] == [("1", "2", "3")]
    assert [(r["_raw"], r["_reason"]) for r in quarantine(result)] == [
        (b"4,u,v,extra", "CSV record does not have 3 fields"),
        (b'5,"open,w\n  \n6,,', "CSV record has an unterminated quote (a quoted field runs to the end of the file)")]


@pytest.mark.parametrize("strict", [False, True])
def test_jsonl_values_must_have_their_json_type(tmp_path, strict):
    """true is not 1 and 2.5 is not an int64; "4" is 4 (the text rules), except under strict."""
    (tmp_path / "e.jsonl").write_text('{"n": 1, "b": true}\n{"n": "4", "b": true}\n{"n": 2, "b": 1}\n'
                                      '{"n": 2.5, "b": false}\n{"n": null, "b": null}\n')
    spec = {"version": 1, "name": "j", "source": {"type": "jsonl", "path": "e.jsonl"}, "strict": strict,
            "columns": {"n": "int64", "b": "bool"}, "sink": {"path": "out"}}
    from gpuetl import Pipeline

    result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts["rows_out"] == (2 if strict else 3)
    assert result.counts["quarantined"] == (3 if strict else 2)
    assert sorted(result.bad_records) == ["field 'b': expected bool, got 1"] + (
        ["field 'n': expected int64, got \"4\""] if strict else []) + ["field 'n': expected int64, got 2.5"]
