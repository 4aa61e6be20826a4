"""The reduce side of the sink: one task per shard gathers its slice of every spilled piece, puts
the rows in their final order and writes the Parquet file with exact row-group boundaries, so
the bytes depend only on the rows, never on how the input was partitioned."""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..backends.host_spill import read_ipc, row_bytes
from ..backends.host_parquet import HostShardEncoder
from ..columns import FILE_INDEX, OFFSET
from ..placement import BUCKETS, ORDER, PLACE, hash_range
from ..storage import is_remote
from ..types import Schema, arrow_schema
from .base import CommittedFolder
from .layout import Layout
from .parquet_policy import DEFAULT_ROW_GROUP_ROWS, dictionary_columns
from .shard_writer import ShardResult, ShardWriter
from .spill import QUARANTINE_SCHEMA

if TYPE_CHECKING:
    from ..backends.base import Spill

QUARANTINE_ROWS_PER_FILE = 1_000_000


@dataclass(frozen=True)
class WriteOptions:
    compression: str
    row_group_rows: int | None
    row_group_bytes: int | None
    durable: bool = True        # flush each file before its rename (gpuetl/durable.py); an object store's staging: no


@dataclass(frozen=True)
class ShardTask:
    split: int
    split_name: str
    index: int                  # within the split
    lo_bucket: int
    hi_bucket: int
    relpath: str                # e.g. train/part-00003.parquet
    row_bytes: float = 0.0      # about how many bytes its rows take in memory (from the map's histograms)


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
    writer = shard_writer(backend, os.path.join(tmp_dir, "data", task.relpath), schema, options, task)
    if layout.in_input_order:               # one shard per split: each piece is in input order
        for path in pieces:
            writer.write(backend.read_spill(path))
        return writer.close()
    input_order = [FILE_INDEX, OFFSET]
    if not layout.shuffle:
        for path in pieces:
            piece = _slice_of(backend, _read(backend, path, task, layout.ranged), task, layout.ranged)
            if len(piece):
                writer.write(backend.spill_sort(piece, input_order))
        return writer.close()
    held = None
    if backend.spill_read_once:
        # a device (gpu_spill): each piece is read once, its rows of the shard held where the
        # backend holds rows, and the turns taken from those; not a read of every piece per turn
        held = [_slice_of(backend, _read(backend, path, task, layout.ranged), task, layout.ranged) for path in pieces]
        held = [piece for piece in held if len(piece)]
    turns = max(1, math.ceil(task.row_bytes / (backend.shard_batch_bytes or SHARD_BATCH_BYTES)))
    edges = _turn_edges(backend, pieces, task, layout.ranged, turns, held)
    xp = backend.xp
    for lo, hi in zip(edges, edges[1:]):
        gathered = []
        for path in (pieces if held is None else held):
            piece, mine = (path, None) if held is not None else \
                _range_of(backend, _read(backend, path, task, layout.ranged), task, layout.ranged)
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


def _turn_edges(backend: Spill, pieces: list[str], task: ShardTask, ranged: bool, turns: int, held=None) -> list:
    """The bounds of the order hash of each turn: equal widths between the smallest and the
    largest order hash among the shard's rows. Without a shard.key the order hash is the
    placement hash, so a shard's rows span only its own stretch of it: turns over the whole
    hash range would leave most turns empty and put the shard in one or two. `held`: the
    shard's rows of each piece, already read (then no piece is read here)."""
    if turns == 1:
        return [0, None]
    low, high = None, None
    for path in (pieces if held is None else held):
        piece = path if held is not None else \
            _slice_of(backend, _read(backend, path, task, ranged, [PLACE, ORDER]), task, ranged)
        span = backend.spill_span(piece, ORDER)
        if span is not None:
            low = span[0] if low is None else min(low, span[0])
            high = span[1] if high is None else max(high, span[1])
    if low is None:
        return [0, None]
    return [low + (high + 1 - low) * k // turns for k in range(turns)] + [None]


def _read(backend: Spill, path: str, task: ShardTask, ranged: bool, columns: list[str] | None = None):
    """A spilled piece, or of a ranged one at least the stretch holding the shard's buckets (a
    backend may read only that: Spill.read_spill)."""
    return backend.read_spill(path, columns, buckets=(task.lo_bucket, task.hi_bucket) if ranged else None)


def _slice_of(backend: Spill, piece, task: ShardTask, ranged: bool):
    """The rows of a spilled piece that belong to the shard (its placement-hash range)."""
    piece, mine = _range_of(backend, piece, task, ranged)
    return piece if mine is None else backend.spill_filter(piece, mine)


def _range_of(backend: Spill, piece, task: ShardTask, ranged: bool):
    """The stretch of a spilled piece that holds the shard's rows (a slice, no copy) and which of
    its rows are the shard's (an xp bool array; None: all)."""
    if not ranged or not len(piece):
        return piece, None
    return backend.spill_range(piece, task.lo_bucket, task.hi_bucket)


def shard_writer(backend: Spill, path: str, schema: Schema, options: WriteOptions, task: ShardTask) -> ShardWriter:
    """The one shard writer (sinks/shard_writer.py) with the backend's encoder."""
    return ShardWriter(path, schema, options, task, backend.shard_encoder(schema, options.compression))


def write_parquet(table: pa.Table, path: str, options: WriteOptions, relpath: str = "") -> ShardResult:
    """A host table as one Parquet file (the quarantine's), with the host's encoder."""
    schema = _schema_of(table)
    writer = ShardWriter(path, schema, options, ShardTask(0, "", 0, 0, 0, relpath),
                         HostShardEncoder(schema, options.compression))
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
    raw = float(row_bytes(sample, schema).sum())
    sink = io.BytesIO()
    compression = None if options.compression == "none" else options.compression
    rows = options.row_group_rows or DEFAULT_ROW_GROUP_ROWS
    sample = sample.select(list(schema)).cast(arrow_schema(schema))
    pq.write_table(sample, sink, compression=compression, row_group_size=rows,
                   use_dictionary=dictionary_columns(sample))
    return max(sink.tell() / max(raw, 1.0), 1e-6)


class ParquetSink(CommittedFolder):
    """The Parquet sink: shards with exact row-group boundaries (ShardWriter, with the backend's
    own Parquet encoder), the quarantine as Parquet, the shared commit protocol."""

    name = "parquet"
    suffix = ".parquet"

    def write_options(self, sink_spec) -> WriteOptions:
        # an object store's shards are staged on the local disk and uploaded: its PUT is what is durable
        durable = getattr(sink_spec, "durable", True) and not is_remote(sink_spec.path)
        return WriteOptions(sink_spec.compression, sink_spec.row_group_rows, sink_spec.row_group_bytes, durable)

    def shard_path(self, split_name: str, index: int) -> str:
        return f"{split_name}/part-{index:05d}.parquet" if split_name else f"part-{index:05d}.parquet"

    def write_shard(self, task, pieces, **kwargs) -> ShardResult:
        return write_shard(task, pieces, **kwargs)

    def shard_writer(self, backend, path: str, schema: Schema, options: WriteOptions, task):
        return shard_writer(backend, path, schema, options, task)

    def write_quarantine(self, pieces, tmp_dir, options) -> list[ShardResult]:
        return write_quarantine(pieces, tmp_dir, options)

    def size_ratio(self, pieces, histogram, schema, options) -> float:
        return compression_ratio(pieces, histogram, schema, options)

    def sample(self, path, rows: int) -> list[dict]:
        return pq.ParquetFile(path).read_row_group(0).slice(0, rows).to_pylist()
