from __future__ import annotations

from pydantic import RootModel

from ..types import Schema
from .base import Binding, RowStep, StepError, register
from .select import missing


class RenameParams(RootModel[dict[str, str]]):
    pass                # a named class: pickled by reference, as a generic alias cannot be


@register
class Rename(RowStep):
    name = "rename"
    summary = "Rename columns: old name -> new name."
    example = "- rename: {size: bytes}"
    Params = RenameParams
    def new_names(self):
        return [((old,), new) for old, new in self.params.root.items()]

    def derive(self, schema: Schema) -> Binding:
        mapping = self.params.root
        missing(schema, mapping)
        out = {mapping.get(k, k): v for k, v in schema.items()}
        if len(out) != len(schema):
            raise StepError(f"renaming {mapping} makes two columns share a name")
        return Binding(out)

    def transform(self, df, backend):
        return df.rename(columns=dict(self.params.root))
