"""Parquet sources: row groups instead of byte ranges, rows instead of lines.

A partition is a run of row groups (packed up to `blocksize` of decoded data), read one row
group at a time; a record's identity is (file, row number in the file), which `provenance:
true` reports as `_offset`.

A row group is a decompression bomb when it decodes past `source.max_uncompressed_bytes` or
`source.max_expand_ratio` times its compressed size (a 440-byte file can hold a 1.5 GB column:
one dictionary entry repeated). Its decoded size is bounded twice, before anything is held:
from the footer at planning (each column chunk's values times its Arrow width, a string's
offsets, and its uncompressed pages), and, for dictionary-encoded strings, whose footer says
nothing of how long each value expands to, exactly at reading: the column is read as its
dictionary and indices (what the footer already bounded) and the lengths the indices pick are
summed before any value is expanded. A row group over the bound is one quarantined record (its
file and row-group index in `_reason`, `_offset` its first row); the run goes on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import SourceError, SpecError
from ..spec.sizes import format_size
from ..types import ARROW_TYPES, Schema, type_name_of
from .compressed import RATIO_FLOOR, Limits
from .files import InputFile
from .ranges import Partition, pack


@dataclass(frozen=True)
class RowGroups:
    file_index: int
    first: int          # first row group
    count: int
    first_row: int      # row number of the first row group's first row
    offset: int = -1    # (byte ranges' field; a row group is never a header)
    cap: int | None = None          # the decoded bytes it may reach (source.max_* bounds); None: no bound
    bound: str = ""                 # which bound that is, in words
    refused: str | None = None      # set when its footer alone passes the bound: one quarantined record


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


WIDTHS = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}
OFFSET_BYTES = 4            # a decoded string's offset (Arrow `string`)


def plan_row_groups(files: list[InputFile], blocksize: int, limits: Limits = Limits(),
                    columns=None) -> list[Partition]:
    """One range per row group, packed by its decoded size from the footer (`footer_bytes`). A
    row group whose footer alone passes the bounds is refused (one quarantined record); the
    others carry their bound (`cap`) for the exact check at reading. `columns`: the names read
    (None: every column)."""
    groups: list[tuple[RowGroups, int]] = []
    for f in files:
        try:
            meta = pq.ParquetFile(f.path).metadata
        except (OSError, pa.ArrowInvalid) as err:
            raise SpecError(f"source.path: {f.display} is not a readable Parquet file ({err})") from None
        row = 0
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            decoded, stored = footer_bytes(meta, i, columns)
            cap, bound = decode_cap(limits, stored, blocksize)
            refused = None
            if decoded > cap:
                refused = (f"{f.display}: row group {i} ({rg.num_rows:,} rows) decodes to at least {decoded:,} bytes "
                           f"by its footer, past {bound}; refused as a possible decompression bomb, its records "
                           "are not read")
            groups.append((RowGroups(f.index, i, 1, row, cap=cap, bound=bound, refused=refused),
                           1 if refused else max(rg.total_byte_size, decoded, 1)))
            row += rg.num_rows
    return pack(groups, blocksize)


def decode_cap(limits: Limits, stored: int, blocksize: int) -> tuple[int, str]:
    """(the decoded bytes a row group of `stored` compressed bytes may reach, which bound that is
    in words): Limits.check's rule, except that the ratio never refuses a row group that decodes
    to no more than a partition (`blocksize`): a sorted or constant column legitimately
    compresses thousands of times, and a partition's worth of memory is spent anyway."""
    floor = max(RATIO_FLOOR, blocksize)
    cap = max(floor, int(limits.max_expand_ratio * stored))
    words = (f"source.max_expand_ratio ({limits.max_expand_ratio:g} times its {format_size(stored)} compressed; "
             f"a row group within source.blocksize, {format_size(floor)}, is never refused for its ratio)")
    if limits.max_uncompressed_bytes is not None and limits.max_uncompressed_bytes < cap:
        cap = limits.max_uncompressed_bytes
        words = f"source.max_uncompressed_bytes ({format_size(cap)})"
    return cap, words


