"""sink.delta_log: true: a Delta Lake log written by the deltalake package beside the shards, one
Delta commit per dataset version (gpuetl version N = Delta version N-1), read back by delta-rs and
polars with the same rows as each version's manifest lists."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.cli import main
from gpuetl.errors import SpecError
from gpuetl.samples import write_access_logs


def spec(mode="append", delta=True):
    return {"version": 1, "name": "days", "source": {"type": "text", "path": "in/*.log", "blocksize": "32KiB"},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
            "shard": {"count": 2, "splits": {"train": 0.8, "val": 0.2}},
            "sink": {"path": "out", "mode": mode, "row_group_rows": 500, "delta_log": delta}}


def run(base: Path, data: dict):
    return gpuetl.Pipeline.from_dict(data, base_dir=base).run(backend="cpu", scheduler="sync")


def rows(table: pa.Table) -> Counter:
    return Counter(tuple(sorted(r.items())) for r in table.to_pylist())


def version_rows(out: Path, manifest: dict, version: int) -> Counter:
    """The rows of the shards dataset version `version` lists (its manifest under _versions/)."""
    listed = json.loads((out / f"_versions/{version:05d}.json").read_bytes())["shards"]
    return sum((rows(pq.read_table(out / s["path"])) for s in listed), Counter())


@pytest.mark.slow
def test_the_delta_log_holds_one_commit_per_version_with_that_versions_rows(tmp_path):
    deltalake = pytest.importorskip("deltalake")
    pl = pytest.importorskip("polars")
    (tmp_path / "in").mkdir()
    for n in (1, 2, 3):
        write_access_logs(tmp_path / "in" / f"day{n}.log", lines=300, seed=n, bad_every=40)
        run(tmp_path, spec())
    out = tmp_path / "out"
    manifest = json.loads((out / "_manifest.json").read_bytes())
    assert manifest["delta_log"]["table_version"] == 2
    assert sorted(p.name for p in (out / "_delta_log").iterdir()) == [f"{k:020d}.json" for k in range(3)]
    table = deltalake.DeltaTable(str(out))
    assert table.version() == 2
    for k in range(3):
        expected = version_rows(out, manifest, k + 1)
        got = deltalake.DeltaTable(str(out), version=k).to_pyarrow_table()
        assert rows(got) == expected
        assert pl.read_delta(str(out), version=k).height == sum(expected.values())
    added = {a for e in manifest["versions"] for a in e["shards"]}
    assert set(table.file_uris()) == {str(out / p) for p in added}       # the same Parquet files, nothing else
    assert main(["verify", str(out)]) == 0


def test_delta_log_in_overwrite_mode_is_version_0_and_replaced_with_the_dataset(tmp_path):
    deltalake = pytest.importorskip("deltalake")
    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "a.log", lines=300, seed=1)
    first = run(tmp_path, spec("overwrite"))
    write_access_logs(tmp_path / "in" / "b.log", lines=200, seed=2)
    second = run(tmp_path, spec("overwrite"))
    out = tmp_path / "out"
    assert sorted(p.name for p in (out / "_delta_log").iterdir()) == [f"{0:020d}.json"]
    table = deltalake.DeltaTable(str(out))
    assert table.version() == 0
    assert table.to_pyarrow_table().num_rows == second.counts["rows_out"] != first.counts["rows_out"]
    assert main(["verify", str(out)]) == 0


def test_delta_log_without_the_deltalake_package_is_a_located_error_at_validate_time(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "deltalake", None)          # import deltalake fails
    (tmp_path / "in").mkdir()
    with pytest.raises(SpecError, match=r"delta_log: true needs the deltalake package.*gpuetl\[delta\]"):
        gpuetl.Pipeline.from_dict(spec(), base_dir=tmp_path)


def test_delta_log_on_a_store_other_than_s3_is_refused_at_validate_time(tmp_path):
    pytest.importorskip("deltalake")
    data = spec()
    data["sink"]["path"] = "gs://bucket/out"
    with pytest.raises(SpecError, match="local dataset folders and s3:// only"):
        gpuetl.Pipeline.from_dict(data, base_dir=tmp_path)
