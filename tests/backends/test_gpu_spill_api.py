"""The index arithmetic of the device spill (backends/gpu_spill.py: group_order, stretch) run
with numpy in place of CuPy, against the CPU's own (backends.host_spill.arrow_groups,
placement.hash_range), on a machine with RAPIDS but no GPU (`make gpu-api`)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

pytestmark = pytest.mark.gpu_api

try:                                        # RAPIDS installed: import it without touching CUDA
    os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")
    from gpuetl.backends import gpu_spill
except Exception as err:                    # noqa: BLE001 (no RAPIDS, or a broken install)
    pytest.skip(f"RAPIDS does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

from gpuetl.backends.host_spill import arrow_groups, arrow_histogram  # noqa: E402
from gpuetl.placement import BUCKETS, PLACE, hash_range  # noqa: E402


def _place(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    place = rng.integers(0, 2**64, n, dtype=np.uint64)
    place[: n // 4] = place[n // 2]             # ties
    place[-3:] = [0, 2**64 - 1, 1 << 48]        # the edges of the hash range and of a bucket
    return place


@pytest.mark.parametrize("n", [3, 7, 5000])
def test_group_order_is_the_cpus(n):
    place = _place(n, n)
    split = np.random.default_rng(1).integers(0, 3, n).astype(np.int8)
    order = gpu_spill.group_order(place, split, np)
    groups = arrow_groups(pa.table({PLACE: place, "row": np.arange(n)}), split, ranged=True)
    expected = np.concatenate([groups[s].column("row").to_numpy() for s in sorted(groups)])
    assert order.tolist() == expected.tolist()


@pytest.mark.parametrize("lo, hi", [(0, BUCKETS), (0, 1), (1, 2), (255, 257), (1000, 30000), (40000, 40001),
                                    (65535, BUCKETS), (256, 512)])
def test_stretch_is_hash_range(lo, hi):
    place = _place(3000, 2)
    place = place[gpu_spill.group_order(place, np.zeros(len(place), dtype=np.int8), np)]   # a ranged piece
    start, stop, mine = gpu_spill.stretch(place, lo, hi, np, lambda a: a)
    want_start, want_stop, want_mine = hash_range(place, lo, hi)
    assert (start, stop) == (want_start, want_stop)
    assert mine.tolist() == (want_mine.tolist() if want_mine is not None else [True] * (stop - start))


@pytest.mark.parametrize("rows, width", [(0, 8), (5, 30), (3000, 400), (3000, 70_000), (100_000, 3), (100_000, 12)])
def test_the_histogram_crosses_packed_and_arrives_whole(rows, width):
    """histogram_to_host (the device histogram's way to the host) gives back the CPU's float64
    histogram exactly, in fewer bytes: the nonzero buckets' (uint16 index, count) pairs for a
    small piece, every bucket's count for a large one, counts as narrow as the largest allows."""
    place = _place(rows, rows) if rows >= 3 else np.zeros(rows, dtype=np.uint64)
    sizes = np.random.default_rng(rows).integers(0, width, rows)
    table = pa.table({PLACE: place, "text": pa.array([b"x" * int(n) for n in sizes], pa.binary())})
    expected = arrow_histogram(table, {"text": "binary"})
    moved = []

    def to_host(values):
        moved.append(values.nbytes)
        return np.array(values)

    got = gpu_spill.histogram_to_host(expected.copy(), np, to_host)
    assert got.dtype == np.float64 and np.array_equal(got, expected)
    width_bytes = next(np.dtype(t).itemsize for t in (np.uint8, np.uint16, np.uint32) if expected.max() <= np.iinfo(t).max)
    nonzero = int((expected > 0).sum())
    assert sum(moved) == 16 + min(nonzero * (2 + width_bytes), BUCKETS * width_bytes), moved
    assert sum(moved) <= expected.nbytes // 2


def test_a_histogram_of_huge_buckets_crosses_exactly():
    """A bucket past 4 GiB (uint64 counts) or at float64's last exact whole number stays exact."""
    hist = np.zeros(BUCKETS)
    hist[[0, 7, BUCKETS - 1]] = [2**53 - 1, 2**32, 1]
    assert np.array_equal(gpu_spill.histogram_to_host(hist.copy(), np, np.array), hist)
    hist[:] = 2**40
    assert np.array_equal(gpu_spill.histogram_to_host(hist.copy(), np, np.array), hist)


@pytest.mark.parametrize("starts", [False, True])
def test_the_piece_writer_options_build_with_the_real_pylibcudf(tmp_path, starts):
    """gpu_spill.write_spill's writer options (cuDF's pandas metadata and the placement groups'
    starts in the footer, no compression or statistics, row groups of piece_group_rows,
    timestamps as cuDF writes them) are built by the installed cuDF and pylibcudf: building
    touches no device (an empty table), writing would."""
    import cudf
    import pylibcudf as plc

    from gpuetl.backends.gpu_support import PIECE_GROUPS_KEY, encode_group_starts

    key_values = {"pandas": cudf.utils.ioutils.generate_pandas_metadata(cudf.DataFrame(), False)}
    if starts:
        key_values[PIECE_GROUPS_KEY] = encode_group_starts([0] * 100 + [7] * 157)

    options = gpu_spill.piece_writer_options(plc.Table([]), str(tmp_path / "p.parquet.partial"), [], [], 7, key_values)
    assert isinstance(options, plc.io.parquet.ParquetWriterOptions)

