"""CpuBackend.filter is pandas' boolean indexing, only faster; separate() cuts a frame's rows by status."""

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import given, settings, strategies as st

from gpuetl.backends.base import (COUNT, STAGE, STATUS, STATUS_DEDUPLICATED, STATUS_FILTERED, STATUS_LIVE,
                                 STATUS_QUARANTINED)
from gpuetl.backends.cpu import CpuBackend


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.text(max_size=5)), max_size=30), data=st.data())
def test_filter_equals_boolean_indexing(values, data):
    backend = CpuBackend()
    n = len(values)
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    df = pd.DataFrame({
        "s": backend.series(pa.array(values, pa.string()), "string"),
        "i": backend.series(pa.array(range(n), pa.int64()), "int64"),
        "f": np.arange(n, dtype=np.float64),
    }).set_axis(np.arange(n) * 3 + 7)
    expected = df[mask]
    for m in (mask, pd.Series(mask, index=df.index), backend.series(pa.array(mask), "bool", index=df.index)):
        got = backend.filter(df, m)
        pd.testing.assert_frame_equal(got, expected)


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from([STATUS_LIVE, STATUS_QUARANTINED, STATUS_FILTERED,
                                                 STATUS_DEDUPLICATED]),
                               st.integers(-1, 3), st.integers(1, 5)), max_size=25),
       live_first=st.booleans())
def test_separate_copies_live_and_quarantined_rows_and_counts_the_rest(rows, live_first):
    """Rows that left may lie anywhere in a frame: separate() returns the live rows and the
    quarantined ones, in order, and what every other row stands for, by stage and status."""
    backend = CpuBackend()
    if live_first:                                 # a frame put together live rows first: a slice
        rows = sorted(rows, key=lambda r: r[0] != STATUS_LIVE)
    n = len(rows)
    df = pd.DataFrame({
        "i": backend.series(pa.array(range(n), pa.int64()), "int64"),
        STATUS: backend.series(pa.array([r[0] for r in rows], pa.int8()), "int8"),
        STAGE: backend.series(pa.array([r[1] for r in rows], pa.int16()), "int16"),
        COUNT: backend.series(pa.array([r[2] for r in rows], pa.int64()), "int64"),
    })
    live, quarantined, tallies = backend.separate(df)
    assert live["i"].tolist() == [i for i, r in enumerate(rows) if r[0] == STATUS_LIVE]
    assert quarantined["i"].tolist() == [i for i, r in enumerate(rows) if r[0] == STATUS_QUARANTINED]
    expected: dict = {}
    for status, stage, count in rows:
        if status not in (STATUS_LIVE, STATUS_QUARANTINED):
            expected[(stage, status)] = expected.get((stage, status), 0) + count
    assert tallies == expected
    if live_first and len(live):
        assert np.shares_memory(np.asarray(live["i"].array._pa_array.chunk(0).buffers()[1]),
                                np.asarray(df["i"].array._pa_array.chunk(0).buffers()[1]))
