"""A shard is written in bounded pieces (sinks/parquet.py: write_shard): shuffled rows in turns
over ranges of their order hash, unshuffled ones piece by piece. The bytes are those of a shard
written at once, whatever the turns and however the input was partitioned."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.samples import write_access_logs
from gpuetl.sinks import parquet


def _run(tmp_path, name, shard, blocksize):
    spec = {"version": 1, "name": "bounded", "source": {"type": "text", "path": "access.log", "blocksize": blocksize},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
            "steps": [{"filter": "status < 500"}],
            "shard": shard, "sink": {"path": name, "row_group_rows": 300}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(scheduler="sync")
    c = result.counts
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    return result


SHARDS = {
    "shuffled": {"count": 3, "shuffle": True, "seed": 7},
    "shuffled by key": {"count": 3, "shuffle": True, "key": ["ip"], "splits": {"train": 0.8, "val": 0.2}},
    "ranged, unshuffled": {"count": 3},
    "shuffled, one shard": {"shuffle": True},
}


@pytest.mark.parametrize("shard", SHARDS.values(), ids=SHARDS)
def test_shards_written_in_turns_are_the_shards_written_at_once(tmp_path, monkeypatch, shard):
    write_access_logs(tmp_path / "access.log", lines=2500, seed=3)
    whole = _run(tmp_path, "whole", shard, "64MiB")
    calls = []
    real = parquet.write_shard

    def counted(task, pieces, **kwargs):
        calls.append(task.row_bytes)
        return real(task, pieces, **kwargs)

    monkeypatch.setattr(parquet, "write_shard", counted)
    monkeypatch.setattr(parquet, "SHARD_BATCH_BYTES", 20_000)      # several turns a shard
    pieces = _run(tmp_path, "pieces", shard, "64KiB")               # and several partitions
    assert calls and all(b > 20_000 for b in calls if b)            # turns were taken
    assert [s["sha256"] for s in pieces.shards] == [s["sha256"] for s in whole.shards]
    assert pieces.counts == whole.counts
    rows = sum(pq.ParquetFile(tmp_path / "pieces" / s["path"]).metadata.num_rows for s in pieces.shards)
    assert rows == whole.counts["rows_out"] > 0
