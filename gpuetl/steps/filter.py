from __future__ import annotations

from functools import cached_property

from pydantic import RootModel

from ..types import Schema
from .base import Step, StepError, register
from .expr import ExprError, parse_expression


@register
class Filter(Step):
    name = "filter"
    summary = "Keep the rows for which a boolean expression is true (null counts as false)."
    example = "- filter: \"status >= 200 and method in ['GET', 'POST']\""
    Params = RootModel[str]
    sees_dropped = True

    @classmethod
    def from_raw(cls, raw):
        step = super().from_raw(raw)
        step.expression  # parse now: a bad expression fails at load time
        return step

    @cached_property
    def expression(self):
        return parse_expression(self.params.root)

    def regexes(self):
        return [((), pattern) for pattern in self.expression.regexes()]

    def output_schema(self, schema: Schema) -> Schema:
        try:
            self.expression.check_predicate(schema)
        except ExprError as err:
            raise StepError(str(err)) from None
        return dict(schema)

    def keep(self, df, backend):
        return self.expression.evaluate_predicate(df, backend)

    def __getstate__(self):
        return {"params": self.params}
