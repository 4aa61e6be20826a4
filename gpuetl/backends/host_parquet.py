"""The host's Parquet encoder of one shard (the CPU backend's Backend.shard_encoder, and the
quarantine's writer): pyarrow's ParquetWriter behind the hooks of sinks/shard_writer.py's
ShardEncoder, which owns the row groups, the hash and the publishing."""

from __future__ import annotations

from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from ..types import Schema, arrow_schema


class HostShardEncoder:
    """Arrow tables in, pyarrow's Parquet writer out: statistics per row group, the columns the
    sink's dictionary choice names dictionary-encoded."""

    def __init__(self, schema: Schema, compression: str):
        self.schema = arrow_schema(schema)
        self.compression = None if compression == "none" else compression
        self.writer: pq.ParquetWriter | None = None
        self.rows_per_group = 0
        self.written: list = []           # the file's FileMetaData, from the writer at close

    def conform(self, rows: pa.Table) -> pa.Table:
        return rows.select(self.schema.names).cast(self.schema)

    def concat(self, pieces: list[pa.Table]) -> pa.Table:
        return pa.concat_tables(pieces)

    def slice(self, rows: pa.Table, start: int, stop: int) -> pa.Table:
        return rows.slice(start, max(stop - start, 0))

    def nbytes(self, rows: pa.Table) -> float:
        return rows.nbytes

    def empty(self) -> pa.Table:
        return self.schema.empty_table()

    def open(self, path: str, first: pa.Table, rows_per_group: int, dictionary: Callable[[pa.Table], list[str]]):
        self.rows_per_group = rows_per_group
        self.writer = pq.ParquetWriter(path, self.schema, compression=self.compression, write_statistics=True,
                                       use_dictionary=dictionary(first.slice(0, rows_per_group)),
                                       metadata_collector=self.written)

    def write_group(self, rows: pa.Table) -> None:
        # one contiguous chunk per row group: Arrow feeds its page writer chunk by chunk, so
        # page cuts could otherwise depend on how the rows arrived (partitions, parse batches)
        self.writer.write_table(rows.combine_chunks(), row_group_size=self.rows_per_group)

    def close(self) -> None:
        self.writer.close()

    def metadata(self):
        """The footer pyarrow wrote, as its writer kept it (the file is not read back)."""
        return self.written[-1]

    def abort(self) -> None:
        self.writer.close()
