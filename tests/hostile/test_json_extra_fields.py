"""Hostile extra fields of JSON lines (#15): under `extra_fields: drop` every top-level field no
column reads is counted, per field, over the records it was left out of, however late, rare,
nested or oddly spelt it is; under `keep` the block reader reads the columns and `_extra` holds
exactly the text Python's json writes. Each case checks the counts or the text, the accounting
identity, and that nothing outside the dataset changed."""

from __future__ import annotations

import gzip
import json
import unicodedata

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.backends import get_backend
from gpuetl.backends.cpu_json import _read_carefully, parse_json
from gpuetl.sources.json_fields import JsonColumn, JsonRead

from .test_sources import assert_identity


def spec(columns, path="*.jsonl", blocksize="1MiB", **over) -> dict:
    return {"version": 1, "name": "t", "source": {"type": "jsonl", "path": path, "blocksize": blocksize},
            "columns": columns, "sink": {"path": "out", "mode": "overwrite"}, **over}


def run(base, s):
    result = gpuetl.Pipeline.from_dict(s, base_dir=base).run(backend="cpu", scheduler="sync")
    assert_identity(result)
    return result


def lines(records) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def dropped(result) -> dict:
    return result.manifest["extra_fields"]["dropped"]


def test_a_field_only_in_late_records_is_counted_exactly(tmp_path, surroundings):
    """Past what the plan samples (the head of a compressed file): not in the sample, counted."""
    records = [{"a": i} for i in range(30000)] + [{"a": 1, "late": i} for i in range(7)] + [{"a": 2}] * 5
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(lines(records).encode()))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"a": "int64"}, path="a.jsonl.gz"))
    assert "late" not in result.manifest["extra_fields"].get("sampled", [])
    assert dropped(result) == {"late": 7}
    assert result.counts["rows_out"] == 30012
    assert any("1 field(s) not in columns were dropped: late (7 records)" in n for n in result.manifest["notes"])


def test_a_field_only_in_one_file_of_many_across_partitions(tmp_path, surroundings):
    for k in range(4):
        extra = [{"a": i, "only3": {"x": i}} for i in range(3)] if k == 3 else []
        (tmp_path / f"{k}.jsonl").write_text(lines([{"a": i, "b": "x" * 50} for i in range(2000)] + extra))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"a": "int64"}, blocksize="32KiB"))
    assert dropped(result) == {"b": 8000, "only3": 3}


def test_nested_extras_count_once_under_their_top_level_name(tmp_path, surroundings):
    """An extra field holding objects with the declared names inside, and a declared object
    with fields its type does not name: only top-level fields count; the columns are unchanged."""
    records = [{"a": 1, "u": {"id": 1, "name": "x"}, "g": {"lat": 1.0, "alt": 9}, "meta": {"a": 2, "u": {"id": 3}}},
               {"a": 2, "u": {"id": 2, "geo": {"lat": 1.5}}, "g": {"lon": 2.0, "lat": 3.0}, "meta": [[{"u": 1}]]},
               {"a": 3, "u": None, "g": [{"lat": 1}], "meta": {}}]
    (tmp_path / "a.jsonl").write_text(lines(records))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"a": "int64", "u.id": "int64", "g": "struct<lat: float64, lon: float64>"}))
    assert dropped(result) == {"meta": 3}      # the third record too: read as an object, then quarantined
    assert result.counts["quarantined"] == 1
    assert pq.read_table(result.out_dir / "part-00000.parquet").to_pylist() == [
        {"a": 1, "u.id": 1, "g": {"lat": 1.0, "lon": None}}, {"a": 2, "u.id": 2, "g": {"lat": 3.0, "lon": 2.0}}]


