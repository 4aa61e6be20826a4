"""A shuffled shard's turns (sinks/parquet.py: write_shard) share its rows about evenly. Without
a shard.key the order hash is the placement hash, so a shard's rows span only its own stretch of
that hash: turns cut over the whole hash range would put most of a shard in a few of them, and a
turn's memory would grow with the input."""

from __future__ import annotations

import math

import pytest

import gpuetl
from gpuetl.samples import write_access_logs
from gpuetl.sinks import parquet

TURN_BYTES = 8_000


@pytest.mark.parametrize("key", [None, ["ip"]], ids=["order hash is the placement hash", "keyed"])
def test_each_turn_holds_about_its_share_of_the_shard(tmp_path, monkeypatch, key):
    write_access_logs(tmp_path / "access.log", lines=3000, seed=5)
    turns: list[int] = []             # rows of each turn, as the writer is handed them
    planned: list[int] = []           # turns each shard is cut into
    real_write, real_shard = parquet.ShardWriter.write, parquet.write_shard

    def write(self, table):
        turns.append(table.num_rows)
        return real_write(self, table)

    def write_shard(task, pieces, **kwargs):
        planned.append(math.ceil(task.row_bytes / TURN_BYTES))
        return real_shard(task, pieces, **kwargs)

    monkeypatch.setattr(parquet.ShardWriter, "write", write)
    monkeypatch.setattr(parquet, "write_shard", write_shard)
    monkeypatch.setattr(parquet, "SHARD_BATCH_BYTES", TURN_BYTES)
    shard = {"count": 4, "shuffle": True, "seed": 1, **({"key": key} if key else {})}
    spec = {"version": 1, "name": "turns", "source": {"type": "text", "path": "access.log", "blocksize": "64KiB"},
            "parse": {"preset": "apache_combined"}, "shard": shard, "sink": {"path": "out"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert sum(turns) == result.counts["rows_out"] == 3000
    assert len(planned) == 4 and min(planned) >= 5          # several turns a shard
    assert len(turns) >= sum(planned) - 4, sorted(turns)     # (nearly) none of them empty
    assert max(turns) <= 2 * 3000 / sum(planned), sorted(turns)
