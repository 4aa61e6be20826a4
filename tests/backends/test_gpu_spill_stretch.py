"""A shard task reads only its stretch of a GPU spill piece (backends/gpu_spill.py with the rules
in gpu_pieces: group_starts, piece_group_rows, piece_file_stretch), emulated on the host:
pyarrow writes each piece as gpu_spill has libcudf write it (row groups of piece_group_rows, the
placement groups' starts in the key-value metadata) and reads rows [start, stop) as libcudf's
skip_rows/nrows do (only the row groups those rows cross, then sliced). The stretch read gives
exactly the rows that reading the whole piece and filtering gives, and a piece without the
starts (written before, by another writer, or with starts that do not fit it) is read whole."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.backends import gpu_pieces
from gpuetl.backends.cpu import CpuBackend
from gpuetl.backends.host_spill import arrow_groups
from gpuetl.placement import BUCKETS, COARSE_BITS, PLACE
from gpuetl.samples import write_access_logs
from gpuetl.sinks import parquet

CPU = CpuBackend()


def _ranged_piece(n: int, seed: int) -> pa.Table:
    """A piece as a ranged spill orders it (host_spill.arrow_groups, which gpu_spill.group_order
    reproduces on the device): by the placement hash's top bits, input order within a group."""
    rng = np.random.default_rng(seed)
    place = rng.integers(0, 2**64, n, dtype=np.uint64)
    place[: n // 5] = place[n // 2]                    # ties
    if n >= 3:
        place[-3:] = [0, 2**64 - 1, 1 << 48]           # the ends of the hash range and of a bucket
    table = pa.table({PLACE: place, "row": np.arange(n),
                      "text": pa.array([None if i % 13 == 0 else "é" * (i % 4) + str(i) for i in range(n)])})
    return arrow_groups(table, np.zeros(n, dtype=np.int8), ranged=True)[0]


def write_like_the_gpu(table: pa.Table, path: str, moved: list | None = None) -> None:
    """gpu_spill.write_spill's file, written by pyarrow."""
    def to_host(values):
        if moved is not None:
            moved.append(values.nbytes)
        return np.asarray(values)

    starts = gpu_pieces.group_starts(table.column(PLACE).to_numpy(), np, to_host) if table.num_rows else None
    stored = {} if starts is None else {gpu_pieces.PIECE_GROUPS_KEY: gpu_pieces.encode_group_starts(starts)}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(table.replace_schema_metadata(stored), path + ".partial", compression="none",
                   row_group_size=gpu_pieces.piece_group_rows(table.num_rows), write_statistics=False)
    os.replace(path + ".partial", path)


def read_rows_like_libcudf(path: str, start: int, stop: int, columns=None) -> tuple[pa.Table, list[int]]:
    """Rows [start, stop) as libcudf's reader gives them with skip_rows/nrows: it reads the row
    groups those rows cross (select_row_groups' row-bounds filter), then drops the rest."""
    f = pq.ParquetFile(path)
    sizes = np.array([f.metadata.row_group(i).num_rows for i in range(f.num_row_groups)], dtype=np.int64)
    ends = np.cumsum(sizes)
    firsts = ends - sizes
    crossed = [i for i in range(len(sizes)) if firsts[i] < stop and ends[i] > start]
    if not crossed:
        return f.schema_arrow.empty_table().select(columns or f.schema_arrow.names), crossed
    table = f.read_row_groups(crossed, columns=columns)
    return table.slice(start - int(firsts[crossed[0]]), stop - start), crossed


def _shards_rows(piece: pa.Table, lo: int, hi: int) -> list[int]:
    rows, mine = CPU.spill_range(piece, lo, hi)
    return (rows if mine is None else rows.filter(pa.array(mine))).column("row").to_pylist()


WINDOWS = [(0, BUCKETS), (0, 1), (1, 2), (255, 257), (256, 512), (1000, 30000), (40000, 40001), (65535, BUCKETS),
           (0, 256), (32768, BUCKETS)]


@pytest.mark.parametrize("n", [1, 300, 5000])
def test_a_stretch_read_gives_the_rows_of_a_whole_read_and_filter(tmp_path, monkeypatch, n):
    monkeypatch.setattr(gpu_pieces, "PIECE_FRAGMENT_ROWS", 16)       # many row groups in a small piece
    piece = _ranged_piece(n, n)
    path = str(tmp_path / "p.parquet")
    write_like_the_gpu(piece, path)
    whole = pq.read_table(path)
    group_rows = gpu_pieces.piece_group_rows(n)
    for lo, hi in WINDOWS:
        span = gpu_pieces.piece_file_stretch(path, lo, hi)
        assert span is not None
        start, stop = span
        stretch, crossed = read_rows_like_libcudf(path, start, stop)
        assert _shards_rows(stretch, lo, hi) == _shards_rows(whole, lo, hi), (lo, hi)
        assert stretch.num_rows == stop - start
        # no more than the row groups the stretch crosses: its rows and part of two groups
        assert len(crossed) * group_rows <= stop - start + 2 * group_rows
        if n == 5000 and hi - lo <= 256:
            assert len(crossed) <= 3 and stop - start < n // 20, (lo, hi, crossed)


def test_shards_together_read_a_piece_about_once(tmp_path, monkeypatch):
    """64 shards over a piece of 64 row groups read it about 3 times in all, not 64 times."""
    monkeypatch.setattr(gpu_pieces, "PIECE_FRAGMENT_ROWS", 16)
    piece = _ranged_piece(20_000, 5)
    path = str(tmp_path / "p.parquet")
    write_like_the_gpu(piece, path)
    edges = np.linspace(0, BUCKETS, 65).astype(int)
    read = 0
    for lo, hi in zip(edges, edges[1:]):
        start, stop = gpu_pieces.piece_file_stretch(path, int(lo), int(hi))
        read += sum(pq.ParquetFile(path).metadata.row_group(i).num_rows
                    for i in read_rows_like_libcudf(path, start, stop)[1])
    assert piece.num_rows <= read <= 3 * piece.num_rows


def test_group_starts_are_the_cpus_and_only_for_a_grouped_piece():
    piece = _ranged_piece(3000, 2)
    place = piece.column(PLACE).to_numpy()
    moved = []
    starts = gpu_pieces.group_starts(place, np, lambda v: moved.append(v.nbytes) or np.asarray(v))
    coarse = (place >> np.uint64(64 - COARSE_BITS)).astype(np.int64)
    assert starts == np.searchsorted(coarse, np.arange((1 << COARSE_BITS) + 1), side="left").tolist()
    assert starts[0] == 0 and starts[-1] == 3000
    assert moved == [((1 << COARSE_BITS) + 2) * 8]                  # 2 KiB of control, whatever the piece's size
    shuffled = np.random.default_rng(0).permutation(place)           # a piece in input order
    assert gpu_pieces.group_starts(shuffled, np, np.asarray) is None
    one = gpu_pieces.group_starts(place[:1], np, np.asarray)
    assert one[0] == 0 and one[-1] == 1 and one.count(1) == 256 - int(coarse[0])


def _stored(starts) -> bytes:
    import json

    return json.dumps(starts).encode()


GOOD = [0] * 100 + [5] * 157


@pytest.mark.parametrize("stored", [
    None, b"", b"not json", b"{\"a\": 1}", _stored(GOOD[:-1]), _stored(GOOD + [5]),
    _stored([1] + GOOD[1:]),                                           # does not start at row 0
    _stored(GOOD[:-1] + [4]),                                          # does not end at the row count
    _stored([0] * 100 + [3, 2] + [5] * 155),                           # goes back
    _stored([0.0] + GOOD[1:]), _stored([True] + GOOD[1:]), _stored(["0"] + GOOD[1:]),
    b"[" * 100_000 + b"]" * 100_000,                                   # nested past the parser's depth
], ids=lambda s: repr(s)[:24])
def test_starts_that_do_not_describe_the_piece_mean_a_whole_read(stored):
    assert gpu_pieces.piece_stretch_rows(stored, 5, 0, BUCKETS) is None
    assert gpu_pieces.piece_stretch_rows(_stored(GOOD), 5, 0, BUCKETS) == (0, 5)
    assert gpu_pieces.piece_stretch_rows(_stored(GOOD).decode(), 5, 100 << 8, 101 << 8) == (5, 5)


class GpuLikePieces(CpuBackend):
    """The CPU backend with pieces in the GPU's files: Parquet written as gpu_spill writes them
    and read as gpu_spill reads them (the stretch alone where the piece says where it lies),
    counting the rows each read takes from the file."""

    spill_suffix = ".parquet"

    def __init__(self, with_starts: bool = True):
        super().__init__()
        self.with_starts = with_starts
        self.rows_read = 0
        self.whole_rows = 0

    def write_spill(self, piece, path, schema):
        if self.with_starts:
            write_like_the_gpu(piece, path)
        else:                               # a piece a run begun before wrote: no starts
            os.makedirs(os.path.dirname(path), exist_ok=True)
            pq.write_table(piece, path)

    def read_spill(self, path, columns=None, buckets=None):
        f = pq.ParquetFile(path)
        self.whole_rows += f.metadata.num_rows
        span = None if buckets is None else gpu_pieces.piece_file_stretch(path, *buckets)
        if span is None:
            self.rows_read += f.metadata.num_rows
            return pq.read_table(path, columns=columns)
        table, crossed = read_rows_like_libcudf(path, *span, columns=columns)
        self.rows_read += sum(f.metadata.row_group(i).num_rows for i in crossed)
        return table


SHARDS = {
    "ranged, unshuffled": {"count": 4},
    "shuffled by key, splits": {"count": 4, "shuffle": True, "key": ["ip"], "splits": {"train": 0.8, "val": 0.2}},
}


@pytest.mark.parametrize("shard", SHARDS.values(), ids=SHARDS)
def test_shards_from_stretch_reads_are_the_shards_of_whole_reads(tmp_path, monkeypatch, shard):
    """A run whose shard tasks read only their stretches writes the bytes the CPU's run writes,
    reading fewer rows than whole reads would; pieces without starts are read whole, same bytes."""
    monkeypatch.setattr(gpu_pieces, "PIECE_FRAGMENT_ROWS", 16)
    monkeypatch.setattr(parquet, "SHARD_BATCH_BYTES", 20_000)          # shuffled shards in several turns
    write_access_logs(tmp_path / "access.log", lines=1500, seed=3)

    def run(name, backend):
        spec = {"version": 1, "name": "stretch", "source": {"type": "text", "path": "access.log", "blocksize": "96KiB"},
                "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
                "shard": shard, "sink": {"path": name, "row_group_rows": 300, "mode": "resume"}}
        result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend=backend, scheduler="sync")
        c = result.counts
        assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
        return result

    plain = run("plain", "cpu")
    stretch, old = GpuLikePieces(), GpuLikePieces(with_starts=False)
    for name, backend in (("stretch", stretch), ("old", old)):
        result = run(name, backend)
        assert [s["sha256"] for s in result.shards] == [s["sha256"] for s in plain.shards], name
        assert result.counts == plain.counts
    assert old.rows_read == old.whole_rows > 0
    assert stretch.whole_rows == old.whole_rows
    assert stretch.rows_read < stretch.whole_rows / 2, (stretch.rows_read, stretch.whole_rows)