def test_keys_differing_by_case_or_unicode_normalisation_are_other_fields(tmp_path, surroundings):
    nfc, nfd = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    records = [{"name": "a", nfc: 1}, {"Name": "b", nfd: 2}, {"NAME": "c", "name": "d"}, {"name\u200b": "e"}]
    (tmp_path / "a.jsonl").write_text(lines(records))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"name": "string", nfc: "int64"}))
    assert dropped(result) == {"Name": 1, "NAME": 1, nfd: 1, "name\u200b": 1}
    assert pq.read_table(result.out_dir / "part-00000.parquet").to_pylist() == [
        {"name": "a", nfc: 1}, {"name": None, nfc: None}, {"name": "d", nfc: None}, {"name": None, nfc: None}]


def test_extras_of_drifting_kinds_nulls_and_escaped_keys(tmp_path, surroundings):
    """An extra field that is a number, a string, an object and an array in turn (the block reader
    refuses its batch: those records go to the careful reader, counted alike); a null value is not
    counted (nothing is lost); a key written with escapes counts under the name it spells, and
    `\\u0061` is the declared `a`. Bad records are quarantined, not counted."""
    body = (lines([{"a": 1, "v": 1}, {"a": 2, "v": "s"}, {"a": 3, "v": {"x": 1}}, {"a": 4, "v": [1, "x"]},
                   {"a": 5, "v": None, "w": None}, {"a": "6", "v": 2}])
            + '{"\\u0061": 7, "q\\"uote": 1, "\\u00e9": true}\n' + '{"a": 8, "v": \n' + "[1, 2]\n")
    (tmp_path / "a.jsonl").write_text(body)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"a": "int64"}))
    assert result.counts["quarantined"] == 2 and result.counts["rows_out"] == 7
    assert dropped(result) == {"v": 5, 'q"uote': 1, "é": 1}
    assert [r["a"] for r in pq.read_table(result.out_dir / "part-00000.parquet").to_pylist()] == [1, 2, 3, 4, 5, 6, 7]


def test_extras_python_cannot_read_are_counted_as_pyarrow_reads_them(tmp_path, surroundings):
    """An extra field nested 2,000 or 200,000 deep, or an integer of 5,000 digits (past Python's
    limits; the record is read as pyarrow's reader reads it): still counted, under its own name.
    (Python's json stops at 1,000 levels on 3.11, 1,500 on 3.12. pyarrow's reader, inferring the
    extra fields, takes time growing with the square of the depth: 4,000 levels took 5 s, so
    200,000 would take hours; such records are read and their keys found in time linear in their
    length.)"""
    deep = '{"a": 2, "d": ' + "[" * 2000 + "]" * 2000 + "}"
    deeper = '{"a": 4, "e\\"": {"x": ' + '{"k": [' * 100_000 + "]}" * 100_000 + '}, "f": null, "g": "}"}'
    huge = '{"a": 3, "n": ' + "9" * 5000 + ', "m": null}'
    (tmp_path / "a.jsonl").write_text('{"a": 1, "d": 1}\n' + deep + "\n" + huge + "\n" + deeper + "\n")
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"a": "int64"}))
    assert result.counts["rows_out"] == 4
    assert dropped(result) == {"d": 2, "n": 1, 'e"': 1, "g": 1}
    assert [r["a"] for r in pq.read_table(result.out_dir / "part-00000.parquet").to_pylist()] == [1, 2, 3, 4]


def test_counts_survive_steps_and_a_global_step(tmp_path, surroundings):
    """Filtered, deduplicated and quarantined records had their fields dropped too: the count is
    of records read, and it reaches the manifest through a dedupe across partitions."""
    records = [{"a": i % 50, "x": i, "t": "2026-01-01T00:00:00Z" if i % 7 else "nope"} for i in range(3000)]
    (tmp_path / "a.jsonl").write_text(lines(records))
    s = spec({"a": "int64", "t": "timestamp"}, blocksize="16KiB",
             steps=[{"filter": "a > 2"}, {"dedupe": {"on": ["a"]}}])
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, s)
    assert result.counts["filtered"] > 0 and result.counts["deduplicated"] > 0 and result.counts["quarantined"] > 0
    assert dropped(result) == {"x": 3000}


