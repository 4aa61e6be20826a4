"""Where each output row goes: split, shard, and its place within the shard.

Every live row gets a 64-bit placement hash P of its key (or, without a key, of its identity:
input file and byte offset), seeded. The split is chosen from a second hash of the same key;
within a split, shards are contiguous ranges of P, cut after the map phase from a histogram of
P, so counts are balanced and `target_bytes` can be met. Nothing here depends on how the input
was partitioned or on the backend: the hashes are gpuetl's own (hashing.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..columns import FILE_INDEX, OFFSET
from ..placement import BUCKETS

_SPLIT_SALT = 0x51A7
_ORDER_SALT = 0x0DE5


MIN_SHARD_ROWS = 100     # shard.count giving fewer rows a shard than this is warned about (a file each)


@dataclass(frozen=True)
class Layout:
    splits: tuple[tuple[str, float], ...]   # () when the output has no splits
    key: tuple[str, ...]
    shuffle: bool
    seed: int
    count: int | None
    target_bytes: int | None
    file_offset: int = 0        # an append's new inputs come after the inputs earlier versions hold (sinks/versions.py)

    @property
    def split_names(self) -> list[str]:
        return [name for name, _ in self.splits] or [""]

    @property
    def ranged(self) -> bool:
        """Shards are cut by placement-hash ranges (several shards in a split, or by size)."""
        return bool(self.target_bytes) or max(self.shard_counts()) > 1

    @property
    def in_input_order(self) -> bool:
        """Rows reach their one shard per split in input order: the writer can stream them."""
        return not self.ranged and not self.shuffle

    def placement(self, df, backend):
        """(split index int8, placement hash P uint64, order uint64 or None) for live rows."""
        xp = backend.xp
        if not (self.splits and len(self.splits) > 1) and not self.shuffle and not self.ranged:
            return xp.zeros(len(df), dtype=xp.int8), xp.zeros(len(df), dtype=xp.uint64), None
        ident = [df[FILE_INDEX], df[OFFSET]]
        if self.file_offset:         # an input's place among every input of the dataset, not of this run alone
            ident[0] = (ident[0] + self.file_offset).astype(ident[0].dtype)
        key_cols = [df[k] for k in self.key] if self.key else ident
        p = backend.hash64(key_cols, self.seed)
        if len(self.splits) > 1:
            u = backend.hash64(key_cols, self.seed ^ _SPLIT_SALT)
            fraction = (u >> xp.uint64(11)).astype(xp.float64) / float(1 << 53)
            edges = xp.asarray(np.cumsum([share for _, share in self.splits])[:-1])
            split = xp.searchsorted(edges, fraction, side="right").astype(xp.int8)
        else:
            split = xp.zeros(len(df), dtype=xp.int8)
        order = None
        if self.shuffle:
            order = p if not self.key else backend.hash64(ident, self.seed ^ _ORDER_SALT)
        return split, p, order

    def shard_counts(self) -> list[int]:
        """How many shards each split gets with `count` (largest remainder, at least one each);
        with `target_bytes` the count follows from the data (cut_points_by_size)."""
        n = len(self.split_names)
        total = self.count or 1
        if n == 1:
            return [total]
        if total < n:
            return [1] * n
        shares = [share for _, share in self.splits]
        raw = [total * s for s in shares]
        counts = [max(1, int(r)) for r in raw]
        for i in sorted(range(n), key=lambda i: raw[i] - int(raw[i]), reverse=True):
            if sum(counts) >= total:
                break
            counts[i] += 1
        while sum(counts) > total:
            i = max(range(n), key=lambda i: counts[i])
            counts[i] -= 1
        return counts


def cut_points(histogram: np.ndarray, shards: int) -> list[int]:
    """Bucket boundaries [b0=0, b1, ..., bk=BUCKETS] cutting the weights into `shards` equal parts.
    Equal keys share a bucket, so a key never straddles two shards."""
    total = int(histogram.sum())
    if shards <= 1 or total == 0:
        return [0] + [BUCKETS] * max(shards, 1)
    cum = np.cumsum(histogram)
    targets = [total * k / shards for k in range(1, shards)]
    cuts = [int(np.searchsorted(cum, t, side="left")) + 1 for t in targets]
    cuts = [min(max(c, 1), BUCKETS) for c in cuts]
    for i in range(1, len(cuts)):           # keep them non-decreasing
        cuts[i] = max(cuts[i], cuts[i - 1])
    return [0, *cuts, BUCKETS]


def cut_points_by_size(histogram: np.ndarray, target: float) -> list[int]:
    """Boundaries so that each shard holds about `target` (in the histogram's unit); the last
    shard of a split takes the remainder. A shard is never cut inside a bucket."""
    total = float(histogram.sum())
    if total <= 0 or target <= 0 or total <= target * 1.1:
        return [0, BUCKETS]
    cum = np.cumsum(histogram)
    cuts = [0]
    k = 1
    while total - target * k > target * 0.1:      # a last shard of a tenth or less joins the one before
        cut = int(np.searchsorted(cum, target * k, side="left")) + 1
        # choose the nearer of the bucket edges around the target
        if cut > 1 and abs(cum[cut - 2] - target * k) < abs(cum[cut - 1] - target * k):
            cut -= 1
        cut = min(max(cut, cuts[-1] + 1), BUCKETS - 1)
        if cut <= cuts[-1] or cut >= BUCKETS:
            break
        cuts.append(cut)
        k += 1
    return cuts + [BUCKETS]
