"""The expression language's errors: at load time (ExprError, ExprTypeError) and at run time
(ExprValueError, and the records `derive` quarantines: Refusals)."""

from __future__ import annotations

import difflib

from ..errors import DataError


class ExprError(ValueError):
    """An expression is malformed or uses something that is not allowed."""

    def __init__(self, message: str, *, expression: str | None = None, col: int | None = None):
        super().__init__(message)
        self.expression = expression
        self.col = col


class ExprTypeError(ExprError):
    """An expression does not type-check against a schema."""


class ExprValueError(DataError):
    """An expression cannot give a value for some records (int64 overflow, an oversized string)
    and nothing can set them aside (a filter): the run stops, saying which and why."""


def value_error(expr, reason: str, records: int) -> ExprValueError:
    """The run-time error of an Expr (expression.py) that cannot give its records' values."""
    return ExprValueError(f"expression {quote_text(expr.text)}: {reason} ({records} record{'s' if records != 1 else ''})",
                          hint="compute it in a derive step, which sets such records aside (on_error), "
                               "then filter on the result")


class Refusals:
    """Records an expression cannot give a value for, collected (by derive) to be quarantined:
    `mask` (plain bool Series) and `reasons` (string Series, null where fine)."""

    def __init__(self):
        self.mask = None
        self.reasons = None

    def add(self, mask, reason: str, backend) -> None:
        why = backend.nulls(len(mask), "string", index=mask.index).where(~mask, reason)
        self.reasons = why if self.reasons is None else self.reasons.where(self.reasons.notna(), why)
        self.mask = mask if self.mask is None else (self.mask | mask)


def quote_text(text: str, limit: int = 120) -> str:
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)


def name_hint(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, [str(c) for c in candidates], n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""
