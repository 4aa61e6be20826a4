"""Spill pieces on the device (backends/gpu_spill.py) against the CPU's Arrow pieces: the same
groups, histograms, stretches and orders; a shuffled run whose pieces never pass through
gpuetl's host memory (no spill bytes in the host-transfer ledger when local, fallbacks zero) and
whose shards hold the CPU's rows. Needs cuDF and a GPU: `pytest -m gpu`."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

cudf = pytest.importorskip("cudf")
cp = pytest.importorskip("cupy")

from gpuetl.backends.cpu import CpuBackend  # noqa: E402
from gpuetl.backends.gpu import GpuBackend  # noqa: E402
from gpuetl.backends import gpu_pieces  # noqa: E402
from gpuetl.backends.gpu_tallies import fallback_counts, reset_tallies, worker_tallies  # noqa: E402
from gpuetl.columns import FILE_INDEX, OFFSET  # noqa: E402
from gpuetl.placement import ORDER, PLACE  # noqa: E402
from gpuetl.samples import write_access_logs  # noqa: E402

pytestmark = pytest.mark.gpu
CPU = CpuBackend()
SCHEMA = {"text": "string", "n": "int64", "t": "timestamp"}
PIECE = {**SCHEMA, FILE_INDEX: "int32", OFFSET: "int64", PLACE: "uint64", ORDER: "uint64"}
STARTS = "control: where a piece's placement groups start"


@pytest.fixture(scope="module")
def gpu():
    return GpuBackend()


def _frames(gpu, n=5000, seed=1):
    rng = np.random.default_rng(seed)
    place = rng.integers(0, 2**64, n, dtype=np.uint64)
    place[: n // 10] = place[0]                              # ties: the sort must be stable
    table = pa.table({
        "text": pa.array([None if i % 17 == 0 else "é" * (i % 5) + str(i) for i in range(n)]),
        "n": pa.array(rng.integers(-9, 9, n)), "t": pa.array(rng.integers(0, 2**40, n), pa.timestamp("us", tz="UTC")),
        FILE_INDEX: pa.array(np.zeros(n, dtype=np.int32)), OFFSET: pa.array(np.arange(n, dtype=np.int64) * 7),
        PLACE: pa.array(place), ORDER: pa.array(place[::-1].copy())})
    frames = {b: b.spill_piece(b.from_arrow(table), PIECE) for b in (gpu, CPU)}
    split = rng.integers(0, 3, n).astype(np.int8)
    return frames, split


def _arrow(piece):
    """A piece as host Arrow with the output's types (a GPU piece copied to the host)."""
    return piece.select(list(PIECE)) if isinstance(piece, pa.Table) else GpuBackend().to_arrow(piece, PIECE)


@pytest.mark.parametrize("ranged", [True, False])
def test_groups_histograms_and_stretches_match_the_cpu(gpu, ranged):
    frames, split = _frames(gpu)
    reset_tallies()
    g, c = gpu.spill_groups(frames[gpu], split, ranged), CPU.spill_groups(frames[CPU], split, ranged)
    windows = [(0, 1 << 16), (1000, 30000), (40000, 40001), (65535, 1 << 16)] if ranged else []
    got = {s: (gpu.spill_histogram(g[s], SCHEMA), [gpu.spill_range(g[s], lo, hi) for lo, hi in windows]) for s in g}
    assert fallback_counts() == {}
    moved = worker_tallies()["host_bytes"]                     # before the comparison copies the pieces over
    assert moved and all(k.startswith("control") for k in moved), moved
    assert sorted(g) == sorted(c) == [0, 1, 2]
    for s in c:
        assert _arrow(g[s]).equals(_arrow(c[s]))
        hist, ranges = got[s]
        assert np.array_equal(hist, CPU.spill_histogram(c[s], SCHEMA))
        for (gp, gm), (lo, hi) in zip(ranges, windows):
            cp_, cm = CPU.spill_range(c[s], lo, hi)
            assert _arrow(gp).equals(_arrow(cp_))
            assert (gm is None) == (cm is None) and (cm is None or cp.asnumpy(gm).tolist() == cm.tolist())


def test_sort_span_filter_concat_match_the_cpu(gpu):
    frames, _ = _frames(gpu)
    g, c = frames[gpu], frames[CPU]
    keys = [ORDER, FILE_INDEX, OFFSET]
    assert _arrow(gpu.spill_sort(g, keys)).equals(_arrow(CPU.spill_sort(c, keys)))
    assert _arrow(gpu.spill_sort(g, [PLACE])).equals(_arrow(CPU.spill_sort(c, [PLACE])))     # stable on ties
    assert gpu.spill_span(g, ORDER) == CPU.spill_span(c, ORDER)
    mask = gpu.spill_column(g, ORDER) > cp.uint64(1 << 63)
    assert _arrow(gpu.spill_filter(g, mask)).equals(_arrow(CPU.spill_filter(c, cp.asnumpy(mask))))
    assert _arrow(gpu.spill_concat([g, g])).equals(_arrow(CPU.spill_concat([c, c])))


