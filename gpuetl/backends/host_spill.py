"""Spill pieces as host Arrow tables in IPC files: what Backend.spill_* do by default (the CPU's
pieces; sinks/spill.py sets them aside, sinks/parquet.py reads them back). The quarantine's
pieces are such files on every backend, and a device backend reads a host piece a run begun on
the CPU left behind."""

from __future__ import annotations

import contextvars
import os
from typing import Callable

import numpy as np
import pyarrow as pa

from ..placement import BUCKETS, NESTED_ROW_BYTES, PLACE, bucket_of, coarse_of
from ..types import Schema

# How the running task fetches a piece that lies in the run store (a URL) into its own folder:
# set by the sink that put it there (sinks/runstore.py, RunStore.task_folder) for the task's
# length. Backends read pieces by local path.
PIECE_FETCH: contextvars.ContextVar[Callable[[str], str] | None] = contextvars.ContextVar(
    "gpuetl_piece_fetch", default=None)


def local_piece(path: str) -> str:
    """A piece's local path: one in the object store (a cluster without a shared disk:
    sinks/runstore.py) is fetched into the task's folder first."""
    if "://" in path:
        fetch = PIECE_FETCH.get()
        if fetch is None:
            raise RuntimeError(f"internal error: {path} read outside a task that fetches the run's files")
        return fetch(path)
    return path


def arrow_groups(whole: pa.Table, split: np.ndarray, ranged: bool) -> dict[int, pa.Table]:
    """Backend.spill_groups for host Arrow pieces."""
    if ranged:
        # One gather puts the rows in split order and, within a split, grouped by the hash's top
        # 8 bits (input order kept within a group), so a shard reads one contiguous stretch of
        # each piece (placement.hash_range) and each split is a slice, not a filtered copy. 256
        # groups gather with forward-moving cursors: far cheaper than a full sort by hash.
        key = split.astype(np.uint16) << 8 | coarse_of(whole.column(PLACE).to_numpy())
        whole = whole.take(pa.array(np.argsort(key, kind="stable")))
        split = np.sort(split, kind="stable")
    present = np.unique(split)
    groups = {}
    for s in present:
        if len(present) == 1:
            table = whole
        elif ranged:
            start, stop = np.searchsorted(split, [s, s + 1], side="left")
            table = whole.slice(int(start), int(stop - start))
        else:               # splits in one shard each: a split's rows in input order
            table = whole.filter(pa.array(split == s))
        groups[int(s)] = table
    return groups


def row_bytes(table: pa.Table, schema: Schema) -> np.ndarray:
    """Each row's size in memory: fixed widths plus string lengths (used to cut shards by bytes);
    a nested value (list, struct) counts NESTED_ROW_BYTES, an estimate every backend makes alike."""
    size = np.zeros(table.num_rows, dtype=np.float64)
    for name in schema:
        col = table.column(name)
        if (pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_binary(col.type)
                or pa.types.is_large_binary(col.type)):
            import pyarrow.compute as pc

            size += pc.fill_null(pc.binary_length(col), 0).to_numpy().astype(np.float64)
        elif pa.types.is_nested(col.type):
            size += NESTED_ROW_BYTES
        else:
            size += max(col.type.bit_width // 8, 1)
    return size


def arrow_histogram(table: pa.Table, schema: Schema) -> np.ndarray:
    """Backend.spill_histogram for host Arrow pieces."""
    buckets = bucket_of(table.column(PLACE).to_numpy())
    return np.bincount(buckets.astype(np.int64), weights=row_bytes(table, schema), minlength=BUCKETS)


def write_ipc(table: pa.Table, path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".partial"
    with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=1 << 20)
    os.replace(tmp, path)   # a retried task never leaves half a piece


def read_ipc(path: str) -> pa.Table:
    """A spilled piece or quarantine file as host Arrow. IPC is memory-mapped: a reducer touches
    only the slice it needs. A device backend's Parquet piece is read on the host (a resumed
    run on the CPU, or the shard-size sample)."""
    path = local_piece(path)
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path)
    return pa.ipc.open_file(pa.memory_map(path, "r")).read_all()
