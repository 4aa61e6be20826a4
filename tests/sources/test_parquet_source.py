"""Parquet sources: row groups as partitions, rows as records, typed values."""

import datetime as dt
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpuetl import Pipeline
from gpuetl.errors import SpecError


@pytest.fixture
def parquet_inputs(tmp_path):
    (tmp_path / "in").mkdir()
    table = pa.table({
        "id": pa.array(range(10), pa.int32()),
        "name": pa.array([f"n{i}" if i % 3 else None for i in range(10)]),
        "ts": pa.array([dt.datetime(2026, 1, 1, 0, 0, i) for i in range(10)], pa.timestamp("ns")),
        "day": pa.array([dt.date(2026, 1, i + 1) for i in range(10)]),
        "score": pa.array([str(i) if i != 4 else "x" for i in range(10)]),
        "tags": pa.array([[1, 2]] * 10),
        "cat": pa.array(["a", "b"] * 5).dictionary_encode(),
    })
    pq.write_table(table, tmp_path / "in" / "a.parquet", row_group_size=3)
    pq.write_table(table.slice(0, 4), tmp_path / "in" / "b.parquet", row_group_size=2)
    return tmp_path


def spec(**source):
    return {"version": 1, "name": "pq",
            "source": {"type": "parquet", "path": "in/*.parquet", "provenance": True, **source},
            "columns": {"score": "int32"}, "steps": [{"filter": "id >= 1"}],
            "sink": {"path": "out", "mode": "overwrite", "row_group_rows": 4}}


def test_rows_types_accounting_and_quarantine(parquet_inputs):
    pipeline = Pipeline.from_dict(spec(blocksize=100), base_dir=parquet_inputs)
    plan = pipeline.plan()
    assert len(plan.partitions) == 6          # 4 + 2 row groups, about one per partition
    assert plan.output_schema["tags"] == "list<int64>"          # nested columns are kept (#15)
    assert plan.output_schema["day"] == "timestamp" and plan.output_schema["cat"] == "string"
    result = pipeline.run(backend="cpu", scheduler="sync")
    assert result.counts == {"rows_in": 14, "rows_out": 11, "filtered": 2, "deduplicated": 0, "quarantined": 1}
    rows = pq.read_table(parquet_inputs / "out" / "part-00000.parquet").to_pylist()
    assert [(r["_file"], r["_offset"]) for r in rows][:3] == [("in/a.parquet", 1), ("in/a.parquet", 2),
                                                              ("in/a.parquet", 3)]
    assert rows[0]["score"] == 1 and rows[0]["ts"] == dt.datetime(2026, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc)
    bad = pq.read_table(parquet_inputs / "out" / "_quarantine").to_pylist()
    assert len(bad) == 1 and bad[0]["_offset"] == 4 and json.loads(bad[0]["_raw"])["score"] == "x"


def test_a_nested_column_may_be_declared_with_its_type(parquet_inputs):
    """A Parquet list column declared as a list is the column as it is (a nested type is refused
    only for a field that is text: a csv field, a regex capture)."""
    data = spec()
    data["columns"] = {"score": "int32", "tags": "list<int64>"}
    result = Pipeline.from_dict(data, base_dir=parquet_inputs).run(backend="cpu", scheduler="sync")
    assert result.counts["rows_out"] == 11
    rows = pq.read_table(parquet_inputs / "out" / "part-00000.parquet").to_pylist()
    assert rows[0]["tags"] == [1, 2]
    data["columns"] = {"name": "list<string>"}
    with pytest.raises(SpecError, match="field 'name' is string, read as a scalar type"):
        Pipeline.from_dict(data, base_dir=parquet_inputs).plan()

def test_one_nested_value_that_does_not_fit_its_declared_type_is_one_bad_record(tmp_path):
    """A list item past int32 in one row of a list<int64> column declared list<int32>: that record
    is bad, the others are kept (Arrow's cast of the whole column failed, and every record of the
    batch was bad)."""
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"id": pa.array(range(50)),
                             "big": pa.array([[10**12] if i == 25 else [i, i] for i in range(50)], pa.list_(pa.int64())),
                             "st": pa.array([{"a": 10**12 if i == 30 else i} for i in range(50)])}),
                   tmp_path / "in" / "a.parquet")
    data = {"version": 1, "name": "pq", "source": {"type": "parquet", "path": "in/*.parquet"},
            "columns": {"big": "list<int32>", "st": "struct<a: int32>"}, "sink": {"path": "out"}}
    result = Pipeline.from_dict(data, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts["rows_out"] == 48 and result.counts["quarantined"] == 2
    rows = pq.read_table(tmp_path / "out" / "part-00000.parquet").to_pylist()
    assert rows[0]["big"] == [0, 0] and rows[0]["st"] == {"a": 0} and 25 not in [r["id"] for r in rows]

def test_partitioning_does_not_change_the_bytes(parquet_inputs):
    small = Pipeline.from_dict(spec(blocksize=100), base_dir=parquet_inputs).run(backend="cpu", scheduler="sync")
    large = Pipeline.from_dict(spec(blocksize="1MiB"), base_dir=parquet_inputs).run(backend="cpu", scheduler="threads")
    assert small.shards == large.shards


def test_inputs_must_share_columns(parquet_inputs):
    pq.write_table(pa.table({"other": [1]}), parquet_inputs / "in" / "c.parquet")
    with pytest.raises(SpecError, match="lacks the column"):
        Pipeline.from_dict(spec(), base_dir=parquet_inputs).plan()


def test_a_file_that_is_not_parquet_is_named(parquet_inputs):
    (parquet_inputs / "in" / "0.parquet").write_text("not parquet")
    with pytest.raises(SpecError, match="0.parquet is not a readable Parquet file"):
        Pipeline.from_dict(spec(), base_dir=parquet_inputs).plan()


def test_a_declared_struct_naming_other_fields_than_the_files_is_a_plan_note(tmp_path):
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"geo": pa.array([{"lat": 1.0, "lon": 2.0}])}), tmp_path / "in" / "a.parquet")
    data = {"version": 1, "name": "pq", "source": {"type": "parquet", "path": "in/*.parquet"},
            "columns": {"geo": "struct<lat: float64, alt: float64>"}, "sink": {"path": "out"}}
    notes = Pipeline.from_dict(data, base_dir=tmp_path).plan().notes
    assert "columns.geo: the declared struct leaves out lon of the file's: not read" in notes
    assert "columns.geo: the declared struct adds alt, which the file lacks: null" in notes
