"""The column types of pipeline files and the schemas that flow between stages.

A schema is an ordered mapping of column name to type name. Type names are the contract's
(bool, int8..int64, uint8..uint64, float32, float64, string, timestamp) and the nested ones built
from them, `list<T>` and `struct<name: T, ...>` (written in one canonical spelling, see
`nested_type_name`); each backend maps them to its own dtypes, and the Parquet output always uses
the Arrow types below.
"""

from __future__ import annotations

import functools
import re

import pyarrow as pa

INT_TYPES = ("int8", "int16", "int32", "int64")
UINT_TYPES = ("uint8", "uint16", "uint32", "uint64")
INTEGER_TYPES = INT_TYPES + UINT_TYPES
FLOAT_TYPES = ("float32", "float64")
NUMERIC_TYPES = INTEGER_TYPES + FLOAT_TYPES
TYPE_NAMES = ("bool", *NUMERIC_TYPES, "string", "timestamp")   # what a pipeline file's columns may be

MAX_NESTING = 16      # struct/list levels in a declared type; deeper JSON values stay JSON text


class _ArrowTypes(dict):
    """Type name -> Arrow type; nested names (`list<...>`, `struct<...>`) are parsed on first use,
    so every `ARROW_TYPES[name]` in the backends takes them too."""

    def __missing__(self, name):
        if not isinstance(name, str) or not name.startswith(("list<", "struct<")):
            raise KeyError(name)
        return _nested_arrow_type(name)      # not stored: the keys stay the scalar names

    def get(self, name, default=None):
        """dict.get skips __missing__: without this, a nested name would give None."""
        try:
            return self[name]
        except KeyError:
            return default


ARROW_TYPES: dict[str, pa.DataType] = _ArrowTypes({
    "bool": pa.bool_(),
    **{name: getattr(pa, name)() for name in INT_TYPES + UINT_TYPES},
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "binary": pa.binary(),     # not a `columns` type: image bytes and pixels, the quarantine's exact input bytes
})
SCALAR_TYPES = tuple(n for n in TYPE_NAMES if n != "timestamp")   # what may sit inside a list or struct


def is_nested(type_name: str) -> bool:
    return type_name.startswith(("list<", "struct<"))


@functools.lru_cache(maxsize=1024)
def _nested_arrow_type(name: str) -> pa.DataType:
    return _parse_nested(name)


def _split_top(text: str) -> list[str]:
    """Split on the commas that are not inside <...>."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _parse_nested(text: str, depth: int = 0) -> pa.DataType:
    """A type name (scalar or nested) as an Arrow type; ValueError says what is wrong."""
    text = text.strip()
    if depth > MAX_NESTING:
        raise ValueError(f"nested more than {MAX_NESTING} levels deep")
    if text in SCALAR_TYPES:
        return ARROW_TYPES[text]
    if text == "timestamp":
        raise ValueError("timestamp is a column type, not one inside list<...> or struct<...>; "
                         "declare a path column for it (e.g. `event.time: timestamp`)")
    m = re.fullmatch(r"(list|struct)\s*<(.*)>", text, re.S)
    if not m:
        import difflib

        close = difflib.get_close_matches(text, TYPE_NAMES, n=1)
        raise ValueError(f"unknown type {text!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                         + f" (types: {', '.join(TYPE_NAMES)}, list<T>, struct<name: T, ...>)")
    kind, inner = m.groups()
    if kind == "list":
        return pa.list_(_parse_nested(inner, depth + 1))
    fields = []
    for part in _split_top(inner):
        name, colon, value = part.partition(":")
        name = name.strip()
        if not colon or not name or any(c in name for c in "<>,"):
            raise ValueError(f"struct<...> holds `name: type` pairs separated by commas, got {part.strip()!r}")
        if name in [f.name for f in fields]:
            raise ValueError(f"struct<...> names the field {name!r} twice")
        fields.append(pa.field(name, _parse_nested(value, depth + 1)))
    if not fields:
        raise ValueError("struct<...> needs at least one field")
    return pa.struct(fields)


def nested_type_name(arrow_type: pa.DataType) -> str:
    """The canonical name of an Arrow type: `list<int64>`, `struct<a: string, b: list<bool>>`."""
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return f"list<{nested_type_name(arrow_type.value_type)}>"
    if pa.types.is_struct(arrow_type):
        inner = ", ".join(f"{f.name}: {nested_type_name(f.type)}" for f in arrow_type)
        return f"struct<{inner}>" if inner else "string"
    name = type_name_of(arrow_type)
    return "string" if name in ("timestamp", "binary") else name


def canonical_type_name(text: str) -> str:
    """A type name as gpuetl writes it (`list< int64 >` -> `list<int64>`); ValueError if unknown."""
    if text in TYPE_NAMES:
        return text
    return nested_type_name(_parse_nested(text))

Schema = dict[str, str]  # column name -> type name


def arrow_schema(schema: Schema) -> pa.Schema:
    return pa.schema([pa.field(name, ARROW_TYPES[t]) for name, t in schema.items()])


def type_name_of(arrow_type: pa.DataType) -> str:
    """Map an Arrow type read from data (jsonl, csv, parquet sources) to a contract type name."""
    if pa.types.is_struct(arrow_type) or pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return nested_type_name(arrow_type)
    if pa.types.is_boolean(arrow_type):
        return "bool"
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return "binary"
    for name, known in ARROW_TYPES.items():
        if name not in ("string", "timestamp", "bool", "binary") and arrow_type == known:
            return name
    if pa.types.is_floating(arrow_type):
        return "float64"
    if pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type):
        return "timestamp"
    return "string"


from typing import Annotated, Union  # noqa: E402

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, field_validator  # noqa: E402

# The same names, for the pipeline file's models: a scalar name or a nested one, canonicalised
TypeName = Annotated[str, AfterValidator(canonical_type_name), WithJsonSchema({
    "anyOf": [{"enum": list(TYPE_NAMES)},
              {"type": "string", "pattern": r"^\s*(list|struct)\s*<.*>\s*$",
               "description": "list<T> or struct<name: T, ...> of the types above (no timestamp inside)"}]})]


class ColumnSpec(BaseModel):
    """A column's type with its parsing options (timestamps: format and the zone of naive values)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: TypeName
    format: str | None = Field(None, description="strptime format, e.g. '%d/%b/%Y:%H:%M:%S %z'; ISO 8601 when absent")
    timezone: str | None = Field(None, description="IANA zone for values without an offset (default UTC)")

    @field_validator("format")
    @classmethod
    def _format(cls, v):
        if v is not None and (why := format_problem(v)):
            raise ValueError(why)
        return v

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, v):
        if v is not None and (why := timezone_problem(v)):
            raise ValueError(why)
        return v


