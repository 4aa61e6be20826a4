"""CpuBackend.filter is pandas' boolean indexing, only faster."""

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import given, settings, strategies as st

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


@settings(max_examples=40, deadline=None)
@given(flags=st.lists(st.booleans(), max_size=20), sort=st.booleans())
def test_split_gives_both_sides_in_order(flags, sort):
    backend = CpuBackend()
    if sort:                                      # live rows first: the slicing path
        flags = sorted(flags, reverse=True)
    mask = np.array(flags, dtype=bool)
    df = pd.DataFrame({"i": backend.series(pa.array(range(len(flags)), pa.int64()), "int64")})
    yes, no = backend.split(df, pd.Series(mask, index=df.index))
    assert yes["i"].tolist() == [i for i, f in enumerate(flags) if f]
    assert no["i"].tolist() == [i for i, f in enumerate(flags) if not f]
