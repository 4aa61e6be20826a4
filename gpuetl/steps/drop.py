from __future__ import annotations

from pydantic import RootModel

from ..types import Schema
from .base import Binding, RowStep, register
from .select import missing


class DropParams(RootModel[list[str]]):
    pass                # a named class: pickled by reference, as a generic alias cannot be


@register
class Drop(RowStep):
    name = "drop"
    summary = "Remove these columns."
    example = "- drop: [ident, user]"
    Params = DropParams
    def derive(self, schema: Schema) -> Binding:
        missing(schema, self.params.root)
        return Binding({k: v for k, v in schema.items() if k not in self.params.root})

    def transform(self, df, backend):
        return df.drop(columns=list(self.params.root))
