"""The column types of pipeline files and the schemas that flow between stages.

A schema is an ordered mapping of column name to type name. Type names are the contract's
(bool, int8..int64, uint8..uint64, float32, float64, string, timestamp); each backend maps them
to its own dtypes, and the Parquet output always uses the Arrow types below.
"""

from __future__ import annotations

import pyarrow as pa

INT_TYPES = ("int8", "int16", "int32", "int64")
UINT_TYPES = ("uint8", "uint16", "uint32", "uint64")
INTEGER_TYPES = INT_TYPES + UINT_TYPES
FLOAT_TYPES = ("float32", "float64")
NUMERIC_TYPES = INTEGER_TYPES + FLOAT_TYPES
TYPE_NAMES = ("bool", *NUMERIC_TYPES, "string", "timestamp")   # what a pipeline file's columns may be

ARROW_TYPES: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    **{name: getattr(pa, name)() for name in INT_TYPES + UINT_TYPES},
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "binary": pa.binary(),     # not a `columns` type: image bytes and pixels, the quarantine's exact input bytes
}

Schema = dict[str, str]  # column name -> type name


def arrow_schema(schema: Schema) -> pa.Schema:
    return pa.schema([pa.field(name, ARROW_TYPES[t]) for name, t in schema.items()])


def type_name_of(arrow_type: pa.DataType) -> str:
    """Map an Arrow type read from data (jsonl, csv, parquet sources) to a contract type name."""
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


from typing import Literal, Union  # noqa: E402

from pydantic import BaseModel, ConfigDict, Field  # noqa: E402

TypeName = Literal[TYPE_NAMES]   # the same names, for the pipeline file's models


class ColumnSpec(BaseModel):
    """A column's type with its parsing options (timestamps: format and the zone of naive values)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: TypeName
    format: str | None = Field(None, description="strptime format, e.g. '%d/%b/%Y:%H:%M:%S %z'; ISO 8601 when absent")
    timezone: str | None = Field(None, description="IANA zone for values without an offset (default UTC)")


ColumnTypeValue = Union[TypeName, ColumnSpec]


def column_spec(value) -> ColumnSpec:
    return value if isinstance(value, ColumnSpec) else ColumnSpec(type=value)
