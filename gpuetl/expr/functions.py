"""The function table: every function an expression may call, with its signature, doc and example
(FUNCTIONS, which docs/steps.md is generated from)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, NamedTuple


class FunctionSpec(NamedTuple):
    """Documentation and arity of one expression function.

    The first three fields are (signature, doc, example) so that docs can be
    generated from ``FUNCTIONS``.  ``max_args`` None means variadic.
    ``keywords`` maps allowed keyword arguments to their positional index
    (-1 = keyword-only).  ``literal_args`` maps a positional index to the kind
    of literal that must be written there ("str", "int", "regex").
    """

    signature: str
    doc: str
    example: str
    min_args: int
    max_args: int | None
    keywords: Mapping[str, int] = MappingProxyType({})
    literal_args: Mapping[int, str] = MappingProxyType({})


def _spec(sig, doc, ex, lo, hi, keywords=None, literal_args=None) -> FunctionSpec:
    return FunctionSpec(
        sig, doc, ex, lo, hi, MappingProxyType(dict(keywords or {})), MappingProxyType(dict(literal_args or {}))
    )


FUNCTIONS: dict[str, FunctionSpec] = {
    "lower": _spec("lower(s)", "lowercase a string, one character for one (Unicode's simple case mapping, "
                   "as Arrow: 'İ' becomes 'i', 'ß' stays), on every backend", "lower(method) == 'get'", 1, 1),
    "upper": _spec("upper(s)", "uppercase a string, one character for one ('ß' becomes 'ẞ', not 'SS'; 'ﬁ' "
                   "stays), on every backend", "upper(country) == 'DE'", 1, 1),
    "strip": _spec("strip(s)", "remove leading and trailing Unicode white space (the characters Python's "
                   "str.isspace calls space: ASCII space, tab and line breaks, \\x1c-\\x1f, U+0085, the "
                   "Unicode spaces; no other control character), on every backend",
                   "strip(user_agent) != ''", 1, 1),
    "len": _spec("len(s)", "length of a string in characters (int64)", "len(path) < 200", 1, 1),
    "contains": _spec(
        "contains(s, sub)", "true if s contains the literal substring sub", "contains(path, '/api/')", 2, 2,
        literal_args={1: "str"},
    ),
    "startswith": _spec(
        "startswith(s, prefix)", "true if s starts with the literal prefix", "startswith(path, '/static')", 2, 2,
        literal_args={1: "str"},
    ),
    "endswith": _spec(
        "endswith(s, suffix)", "true if s ends with the literal suffix", "endswith(path, '.png')", 2, 2,
        literal_args={1: "str"},
    ),
    "matches": _spec(
        "matches(s, regex)", "true if the regular expression (RE2: no lookarounds or backreferences) matches anywhere in s (anchor with ^...$)",
        "matches(path, '^/v[0-9]+/')", 2, 2, literal_args={1: "regex"},
    ),
    "replace": _spec(
        "replace(s, old, new)", "replace every literal occurrence of old (not empty) with new", "replace(path, '//', '/')", 3, 3,
        literal_args={1: "str", 2: "str"},
    ),
    "substr": _spec(
        "substr(s, start, length)", "substring of at most length characters from 0-based start",
        "substr(time_str, 0, 10)", 3, 3, literal_args={1: "int", 2: "int"},
    ),
    "coalesce": _spec(
        "coalesce(a, b, ...)", "first non-null argument (arguments must share a type)",
        "coalesce(referrer, '-')", 2, None,
    ),
    "if_else": _spec(
        "if_else(cond, a, b)", "a where cond is true, else b (null cond counts as false)",
        "if_else(status >= 500, 'error', 'ok')", 3, 3,
    ),
    "is_null": _spec("is_null(x)", "true where x is null", "is_null(user_id)", 1, 1),
    "not_null": _spec("not_null(x)", "true where x is not null", "not_null(user_id)", 1, 1),
    "year": _spec("year(t)", "year of a timestamp (int32)", "year(time) >= 2024", 1, 1),
    "month": _spec("month(t)", "month of a timestamp, 1-12 (int32)", "month(time) == 12", 1, 1),
    "day": _spec("day(t)", "day of month of a timestamp, 1-31 (int32)", "day(time) == 1", 1, 1),
    "hour": _spec("hour(t)", "hour of a timestamp, 0-23 (int32)", "hour(time) < 6", 1, 1),
    "minute": _spec("minute(t)", "minute of a timestamp, 0-59 (int32)", "minute(time) == 0", 1, 1),
    "weekday": _spec("weekday(t)", "day of week, Monday=0 .. Sunday=6 (int32)", "weekday(time) >= 5", 1, 1),
    "abs": _spec("abs(x)", "absolute value", "abs(delta) > 10", 1, 1),
    "round": _spec(
        "round(x, ndigits=0)", "round half to even to ndigits decimals", "round(latency_ms, 1)", 1, 2,
        keywords={"ndigits": 1}, literal_args={1: "int"},
    ),
    "floor": _spec("floor(x)", "largest integer <= x", "floor(score)", 1, 1),
    "ceil": _spec("ceil(x)", "smallest integer >= x", "ceil(bytes / 1024)", 1, 1),
    "hash": _spec(
        "hash(x, ..., seed=0)", "64-bit hash of one or more values (uint64)", "hash(user_id) % 100 < 10", 1, None,
        keywords={"seed": -1},
    ),
}

STRING_UNARY = ("lower", "upper", "strip")
STRING_PREDICATES = ("contains", "startswith", "endswith", "matches")
DATE_PARTS = ("year", "month", "day", "hour", "minute", "weekday")
