"""The reduce side of the sink: one task per shard gathers its slice of every spilled piece, puts
the rows in their final order and writes the Parquet file with exact row-group boundaries, so
the bytes depend only on the rows, never on how the input was partitioned."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..backends.base import FILE_INDEX, OFFSET
from ..types import Schema, arrow_schema
from .layout import BUCKET_BITS, BUCKETS
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


@dataclass
class ShardResult:
    path: str                   # relative to the dataset folder
    split: str
    rows: int
    bytes: int
    sha256: str


def write_shard(task: ShardTask, pieces: list[str], *, schema: Schema, tmp_dir: str, options: WriteOptions,
                shuffle: bool, ranged: bool) -> ShardResult:
    out_path = os.path.join(tmp_dir, "data", task.relpath)
    tables = []
    for path in pieces:
        table = read_ipc(path)
        if ranged and table.num_rows:
            place = table.column(PLACE).to_numpy()
            lo = np.searchsorted(place, np.uint64(task.lo_bucket) << np.uint64(64 - BUCKET_BITS), side="left")
            hi = (len(place) if task.hi_bucket >= BUCKETS else
                  np.searchsorted(place, np.uint64(task.hi_bucket) << np.uint64(64 - BUCKET_BITS), side="left"))
            table = table.slice(lo, hi - lo)
        if table.num_rows:
            tables.append(table)
    target = arrow_schema(schema)
    if tables:
        table = pa.concat_tables(tables)
        keys = [(ORDER, "ascending")] if shuffle else []
        keys += [(FILE_INDEX, "ascending"), (OFFSET, "ascending")]
        table = table.take(pc.sort_indices(table, sort_keys=keys))
        table = table.select(list(schema)).cast(target)
    else:
        table = target.empty_table()
    write_parquet(table, out_path, options)
    return ShardResult(task.relpath, task.split_name, table.num_rows, os.path.getsize(out_path), sha256_of(out_path))


def write_parquet(table: pa.Table, path: str, options: WriteOptions) -> None:
    """Row groups of exactly row_group_rows (the last one smaller), written through a partial
    file and renamed: a killed task never leaves a truncated shard."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rows = options.row_group_rows
    if rows is None and options.row_group_bytes:
        sample = table.slice(0, 65_536)
        per_row = max(1.0, sample.nbytes / max(sample.num_rows, 1))
        rows = max(1, int(options.row_group_bytes // per_row))
    rows = rows or DEFAULT_ROW_GROUP_ROWS
    compression = None if options.compression == "none" else options.compression
    tmp = path + ".partial"
    with pq.ParquetWriter(tmp, table.schema, compression=compression, write_statistics=True) as writer:
        if table.num_rows == 0:
            writer.write_table(table)
        for start in range(0, table.num_rows, rows):
            writer.write_table(table.slice(start, rows), row_group_size=rows)
    os.replace(tmp, path)


def write_quarantine(pieces: list[str], tmp_dir: str, options: WriteOptions) -> list[ShardResult]:
    tables = [read_ipc(p) for p in pieces]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return []
    table = pa.concat_tables(tables)
    table = table.take(pc.sort_indices(table, sort_keys=[(FILE_INDEX, "ascending"), ("_offset", "ascending"),
                                                         ("_stage", "ascending")]))
    table = table.select(QUARANTINE_SCHEMA.names).cast(QUARANTINE_SCHEMA)
    results = []
    for n, start in enumerate(range(0, table.num_rows, QUARANTINE_ROWS_PER_FILE)):
        relpath = f"_quarantine/part-{n:05d}.parquet"
        path = os.path.join(tmp_dir, "data", relpath)
        write_parquet(table.slice(start, QUARANTINE_ROWS_PER_FILE), path, options)
        results.append(ShardResult(relpath, "_quarantine", min(QUARANTINE_ROWS_PER_FILE, table.num_rows - start),
                                   os.path.getsize(path), sha256_of(path)))
    return results


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
