from __future__ import annotations

from pydantic import RootModel

from ..types import ColumnSpec, ColumnTypeValue, Schema, column_spec
from ..sources.records import cast_columns
from .base import Binding, RowStep, register
from .select import missing


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
