from __future__ import annotations

from pydantic import RootModel

from ..types import ColumnSpec, ColumnTypeValue, Schema, column_spec
from .base import Binding, RowStep, register
from .select import missing


def cast_columns(df, specs: dict[str, ColumnSpec], backend):
    """Cast columns in place of the old ones. Returns (df, bad mask or None, reason Series or None):
    a row is bad when a present value cannot be read as its type; the first bad column is named."""
    df = df.copy(deep=False)          # the caller keeps the values as they came
    bad_any = None
    reasons = None
    for name, spec in specs.items():
        values, bad = backend.cast(df[name], spec.type, fmt=spec.format, timezone=spec.timezone)
        df[name] = values
        if bad.any():
            why = _reason_for(df, name, spec, bad, backend)
            reasons = why if reasons is None else reasons.where(reasons.notna(), why)
            bad_any = bad if bad_any is None else (bad_any | bad)
    return df, bad_any, reasons


def _reason_for(df, name, spec, bad, backend):
    what = spec.type + (f" with format {spec.format!r}" if spec.format else "")
    message = backend.series([f"column {name!r}: value is not a valid {what}"], "string")
    full = backend.nulls(len(df), "string", index=df.index)
    return full.where(~bad, message.iloc[0])


class CastParams(RootModel[dict[str, ColumnTypeValue]]):
    pass                # a named class: pickled by reference, as a generic alias cannot be


@register
class Cast(RowStep):
    name = "cast"
    summary = "Convert columns to other types; rows whose values do not convert go to on_error."
    example = "- cast: {status: int16, time: {type: timestamp, format: '%Y-%m-%d %H:%M:%S', timezone: UTC}}"
    Params = CastParams

    @property
    def specs(self) -> dict[str, ColumnSpec]:
        return {k: column_spec(v) for k, v in self.params.root.items()}

    def derive(self, schema: Schema) -> Binding:
        missing(schema, self.params.root)
        return Binding({k: (self.specs[k].type if k in self.specs else t) for k, t in schema.items()})

    def quarantine(self, df, backend):
        return cast_columns(df, self.specs, backend)
