"""Spill pieces on the device (Backend.spill_*; sinks/spill.py and sinks/parquet.py use them).

Mixed into GpuBackend (gpu.py). A partition's rows stay a cuDF frame from the map task to the
shard writer: they are grouped, counted and ordered on the device, and a piece is written and
read as Parquet by libcudf, whose local file sink and source are KvikIO file handles (GDS where
the file system has it, else KvikIO's POSIX path and its bounce buffers, which the manifest
reports under host_transfer.reads). No piece byte passes through gpuetl's own host memory, so
the host-transfer ledger holds none, except a piece in the run store (a cluster without a shared
disk: sinks/runstore.py), which reaches the task as a host file and is counted per read. What
does come to the host is control: split boundaries, a shard's stretch of a piece, the order
hash's span, each piece's histogram of bytes per placement bucket and where its placement
groups start (docs/gpu.md).

A shard task reads only its stretch of a ranged piece: the piece's writer stores where each
placement group starts (gpu_pieces.piece_stretch_rows) and cuts the file into small row groups,
and the reader asks libcudf for those rows alone (skip_rows/nrows: only the row groups they
cross are read). A piece without that entry (a run begun before, or a CPU's piece) is read
whole and sliced, as before.
"""

from __future__ import annotations

import os

import cudf
import cupy as cp
import numpy as np
import pyarrow as pa
import pylibcudf as plc

from ..placement import BUCKET_BITS, BUCKETS, COARSE_BITS, NESTED_ROW_BYTES, PLACE, hash_range
from ..types import ARROW_TYPES, Schema, is_nested
from .gpu_pieces import PIECE_GROUPS_KEY, encode_group_starts, group_starts, piece_file_stretch, piece_group_rows
from .gpu_tallies import count_host_bytes
from .host_spill import local_piece, read_ipc


def group_order(place, split, xp):
    """The row order of host_spill.arrow_groups for ranged pieces, in any array module: by
    split, then by the placement hash's top bits, input order kept within a group (numpy's
    stable argsort; CuPy's argsort is always stable)."""
    coarse = (place >> xp.uint64(64 - COARSE_BITS)).astype(xp.uint16)
    key = (split.astype(xp.uint16) << xp.uint16(COARSE_BITS)) | coarse
    return xp.argsort(key, kind="stable") if xp is np else xp.argsort(key)


def stretch(place, lo_bucket: int, hi_bucket: int, xp, to_host):
    """placement.hash_range in any array module: (start, stop, mask of the rows in buckets
    [lo, hi) within that stretch). One binary search call over the coarse groups; its two
    results come to the host through `to_host`."""
    groups = (place >> xp.uint64(64 - COARSE_BITS)).astype(xp.uint16)
    shift = BUCKET_BITS - COARSE_BITS
    top = len(place) if hi_bucket >= BUCKETS else None
    wanted = [lo_bucket >> shift] + ([] if top is not None else [((hi_bucket - 1) >> shift) + 1])
    found = to_host(xp.searchsorted(groups, xp.asarray(wanted, dtype=xp.uint16), side="left"))
    start = int(found[0])
    stop = max(int(found[1]) if top is None else top, start)
    window = place[start:stop]
    mine = window >= xp.uint64(lo_bucket << (64 - BUCKET_BITS))
    if top is None:
        mine &= window < xp.uint64(hi_bucket << (64 - BUCKET_BITS))
    return start, stop, mine


_COUNT_TYPES = (np.uint8, np.uint16, np.uint32, np.uint64)


