"""The Parquet writer of one shard on the host (the CPU backend's Backend.shard_writer; the
sinks write shards and the quarantine through it): exact row-group boundaries, so the bytes
depend only on the rows, and a partial file renamed on close, so a killed task never leaves a
truncated shard; the file is flushed to the disk before that rename (durable.publish). A
device backend's writer keeps the same contract (write, close -> ShardResult, abort)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..durable import publish
from ..types import Schema, arrow_schema

DEFAULT_ROW_GROUP_ROWS = 131_072
DEFAULT_ROW_GROUP_BYTES = 64 << 20


@dataclass(frozen=True)
class GroupSizing:
    """How a shard's rows per row group are chosen, the same for every backend's writer. With
    neither sink option, DEFAULT_ROW_GROUP_ROWS, or fewer where rows are wide (images,
    documents) so a group holds about DEFAULT_ROW_GROUP_BYTES: a writer buffers a whole group
    before writing it, and 131,072 photos are gigabytes. Judged on the shard's first
    `sample_rows` rows, so the choice depends only on the rows."""

    rows: int | None          # known from the options; None: judged on the first rows
    sample_rows: int = 0
    target_bytes: int = 0
    most_rows: int | None = None

    @classmethod
    def of(cls, options) -> "GroupSizing":
        if options.row_group_rows:
            return cls(options.row_group_rows)
        if options.row_group_bytes:
            return cls(None, _SIZING_ROWS, options.row_group_bytes)
        return cls(None, _DEFAULT_SIZING_ROWS, DEFAULT_ROW_GROUP_BYTES, DEFAULT_ROW_GROUP_ROWS)

    def rows_for(self, sample_bytes: float, sample_rows: int) -> int:
        per_row = max(1.0, sample_bytes / max(sample_rows, 1))
        rows = max(1, int(self.target_bytes // per_row))
        return min(rows, self.most_rows) if self.most_rows else rows


@dataclass
class ShardResult:
    path: str                   # relative to the dataset folder
    split: str
    rows: int
    bytes: int
    sha256: str


class ShardWriter:
    """One Parquet file, fed tables in final row order. Row groups hold exactly row_group_rows
    rows (the last one fewer), so the bytes depend only on the rows; written through a partial
    file and renamed, so a killed task never leaves a truncated shard. `options` and `task`: the
    sink's WriteOptions and ShardTask (sinks/parquet.py)."""

    def __init__(self, path: str, schema: Schema, options: Any, task: Any):
        self.path, self.task, self.options = path, task, options
        self.schema = arrow_schema(schema)
        self.sizing = GroupSizing.of(options)
        self.rows_per_group = self.sizing.rows
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
        if self.rows_per_group is None and self.pending_rows >= self.sizing.sample_rows:
            self._size_groups()
        if self.rows_per_group is not None and self.pending_rows >= self.rows_per_group:
            self._flush(final=False)

    def _size_groups(self) -> None:
        """Rows per group from the shard's first rows (GroupSizing: the same on every run)."""
        sample = pa.concat_tables(self.pending).slice(0, self.sizing.sample_rows)
        self.rows_per_group = self.sizing.rows_for(sample.nbytes, sample.num_rows)

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
        publish(self.path + ".partial", self.path, durable=getattr(self.options, "durable", True))
        return ShardResult(self.task.relpath, self.task.split_name, self.rows, os.path.getsize(self.path),
                           self.digest.hexdigest())


_SIZING_ROWS = 65_536           # row_group_bytes is judged on this many first rows
_DEFAULT_SIZING_ROWS = 1_024    # the default on fewer: a wide row's group is soon full
DICTIONARY_MAX_SHARE = 0.3
_DICTIONARY_SAMPLE_ROWS = DEFAULT_ROW_GROUP_ROWS    # at most one default row group


def dictionary_columns(table: pa.Table) -> list[str]:
    """Columns to dictionary-encode: those with few distinct values in the shard's first row
    group (the writer passes it, so the choice depends only on the rows). A dictionary holds a
    row group's distinct values, so a row group is what is judged (client IPs repeat across a
    row group though rarely within its first few thousand rows). Timestamps, sizes and URLs are
    mostly distinct: their dictionary is as large as the data and slower to build, so they are
    plain-encoded (measurements in docs/design.md). Nested columns (structs, lists) are
    left to the writer's defaults: there is no distinct count of a struct. Nor are text or
    binary values longer than WIDE_VALUE_BYTES on average (images, documents): counting their
    distinct values hashes every byte of them, and such values rarely repeat."""
    sample = table.slice(0, _DICTIONARY_SAMPLE_ROWS)
    limit = DICTIONARY_MAX_SHARE * max(sample.num_rows, 1)
    return [name for name in sample.column_names
            if not pa.types.is_nested(sample.schema.field(name).type) and not _wide(sample.column(name))
            and pc.count_distinct(sample.column(name), mode="all").as_py() <= limit]


WIDE_VALUE_BYTES = 1024


def _wide(column: pa.ChunkedArray) -> bool:
    t = column.type
    if not (pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t)
            or pa.types.is_large_string(t)):
        return False
    total = pc.sum(pc.binary_length(column)).as_py() or 0
    return total > WIDE_VALUE_BYTES * max(len(column) - column.null_count, 1)
