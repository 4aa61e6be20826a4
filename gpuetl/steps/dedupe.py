from __future__ import annotations

from pydantic import Field, model_validator

from ..backends.base import FILE_INDEX, OFFSET, STATUS_DEDUPLICATED
from ..types import Schema
from .base import Params, Step, register
from .select import missing

KEY_HASH = "__h"          # set by plan/graph.py's shuffle for global steps: the key's hash


class DedupeParams(Params):
    on: list[str] | None = Field(None, description="columns that make two rows duplicates; all columns when absent")
    keep: str = Field("first", description="which copy survives: the first by input file and byte offset")

    @model_validator(mode="after")
    def _check(self):
        if self.keep != "first":
            raise ValueError("keep: only 'first' (the earliest record by file and offset) is supported")
        if self.on is not None and not self.on:
            raise ValueError("on: give at least one column, or leave it out to compare whole rows")
        return self


@register
class Dedupe(Step):
    """Exact duplicates across the whole dataset: rows are shuffled by a hash of the key so equal
    keys meet in one partition, then compared by value (a hash collision never drops a row)."""

    name = "dedupe"
    summary = "Remove exact duplicates across all partitions, keeping the first by file and offset."
    example = "- dedupe: {on: [ip, time, request]}"
    Params = DedupeParams
    drops_as = STATUS_DEDUPLICATED
    is_global = True

    @classmethod
    def from_raw(cls, raw):
        return cls(cls.Params.model_validate({} if raw is None else raw))

    def key_columns(self, schema: Schema) -> list[str]:
        return list(self.params.on) if self.params.on else [c for c in schema if not c.startswith("_")]

    def output_schema(self, schema: Schema) -> Schema:
        if self.params.on:
            missing(schema, self.params.on)
        self._keys = self.key_columns(schema)
        return dict(schema)

    def keep(self, df, backend):
        """Within one partition after the shuffle: keep the first copy of each key. Only rows
        whose key hash (the shuffle's) occurs twice can be duplicates; values decide among them."""
        if len(df) == 0:
            return None
        if KEY_HASH in df.columns:
            candidates = df[KEY_HASH].duplicated(keep=False)
            if not bool(candidates.any()):
                return None
            if not bool(candidates.all()):
                keep = candidates == candidates         # all True, same index and kind
                keep[candidates] = self._first_copies(df[candidates])
                return keep
        return self._first_copies(df)

    def _first_copies(self, df):
        ordered = df.sort_values([FILE_INDEX, OFFSET])
        duplicated = ordered.duplicated(subset=self._keys, keep="first")
        return ~duplicated.reindex(df.index)

    def __getstate__(self):
        return {"params": self.params, "_keys": getattr(self, "_keys", None)}