def histogram_to_host(hist, xp, to_host) -> np.ndarray:
    """A per-bucket histogram of whole numbers (xp float64 of length BUCKETS), brought to the host
    in few bytes and returned as the float64 histogram it was: the counts in the narrowest
    unsigned type that holds the largest, and, when that is smaller, only the nonzero buckets
    with their uint16 index (a small piece fills few of the 65,536 buckets). Exact: the counts
    are whole numbers below 2**53. `to_host` copies an xp array to numpy (and counts it)."""
    counts = hist.astype(xp.uint64)
    largest, nonzero = (int(v) for v in to_host(xp.stack([counts.max(), (counts > 0).sum(dtype=xp.uint64)])))
    width = next(t for t in _COUNT_TYPES if largest <= np.iinfo(t).max)
    out = np.zeros(BUCKETS, dtype=np.float64)
    if nonzero * (2 + np.dtype(width).itemsize) < BUCKETS * np.dtype(width).itemsize:
        # the nonzero buckets' indexes without a nonzero search (its size would be read back:
        # a sync); `nonzero` is known: each goes to its rank, the zero buckets to a slot past the end
        filled = counts > 0
        index = xp.zeros(nonzero + 1, dtype=xp.int64)
        index[xp.where(filled, xp.cumsum(filled) - 1, nonzero)] = xp.arange(BUCKETS, dtype=xp.int64)
        index = index[:nonzero]
        out[to_host(index.astype(xp.uint16))] = to_host(counts[index].astype(width))
    else:
        out[:] = to_host(counts.astype(width))
    return out


def writer_metadata(table, names: list[str], arrow_types: list, nullable: bool | None = None):
    """libcudf's Parquet writer metadata for `table`, every column and nested child named as the
    CPU's pyarrow names them, so a file reads back with the CPU backend's Arrow schema: struct
    fields by their names (libcudf writes an unnamed child with an empty name), a list's values
    `element` (the Parquet LIST convention, which libcudf also applies by itself), and every
    `binary` column or child written as unannotated BYTE_ARRAY (`set_output_as_binary`: libcudf
    holds binary as a strings column and would annotate it UTF8, so a reader would type it
    `string` and decode image bytes as text). `arrow_types`: each column's Arrow type (None stands
    for any type without children or binary). `nullable`: declare every column and child
    optional, as pyarrow writes them; None leaves libcudf's default."""
    meta = plc.io.types.TableInputMetadata(table)
    for column, name, arrow_type in zip(meta.column_metadata, names, arrow_types):
        column.set_name(name)
        _describe(column, arrow_type, nullable)
    return meta


def _describe(column, arrow_type, nullable: bool | None) -> None:
    if nullable is not None:
        column.set_nullability(nullable)
    if arrow_type is None:
        return
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        # libcudf's column_in_metadata adds the second child a binary leaf's metadata needs
        column.set_output_as_binary(True)
    elif pa.types.is_struct(arrow_type):
        for i, field in enumerate(arrow_type):
            column.child(i).set_name(field.name)
            _describe(column.child(i), field.type, nullable)
    elif pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        column.child(1).set_name("element")      # child 0: the offsets
        _describe(column.child(1), arrow_type.value_type, nullable)


def device_arrow_type(dtype):
    """The Arrow type of a cuDF nested dtype (its field names), None for any other dtype."""
    return dtype.to_arrow() if isinstance(dtype, (cudf.StructDtype, cudf.ListDtype)) else None


def piece_writer_options(table, path: str, names: list[str], dtypes: list, rows: int, key_values: dict[str, str],
                         binary: frozenset = frozenset()):
    """libcudf's Parquet writer options for a spill piece: the columns and their nested children
    named and declared nullable (writer_metadata), no compression, no statistics (nothing reads
    them), row groups of piece_group_rows, `key_values` in the footer. Timestamps are written as
    cuDF writes them (not marked UTC; read_spill puts the zone back).

    Nullable: libcudf's single write would mark a column without a null mask required, so two
    pieces of one run read on the host (compression_ratio's sample, a run resumed on the CPU)
    could differ in their Arrow schema's nullability, which pa.concat_tables refuses.

    `binary`: the names of the piece's `binary` columns (a cuDF strings dtype does not say),
    written as unannotated BYTE_ARRAY as the shards' are; libcudf reads them back as strings."""
    types = [pa.binary() if name in binary else device_arrow_type(d) for name, d in zip(names, dtypes)]
    meta = writer_metadata(table, names, types, nullable=True)
    return (plc.io.parquet.ParquetWriterOptions.builder(plc.io.SinkInfo([path]), table)
            .metadata(meta)
            .key_value_metadata([key_values])
            .compression(plc.io.types.CompressionType.NONE)
            .stats_level(plc.io.types.StatisticsFreq.STATISTICS_NONE)
            .row_group_size_rows(piece_group_rows(rows))
            .utc_timestamps(False)
            .build())


