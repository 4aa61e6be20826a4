"""The expression language's limits: the text, its literals, its depth and size, and the values it makes."""

from __future__ import annotations


MAX_TEXT_LENGTH = 10_000
MAX_STRING_LITERAL = 1_000
MAX_DEPTH = 64
MAX_NODES = 1_000
# A value an expression makes (replace() or '+' of strings) may not grow past MAX_VALUE_CHARS: the
# record is quarantined by derive (a filter stops the run). A partition's column may not grow past
# MAX_COLUMN_CHARS: the run stops, asking for a smaller source.blocksize.
MAX_VALUE_CHARS = 1 << 24
MAX_COLUMN_CHARS = 1 << 30
MAX_SUBSTR = 2**31 - 1

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
