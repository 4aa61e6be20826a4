"""Where the shards are cut, from the map's placement-hash histograms (docs/design.md,
"Placement"): used by the map phase for the shards it streams and by the shard phase."""

from __future__ import annotations

import numpy as np

from ...placement import BUCKETS
from ...sinks.layout import Layout, cut_points, cut_points_by_size
from ...sinks.parquet import ShardTask
from ...sinks.spill import MapResult


def histograms(layout: Layout, results: list[MapResult]) -> dict[int, np.ndarray]:
    """Each split's row bytes per placement-hash bucket, summed over the partitions."""
    return {i: sum((r.histograms[i] for r in results if i in r.histograms), np.zeros(BUCKETS))
            for i in range(len(layout.split_names))}


def shard_tasks(layout: Layout, sink, hist: dict[int, np.ndarray], ratio: float | None = None) -> list[ShardTask]:
    """The shards, cut from the histograms: shard.count cuts of equal row bytes, or, by
    shard.target_bytes, every target / ratio row bytes (ratio: Parquet bytes per row byte)."""
    if layout.target_bytes:
        cuts_by_split = {i: cut_points_by_size(hist[i], layout.target_bytes / ratio) for i in hist}
    else:
        counts = layout.shard_counts()
        cuts_by_split = {i: cut_points(hist[i], counts[i]) if layout.ranged else [0, BUCKETS] for i in hist}
    tasks = []
    for i, name in enumerate(layout.split_names):
        cuts = cuts_by_split[i]
        for k in range(len(cuts) - 1):
            rel = sink.shard_path(name, k)
            tasks.append(ShardTask(i, name, k, cuts[k], cuts[k + 1], rel, float(hist[i][cuts[k]:cuts[k + 1]].sum())))
    return tasks
