import numpy as np

from gpuetl.sinks.layout import BUCKETS, Layout, cut_points, cut_points_by_size


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
