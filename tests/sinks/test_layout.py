import numpy as np
from hypothesis import given, settings, strategies as st

from gpuetl.placement import BUCKETS
from gpuetl.sinks.layout import Layout, cut_points, cut_points_by_size


def layout(**kw):
    base = dict(splits=(), key=(), shuffle=False, seed=0, count=None, target_bytes=None)
    return Layout(**{**base, **kw})


def test_shard_counts_share_count_across_splits():
    assert layout(count=16, splits=(("train", 0.98), ("val", 0.01), ("test", 0.01))).shard_counts() == [14, 1, 1]
    assert layout(count=10, splits=(("a", 0.5), ("b", 0.5))).shard_counts() == [5, 5]
    assert layout(count=2, splits=(("a", 0.5), ("b", 0.3), ("c", 0.2))).shard_counts() == [1, 1, 1]
    assert layout().shard_counts() == [1]


def test_cut_points_balance_weight():
    hist = np.ones(BUCKETS)
    cuts = cut_points(hist, 4)
    assert cuts[0] == 0 and cuts[-1] == BUCKETS and len(cuts) == 5
    sizes = np.diff(cuts)
    assert sizes.max() - sizes.min() <= 1


def test_cut_points_by_size_leave_the_remainder_last():
    hist = np.ones(BUCKETS)                       # total = BUCKETS
    cuts = cut_points_by_size(hist, BUCKETS / 3.5)
    sizes = np.diff(cuts)
    assert len(sizes) == 4
    assert all(abs(s - BUCKETS / 3.5) <= 1 for s in sizes[:-1])
    assert sizes[-1] < BUCKETS / 3.5
    assert cut_points_by_size(hist, BUCKETS * 2) == [0, BUCKETS]


@settings(max_examples=100, deadline=None)
@given(hashes=st.lists(st.integers(0, 2**64 - 1), max_size=200), lo=st.integers(0, BUCKETS), width=st.integers(0, 3000))
def test_hash_range_selects_exactly_the_buckets(hashes, lo, width):
    """Pieces are grouped by the top 8 bits (stable); a shard's rows are found by hash_range."""
    from gpuetl.placement import coarse_of, hash_range

    place = np.array(hashes, dtype=np.uint64)
    place = place[np.argsort(coarse_of(place), kind="stable")]
    hi = min(lo + width, BUCKETS)
    start, stop, mine = hash_range(place, lo, hi)
    got = place[start:stop] if mine is None else place[start:stop][mine]
    buckets = place >> np.uint64(64 - 16)
    assert got.tolist() == place[(buckets >= lo) & (buckets < hi)].tolist()