def test_no_extra_fields_is_said_too(tmp_path, surroundings):
    (tmp_path / "a.jsonl").write_text(lines([{"a": 1}, {"a": 2, "b": None}]))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"a": "int64", "b": "string"}))
    assert dropped(result) == {}
    assert "source: no record had a field that is not in columns" in result.manifest["notes"]


KEEP_RECORDS = [
    {"a": 1}, {"a": 2, "x": {"y": [1, 2.5, None]}, "z": "é\u2028\"q\""}, {"x": 1e300, "a": None, "big": 2**70},
    {"a": 3, "u": {"id": 1, "more": [{}]}, "emoji": "😀", "esc": "\\n\t"}, {"a": 4, "f": 1.0, "g": -0.0},
]


def test_keep_writes_the_same_text_as_the_careful_reader():
    """The `_extra` text the block path writes is the careful reader's, record for record
    (order of keys, floats, non-ASCII, escapes, integers over int64)."""
    backend = get_backend("cpu")
    read = JsonRead((JsonColumn("a", "int64", None), JsonColumn("u.id", "int64", ("u", "id"))), extra="keep")
    text = [json.dumps(r, ensure_ascii=False) for r in KEEP_RECORDS]
    text += ['{"a": 5, "s": "\\ud800"}', '{"a": 6, "s": "\\u00e9"}']
    arr = pa.array(text, pa.string())
    cols, ok, _ = parse_json(backend, pd.Series(pd.arrays.ArrowExtensionArray(arr)), read)
    careful_cols, careful_ok, _ = _read_carefully(backend, arr, read)
    assert list(ok) == list(careful_ok) == [True] * 5 + [False, True]
    assert pa.array(cols["_extra"]).to_pylist() == careful_cols["_extra"].to_pylist()
    assert pa.array(cols["_extra"]).to_pylist()[:3] == [None, '{"x": {"y": [1, 2.5, null]}, "z": "é\u2028\\"q\\""}',
                                                         f'{{"x": 1e+300, "big": {2**70}}}']
    assert pa.array(cols["a"]).to_pylist() == careful_cols["a"].to_pylist()


def test_keep_takes_records_python_cannot_write_back_to_the_careful_reader(tmp_path, surroundings):
    deep = '{"a": 1, "d": ' + "[" * 5000 + "]" * 5000 + "}"
    body = lines(KEEP_RECORDS) + deep + "\n" + '{"a": 9, "s": "\\udc00x"}\n'
    (tmp_path / "a.jsonl").write_text(body)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"a": "int64"}, extra_fields="keep"))
    out = pq.read_table(result.out_dir / "part-00000.parquet").to_pylist()
    assert [r["a"] for r in out][:5] == [1, 2, None, 3, 4]
    assert result.counts["rows_in"] == 7
    assert out[1]["_extra"] == '{"x": {"y": [1, 2.5, null]}, "z": "é\u2028\\"q\\""}'


@pytest.mark.slow
def test_dropped_fields_and_pins_cross_worker_processes_with_their_frames(tmp_path, surroundings):
    """On a cluster of worker processes a partition's counters are pickled with its frame from
    task to task (read, dedupe's keys and marks, the spill): the manifest's dropped fields and
    input pins are those of a run in this process, and every record is accounted for."""
    records = [{"a": i % 40, "b": "x" * 20, **({"gone": i} if i % 4 == 0 else {})} for i in range(3000)]
    (tmp_path / "a.jsonl").write_text(lines(records))
    s = spec({"a": "int64"}, blocksize="16KiB", extra_fields="drop", steps=[{"dedupe": {"on": ["a"]}}])
    alone = run(tmp_path, s)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="local")
    assert_identity(result)
    assert dropped(result) == dropped(alone) == {"b": 3000, "gone": 750}
    assert len(alone.manifest["inputs"][0]["content"]["ranges"]) > 3
    assert result.manifest["inputs"][0]["content"] == alone.manifest["inputs"][0]["content"]
    assert result.counts == alone.counts and result.counts["rows_out"] == 40
