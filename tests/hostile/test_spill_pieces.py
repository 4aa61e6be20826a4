"""Spill pieces with hostile shapes: nested values and huge strings in shuffled and byte-sized
shards: the row-size estimate behind the shard cuts and turns counts a nested value as
NESTED_ROW_BYTES (it raised on a list column before)."""

from __future__ import annotations

import json
import random

import pyarrow.parquet as pq
import pytest

import gpuetl

NESTED = [{"a": [1, 2], "s": {"x": "y"}, "t": "hi"}, {"a": [], "s": None, "t": "é" * 50_000},
          {"a": None, "s": {"x": None}, "t": None}, {"a": list(range(500)), "s": {"x": "z" * 3}, "t": ""}]
ROWS = [{**NESTED[i % 4], **({"t": random.Random(i).randbytes(20_000).hex()} if i % 4 == 1 else {})}
        for i in range(40)]                  # huge values that do not compress away: several shards by bytes


@pytest.mark.parametrize("shard", [{"count": 3, "shuffle": True}, {"target_bytes": "64KiB"}, {"count": 2}],
                         ids=["shuffled", "by bytes", "ranged"])
def test_nested_and_huge_values_go_through_sized_and_shuffled_shards(tmp_path, surroundings, shard):
    lines = [json.dumps(r) for r in ROWS] + ["{not json", "[1, 2]"]
    (tmp_path / "e.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spec = {"version": 1, "name": "n", "source": {"type": "jsonl", "path": "e.jsonl"},
            "columns": {"a": "list<int64>", "s": "struct<x: string>", "t": "string"},
            "shard": shard, "sink": {"path": "out"}}
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    c = result.counts
    assert c["rows_in"] == 42 == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    assert c["rows_out"] == 40 and c["quarantined"] == 2
    assert len(result.shards) == shard.get("count", len(result.shards)) and len(result.shards) > 1
    rows = [r for s in result.shards for r in pq.read_table(tmp_path / "out" / s["path"]).to_pylist()]
    assert sorted(map(json.dumps, rows)) == sorted(map(json.dumps, ROWS))