class GpuSpillMixin:
    """Backend.spill_* on cuDF frames (a piece: a cuDF DataFrame with a fresh RangeIndex)."""

    spill_suffix = ".parquet"
    # A shuffled shard's pieces are read once each, their rows of the shard held on the device
    # (sinks/parquet.write_shard), and ordered in turns of about shard_batch_bytes: not re-read
    # once per 32 MiB turn as on the host (docs/gpu.md, "Memory").
    spill_read_once = True
    shard_batch_bytes = 1 << 30

    def spill_piece(self, df, schema: Schema):
        return self.conform(df, schema).reset_index(drop=True)

    def spill_groups(self, piece, split: np.ndarray, ranged: bool) -> dict:
        present = np.unique(split)
        if ranged:
            # the CPU's gather (host_spill.arrow_groups): by split, then by the placement hash's
            # top bits, input order kept within a group (CuPy's argsort is stable)
            from .gpu_device import device_values

            piece = piece.take(group_order(device_values(piece[PLACE]), cp.asarray(split), cp)).reset_index(drop=True)
            ordered = np.sort(split, kind="stable")
            if len(present) == 1:
                return {int(present[0]): piece}
            bounds = np.searchsorted(ordered, np.concatenate([present, [present[-1] + 1]]), side="left")
            return {int(s): piece.iloc[int(a):int(b)].reset_index(drop=True)
                    for s, a, b in zip(present, bounds[:-1], bounds[1:])}
        if len(present) == 1:
            return {int(present[0]): piece}
        where = cp.asarray(split)
        return {int(s): piece[cudf.Series(where == s, index=piece.index)].reset_index(drop=True) for s in present}

    def spill_histogram(self, piece, schema: Schema) -> np.ndarray:
        """host_spill.arrow_histogram on the device: each row's bytes (fixed widths plus string
        byte lengths) summed per bucket. The sums are of whole numbers, exact in float64, so
        they equal the CPU's whatever order the device adds them in; they cross to the host
        packed (histogram_to_host)."""
        from .gpu_device import device_values, to_host_copy

        size = cp.zeros(len(piece), dtype=cp.int64)
        fixed = 0
        for name, t in schema.items():
            if t in ("string", "binary"):
                size += piece[name].str.byte_count().fillna(0).astype("int64").values
            elif is_nested(t):
                fixed += NESTED_ROW_BYTES
            else:
                fixed += max(ARROW_TYPES[t].bit_width // 8, 1)
        buckets = (device_values(piece[PLACE]) >> cp.uint64(64 - BUCKET_BITS)).astype(cp.int64)
        hist = cp.bincount(buckets, weights=(size + fixed).astype(cp.float64), minlength=BUCKETS)
        return histogram_to_host(hist, cp, lambda values: to_host_copy(values, "control: bytes per placement bucket"))

    def write_spill(self, piece, path: str, schema: Schema) -> None:
        """Uncompressed Parquet (a piece lives for one run) written by libcudf into a partial
        file, then renamed: a retried task never leaves half a piece. A ranged piece (rows
        grouped by placement group) records where each group starts, for read_spill."""
        from .gpu_device import device_values, to_host_copy

        os.makedirs(os.path.dirname(path), exist_ok=True)
        partial = path + ".partial"
        starts = None
        if PLACE in piece.columns and len(piece):
            starts = group_starts(device_values(piece[PLACE]), cp,
                                  lambda found: to_host_copy(found, "control: where a piece's placement groups start"))
        # what cuDF's to_parquet stores (read_parquet rebuilds the dtypes from it), and the starts
        key_values = {"pandas": cudf.utils.ioutils.generate_pandas_metadata(piece, False)}
        if starts is not None:
            key_values[PIECE_GROUPS_KEY] = encode_group_starts(starts)
        names = list(piece.columns)
        table = plc.Table([piece[name].to_pylibcudf()[0] for name in names])
        options = piece_writer_options(table, partial, names, [piece[n].dtype for n in names], len(piece), key_values,
                                       # a cuDF strings dtype does not tell binary from string: the schema does
                                       frozenset(name for name, t in schema.items() if t == "binary"))
        self.counted_file_io("spill pieces written", lambda: os.path.getsize(partial),
                             lambda: plc.io.parquet.write_parquet(options))
        os.replace(partial, path)

    def read_spill(self, path: str, columns: list[str] | None = None,
                   buckets: tuple[int, int] | None = None):
        """For a shard's buckets, only the rows of their placement groups where the piece says
        where those lie (an empty stretch reads no rows: libcudf gives the empty columns)."""
        from .gpu_device import utc_timestamps

        local = local_piece(path)
        if local != path:
            count_host_bytes("spill: run-store piece read through a host file", os.path.getsize(local))
        if not local.endswith(".parquet"):          # a host Arrow piece: a run begun on the CPU, resumed here
            table = read_ipc(local)
            if buckets is not None and table.num_rows:    # only the stretch goes to the device
                start, stop, _ = hash_range(table.column(PLACE).to_numpy(), *buckets)
                table = table.slice(start, stop - start)
            return self.from_arrow(table.select(columns) if columns is not None else table)
        rows = None if buckets is None else piece_file_stretch(local, *buckets)
        if rows is None:                           # not ranged, or a piece without its groups' starts
            frame = self.counted_file_io("spill pieces read", lambda: os.path.getsize(local),
                                         lambda: cudf.read_parquet(local, columns=columns))
        else:
            frame = self.counted_file_io("spill pieces read", lambda: 0, lambda: cudf.read_parquet(
                local, columns=columns, skip_rows=rows[0], nrows=rows[1] - rows[0]))
        for name in frame.columns:
            # Parquet keeps UTC microseconds; the backend's timestamp dtype carries the zone, and
            # a naive column would send the shard writer's conform() to a host cast
            dtype = frame[name].dtype
            if dtype.kind == "M" and getattr(dtype, "tz", None) is None:
                frame[name] = utc_timestamps(frame[name])
        return frame

    def spill_range(self, piece, lo_bucket: int, hi_bucket: int):
        """placement.hash_range on the device (stretch): 16 bytes come to the host to slice
        the frame, and one to say whether every row of the stretch is the shard's."""
        from .gpu_device import any_true, device_values, to_host_copy

        if not len(piece):
            return piece, None
        start, stop, mine = stretch(device_values(piece[PLACE]), lo_bucket, hi_bucket, cp,
                                    lambda found: to_host_copy(found, "control: a shard's stretch of a piece"))
        rows = piece.iloc[start:stop].reset_index(drop=True)
        return rows, (mine if any_true(~mine, "control: rows outside the shard") else None)

    def spill_column(self, piece, name: str):
        from .gpu_device import device_values

        return device_values(piece[name])

    def spill_filter(self, piece, mask):
        return piece[cudf.Series(mask, index=piece.index)].reset_index(drop=True)

    def spill_concat(self, pieces: list):
        return cudf.concat(pieces, ignore_index=True)

    def spill_sort(self, piece, keys: list[str]):
        """Stable, as the CPU's sort_indices: rows with equal keys keep their order."""
        n = len(keys)
        order = plc.sorting.stable_sorted_order(plc.Table([piece[k].to_pylibcudf()[0] for k in keys]),
                                                [plc.types.Order.ASCENDING] * n, [plc.types.NullOrder.AFTER] * n)
        return piece.take(cudf.Series.from_pylibcudf(order)).reset_index(drop=True)

    def spill_span(self, piece, name: str):
        from .gpu_device import device_values, to_host_copy

        if not len(piece):
            return None
        values = device_values(piece[name])
        low, high = to_host_copy(cp.stack([values.min(), values.max()]), "control: order-hash span")
        return int(low), int(high)
