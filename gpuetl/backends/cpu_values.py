"""Value helpers the CPU backend's modules share (cpu.py, cpu_json.py; gpu.py reads the boolean
words): a column as one Arrow array, the scratch memory pool, and the exact conversion of one
JSON/CSV value that the careful readers use."""

from __future__ import annotations

import math
import re

import numpy as np
import pyarrow as pa

from ..types import INT_TYPES, UINT_TYPES
from .cpu_clf import one_array

INF_TEXT = r"(?i)^\s*[+-]?inf(inity)?\s*$"      # text that says infinity (other text past the range is bad)
FLOAT32_PAST = 2.0 ** 128 - 2.0 ** 103           # from here a float64 rounds to float32's infinity
TRUE_WORDS = ("true", "t", "yes", "y", "1")      # the texts a bool cast reads as true (both backends)
FALSE_WORDS = ("false", "f", "no", "n", "0")

BAD = object()                                   # exact_value: the value does not fit the type


def as_arrow(col) -> pa.Array:
    """A pandas column's Arrow data as one array (chunks joined)."""
    arr = pa.array(col)
    return one_array(arr) if isinstance(arr, pa.ChunkedArray) else arr


def scratch_pool() -> pa.MemoryPool:
    """Arrow's mimalloc pool, for a batch's short-lived buffers that the same thread frees (the
    records less their line endings: the parser reads them, the batch drops them). A kernel
    that shrinks its output at the end reallocates, and the system allocator, which in-order
    runs use (cli/tuning.py), reallocates aligned memory by allocating afresh and copying;
    mimalloc does not, and reuses the previous batch's pages (measured in docs/design.md)."""
    try:
        return pa.mimalloc_memory_pool()
    except NotImplementedError:      # a pyarrow built without mimalloc
        return pa.default_memory_pool()


def exact_value(value, type_name: str):
    """Convert one JSON/CSV value exactly or return BAD (used on the slow path only)."""
    if value is None:
        return None
    try:
        if type_name in INT_TYPES or type_name in UINT_TYPES:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                return BAD
            number = int(value)
            info = np.iinfo(type_name)
            return number if info.min <= number <= info.max else BAD
        if type_name in ("float32", "float64"):
            if isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value)):
                return BAD          # a JSON number has no NaN or infinity: 1e400, or the literal NaN
            number = float(value)
            if math.isinf(number) and not re.match(INF_TEXT, str(value)):
                return BAD          # text "1e400" is past the range; "inf" says infinity
            return BAD if type_name == "float32" and abs(number) >= FLOAT32_PAST else number
        if type_name == "bool":
            return value if isinstance(value, bool) else BAD
        if type_name == "string":
            return str(value)
    except (TypeError, ValueError, OverflowError):
        return BAD
    return BAD
