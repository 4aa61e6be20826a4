"""The reduce side of the sink: one task per shard gathers its slice of every spilled piece, puts
the rows in their final order and writes the Parquet file with exact row-group boundaries, so
the bytes depend only on the rows, never on how the input was partitioned."""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..columns import FILE_INDEX, OFFSET
from ..types import Schema, arrow_schema
from .base import CommittedFolder
from .layout import BUCKETS, Layout, hash_range
from .spill import ORDER, PLACE, QUARANTINE_SCHEMA, read_ipc

DEFAULT_ROW_GROUP_ROWS = 131_072
QUARANTINE_ROWS_PER_FILE = 1_000_000


@dataclass(frozen=True)
class WriteOptions:
    compression: str
    row_group_rows: int | None
    row_group_bytes: int | None


@dataclass(frozen=True)
class ShardTask:
    split: int
    split_name: str
    index: int                  # within the split
    lo_bucket: int
    hi_bucket: int
    relpath: str                # e.g. train/part-00003.parquet
    row_bytes: float = 0.0      # about how many bytes its rows take in memory (from the map's histograms)


@dataclass
class ShardResult:
    path: str                   # relative to the dataset folder
    split: str
    rows: int
    bytes: int
    sha256: str


SHARD_BATCH_BYTES = 32 << 20      # row bytes (the map's estimate) a shuffled shard is ordered and written in at a time


def write_shard(task: ShardTask, pieces: list[str], *, schema: Schema, tmp_dir: str, options: WriteOptions,
                layout: Layout, backend=None) -> ShardResult:
    """Gather the shard's slice of each piece, put the rows in their final order, write them, in
    pieces of bounded size, so a shard's memory does not grow with the input. The pieces come in
    partition order, which is input order: unshuffled rows are written piece by piece (each
    piece's slice put back in input order); shuffled rows are ordered by their order hash, in
    turns over disjoint ranges of it (rows with equal hashes share a turn), each turn holding
    about SHARD_BATCH_BYTES. `backend`: whose pieces these are (Backend.read_spill and the
    spill_* methods) and whose Parquet writer encodes the shard (default: the CPU's)."""
    if backend is None:
        from ..backends import get_backend

        backend = get_backend("cpu")
    writer = backend.shard_writer(os.path.join(tmp_dir, "data", task.relpath), schema, options, task)
    if layout.in_input_order:               # one shard per split: each piece is in input order
        for path in pieces:
            writer.write(backend.read_spill(path))
        return writer.close()
    input_order = [FILE_INDEX, OFFSET]
    if not layout.shuffle:
        for path in pieces:
            piece = _slice_of(backend, backend.read_spill(path), task, layout.ranged)
            if len(piece):
                writer.write(backend.spill_sort(piece, input_order))
        return writer.close()
    turns = max(1, math.ceil(task.row_bytes / SHARD_BATCH_BYTES))
    edges = _turn_edges(backend, pieces, task, layout.ranged, turns)
    xp = backend.xp
    for lo, hi in zip(edges, edges[1:]):
        gathered = []
        for path in pieces:
            piece, mine = _range_of(backend, backend.read_spill(path), task, layout.ranged)
            if len(piece) and turns > 1:
                order = backend.spill_column(piece, ORDER)
                turn = order >= xp.uint64(lo)
                if hi is not None:
                    turn &= order < xp.uint64(hi)
                mine = turn if mine is None else mine & turn
            if mine is not None:
                piece = backend.spill_filter(piece, mine)
            if len(piece):
                gathered.append(piece)
        if gathered:
            rows = backend.spill_concat(gathered) if len(gathered) > 1 else gathered[0]
            del gathered
            ordered = backend.spill_sort(rows, [ORDER, *input_order])
            del rows                 # a turn holds its rows about twice: the gathered ones, then in order
            writer.write(ordered)
            del ordered
    return writer.close()


