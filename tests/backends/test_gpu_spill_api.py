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

    from gpuetl.backends.gpu_pieces import PIECE_GROUPS_KEY, encode_group_starts

    key_values = {"pandas": cudf.utils.ioutils.generate_pandas_metadata(cudf.DataFrame(), False)}
    if starts:
        key_values[PIECE_GROUPS_KEY] = encode_group_starts([0] * 100 + [7] * 157)

    options = gpu_spill.piece_writer_options(plc.Table([]), str(tmp_path / "p.parquet.partial"), [], [], 7, key_values)
    assert isinstance(options, plc.io.parquet.ParquetWriterOptions)



NESTED_SCHEMA = {"event": "struct<a: string, b: list<struct<c: int64>>>", "tags": "list<string>", "n": "int64"}


def _empty_column(arrow_type):
    """An empty pylibcudf column of `arrow_type` with no device memory (what the writer's
    metadata is built from: only the column tree matters)."""
    import pylibcudf as plc

    ids = plc.TypeId
    if pa.types.is_struct(arrow_type):
        kind, children = ids.STRUCT, [_empty_column(f.type) for f in arrow_type]
    elif pa.types.is_list(arrow_type):
        kind, children = ids.LIST, [_empty_column(pa.int32()), _empty_column(arrow_type.value_type)]
    else:
        kind, children = {pa.string(): ids.STRING, pa.int64(): ids.INT64, pa.int32(): ids.INT32}[arrow_type], []
    return plc.Column(plc.DataType(kind), 0, None, None, 0, 0, children)


def _names(column, arrow_type):
    """The names the writer's metadata gives a column's children, walked along `arrow_type`'s
    shape: [(name, its children's names)] per struct field, or the list's one element."""
    if pa.types.is_struct(arrow_type):
        return [(column.child(i).get_name(), _names(column.child(i), f.type)) for i, f in enumerate(arrow_type)]
    if pa.types.is_list(arrow_type):
        return [(column.child(1).get_name(), _names(column.child(1), arrow_type.value_type))]
    return []


def _arrow_names(arrow_type):
    if pa.types.is_struct(arrow_type):
        return [(f.name, _arrow_names(f.type)) for f in arrow_type]
    if pa.types.is_list(arrow_type):
        return [(arrow_type.value_field.name, _arrow_names(arrow_type.value_type))]
    return []


@pytest.mark.parametrize("writer", ["shard", "spill"])
def test_both_writers_name_nested_children_as_the_cpu_writes_them(tmp_path, writer):
    """The shard writer (GpuShardEncoder: from the pipeline's schema) and the spill writer
    (write_spill: from the cuDF dtypes) name every struct field and list element in libcudf's
    writer metadata as the CPU's Parquet reads back: an unnamed struct field would be written
    with an empty name, a different Arrow schema from the CPU backend's."""
    import cudf
    import pyarrow.parquet as pq
    import pylibcudf as plc

    from gpuetl.backends.host_parquet import HostShardEncoder
    from gpuetl.sinks.shard_writer import ShardWriter
    from gpuetl.types import arrow_schema

    schema = arrow_schema(NESTED_SCHEMA)
    table = plc.Table([_empty_column(t) for t in schema.types])
    if writer == "shard":
        meta = gpu_spill.writer_metadata(table, schema.names, schema.types, nullable=True)
    else:
        dtypes = [cudf.StructDtype.from_arrow(t) if pa.types.is_struct(t) else
                  cudf.ListDtype.from_arrow(t) if pa.types.is_list(t) else np.dtype("int64") for t in schema.types]
        meta = gpu_spill.writer_metadata(table, schema.names, [gpu_spill.device_arrow_type(d) for d in dtypes])
        assert isinstance(gpu_spill.piece_writer_options(table, str(tmp_path / "p.parquet.partial"), schema.names,
                                                         dtypes, 0, {}), plc.io.parquet.ParquetWriterOptions)

    class Options:
        row_group_rows, row_group_bytes, compression = 10, None, "none"

    class Task:
        relpath, split_name = "shard.parquet", "train"

    cpu = ShardWriter(str(tmp_path / "cpu" / "shard.parquet"), NESTED_SCHEMA, Options(), Task(),
                      HostShardEncoder(NESTED_SCHEMA, "none"))
    cpu.close()
    written = pq.read_schema(tmp_path / "cpu" / "shard.parquet")
    assert [c.get_name() for c in meta.column_metadata] == written.names
    for column, field in zip(meta.column_metadata, written):
        assert _names(column, field.type) == _arrow_names(field.type), field.name
    assert _arrow_names(written.field("event").type) == [("a", []), ("b", [("element", [("c", [])])])]


class _RecordedColumn:
    """What writer_metadata asks of a column's metadata (pylibcudf's ColumnInMetadata has no
    getter for nullability)."""

    def __init__(self):
        self.name, self.nullable, self.binary, self.children = None, None, None, {}

    def set_name(self, name):
        self.name = name

    def set_nullability(self, nullable):
        self.nullable = nullable

    def set_output_as_binary(self, binary):
        self.binary = binary

    def child(self, i):
        return self.children.setdefault(i, _RecordedColumn())

    def declared(self):
        """(name, nullable) of this column and of every child asked for, depth first."""
        return [(self.name, self.nullable)] + [d for _, c in sorted(self.children.items()) for d in c.declared()]


