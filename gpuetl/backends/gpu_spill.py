"""Spill pieces on the device (Backend.spill_*; sinks/spill.py and sinks/parquet.py use them).

Mixed into GpuBackend (gpu.py). A partition's rows stay a cuDF frame from the map task to the
shard writer: they are grouped, counted and ordered on the device, and a piece is written and
read as Parquet by libcudf, whose local file sink and source are KvikIO file handles (GDS where
the file system has it, else KvikIO's POSIX path and its bounce buffers, which the manifest
reports under host_transfer.reads). No piece byte passes through gpuetl's own host memory, so
the host-transfer ledger holds none, except a piece in the run store (a cluster without a shared
disk: sinks/runstore.py), which reaches the task as a host file and is counted per read. What
does come to the host is control: split boundaries, a shard's stretch of a piece, the order
hash's span, and each piece's histogram of bytes per placement bucket (docs/gpu.md).
"""

from __future__ import annotations

import os

import cudf
import cupy as cp
import numpy as np
import pylibcudf as plc

from ..placement import BUCKET_BITS, BUCKETS, COARSE_BITS, NESTED_ROW_BYTES, PLACE
from ..types import ARROW_TYPES, Schema, is_nested
from .gpu_support import count_host_bytes
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
        index = xp.flatnonzero(counts)
        out[to_host(index.astype(xp.uint16))] = to_host(counts[index].astype(width))
    else:
        out[:] = to_host(counts.astype(width))
    return out


class GpuSpillMixin:
    """Backend.spill_* on cuDF frames (a piece: a cuDF DataFrame with a fresh RangeIndex)."""

    spill_suffix = ".parquet"

    def spill_piece(self, df, schema: Schema):
        return self.conform(df, schema).reset_index(drop=True)

    def spill_groups(self, piece, split: np.ndarray, ranged: bool) -> dict:
        present = np.unique(split)
        if ranged:
            # the CPU's gather (host_spill.arrow_groups): by split, then by the placement hash's
            # top bits, input order kept within a group (CuPy's argsort is stable)
            from .gpu import _device_values

            piece = piece.take(group_order(_device_values(piece[PLACE]), cp.asarray(split), cp)).reset_index(drop=True)
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
        from .gpu import _device_values, to_host_copy

        size = cp.zeros(len(piece), dtype=cp.int64)
        fixed = 0
        for name, t in schema.items():
            if t in ("string", "binary"):
                size += piece[name].str.byte_count().fillna(0).astype("int64").values
            elif is_nested(t):
                fixed += NESTED_ROW_BYTES
            else:
                fixed += max(ARROW_TYPES[t].bit_width // 8, 1)
        buckets = (_device_values(piece[PLACE]) >> cp.uint64(64 - BUCKET_BITS)).astype(cp.int64)
        hist = cp.bincount(buckets, weights=(size + fixed).astype(cp.float64), minlength=BUCKETS)
        return histogram_to_host(hist, cp, lambda values: to_host_copy(values, "control: bytes per placement bucket"))

    def write_spill(self, piece, path: str) -> None:
        """Uncompressed Parquet (a piece lives for one run) written by libcudf into a partial
        file, then renamed: a retried task never leaves half a piece."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        partial = path + ".partial"
        piece.to_parquet(partial, compression=None, index=False)
        os.replace(partial, path)

    def read_spill(self, path: str, columns: list[str] | None = None):
        local = local_piece(path)
        if local != path:
            count_host_bytes("spill: run-store piece read through a host file", os.path.getsize(local))
        if not local.endswith(".parquet"):          # a host Arrow piece: a run begun on the CPU, resumed here
            table = read_ipc(local)
            return self.from_arrow(table.select(columns) if columns is not None else table)
        frame = cudf.read_parquet(local, columns=columns)
        for name in frame.columns:
            # Parquet keeps UTC microseconds; the backend's timestamp dtype carries the zone, and
            # a naive column would send the shard writer's conform() to a host cast
            dtype = frame[name].dtype
            if dtype.kind == "M" and getattr(dtype, "tz", None) is None:
                frame[name] = frame[name].dt.tz_localize("UTC")
        return frame

    def spill_range(self, piece, lo_bucket: int, hi_bucket: int):
        """placement.hash_range on the device (stretch): 16 bytes come to the host to slice
        the frame, and one to say whether every row of the stretch is the shard's."""
        from .gpu import _device_values, _flag, to_host_copy

        if not len(piece):
            return piece, None
        start, stop, mine = stretch(_device_values(piece[PLACE]), lo_bucket, hi_bucket, cp,
                                    lambda found: to_host_copy(found, "control: a shard's stretch of a piece"))
        rows = piece.iloc[start:stop].reset_index(drop=True)
        return rows, (mine if _flag(~mine, "control: rows outside the shard") else None)

    def spill_column(self, piece, name: str):
        from .gpu import _device_values

        return _device_values(piece[name])

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
        from .gpu import _device_values, to_host_copy

        if not len(piece):
            return None
        values = _device_values(piece[name])
        low, high = to_host_copy(cp.stack([values.min(), values.max()]), "control: order-hash span")
        return int(low), int(high)
