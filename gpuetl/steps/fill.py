from __future__ import annotations

from dataclasses import dataclass

import datetime as _dt
from typing import Union

import numpy as np
from pydantic import RootModel, StrictBool, StrictFloat, StrictInt, StrictStr

from ..types import FLOAT_TYPES, INT_TYPES, UINT_TYPES, Schema
from .base import Binding, RowStep, StepError, register
from .select import missing

Literal_ = Union[StrictBool, StrictInt, StrictFloat, StrictStr]


def check_literal(column: str, type_name: str, value):
    """The value as the column's type would hold it; StepError (at plan time) when it does not fit."""
    def bad(why: str):
        return StepError(f"column {column!r} is {type_name}: {why} ({value!r})")

    if type_name == "string":
        if not isinstance(value, str):
            raise bad("give a string, quoted in YAML")
        return value
    if type_name == "bool":
        if not isinstance(value, bool):
            raise bad("give true or false")
        return value
    if type_name in INT_TYPES or type_name in UINT_TYPES:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("give a whole number")
        info = np.iinfo(type_name)
        if not info.min <= value <= info.max:
            raise bad(f"out of range {info.min}..{info.max}")
        return value
    if type_name in FLOAT_TYPES:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("give a number")
        return float(value)
    if type_name == "timestamp":
        if not isinstance(value, str):
            raise bad("give an ISO 8601 time as a string, e.g. '2024-01-01T00:00:00Z'")
        try:
            moment = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise bad("not an ISO 8601 time") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=_dt.timezone.utc)
        return moment.astimezone(_dt.timezone.utc)
    raise bad("this type cannot be filled")  # pragma: no cover


@dataclass(frozen=True)
class FillBinding(Binding):
    values: dict                   # each column's fill value, checked against its type
    types: dict[str, str]


class FillParams(RootModel[dict[str, Literal_]]):
    pass                # a named class: pickled by reference, as a generic alias cannot be


@register
class Fill(RowStep):
    """Each value is checked against its column's type at plan time: a string for string
    columns, a whole number in range for integer columns, a number for float columns, true/false
    for bool columns and an ISO 8601 string for timestamps (UTC unless it carries an offset).
    Present values are never changed; no row is dropped."""

    name = "fill"
    summary = "Replace nulls in columns with a constant of the column's type."
    example = "- fill: {referer: '-', size: 0, status: 0}"
    Params = FillParams

    def derive(self, schema: Schema) -> Binding:
        missing(schema, self.params.root)
        if not self.params.root:
            raise StepError("name at least one column and the value for its nulls")
        return FillBinding(dict(schema), {name: check_literal(name, schema[name], value) for name, value in self.params.root.items()},
                           {name: schema[name] for name in self.params.root})

    def transform(self, df, backend):
        df = df.copy()
        for name, value in self.binding.values.items():
            col = df[name]
            if not bool(col.isna().any()):
                continue
            scalar = backend.series([value], self.binding.types[name])
            filled = col.fillna(scalar.iloc[0])
            df[name] = filled if filled.dtype == backend.dtype(self.binding.types[name]) else backend.astype(filled, self.binding.types[name])
        return df