def test_a_spill_piece_declares_every_column_and_child_nullable(tmp_path, monkeypatch):
    """A piece's columns and nested children are all optional, as pyarrow writes them: libcudf's
    single write marks a column without a null mask required, and two pieces read on the host
    (compression_ratio's sample) would then differ in nullability, which pa.concat_tables refuses."""
    import cudf
    import pylibcudf as plc

    from gpuetl.types import ARROW_TYPES

    event = ARROW_TYPES[NESTED_SCHEMA["event"]]
    asked = []
    real = gpu_spill.writer_metadata
    monkeypatch.setattr(gpu_spill, "writer_metadata", lambda *a, **k: asked.append(k) or real(*a, **k))
    gpu_spill.piece_writer_options(plc.Table([_empty_column(event)]), str(tmp_path / "p.parquet.partial"), ["event"],
                                   [cudf.StructDtype.from_arrow(event)], 0, {})
    assert asked == [{"nullable": True}]

    root = _RecordedColumn()
    gpu_spill._describe(root, event, True)
    assert root.declared() == [(None, True), ("a", True), ("b", True), ("element", True), ("c", True)]


def _binary_leaves(column):
    """(name, binary flag) of this column and every child asked for, depth first."""
    return [(column.name, column.binary)] + [d for _, c in sorted(column.children.items()) for d in _binary_leaves(c)]


def test_binary_columns_are_written_as_binary_not_utf8():
    """libcudf holds a `binary` column (image bytes, the quarantine's `_raw`) as a strings column
    and annotates it UTF8 unless its metadata says `set_output_as_binary`: the shard's schema
    would say `string` where the CPU's says `binary`, and reading image bytes back as text fails.
    Both writers' metadata (writer_metadata: GpuShardEncoder and the spill piece) mark every binary
    column and nested binary child, and nothing else."""
    import pylibcudf as plc

    image, raw = _RecordedColumn(), _RecordedColumn()
    gpu_spill._describe(image, pa.binary(), True)
    gpu_spill._describe(raw, pa.large_binary(), None)
    assert (image.binary, raw.binary) == (True, True)
    text = _RecordedColumn()
    gpu_spill._describe(text, pa.string(), True)
    assert text.binary is None
    nested = _RecordedColumn()
    gpu_spill._describe(nested, pa.struct([("s", pa.string()), ("b", pa.list_(pa.binary()))]), True)
    assert _binary_leaves(nested) == [(None, None), ("s", None), ("b", None), ("element", True)]

    # the real pylibcudf call, on a strings column with its offsets child (libcudf's
    # column_in_metadata adds the second child a binary leaf needs): it binds and builds
    strings = plc.Column(plc.DataType(plc.TypeId.STRING), 0, None, None, 0, 0,
                         [_empty_column(pa.int32())])
    table = plc.Table([strings, _empty_column(pa.string())])
    meta = gpu_spill.writer_metadata(table, ["image", "text"], [pa.binary(), pa.string()], nullable=True)
    assert [c.get_name() for c in meta.column_metadata] == ["image", "text"]


def test_a_spill_piece_marks_its_binary_columns(tmp_path, monkeypatch):
    """A piece's cuDF dtypes do not tell binary from string: write_spill takes the piece's
    schema, and the piece's writer metadata gets its binary columns as Arrow binary (so a piece
    read on the host, as the shard-size sample does, has the pipeline's types)."""
    import pylibcudf as plc

    from gpuetl.backends.gpu_spill import GpuSpillMixin

    written = []
    monkeypatch.setattr(gpu_spill, "piece_writer_options", lambda *args: written.append(args[-1]) or None)
    monkeypatch.setattr(gpu_spill.plc.io.parquet, "write_parquet", lambda options: None)

    class Column:
        def to_pylibcudf(self):
            return (_empty_column(pa.string()),)

        dtype = np.dtype("object")

    class Piece:
        columns = ["image", "text"]

        def __getitem__(self, name):
            return Column()

        def __len__(self):
            return 0

    class Backend(GpuSpillMixin):
        def counted_file_io(self, what, size, write):
            write()
            open(partial, "wb").close()

    partial = str(tmp_path / "s0" / "p.parquet.partial")
    monkeypatch.setattr(gpu_spill.cudf.utils.ioutils, "generate_pandas_metadata", lambda piece, index: "{}")
    Backend().write_spill(Piece(), partial[:-len(".partial")], {"image": "binary", "text": "string"})
    assert written == [frozenset({"image"})]

    asked = []
    real = gpu_spill.writer_metadata
    monkeypatch.setattr(gpu_spill, "writer_metadata", lambda t, n, types, **k: asked.append(types) or real(t, n, types, **k))
    table = plc.Table([_empty_column(pa.string()), _empty_column(pa.string())])
    monkeypatch.undo()
    monkeypatch.setattr(gpu_spill, "writer_metadata", lambda t, n, types, **k: asked.append(types) or real(t, n, types, **k))
    gpu_spill.piece_writer_options(table, str(tmp_path / "p.parquet.partial"), ["image", "text"],
                                   [np.dtype("object"), np.dtype("object")], 0, {}, frozenset({"image"}))
    assert asked == [[pa.binary(), None]]


def test_the_device_reads_a_shuffled_shards_pieces_once():
    """The policy tests/backends/test_gpu_spill_stretch.py runs on the host (ReadOnce): the GPU
    backend's spill holds a shard's rows and reads each piece once, in turns of 1 GiB."""
    from gpuetl.sinks.parquet import SHARD_BATCH_BYTES

    assert gpu_spill.GpuSpillMixin.spill_read_once is True
    assert gpu_spill.GpuSpillMixin.shard_batch_bytes == 1 << 30 > SHARD_BATCH_BYTES
