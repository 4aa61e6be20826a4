"""The types expressions reason with: the pipeline file's type names, a few of their own (bool,
string, timestamp, null) and the rules that combine them."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..types import FLOAT_TYPES, INTEGER_TYPES, NUMERIC_TYPES, TYPE_NAMES


BOOL = "bool"
STRING = "string"
TIMESTAMP = "timestamp"
NULL = "null"  # internal only: the type of the literal None
# the type names are types.py's; NULL is expressions' own

_ALIASES = {
    "boolean": BOOL,
    "str": STRING,
    "utf8": STRING,
    "large_utf8": STRING,
    "large_string": STRING,
    "text": STRING,
    "object": STRING,
    "int": "int64",
    "float": "float64",
    "double": "float64",
    "datetime": TIMESTAMP,
    "datetime64": TIMESTAMP,
}


def normalize_type(name: Any) -> str | None:
    """Map a schema type name (or a few common aliases) to one of TYPE_NAMES."""
    if not isinstance(name, str):
        name = str(name)
    s = name.strip().lower()
    if s in TYPE_NAMES:
        return s
    if s in _ALIASES:
        return _ALIASES[s]
    if s.startswith("timestamp") or s.startswith("datetime64"):
        return TIMESTAMP
    return None


def dtype_to_type(dtype: Any) -> str | None:
    """Map a pandas / cuDF dtype to one of TYPE_NAMES (None if unsupported)."""
    s = str(dtype).lower()
    if s.endswith("[pyarrow]"):
        s = s[: -len("[pyarrow]")]
    if s in ("bool", "boolean"):
        return BOOL
    if s in INTEGER_TYPES:
        return s
    if s in FLOAT_TYPES:
        return s
    if s in ("double",):
        return "float64"
    if s in ("float", "halffloat", "float16"):
        return "float32"
    if s in ("object", "str", "string", "large_string", "string[python]", "utf8", "large_utf8"):
        return STRING
    if s.startswith("datetime64") or s.startswith("timestamp"):
        return TIMESTAMP
    return None


def is_int(t: str) -> bool:
    return t in INTEGER_TYPES


def is_float(t: str) -> bool:
    return t in FLOAT_TYPES


def is_num(t: str) -> bool:
    return t in NUMERIC_TYPES


def common_type(a: str, b: str) -> str | None:
    if a == NULL:
        return b
    if b == NULL:
        return a
    if a == b:
        return a
    if is_num(a) and is_num(b):
        return "float64" if (is_float(a) or is_float(b)) else "int64"
    return None


def valid_timestamp_literal(value: str) -> bool:
    if value.strip().lower() in ("now", "today", "tomorrow", "yesterday", ""):
        return False
    try:
        ts = pd.Timestamp(value)
    except Exception:
        return False
    return ts is not pd.NaT and not pd.isna(ts)
