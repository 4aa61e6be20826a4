"""Each shard's writer sends back what its footer says of the columns (sinks/column_stats.py), so
the run report's column profile and the empty-declared-column check need no shard file opened
where the run commits: taken from the writer's own metadata at close (pyarrow's), kept in the
saved result a resumed run reads, and read from the footer in a task where a result lacks them."""

from __future__ import annotations

import datetime
import decimal
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import access_spec
from gpuetl import Pipeline
from gpuetl.runtime.phases import manifest as manifest_phase
from gpuetl.runtime.phases import sharding
from gpuetl.sinks import column_stats
from gpuetl.sinks.column_stats import decode, encode, file_columns, footer_columns, profile
from gpuetl.sinks.parquet import WriteOptions, write_parquet


def test_the_host_writer_hands_over_its_footer_without_reading_the_file_back(tmp_path, monkeypatch):
    table = pa.table({"a": pa.array([3, None, 1], pa.int16()), "s": ["x", None, "y"],
                      "t": pa.array([1, 2, None], pa.timestamp("us", tz="UTC")),
                      "n": pa.array([{"b": 1}, None, {"b": 5}], pa.struct([("b", pa.int64())]))})

    def no_reading(*args, **kwargs):
        raise AssertionError("the shard was read back")

    monkeypatch.setattr(pq, "read_metadata", no_reading)
    monkeypatch.setattr(pq, "ParquetFile", no_reading)
    result = write_parquet(table, str(tmp_path / "x.parquet"), WriteOptions("zstd", 2, None), "x.parquet")
    monkeypatch.undo()
    assert result.columns == footer_columns(str(tmp_path / "x.parquet"))
    by = {c["column"]: c for c in result.columns}
    assert [c["column"] for c in result.columns] == ["a", "s", "t", "n.b"]
    assert [c["field"] for c in result.columns] == ["a", "s", "t", "n"]
    assert by["a"]["type"] == "int16" and by["t"]["type"] == "timestamp[us, UTC]"
    assert (by["a"]["rows"], by["a"]["nulls"], decode(by["a"]["min"]), decode(by["a"]["max"])) == (3, 1, 1, 3)
    assert (decode(by["s"]["min"]), decode(by["s"]["max"])) == ("x", "y")
    assert json.loads(json.dumps(result.columns)) == result.columns       # saved with the result as it is
    assert set(result.entry()) == {"path", "split", "rows", "bytes", "sha256"}     # the manifest's entry


@pytest.mark.parametrize("value", [None, True, 7, -1.5, "text", b"\xff\x00", decimal.Decimal("1.50"),
                                   datetime.date(2024, 2, 29), datetime.time(12, 30, 1),
                                   datetime.datetime(2024, 1, 1, 5, tzinfo=datetime.timezone.utc),
                                   datetime.datetime(2024, 1, 1, 5, 0, 0, 123)])
def test_a_statistic_goes_through_json_and_comes_back_equal_and_shown_alike(value):
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and str(back) == str(value) and type(back) is type(value)


def test_a_nanosecond_timestamp_keeps_its_nanoseconds():
    import pandas as pd

    value = pd.Timestamp("1970-01-01 00:00:00.000000001")
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and str(back) == str(value)


def test_the_profile_over_shards_is_the_profile_of_their_footers_together(tmp_path):
    """min over the shards' mins, max over their maxes, nulls and values added, `complete` only
    where every row group had its statistics (a group of nulls alone has no min or max); a
    shard without statistics is left out."""
    options = WriteOptions("none", 3, None)
    one = write_parquet(pa.table({"a": [5, 9, None], "b": [None, None, None]}), str(tmp_path / "1.parquet"), options)
    two = write_parquet(pa.table({"a": [-3, 4], "b": pa.array([None, None], pa.int64())}),
                        str(tmp_path / "2.parquet"), options)
    got = {c["column"]: c for c in profile([one.columns, None, two.columns])}
    assert got["a"] == {"column": "a", "type": "int64", "rows": 5, "nulls": 1, "min": -3, "max": 9, "complete": True}
    assert (got["b"]["rows"], got["b"]["nulls"], got["b"]["min"], got["b"]["complete"]) == (5, 5, None, False)


def test_a_resumed_run_reads_the_footers_of_kept_shards_saved_without_statistics_in_a_task(tmp_path, access_logs,
                                                                                           monkeypatch):
    """Shards an earlier attempt wrote are kept with their saved results; a result saved without
    column statistics (by an older gpuetl) has them read from the shard's footer, in a task, and
    the report's column profile is the same as a run's in one go."""
    spec = access_spec(shard={"count": 3, "key": ["ip"]}, sink__mode="resume")

    def stop(*args, **kwargs):
        raise RuntimeError("stopped after the shards were written")

    monkeypatch.setattr(manifest_phase, "build_result", stop)
    with pytest.raises(RuntimeError, match="stopped after"):
        Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    monkeypatch.undo()
    saved = sorted((tmp_path / "out" / "_tmp").glob("*/shards/*.json"))
    assert len(saved) == 3
    for path in saved:
        result = json.loads(path.read_text())
        assert result.pop("columns")
        path.write_text(json.dumps(result))

    read = []
    real = sharding.footer_columns
    monkeypatch.setattr(sharding, "footer_columns", lambda path, fs=None: read.append(Path(path).name) or real(path, fs))
    logs = []
    resumed = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync", log=logs.append)
    assert any("3 of 3 shards already written" in line for line in logs), logs
    assert sorted(read) == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    once = Pipeline.from_dict({**spec, "sink": {**spec["sink"], "path": "once"}}, base_dir=tmp_path).run(
        backend="cpu", scheduler="sync")
    assert resumed.shards == once.shards and resumed.columns == once.columns and resumed.columns
    report = json.loads((resumed.out_dir / "_report.json").read_text())
    assert report["columns"] == json.loads((once.out_dir / "_report.json").read_text())["columns"]
    c = resumed.counts
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]


def test_a_file_that_is_not_parquet_has_no_statistics(tmp_path):
    (tmp_path / "x.parquet").write_bytes(b"not parquet")
    assert footer_columns(str(tmp_path / "x.parquet")) is None
    assert column_stats.null_in_every_row(["a"], []) == []