def _turn_edges(backend, pieces: list[str], task: ShardTask, ranged: bool, turns: int) -> list:
    """The bounds of the order hash of each turn: equal widths between the smallest and the
    largest order hash among the shard's rows. Without a shard.key the order hash is the
    placement hash, so a shard's rows span only its own stretch of it: turns over the whole
    hash range would leave most turns empty and put the shard in one or two."""
    if turns == 1:
        return [0, None]
    low, high = None, None
    for path in pieces:
        piece = _slice_of(backend, backend.read_spill(path, [PLACE, ORDER]), task, ranged)
        span = backend.spill_span(piece, ORDER)
        if span is not None:
            low = span[0] if low is None else min(low, span[0])
            high = span[1] if high is None else max(high, span[1])
    if low is None:
        return [0, None]
    return [low + (high + 1 - low) * k // turns for k in range(turns)] + [None]


def _slice_of(backend, piece, task: ShardTask, ranged: bool):
    """The rows of a spilled piece that belong to the shard (its placement-hash range)."""
    piece, mine = _range_of(backend, piece, task, ranged)
    return piece if mine is None else backend.spill_filter(piece, mine)


def _range_of(backend, piece, task: ShardTask, ranged: bool):
    """The stretch of a spilled piece that holds the shard's rows (a slice, no copy) and which of
    its rows are the shard's (an xp bool array; None: all)."""
    if not ranged or not len(piece):
        return piece, None
    return backend.spill_range(piece, task.lo_bucket, task.hi_bucket)


class ShardWriter:
    """One Parquet file, fed tables in final row order. Row groups hold exactly row_group_rows
    rows (the last one fewer), so the bytes depend only on the rows; written through a partial
    file and renamed, so a killed task never leaves a truncated shard."""

    def __init__(self, path: str, schema: Schema, options: WriteOptions, task: ShardTask):
        self.path, self.task, self.options = path, task, options
        self.schema = arrow_schema(schema)
        self.rows_per_group = options.row_group_rows or (None if options.row_group_bytes else DEFAULT_ROW_GROUP_ROWS)
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.rows = 0
        self.closed = False
        self.writer: pq.ParquetWriter | None = None      # opened with the first rows (dictionary_columns)
        self.digest = hashlib.sha256()      # of the bytes written so far (a writer only appends)
        self.hashed = 0
        os.makedirs(os.path.dirname(path), exist_ok=True)

    def _open(self, first: pa.Table) -> pq.ParquetWriter:
        compression = None if self.options.compression == "none" else self.options.compression
        self.writer = pq.ParquetWriter(self.path + ".partial", self.schema, compression=compression,
                                       write_statistics=True,
                                       use_dictionary=dictionary_columns(first.slice(0, self.rows_per_group)))
        return self.writer

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self.pending.append(table.select(self.schema.names).cast(self.schema))
        self.pending_rows += table.num_rows
        if self.rows_per_group is None and self.pending_rows >= _SIZING_ROWS:
            self._size_groups()
        if self.rows_per_group is not None and self.pending_rows >= self.rows_per_group:
            self._flush(final=False)

    def _size_groups(self) -> None:
        """row_group_bytes: rows per group from the shard's first rows (the same on every run)."""
        sample = pa.concat_tables(self.pending).slice(0, _SIZING_ROWS)
        per_row = max(1.0, sample.nbytes / max(sample.num_rows, 1))
        self.rows_per_group = max(1, int(self.options.row_group_bytes // per_row))

    def _flush(self, final: bool) -> None:
        table = pa.concat_tables(self.pending) if len(self.pending) > 1 else self.pending[0]
        size = self.rows_per_group
        full = table.num_rows - table.num_rows % size if not final else table.num_rows
        writer = self.writer or self._open(table)
        for start in range(0, full, size):
            # one contiguous chunk per row group: Arrow feeds its page writer chunk by chunk, so
            # page cuts could otherwise depend on how the rows arrived (partitions, parse batches)
            chunk = table.slice(start, min(size, full - start)).combine_chunks()
            writer.write_table(chunk, row_group_size=size)
        rest = table.slice(full)
        self.pending = [rest] if rest.num_rows else []
        self.pending_rows = rest.num_rows
        self.rows += full
        self._hash_written()

    def _hash_written(self) -> None:
        """Hash what the writer has appended since the last call, while later rows are still
        being parsed, so closing the shard does not read it all back at the end."""
        with open(self.path + ".partial", "rb") as fh:
            fh.seek(self.hashed)
            while block := fh.read(1 << 20):
                self.digest.update(block)
                self.hashed += len(block)

    def abort(self) -> None:
        """Close without publishing (idempotent; a no-op after close)."""
        if not self.closed:
            self.closed = True
            if self.writer is not None:
                self.writer.close()

    def close(self) -> ShardResult:
        if self.pending:
            if self.rows_per_group is None:
                self._size_groups()
            self._flush(final=True)
        if self.rows == 0:
            (self.writer or self._open(self.schema.empty_table())).write_table(self.schema.empty_table())
        self.writer.close()
        self.closed = True
        self._hash_written()
        os.replace(self.path + ".partial", self.path)
        return ShardResult(self.task.relpath, self.task.split_name, self.rows, os.path.getsize(self.path),
                           self.digest.hexdigest())


_SIZING_ROWS = 65_536
DICTIONARY_MAX_SHARE = 0.3
_DICTIONARY_SAMPLE_ROWS = DEFAULT_ROW_GROUP_ROWS    # at most one default row group


def dictionary_columns(table: pa.Table) -> list[str]:
    """Columns to dictionary-encode: those with few distinct values in the shard's first row
    group (the writer passes it, so the choice depends only on the rows). A dictionary holds a
    row group's distinct values, so a row group is what is judged (client IPs repeat across a
    row group though rarely within its first few thousand rows). Timestamps, sizes and URLs are
    mostly distinct: their dictionary is as large as the data and slower to build, so they are
    plain-encoded (measurements in benchmarks/README.md). Nested columns (structs, lists) are
    left to the writer's defaults: there is no distinct count of a struct."""
    sample = table.slice(0, _DICTIONARY_SAMPLE_ROWS)
    limit = DICTIONARY_MAX_SHARE * max(sample.num_rows, 1)
    return [name for name in sample.column_names
            if not pa.types.is_nested(sample.schema.field(name).type) and pc.count_distinct(sample.column(name), mode="all").as_py() <= limit]


def write_parquet(table: pa.Table, path: str, options: WriteOptions, relpath: str = "") -> ShardResult:
    writer = ShardWriter(path, _schema_of(table), options, ShardTask(0, "", 0, 0, 0, relpath))
    writer.write(table)
    return writer.close()


def _schema_of(table: pa.Table) -> Schema:
    from ..types import type_name_of

    return {f.name: "binary" if pa.types.is_binary(f.type) else type_name_of(f.type) for f in table.schema}


def write_quarantine(pieces: list[str], tmp_dir: str, options: WriteOptions) -> list[ShardResult]:
    tables = [read_ipc(p) for p in pieces]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return []
    table = pa.concat_tables(tables)
    table = table.take(pc.sort_indices(table, sort_keys=[(FILE_INDEX, "ascending"), ("_offset", "ascending"),
                                                         ("_stage", "ascending")]))
    schema = QUARANTINE_SCHEMA
    if pa.types.is_binary(table.schema.field("_raw").type):     # an image source's exact input bytes
        schema = schema.set(schema.get_field_index("_raw"), pa.field("_raw", pa.binary()))
    table = table.select(schema.names).cast(schema)
    results = []
    for n, start in enumerate(range(0, table.num_rows, QUARANTINE_ROWS_PER_FILE)):
        relpath = f"_quarantine/part-{n:05d}.parquet"
        result = write_parquet(table.slice(start, QUARANTINE_ROWS_PER_FILE), os.path.join(tmp_dir, "data", relpath),
                               options, relpath)
        result.split = "_quarantine"
        results.append(result)
    return results


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


SAMPLE_ROW_BYTES = 16 << 20


def compression_ratio(pieces: list[str], histogram: np.ndarray, schema: Schema, options: WriteOptions) -> float:
    """Parquet bytes per in-memory row byte, from compressing a deterministic sample: the rows
    of the lowest placement-hash buckets (which depend only on the data) up to ~16 MiB."""
    import io

    from .spill import _row_bytes

    cum = np.cumsum(histogram)
    last = min(int(np.searchsorted(cum, SAMPLE_ROW_BYTES)) + 1, BUCKETS)
    parts = []
    for path in pieces:
        table = read_ipc(path)
        if table.num_rows:
            start, stop, mine = hash_range(table.column(PLACE).to_numpy(), 0, last)
            table = table.slice(start, stop - start)
            parts.append(table if mine is None else table.filter(pa.array(mine)))
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return 1.0
    sample = pa.concat_tables(parts)
    sample = sample.take(pc.sort_indices(sample, sort_keys=[(PLACE, "ascending"), (FILE_INDEX, "ascending"),
                                                            (OFFSET, "ascending")]))
    raw = float(_row_bytes(sample, schema).sum())
    sink = io.BytesIO()
    compression = None if options.compression == "none" else options.compression
    rows = options.row_group_rows or DEFAULT_ROW_GROUP_ROWS
    sample = sample.select(list(schema)).cast(arrow_schema(schema))
    pq.write_table(sample, sink, compression=compression, row_group_size=rows,
                   use_dictionary=dictionary_columns(sample))
    return max(sink.tell() / max(raw, 1.0), 1e-6)


class ParquetSink(CommittedFolder):
    """The Parquet sink: shards with exact row-group boundaries (ShardWriter, or the backend's own
    Parquet writer), the quarantine as Parquet, the shared commit protocol."""

    name = "parquet"
    suffix = ".parquet"

    def write_options(self, sink_spec) -> WriteOptions:
        return WriteOptions(sink_spec.compression, sink_spec.row_group_rows, sink_spec.row_group_bytes)

    def shard_path(self, split_name: str, index: int) -> str:
        return f"{split_name}/part-{index:05d}.parquet" if split_name else f"part-{index:05d}.parquet"

    def write_shard(self, task, pieces, **kwargs) -> ShardResult:
        return write_shard(task, pieces, **kwargs)

    def shard_writer(self, backend, path: str, schema: Schema, options: WriteOptions, task):
        return (backend.shard_writer if backend is not None else ShardWriter)(path, schema, options, task)

    def write_quarantine(self, pieces, tmp_dir, options) -> list[ShardResult]:
        return write_quarantine(pieces, tmp_dir, options)

    def size_ratio(self, pieces, histogram, schema, options) -> float:
        return compression_ratio(pieces, histogram, schema, options)

    def sample(self, path, rows: int) -> list[dict]:
        return pq.ParquetFile(path).read_row_group(0).slice(0, rows).to_pylist()