class ReadOnce(GpuLikePieces):
    """GpuLikePieces with the device's policy for shuffled shards (gpu_spill.GpuSpillMixin:
    spill_read_once, shard_batch_bytes; turns kept small here so a shard takes several), counting
    each piece's reads per shard task."""

    spill_read_once = True
    shard_batch_bytes = 20_000

    def __init__(self):
        super().__init__()
        self.task = None
        self.reads: dict = {}

    def read_spill(self, path, columns=None, buckets=None):
        key = (self.task, path)
        self.reads[key] = self.reads.get(key, 0) + 1
        return super().read_spill(path, columns, buckets)


@pytest.mark.slow
@pytest.mark.parametrize("shard", [{"count": 3, "shuffle": True, "seed": 2},
                                   {"count": 3, "shuffle": True, "key": ["ip"], "splits": {"train": 0.8, "val": 0.2}}],
                         ids=["ranged", "keyed, splits"])
def test_a_shuffled_shard_on_the_device_reads_each_piece_once(tmp_path, monkeypatch, shard):
    """The host reads every piece once per turn (32 MiB of rows); the device reads each piece
    once per shard, holds the shard's rows and takes the turns from them: same shard bytes."""
    monkeypatch.setattr(gpu_pieces, "PIECE_FRAGMENT_ROWS", 16)
    monkeypatch.setattr(parquet, "SHARD_BATCH_BYTES", 20_000)          # the host's turns: several a shard
    write_access_logs(tmp_path / "access.log", lines=1500, seed=4)
    real_write_shard = parquet.write_shard
    turns: list[int] = []

    def write_shard(task, pieces, **kwargs):
        backend = kwargs.get("backend")
        if isinstance(backend, ReadOnce):
            backend.task = (task.split, task.index)
        turns.append(-(-int(task.row_bytes) // 20_000))
        return real_write_shard(task, pieces, **kwargs)

    monkeypatch.setattr(parquet, "write_shard", write_shard)

    def run(name, backend):
        spec = {"version": 1, "name": "once", "source": {"type": "text", "path": "access.log", "blocksize": "48KiB"},
                "parse": {"preset": "apache_combined"}, "shard": shard, "sink": {"path": name, "row_group_rows": 300}}
        result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend=backend, scheduler="sync")
        c = result.counts
        assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"] == 1500
        return result

    plain = run("plain", "cpu")
    once = ReadOnce()
    result = run("once", once)
    assert [s["sha256"] for s in result.shards] == [s["sha256"] for s in plain.shards]
    assert min(turns) > 1                                   # several turns a shard
    assert len({task for task, _ in once.reads}) >= 3       # every shard task read pieces
    assert set(once.reads.values()) == {1}, once.reads      # each piece once per shard

    class PerTurn(ReadOnce):
        spill_read_once = False                             # the host's way: every piece read again per turn

    again = PerTurn()
    run("again", again)
    assert max(again.reads.values()) > 1
