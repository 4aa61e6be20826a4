"""The placement hash's buckets and the bookkeeping columns that carry it through the spill.

Every live row gets a 64-bit placement hash (sinks/layout.py); shards are contiguous ranges of
its top BUCKET_BITS bits (buckets), and a ranged spill piece groups its rows by the top
COARSE_BITS bits so a shard reads one stretch of it. This arithmetic is shared by the sinks,
which decide what goes where, and the backends, which hold and slice the pieces, so it lives
below both (as the other bookkeeping column names do, in columns.py).
"""

from __future__ import annotations

import numpy as np

PLACE = "__p"            # uint64: a spilled row's placement hash
ORDER = "__order"        # uint64: a shuffled row's order hash

BUCKET_BITS = 16
BUCKETS = 1 << BUCKET_BITS
COARSE_BITS = 8          # spilled pieces are grouped by the placement hash's top 8 bits

NESTED_ROW_BYTES = 8     # what a list or struct value counts for in the row-size estimate


def coarse_of(p):
    """The coarse group of placement hashes (uint64 array -> uint8 array)."""
    return (p >> np.uint64(64 - COARSE_BITS)).astype(np.uint8)


def bucket_of(p):
    return p >> np.uint64(64 - BUCKET_BITS)


def hash_range(place, lo_bucket: int, hi_bucket: int) -> tuple[int, int, object]:
    """Rows of a piece grouped by coarse_of (input order within a group) whose placement hash
    lies in buckets [lo_bucket, hi_bucket): (start, stop, mask within that slice or None)."""
    lo = np.uint64(lo_bucket) << np.uint64(64 - BUCKET_BITS)
    groups = coarse_of(place)
    start = int(np.searchsorted(groups, lo_bucket >> (BUCKET_BITS - COARSE_BITS), side="left"))
    if hi_bucket >= BUCKETS:
        stop, hi = len(place), None
    else:
        hi = np.uint64(hi_bucket) << np.uint64(64 - BUCKET_BITS)
        stop = int(np.searchsorted(groups, (hi_bucket - 1) >> (BUCKET_BITS - COARSE_BITS), side="right"))
    stop = max(stop, start)
    window = place[start:stop]
    mine = window >= lo
    if hi is not None:
        mine &= window < hi
    return start, stop, None if mine.all() else mine
