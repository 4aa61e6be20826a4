from __future__ import annotations

from pydantic import RootModel, field_validator

from ..types import Schema
from .base import Binding, RowStep, StepError, closest, register


class SelectParams(RootModel[list[str]]):
    # a named class: pickled by reference, as a generic alias cannot be

    @field_validator("root")
    @classmethod
    def _once_each(cls, names: list[str]) -> list[str]:
        seen = set()
        for name in names:
            if name in seen:
                raise ValueError(f"the column {name!r} is listed twice (a dataset holds each column once)")
            seen.add(name)
        return names


@register
class Select(RowStep):
    name = "select"
    summary = "Keep only these columns, in this order."
    example = "- select: [ip, time, status]"
    Params = SelectParams
    def derive(self, schema: Schema) -> Binding:
        missing(schema, self.params.root)
        return Binding({name: schema[name] for name in self.params.root})

    def transform(self, df, backend):
        return df[list(self.params.root) + [c for c in df.columns if c.startswith("__")]]


def missing(schema: Schema, names) -> None:
    for name in names:
        if name not in schema:
            hint = closest(name, schema)
            raise StepError(f"no column {name!r}" + (f"; did you mean {hint!r}?" if hint else "")
                            + f" (columns here: {', '.join(schema)})")
