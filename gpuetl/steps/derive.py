from __future__ import annotations

from dataclasses import dataclass

from functools import cached_property

from pydantic import RootModel

from ..types import Schema
from .base import Binding, RowStep, StepError, register
from ..expr import ExprError, Refusals, parse_expression


@dataclass(frozen=True)
class DeriveBinding(Binding):
    types: dict[str, str]          # each new column's type, inferred from the input schema


class DeriveParams(RootModel[dict[str, str]]):
    pass                # a named class: pickled by reference, as a generic alias cannot be


@register
class Derive(RowStep):
    """A record for which an expression cannot give a value (an integer result that would
    overflow int64, a string from `replace` or `+` that would pass 16 Mi characters) is a bad
    record (on_error; by default quarantined with the reason); values are never wrapped around."""

    name = "derive"
    summary = "Add or replace columns computed from expressions, in order (later ones may use earlier ones)."
    example = '- derive: {hour: "hour(time)", path_len: "len(path)"}'
    Params = DeriveParams

    @classmethod
    def from_raw(cls, raw):
        step = super().from_raw(raw)
        step.expressions  # parse now: a bad expression fails at load time
        return step

    @cached_property
    def expressions(self):
        out = {}
        for name, text in self.params.root.items():
            try:
                out[name] = parse_expression(text)
            except ExprError as err:
                raise ExprError(f"{name}: {err}") from None
        return out

    def new_names(self):
        return [((name,), name) for name in self.params.root]

    def regexes(self):
        return [((name,), pattern) for name, expr in self.expressions.items() for pattern in expr.regexes()]

    def derive(self, schema: Schema) -> Binding:
        out = dict(schema)
        for name, expr in self.expressions.items():
            try:
                out[name] = expr.infer_type(out)
            except ExprError as err:
                raise StepError(f"{name}: {err}", key=(name,)) from None
        return DeriveBinding(out, {name: out[name] for name in self.expressions})

    def quarantine(self, df, backend):
        """Records an expression cannot give a value for (int64 overflow, a value grown past
        expr.MAX_VALUE_CHARS) are set aside with the reason. Found by a first evaluation, made
        only when an expression can refuse at all; transform then runs on the rest."""
        if not any(expr.may_refuse() for expr in self.expressions.values()):
            return df, None, None
        refusals = Refusals()
        self.transform(df, backend, refusals)
        if refusals.mask is None:
            return df, None, None
        return df, refusals.mask, refusals.reasons

    def transform(self, df, backend, refusals: Refusals | None = None):
        df = df.copy()
        for name, expr in self.expressions.items():
            values = expr.evaluate(df, backend, refusals)
            if not hasattr(values, "index"):  # a constant: broadcast
                values = backend.series([values] * len(df), self.binding.types[name], index=df.index)
            df[name] = backend.astype(values, self.binding.types[name]) if values.dtype != backend.dtype(self.binding.types[name]) else values
        return df

