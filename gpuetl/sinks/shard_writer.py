"""One shard's Parquet file, the same state machine whatever encodes it: rows come in in their
final order, row groups are cut at exact counts (parquet_policy.GroupSizing), the bytes are
hashed as they are appended, and at close the partial file is published durably
(durable.publish) and its size, sha256 and column statistics (the encoder's footer metadata:
sinks/column_stats.py) recorded. A backend brings only its encoder
(`Backend.shard_encoder`, the ShardEncoder hooks): pyarrow's on the host
(backends/host_parquet.py), libcudf's on the device (backends/gpu.py)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from ..durable import publish
from ..types import Schema
from .column_stats import file_columns
from .parquet_policy import DEFAULT_ROW_GROUP_ROWS, GroupSizing, dictionary_columns


@dataclass
class ShardResult:
    path: str                   # relative to the dataset folder
    split: str
    rows: int
    bytes: int
    sha256: str
    # what the file's footer says of each column (sinks/column_stats.py: file_columns), taken
    # where it was written; None: not known (another sink's writer, a result saved without it)
    columns: list[dict] | None = None

    def entry(self) -> dict:
        """The shard as the manifest lists it (its column statistics are the run report's)."""
        return {"path": self.path, "split": self.split, "rows": self.rows, "bytes": self.bytes,
                "sha256": self.sha256}


class ShardEncoder(Protocol):
    """A backend's side of one shard: its rows (an Arrow table, a device frame) and its Parquet
    writer. The file it writes must only grow by appends, each write_group complete on return
    (the writer hashes what was appended after each batch of groups)."""

    def conform(self, rows: Any) -> Any:
        """The output columns, in order, with the output types."""

    def concat(self, pieces: list) -> Any: ...

    def slice(self, rows: Any, start: int, stop: int) -> Any: ...

    def nbytes(self, rows: Any) -> float:
        """Their size in memory (GroupSizing judges a row's width by it)."""

    def empty(self) -> Any:
        """No rows, the output schema (an empty shard is still a Parquet file)."""

    def open(self, path: str, first: Any, rows_per_group: int,
             dictionary: Callable[[Any], list[str]]) -> None:
        """Start the file; `first`: its first rows, `dictionary`: the sink's dictionary choice
        (parquet_policy.dictionary_columns, for an Arrow table), for an encoder that takes it."""

    def write_group(self, rows: Any) -> None:
        """Append `rows` as exactly one row group."""

    def close(self) -> None: ...

    def metadata(self) -> Any:
        """After close: the file's `pyarrow.parquet.FileMetaData` (its footer: the column
        statistics), as the writer holds it or read back from the closed file; None where the
        encoder cannot tell (the shard phase then reads the footer in a task)."""

    def abort(self) -> None:
        """Close an opened file without finishing it."""


class ShardWriter:
    """One Parquet file, fed rows in final row order. Row groups hold exactly rows_per_group rows
    (the last one fewer), so the bytes depend only on the rows; written through a partial file
    and renamed, so a killed task never leaves a truncated shard. `options` and `task`: the
    sink's WriteOptions and ShardTask (sinks/parquet.py); `encoder`: the backend's hooks."""

    def __init__(self, path: str, schema: Schema, options: Any, task: Any, encoder: ShardEncoder):
        self.path, self.task, self.options, self.encoder = path, task, options, encoder
        self.sizing = GroupSizing.of(options)
        self.rows_per_group = self.sizing.rows
        self.pending: list = []
        self.pending_rows = 0
        self.rows = 0
        self.opened = False         # opened with the first rows (the dictionary choice)
        self.closed = False
        self.digest = hashlib.sha256()      # of the bytes written so far (a writer only appends)
        self.hashed = 0
        os.makedirs(os.path.dirname(path), exist_ok=True)

    def write(self, rows: Any) -> None:
        if len(rows) == 0:
            return
        self.pending.append(self.encoder.conform(rows))
        self.pending_rows += len(rows)
        if self.rows_per_group is None and self.pending_rows >= self.sizing.sample_rows:
            self._size_groups()
        if self.rows_per_group is not None and self.pending_rows >= self.rows_per_group:
            self._flush(final=False)

    def _joined(self) -> Any:
        return self.pending[0] if len(self.pending) == 1 else self.encoder.concat(self.pending)

    def _size_groups(self) -> None:
        """Rows per group from the shard's first rows (GroupSizing: the same on every run)."""
        sample = self.encoder.slice(self._joined(), 0, self.sizing.sample_rows)
        self.rows_per_group = self.sizing.rows_for(self.encoder.nbytes(sample), len(sample))

    def _open(self, first: Any) -> None:
        # rows_per_group is None only for an empty shard (no rows judged)
        self.encoder.open(self.path + ".partial", first, self.rows_per_group or DEFAULT_ROW_GROUP_ROWS,
                          dictionary_columns)
        self.opened = True

    def _flush(self, final: bool) -> None:
        rows = self._joined()
        size, count = self.rows_per_group, len(rows)
        full = count if final else count - count % size
        if not self.opened:
            self._open(rows)
        for start in range(0, full, size):
            self.encoder.write_group(self.encoder.slice(rows, start, min(start + size, full)))
        rest = self.encoder.slice(rows, full, count)
        self.pending = [rest] if len(rest) else []
        self.pending_rows = len(rest)
        self.rows += full
        self._hash_written()

    def _hash_written(self) -> None:
        """Hash what the encoder has appended since the last call, while later rows are still
        being made, so closing the shard does not read it all back at the end."""
        with open(self.path + ".partial", "rb") as fh:
            fh.seek(self.hashed)
            while block := fh.read(1 << 20):
                self.digest.update(block)
                self.hashed += len(block)

    def abort(self) -> None:
        """Close without publishing (idempotent; a no-op after close)."""
        if not self.closed:
            self.closed = True
            if self.opened:
                self.encoder.abort()

    def close(self) -> ShardResult:
        if self.pending:
            if self.rows_per_group is None:
                self._size_groups()
            self._flush(final=True)
        if not self.opened:             # no rows: an empty file with the schema
            empty = self.encoder.empty()
            self._open(empty)
            self.encoder.write_group(empty)
        self.encoder.close()
        self.closed = True
        self._hash_written()
        meta = self.encoder.metadata()
        columns = None if meta is None else file_columns(meta)
        publish(self.path + ".partial", self.path, durable=getattr(self.options, "durable", True))
        return ShardResult(self.task.relpath, self.task.split_name, self.rows, os.path.getsize(self.path),
                           self.digest.hexdigest(), columns)