def footer_bytes(meta, i: int, columns=None) -> tuple[int, int]:
    """(decoded bytes at least, compressed bytes) of row group i's chunks of the columns read,
    from the footer alone: values times their width for fixed-width types; for byte arrays an
    offset a value plus the uncompressed pages (a dictionary-encoded chunk decodes to more: its
    values expand to their dictionary entries, checked at reading)."""
    rg = meta.row_group(i)
    wanted = None if columns is None else set(columns)
    decoded = stored = 0
    for j in range(rg.num_columns):
        chunk = rg.column(j)
        path = chunk.path_in_schema
        if wanted is not None and not any(path == n or path.startswith(n + ".") for n in wanted):
            continue
        stored += chunk.total_compressed_size
        kind = chunk.physical_type
        if kind in WIDTHS:
            decoded += chunk.num_values * WIDTHS[kind]
        elif kind == "FIXED_LEN_BYTE_ARRAY":
            decoded += chunk.num_values * max(meta.schema.column(j).length, 1)
        else:
            decoded += chunk.num_values * OFFSET_BYTES + chunk.total_uncompressed_size
    return decoded, max(stored, 1)


def _dictionary_chunks(meta, i: int, names) -> list[str]:
    """The byte-array leaves (paths: `s`, `tags.list.element`, `user.name`) of the columns read
    whose chunk in row group i is dictionary-encoded."""
    rg = meta.row_group(i)
    out = []
    for j in range(rg.num_columns):
        chunk = rg.column(j)
        path = chunk.path_in_schema
        if (chunk.physical_type == "BYTE_ARRAY" and chunk.has_dictionary_page
                and any(path == n or path.startswith(n + ".") for n in names)):
            out.append(path)
    return out


def expanded_bytes(table: pa.Table) -> int:
    """The bytes `table` takes with every dictionary (at any depth: a list's items, a struct's
    field) expanded to its values, counted without expanding them: a dictionary's offsets and,
    per value, its entry's length."""
    return sum(_expanded(chunk) for col in table.columns for chunk in col.chunks)


def _expanded(arr: pa.Array) -> int:
    t = arr.type
    if pa.types.is_dictionary(t):
        lengths = pc.fill_null(pc.binary_length(arr.dictionary), 0).to_numpy(zero_copy_only=False)
        if not len(lengths):
            return len(arr) * OFFSET_BYTES
        idx = pc.fill_null(arr.indices, 0).to_numpy(zero_copy_only=False)
        return int(np.bincount(idx, minlength=len(lengths)).astype(np.int64) @ lengths.astype(np.int64)) \
            + len(arr) * OFFSET_BYTES
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return (len(arr) + 1) * OFFSET_BYTES + _expanded(arr.values)
    if pa.types.is_struct(t):
        return sum(_expanded(arr.field(k)) for k in range(t.num_fields))
    return arr.nbytes


def read_row_groups(files: list[InputFile], ranges, schema: Schema,
                    refused: list | None = None) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """The partition's rows as one table with the plan's columns, plus each row's file index and
    row number; a row group at a time. A row group over its bound is left out and appended to
    `refused` as (file index, first row, raw bytes, reason)."""
    tables, file_index, offsets = [], [], []
    target = pa.schema([(name, ARROW_TYPES[t]) for name, t in schema.items()])
    refused = [] if refused is None else refused
    for rg in ranges:
        f = files[rg.file_index]
        if rg.refused:
            refused.append((rg.file_index, rg.first_row, b"", rg.refused))
            continue
        try:
            table = _read_bounded(f, rg, list(schema), refused)
        except (OSError, pa.ArrowInvalid) as err:
            raise SourceError(f"{f.display}: cannot read row group {rg.first}: {err}") from None
        if table is None:
            continue
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


def _read_bounded(f: InputFile, rg: RowGroups, names: list[str], refused: list) -> pa.Table | None:
    """The row groups' columns; with a bound, dictionary-encoded strings are read as dictionaries
    and their expanded size summed first: over the bound, None (and the reason in `refused`)."""
    groups = list(range(rg.first, rg.first + rg.count))
    meta = pq.ParquetFile(f.path).metadata
    dictionary = sorted({c for i in groups for c in _dictionary_chunks(meta, i, set(names))})
    table = pq.ParquetFile(f.path, read_dictionary=dictionary).read_row_groups(groups, columns=names)
    decoded = expanded_bytes(table)
    if decoded > rg.cap:
        rows = sum(meta.row_group(i).num_rows for i in groups)
        refused.append((rg.file_index, rg.first_row, b"",
                        f"{f.display}: row group {rg.first} ({rows:,} rows) decodes to {decoded:,} bytes (its "
                        f"dictionary entries expanded), past {rg.bound}; refused as a possible decompression bomb, "
                        "its records are not read"))
        return None
    return table
