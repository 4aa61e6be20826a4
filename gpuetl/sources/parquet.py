"""Parquet sources: row groups instead of byte ranges, rows instead of lines.

A partition is a run of row groups (packed up to `blocksize` of uncompressed data); a record's
identity is (file, row number in the file), which `provenance: true` reports as `_offset`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import SourceError, SpecError
from ..types import ARROW_TYPES, Schema, type_name_of
from .files import InputFile
from .ranges import Partition, pack


@dataclass(frozen=True)
class RowGroups:
    file_index: int
    first: int          # first row group
    count: int
    first_row: int      # row number of the first row group's first row
    offset: int = -1    # (byte ranges' field; a row group is never a header)


@dataclass(frozen=True)
class ParquetColumns:
    """The source's columns (what sources/parsers.py's parsers expose as `schema`)."""

    fields: tuple[tuple[str, str], ...]

    @property
    def schema(self) -> Schema:
        return dict(self.fields)


def _supported(arrow_type: pa.DataType) -> bool:
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return _supported_inside(arrow_type.value_type)
    if pa.types.is_struct(arrow_type):
        return arrow_type.num_fields > 0 and all(_supported_inside(f.type) for f in arrow_type)
    return (pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_boolean(arrow_type)
            or pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
            or pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type) or pa.types.is_dictionary(arrow_type)
            and pa.types.is_string(arrow_type.value_type))


def _supported_inside(arrow_type: pa.DataType) -> bool:
    """What a list<...> or struct<...> column type may hold (types.py: no timestamps inside)."""
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_struct(arrow_type):
        return _supported(arrow_type)
    return (pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_boolean(arrow_type)
            or pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type))


def parquet_columns(files: list[InputFile], where: str) -> tuple[ParquetColumns, list[str]]:
    """Columns of the first file, checked against every other file; lists and structs of the
    column types are kept, other columns (maps, timestamps inside structs, ...) are left out,
    and said so."""
    try:
        first = pq.read_schema(files[0].path)
    except (OSError, pa.ArrowInvalid) as err:
        raise SpecError(f"{where}: {files[0].display} is not a readable Parquet file ({err})") from None
    fields, skipped = [], []
    for field in first:
        if _supported(field.type):
            value_type = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
            fields.append((field.name, type_name_of(value_type)))
        else:
            skipped.append(f"{field.name} ({field.type})")
    for f in files[1:]:
        try:
            other = pq.read_schema(f.path)
        except (OSError, pa.ArrowInvalid) as err:
            raise SpecError(f"{where}: {f.display} is not a readable Parquet file ({err})") from None
        missing = [name for name, _ in fields if name not in other.names]
        if missing:
            raise SpecError(f"{where}: {f.display} lacks the column(s) {', '.join(missing)} that "
                            f"{files[0].display} has; all Parquet inputs must share their columns")
    return ParquetColumns(tuple(fields)), skipped


def plan_row_groups(files: list[InputFile], blocksize: int) -> list[Partition]:
    groups: list[tuple[RowGroups, int]] = []
    for f in files:
        try:
            meta = pq.ParquetFile(f.path).metadata
        except (OSError, pa.ArrowInvalid) as err:
            raise SpecError(f"source.path: {f.display} is not a readable Parquet file ({err})") from None
        row = 0
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            groups.append((RowGroups(f.index, i, 1, row), max(rg.total_byte_size, 1)))
            row += rg.num_rows
    return pack(groups, blocksize)


def read_row_groups(files: list[InputFile], ranges, schema: Schema) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """The partition's rows as one table with the plan's columns, plus each row's file index and
    row number."""
    tables, file_index, offsets = [], [], []
    target = pa.schema([(name, ARROW_TYPES[t]) for name, t in schema.items()])
    for rg in ranges:
        f = files[rg.file_index]
        try:
            table = pq.ParquetFile(f.path).read_row_groups(list(range(rg.first, rg.first + rg.count)),
                                                          columns=list(schema))
        except (OSError, pa.ArrowInvalid) as err:
            raise SourceError(f"{f.display}: cannot read row group {rg.first}: {err}") from None
        columns = []
        for name, field in zip(target.names, target):
            col = table.column(name)
            if pa.types.is_dictionary(col.type):
                col = col.cast(col.type.value_type)
            columns.append(col.cast(field.type, safe=not pa.types.is_timestamp(field.type)))
        tables.append(pa.Table.from_arrays(columns, schema=target))
        file_index.append(np.full(table.num_rows, rg.file_index, dtype=np.int32))
        offsets.append(np.arange(rg.first_row, rg.first_row + table.num_rows, dtype=np.int64))
    if not tables:
        return target.empty_table(), np.zeros(0, np.int32), np.zeros(0, np.int64)
    return pa.concat_tables(tables), np.concatenate(file_index), np.concatenate(offsets)
