from __future__ import annotations

from pydantic import Field, model_validator

from ..types import Schema
from .base import Params, Binding, RowStep, StepError, register
from .select import missing


class NormalizeTextParams(Params):
    columns: list[str] = Field(..., min_length=1, description="string columns to normalize, in place")
    nfkc: bool = Field(True, description="Unicode NFKC: compatibility forms folded (ﬁ -> fi, full-width -> ASCII, NBSP -> space)")
    lower: bool = Field(False, description="lower case (Unicode)")
    collapse_whitespace: bool = Field(True, description="runs of white space -> one space")
    strip: bool = Field(True, description="remove white space at both ends")

    @model_validator(mode="after")
    def _check(self):
        if not (self.nfkc or self.lower or self.collapse_whitespace or self.strip):
            raise ValueError("every operation is off: turn on at least one of nfkc, lower, collapse_whitespace, strip")
        if len(set(self.columns)) != len(self.columns):
            raise ValueError("columns: a column is named twice")
        return self


@register
class NormalizeText(RowStep):
    """Operations run in a fixed order: NFKC, lower case (one character for one, as the
    expression function `lower()`), collapse white space, strip. White
    space means the ASCII space, tab, newline, vertical tab, form feed and carriage return; NFKC
    first turns the other Unicode spaces (no-break, em, ideographic, ...) into plain spaces. Nulls
    stay null; no row is dropped."""

    name = "normalize_text"
    summary = ("Normalize string columns: Unicode NFKC (`nfkc`, default on), lower case (`lower`, default off), "
               "collapse white space (`collapse_whitespace`, default on), strip it at both ends (`strip`, default on).")
    example = "- normalize_text: {columns: [message], nfkc: true, lower: true, collapse_whitespace: true, strip: true}"
    Params = NormalizeTextParams

    def derive(self, schema: Schema) -> Binding:
        missing(schema, self.params.columns)
        for name in self.params.columns:
            if schema[name] != "string":
                raise StepError(f"normalize_text: column {name!r} is {schema[name]}, not string")
        return Binding(dict(schema))

    def transform(self, df, backend):
        p = self.params
        df = df.copy()
        for name in p.columns:
            df[name] = backend.normalize_text(df[name], nfkc=p.nfkc, lower=p.lower,
                                              collapse_whitespace=p.collapse_whitespace, strip=p.strip)
        return df
