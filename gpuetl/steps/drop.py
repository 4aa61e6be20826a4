from __future__ import annotations

from pydantic import RootModel

from ..types import Schema
from .base import Step, register
from .select import missing


@register
class Drop(Step):
    name = "drop"
    summary = "Remove these columns."
    example = "- drop: [ident, user]"
    Params = RootModel[list[str]]
    sees_dropped = True         # columns only: no row is read

    def output_schema(self, schema: Schema) -> Schema:
        missing(schema, self.params.root)
        return {k: v for k, v in schema.items() if k not in self.params.root}

    def transform(self, df, backend):
        return df.drop(columns=list(self.params.root))
