"""The Parquet sink's policy, the same for every backend's encoder: how many rows a row group
holds (GroupSizing) and which columns are dictionary-encoded (dictionary_columns). Both are
judged on the shard's own first rows, so a choice depends only on the rows."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

DEFAULT_ROW_GROUP_ROWS = 131_072
DEFAULT_ROW_GROUP_BYTES = 64 << 20


@dataclass(frozen=True)
class GroupSizing:
    """How a shard's rows per row group are chosen. With neither sink option,
    DEFAULT_ROW_GROUP_ROWS, or fewer where rows are wide (images, documents) so a group holds
    about DEFAULT_ROW_GROUP_BYTES: a writer buffers a whole group before writing it, and 131,072
    photos are gigabytes. Judged on the shard's first `sample_rows` rows, so the choice depends
    only on the rows."""

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
