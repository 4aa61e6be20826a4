from __future__ import annotations

from functools import cached_property

from pydantic import RootModel

from ..backends.base import STATUS, STATUS_LIVE
from ..types import Schema
from .base import Binding, RowStep, StepError, register
from ..expr import ExprError, Refusals, parse_expression, value_error


class FilterParams(RootModel[str]):
    pass                # a named class: pickled by reference, as a generic alias cannot be


@register
class Filter(RowStep):
    """A filter only keeps or drops rows: a record whose predicate cannot be computed (integer
    overflow, a string grown past 16 Mi characters) stops the run (exit 1); compute such a value
    in a `derive` first, which sets those records aside."""

    name = "filter"
    summary = "Keep the rows for which a boolean expression is true (null counts as false)."
    example = "- filter: \"status >= 200 and method in ['GET', 'POST']\""
    Params = FilterParams
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

    def derive(self, schema: Schema) -> Binding:
        try:
            self.expression.check_predicate(schema)
        except ExprError as err:
            raise StepError(str(err)) from None
        return Binding(dict(schema))

    def keep(self, df, backend):
        """A filter cannot set records aside: a live record the expression cannot compute (int64
        overflow, a string grown too long) stops the run; rows that already left are ignored."""
        refusals = Refusals()
        kept = self.expression.evaluate_predicate(df, backend, refusals)
        if refusals.mask is not None:
            live = refusals.mask & (df[STATUS] == STATUS_LIVE) if STATUS in df.columns else refusals.mask
            if bool(live.any()):
                raise value_error(self.expression, refusals.reasons[live].iloc[0], int(live.sum()))
        return kept