def test_a_piece_round_trips_through_parquet_on_the_device(gpu, tmp_path):
    frames, _ = _frames(gpu)
    path = str(tmp_path / "spill" / "s0" / f"p000001{gpu.spill_suffix}")
    reset_tallies()
    gpu.write_spill(frames[gpu], path, PIECE)
    back = gpu.read_spill(path)
    # device -> file -> device; only the (unused: rows in input order) placement groups' starts cross
    assert set(worker_tallies()["host_bytes"]) <= {STARTS}
    assert _arrow(back).equals(_arrow(frames[CPU]))
    assert dict(back.dtypes) == dict(frames[gpu].dtypes)        # the zone kept: no host cast in the writer
    some = gpu.read_spill(path, [PLACE, ORDER])
    assert list(some.columns) == [PLACE, ORDER]
    assert cp.asnumpy(gpu.spill_column(some, ORDER)).tolist() == frames[CPU].column(ORDER).to_pylist()
    # the CPU reads a GPU piece on the host (a resumed run, the shard-size sample), and back
    cpu_back = CPU.read_spill(path)
    assert cpu_back.select(list(PIECE)).column(PLACE).equals(frames[CPU].column(PLACE))
    ipc = str(tmp_path / "p.arrow")
    CPU.write_spill(frames[CPU], ipc, PIECE)
    assert _arrow(gpu.read_spill(ipc)).equals(_arrow(frames[CPU]))


def test_a_shard_task_reads_only_its_stretch_of_a_piece(gpu, tmp_path, monkeypatch):
    """A ranged piece written by libcudf in row groups, with its placement groups' starts in the
    footer; a read for a shard's buckets takes only the rows of its groups (libcudf's skip_rows
    and nrows) and, through spill_range, gives exactly the rows of the CPU's whole piece. A
    piece without the starts (cuDF's to_parquet: a run begun before) is read whole."""
    monkeypatch.setattr(gpu_pieces, "PIECE_FRAGMENT_ROWS", 64)       # many row groups in a small piece
    frames, split = _frames(gpu, n=20_000, seed=4)
    g, c = gpu.spill_groups(frames[gpu], split, True), CPU.spill_groups(frames[CPU], split, True)
    windows = [(0, 1 << 16), (0, 1), (255, 257), (1000, 30000), (40000, 40001), (65535, 1 << 16)]
    reset_tallies()
    for s in g:
        path, old = str(tmp_path / f"s{s}.parquet"), str(tmp_path / f"s{s}-old.parquet")
        gpu.write_spill(g[s], path, PIECE)
        footer = pq.read_metadata(path)
        assert gpu_pieces.PIECE_GROUPS_KEY.encode() in footer.metadata and footer.num_row_groups >= 16
        g[s].to_parquet(old, index=False)
        for lo, hi in windows:
            part = gpu.read_spill(path, buckets=(lo, hi))
            assert len(part) < len(g[s]) or hi - lo == 1 << 16
            assert len(gpu.read_spill(old, buckets=(lo, hi))) == len(g[s])
            for piece in (part, gpu.read_spill(old, buckets=(lo, hi))):
                rows, mine = gpu.spill_range(piece, lo, hi)
                rows = rows if mine is None else gpu.spill_filter(rows, mine)
                want, want_mine = CPU.spill_range(c[s], lo, hi)
                want = want if want_mine is None else want.filter(pa.array(want_mine))
                assert _arrow(rows).equals(_arrow(want)), (s, lo, hi)
    assert fallback_counts() == {}
    assert set(worker_tallies()["host_bytes"]) <= {STARTS, "control: a shard's stretch of a piece",
                                                   "control: rows outside the shard"}


SHARDS = {
    "shuffled": {"count": 3, "shuffle": True, "seed": 7},
    "shuffled by key, splits": {"count": 3, "shuffle": True, "key": ["ip"], "splits": {"train": 0.8, "val": 0.2}},
    "ranged, unshuffled": {"count": 3},
}


@pytest.mark.parametrize("shard", SHARDS.values(), ids=SHARDS)
def test_a_shuffled_run_keeps_its_pieces_on_the_device(tmp_path, shard):
    """Pieces written and read by libcudf: the ledger holds no spill bytes and no frame copied
    to host Arrow; the shards hold the CPU's rows."""
    from gpuetl import Pipeline

    write_access_logs(tmp_path / "a.log", lines=20_000, seed=3)
    spec = {"version": 1, "name": "s", "source": {"type": "text", "path": "a.log", "blocksize": "256KiB"},
            "parse": {"preset": "apache_combined"},
            "columns": {"status": "int16", "size": "int64", "time": {"type": "timestamp", "format": "%d/%b/%Y:%H:%M:%S %z"}},
            "shard": shard, "sink": {"path": "out", "mode": "overwrite"}}
    result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="gpu", scheduler="sync")
    moved = result.manifest["host_transfer"]
    assert result.manifest["fallbacks"] == {}
    assert not [r for r in moved["by_reason"] if r.startswith(("spill", "to_arrow"))], moved
    # what does cross is control; a small piece's histogram is its nonzero buckets (at most one
    # a row, 10 bytes each, and 16 bytes a piece), never the 512 KiB of float64 it stands for
    assert all(r.startswith(("control", "bookkeeping", "tallies", "to_pandas")) for r in moved["by_reason"]), moved
    assert moved["by_reason"].get("control: bytes per placement bucket", 0) <= 10 * result.counts["rows_in"] + 16_000
    cpu = Pipeline.from_dict(spec | {"sink": {"path": "cpu", "mode": "overwrite"}}, base_dir=tmp_path).run(
        backend="cpu", scheduler="sync")
    assert result.counts == cpu.counts
    assert [s["path"] for s in result.shards] == [s["path"] for s in cpu.shards]
    for g, c in zip(result.shards, cpu.shards):
        got, want = pq.read_table(tmp_path / "out" / g["path"]), pq.read_table(tmp_path / "cpu" / c["path"])
        assert got.cast(want.schema).equals(want), g["path"]