def format_problem(fmt: str) -> str | None:
    """Why `fmt` is not a format the CPU parser (pandas' strptime) takes, or None: a directive
    strptime does not have (`%Q`), a `%` with none after it, one given twice, or directives it
    will not combine (`%W` without a weekday, `%Z` with `%z`). Caught here, the mistake is located
    in the pipeline file rather than failing the run at its first value (pandas is imported only
    for a file that gives a format)."""
    import datetime

    import pandas as pd

    if not fmt.strip():
        return "format: empty; give a strptime format such as '%d/%b/%Y:%H:%M:%S %z', or none for ISO 8601"
    if fmt.strip().lower() in ("mixed", "iso8601"):    # pandas' words, not formats: 'mixed' guesses per value
        return (f"format {fmt!r} is not a strptime format (pandas would guess each value's form, reading "
                "12/01/2026 as 1 December); give one such as '%d/%m/%Y', or no format for ISO 8601")
    directives = ("strptime's directives: %Y %m %d %H %M %S %f %z %Z %b %B %a %A %p %I %j %y %U %W %w %G %V %u, "
                  "and %% for a % sign")
    try:
        datetime.datetime.strptime("", fmt)
    except ValueError as err:
        if "directive" in str(err) or "stray %" in str(err):
            return f"format {fmt!r}: {err} ({directives})"
    except re.error as err:                  # a directive twice: its group named twice
        return f"format {fmt!r}: a directive appears twice ({err.msg})"
    try:
        pd.to_datetime(pd.Series(["x"], dtype=object), format=fmt, errors="coerce")
    except (ValueError, re.error) as err:
        return f"format {fmt!r}: {err}"
    return None


_FIXED_OFFSET = re.compile(r"^[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]$")


@functools.lru_cache(maxsize=64)
def timezone_problem(name: str) -> str | None:
    """Why `name` is not a zone the casts can use (None: it is one): an IANA name that both Arrow
    and Python's zoneinfo know, or a fixed offset such as +05:30. A path (`../../etc/passwd`) is
    no zone name, so nothing is read but the zone database."""
    import zoneinfo

    import pyarrow.compute as pc

    if not _FIXED_OFFSET.match(name):
        try:
            zoneinfo.ZoneInfo(name)
        except (ValueError, zoneinfo.ZoneInfoNotFoundError):
            return (f"timezone {name!r}: not a known IANA time zone (e.g. UTC, Europe/Paris, America/New_York) "
                    "or a fixed offset such as +05:30")
    try:
        pc.assume_timezone(pa.array([0], pa.timestamp("us")), timezone=name)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        return f"timezone {name!r}: Arrow's time zone database does not know it ({err})"
    return None


ColumnTypeValue = Union[TypeName, ColumnSpec]


def column_spec(value) -> ColumnSpec:
    return value if isinstance(value, ColumnSpec) else ColumnSpec(type=value)
