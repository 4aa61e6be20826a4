"""Definitions both backends use where they do exactly the same thing, written once against what
pandas and cuDF share. No backend inherits them: each calls them from its own method
(base.py's facets carry no behaviour), so a third backend decides for itself."""

from __future__ import annotations

from typing import Any

from ..types import Schema


def empty_frame(backend, schema: Schema) -> Any:
    """A typed, empty frame of `schema` (Frames.empty)."""
    return backend.xd.DataFrame({name: backend.series([], t) for name, t in schema.items()})


def conform_frame(backend, df: Any, schema: Schema) -> Any:
    """df with exactly the schema's columns, in order, with the schema's dtypes (Frames.conform):
    a column of another dtype converted exactly, a missing one null. A frame that already is
    that is returned as it is."""
    if list(df.columns) == list(schema) and all(
            dtype == backend.dtype(t) for dtype, t in zip(df.dtypes, schema.values())):
        return df
    out = {}
    for name, t in schema.items():
        if name in df.columns:
            col = df[name]
            out[name] = col if col.dtype == backend.dtype(t) else backend.astype(col, t)
        else:
            out[name] = backend.nulls(len(df), t, index=df.index)
    return backend.frame(out, index=df.index)


def extract_fields(backend, text: Any, regex: str, names: tuple[str, ...], *, kernel: str | None = None,
                   dash_is_null: bool = False) -> tuple[dict, Any]:
    """backend.extract(), with empty captures (and '-' where the format says so) turned into
    nulls, by Series methods (Records.extract_fields)."""
    cols, matched = backend.extract(text, regex, names, kernel=kernel)
    for name, col in cols.items():
        empty = col.str.len() == 0
        if dash_is_null:
            empty = empty | (col == "-")
        cols[name] = col.mask(empty.fillna(False).astype(bool))
    return cols, matched


def hash_series(backend, columns: list, seed: int = 0) -> Any:
    """backend.hash64 of the columns as a uint64 Series, literals broadcast to the columns'
    length (Text.hash_columns: expressions' hash())."""
    series = [c for c in columns if hasattr(c, "index")]
    index = series[0].index if series else None
    n = len(series[0]) if series else 1
    full = [c if hasattr(c, "index") else backend.series([c] * n, literal_type(c), index=index) for c in columns]
    return backend.series(backend.hash64(full, seed), "uint64", index=index)


def literal_type(value) -> str:
    """The contract type of a Python literal."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    return "string"
