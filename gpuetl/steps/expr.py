"""Safe expression language for the ``filter`` and ``derive`` steps.

Pipeline files contain small expressions such as::

    status >= 200 and method in ['GET', 'POST']
    hour(time)
    coalesce(referrer, '-')

This module parses them with :func:`ast.parse` (``mode="eval"``) and converts
the Python syntax tree into a tree of this module's own small node classes.
Only a whitelisted subset of Python syntax is accepted; everything else is
rejected at parse time with an :class:`ExprError` that quotes the expression
and gives the column offset of the offending part.  User text is never passed
to ``eval``/``exec``/``compile``; evaluation walks our own node classes and
only calls pandas/cuDF-compatible Series methods.

Public API
----------
``parse_expression(text) -> Expr``
``Expr.columns() -> set[str]``
``Expr.infer_type(schema) -> str``            (plan-time type checking)
``Expr.check_predicate(schema) -> None``      (raises unless the type is bool)
``Expr.evaluate(df, backend=None)``           (-> Series of len(df))
``Expr.evaluate_predicate(df, backend=None)`` (-> non-null bool Series)
``FUNCTIONS: dict[str, FunctionSpec]``        (for generated docs)
``ExprError(ValueError)``, ``ExprTypeError(ExprError)``

Null semantics (SQL-like)
-------------------------
* Arithmetic, string functions and date functions of a null give null.
* Comparisons, ``in``/``not in``, ``contains``/``startswith``/``endswith``/
  ``matches`` of a null give null; ``not null`` is null; ``and``/``or``
  follow the backend's three-valued logic (Kleene in pandas).
* A predicate (``evaluate_predicate``, the ``filter`` step) treats null as
  False, so ``x != 5`` does NOT keep rows where ``x`` is null; use
  ``x is None`` / ``is_null(x)`` / ``coalesce`` explicitly.
* Division or modulo by zero (``/``, ``//``, ``%``) gives null.
* Integer ``+ - * //``, unary ``-``, ``abs`` and ``round`` that would overflow int64, and ``replace`` or
  string ``+`` that would make a value longer than MAX_VALUE_CHARS, are found before they are
  computed: with ``refusals`` (derive) the record is collected to be quarantined, without it
  ``ExprValueError`` stops the run. Nothing wraps around.
* ``if_else(cond, a, b)`` takes ``b`` where ``cond`` is null.
"""

from __future__ import annotations

import ast
import difflib
import math
import re
from types import MappingProxyType
from typing import Any, Iterator, Mapping, NamedTuple

import numpy as np
import pandas as pd

from ..errors import DataError
from ..types import FLOAT_TYPES, INTEGER_TYPES, NUMERIC_TYPES, TYPE_NAMES

__all__ = [
    "Expr",
    "ExprError",
    "ExprTypeError",
    "FUNCTIONS",
    "FunctionSpec",
    "TYPE_NAMES",
    "parse_expression",
    "normalize_type",
    "MAX_TEXT_LENGTH",
    "MAX_STRING_LITERAL",
    "MAX_DEPTH",
    "MAX_NODES",
    "regex_problem",
    "ExprValueError",
    "Refusals",
]

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

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1


# --------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------


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


def value_error(expr: "Expr", reason: str, records: int) -> ExprValueError:
    return ExprValueError(f"expression {_quote(expr.text)}: {reason} ({records} record{'s' if records != 1 else ''})",
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


def _quote(text: str, limit: int = 120) -> str:
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return repr(text)


def _hint(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, [str(c) for c in candidates], n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


# --------------------------------------------------------------------------
# types
# --------------------------------------------------------------------------

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


def _dtype_to_type(dtype: Any) -> str | None:
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


def _is_int(t: str) -> bool:
    return t in INTEGER_TYPES


def _is_float(t: str) -> bool:
    return t in FLOAT_TYPES


def _is_num(t: str) -> bool:
    return t in NUMERIC_TYPES


def _common_type(a: str, b: str) -> str | None:
    if a == NULL:
        return b
    if b == NULL:
        return a
    if a == b:
        return a
    if _is_num(a) and _is_num(b):
        return "float64" if (_is_float(a) or _is_float(b)) else "int64"
    return None


def _valid_timestamp_literal(value: str) -> bool:
    if value.strip().lower() in ("now", "today", "tomorrow", "yesterday", ""):
        return False
    try:
        ts = pd.Timestamp(value)
    except Exception:
        return False
    return ts is not pd.NaT and not pd.isna(ts)


# --------------------------------------------------------------------------
# function table
# --------------------------------------------------------------------------


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

_STRING_UNARY = ("lower", "upper", "strip")
_STRING_PREDICATES = ("contains", "startswith", "endswith", "matches")
_DATE_PARTS = ("year", "month", "day", "hour", "minute", "weekday")


# --------------------------------------------------------------------------
# nodes
# --------------------------------------------------------------------------


class Node:
    """Base class of the expression tree (our own classes, not ast nodes)."""

    __slots__ = ("col", "src")

    def __init__(self, col: int = 0, src: str = ""):
        self.col = col
        self.src = src

    def children(self) -> tuple["Node", ...]:
        return ()

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"{type(self).__name__}({self.src!r})"


class Column(Node):
    __slots__ = ("name",)

    def __init__(self, name: str, col: int = 0, src: str = ""):
        super().__init__(col, src or name)
        self.name = name


class Literal(Node):
    __slots__ = ("value",)

    def __init__(self, value: Any, col: int = 0, src: str = ""):
        super().__init__(col, src or repr(value))
        self.value = value


class _Unary(Node):
    __slots__ = ("operand",)

    def __init__(self, operand: Node, col=0, src=""):
        super().__init__(col, src)
        self.operand = operand

    def children(self):
        return (self.operand,)


class Neg(_Unary):
    __slots__ = ()


class Not(_Unary):
    __slots__ = ()


class BoolOp(Node):
    __slots__ = ("op", "values")

    def __init__(self, op: str, values: list[Node], col=0, src=""):
        super().__init__(col, src)
        self.op = op  # "and" | "or"
        self.values = tuple(values)

    def children(self):
        return self.values


class BinOp(Node):
    __slots__ = ("op", "left", "right")

    def __init__(self, op: str, left: Node, right: Node, col=0, src=""):
        super().__init__(col, src)
        self.op = op  # + - * / // %
        self.left = left
        self.right = right

    def children(self):
        return (self.left, self.right)


class Compare(Node):
    """Possibly chained comparison: ``a < b <= c`` == ``a < b and b <= c``."""

    __slots__ = ("left", "ops", "rights")

    def __init__(self, left: Node, ops: list[str], rights: list[Node], col=0, src=""):
        super().__init__(col, src)
        self.left = left
        self.ops = tuple(ops)
        self.rights = tuple(rights)

    def children(self):
        return (self.left,) + self.rights


class InList(Node):
    __slots__ = ("operand", "values", "negate")

    def __init__(self, operand: Node, values: list[Any], negate: bool, col=0, src=""):
        super().__init__(col, src)
        self.operand = operand
        self.values = tuple(values)
        self.negate = negate

    def children(self):
        return (self.operand,)


class IsNull(Node):
    __slots__ = ("operand", "negate")

    def __init__(self, operand: Node, negate: bool, col=0, src=""):
        super().__init__(col, src)
        self.operand = operand
        self.negate = negate

    def children(self):
        return (self.operand,)


class Call(Node):
    __slots__ = ("name", "args", "kwargs")

    def __init__(self, name: str, args: list[Node], kwargs: dict[str, Any], col=0, src=""):
        super().__init__(col, src)
        self.name = name
        self.args = tuple(args)
        self.kwargs = dict(kwargs)

    def children(self):
        return self.args


def _walk(root: Node) -> Iterator[Node]:
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children())


# --------------------------------------------------------------------------
# parser: ast -> our nodes
# --------------------------------------------------------------------------

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%"}
_BAD_BINOPS = {
    ast.Pow: "the power operator '**'",
    ast.BitAnd: "the bitwise operator '&' (use 'and')",
    ast.BitOr: "the bitwise operator '|' (use 'or')",
    ast.BitXor: "the bitwise operator '^'",
    ast.LShift: "the shift operator '<<'",
    ast.RShift: "the shift operator '>>'",
    ast.MatMult: "the operator '@'",
}
_CMPOPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_REJECTED_NODES = {
    ast.Attribute: "attribute access",
    ast.Subscript: "subscripts / indexing ('x[...]')",
    ast.Lambda: "lambda expressions",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "generator expressions",
    ast.JoinedStr: "f-strings",
    ast.FormattedValue: "f-strings",
    ast.Starred: "starred expressions ('*x')",
    ast.NamedExpr: "assignment expressions (':=')",
    ast.IfExp: "conditional expressions ('a if c else b'); use if_else(c, a, b)",
    ast.Dict: "dict literals",
    ast.Set: "set literals",
    ast.List: "lists outside the right side of 'in' / 'not in'",
    ast.Tuple: "tuples outside the right side of 'in' / 'not in'",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.Slice: "slices",
}
_SURROGATE = re.compile("[\ud800-\udfff]")
_NULL_ONLY = "None is only allowed in 'x is None', 'x is not None', coalesce() and if_else()"


class _Parser:
    def __init__(self, original: str, src: str, quoted: _Quoted):
        self.original = original
        self.src = src
        self.quoted = quoted
        self.raw = quoted.code.encode("utf-8")

    # -- location helpers: ast counts UTF-8 bytes of the code it read; the user counts characters
    # of what they wrote, backticks included -------------------------------
    def _user_col(self, offset: int) -> int:
        chars = len(self.raw[:offset].decode("utf-8", "replace"))
        return self.quoted.char_map[min(chars, len(self.quoted.char_map) - 1)]

    def col(self, node: ast.AST) -> int:
        return self._user_col(getattr(node, "col_offset", 0) or 0)

    def seg(self, node: ast.AST) -> str:
        start = getattr(node, "col_offset", 0) or 0
        end = getattr(node, "end_col_offset", None)
        if end is None:
            end = len(self.raw)
        return self.src[self._user_col(start):self._user_col(end)].strip()

    def name_of(self, node: ast.Name) -> str:
        """The column a name stands for: a quoted name's text, or a bare identifier exactly as
        written (Python reads identifiers NFKC-normalised: a fullwidth 'ａ' would become 'a')."""
        if node.id in self.quoted.names:
            return self.quoted.names[node.id]
        written = self.seg(node)
        if written != node.id:
            self.fail(node, f"the name {written!r} is read by Python as {node.id!r} (its letters are "
                            f"normalised, NFKC); to name a column {written!r} quote it: {quote_name(written)}")
        return node.id

    def fail(self, node: ast.AST | None, msg: str, col: int | None = None):
        if col is None:
            col = self.col(node) if node is not None else 0
        raise ExprError(
            f"invalid expression {_quote(self.src)} at column {col}: {msg}", expression=self.src, col=col
        )

    def not_allowed(self, node: ast.AST, what: str):
        self.fail(node, f"not allowed: {what}")

    # -- limits -----------------------------------------------------------
    def check_limits(self, tree: ast.Expression) -> None:
        count = 0
        stack: list[tuple[ast.AST, int]] = [(tree.body, 1)]
        while stack:
            node, depth = stack.pop()
            if isinstance(node, (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)):
                continue
            count += 1
            if count > MAX_NODES:
                self.fail(node, f"expression has more than {MAX_NODES} syntax nodes")
            if depth > MAX_DEPTH:
                self.fail(node, f"expression is nested more than {MAX_DEPTH} levels deep")
            if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
                if len(node.value) > MAX_STRING_LITERAL:
                    self.fail(
                        node, f"string literal is {len(node.value)} characters long; the limit is {MAX_STRING_LITERAL}"
                    )
                if isinstance(node.value, str) and (bad := _SURROGATE.search(node.value)):
                    self.fail(node, f"the string literal {self.seg(node)[:40]} holds {ascii(bad.group())}, half of a "
                                    "UTF-16 surrogate pair, which is not a character (no text can hold it)")
            if isinstance(node, ast.Constant) and isinstance(node.value, float) and not math.isfinite(node.value):
                self.fail(node, f"the number {self.seg(node)[:40]} is too large for a float64 "
                                "(the largest is about 1.8e308)")
            for child in ast.iter_child_nodes(node):
                stack.append((child, depth + 1))

    # -- conversion -------------------------------------------------------
    def convert(self, n: ast.AST, allow_null: bool = False) -> Node:
        col, src = self.col(n), self.seg(n)
        if isinstance(n, ast.Constant):
            return self.constant(n, allow_null)
        if isinstance(n, ast.Name):
            name = self.name_of(n)
            self.check_name(n, name)
            return Column(name, col, src)
        if isinstance(n, ast.UnaryOp):
            if isinstance(n.op, ast.Not):
                return Not(self.convert(n.operand), col, src)
            if isinstance(n.op, ast.USub):
                operand = self.convert(n.operand)
                if isinstance(operand, Literal) and isinstance(operand.value, (int, float)) and not isinstance(
                    operand.value, bool
                ):
                    value = -operand.value
                    self.check_int_range(n, value)
                    return Literal(value, col, src)
                return Neg(operand, col, src)
            if isinstance(n.op, ast.UAdd):
                self.not_allowed(n, "unary '+'")
            self.not_allowed(n, "the operator '~' (use 'not')")
        if isinstance(n, ast.BinOp):
            op = _BINOPS.get(type(n.op))
            if op is None:
                self.not_allowed(n, _BAD_BINOPS.get(type(n.op), f"the operator {type(n.op).__name__}"))
            return BinOp(op, self.convert(n.left), self.convert(n.right), col, src)
        if isinstance(n, ast.BoolOp):
            op = "and" if isinstance(n.op, ast.And) else "or"
            return BoolOp(op, [self.convert(v) for v in n.values], col, src)
        if isinstance(n, ast.Compare):
            return self.compare(n)
        if isinstance(n, ast.Call):
            return self.call(n)
        if isinstance(n, ast.Attribute):
            self.not_allowed(n, f"attribute access ('.{n.attr}'){self.quote_hint(n)}")
        if isinstance(n, ast.Subscript):
            self.not_allowed(n, f"{_REJECTED_NODES[ast.Subscript]}{self.quote_hint(n)}")
        for cls, what in _REJECTED_NODES.items():
            if isinstance(n, cls):
                self.not_allowed(n, what)
        self.not_allowed(n, f"{type(n).__name__} syntax")
        raise AssertionError("unreachable")  # pragma: no cover

    def quote_hint(self, node: ast.AST) -> str:
        """For `a.b` or `a[0]`: how to name a column whose name is that text."""
        return f"; a column whose name has dots, brackets or spaces is written in backticks: {quote_name(self.seg(node))}"

    def check_name(self, node: ast.AST, name: str) -> None:
        if name.startswith("__") or name.endswith("__"):
            self.not_allowed(node, f"the dunder name '{name}'")

    def check_int_range(self, node: ast.AST, value: Any) -> None:
        if isinstance(value, int) and not isinstance(value, bool):
            if value < _INT64_MIN or value > _UINT64_MAX:
                self.fail(node, f"integer literal {self.seg(node)[:40]} does not fit in 64 bits")

    def constant(self, n: ast.Constant, allow_null: bool) -> Literal:
        v = n.value
        if v is None:
            if not allow_null:
                self.fail(n, _NULL_ONLY)
            return Literal(None, self.col(n), "None")
        if isinstance(v, bool) or isinstance(v, (str, float)):
            return Literal(v, self.col(n), self.seg(n))
        if isinstance(v, int):
            self.check_int_range(n, v)
            return Literal(v, self.col(n), self.seg(n))
        if isinstance(v, bytes):
            self.not_allowed(n, "bytes literals")
        if isinstance(v, complex):
            self.not_allowed(n, "complex numbers")
        self.not_allowed(n, f"the constant {self.seg(n)[:40]}")
        raise AssertionError("unreachable")  # pragma: no cover

    def literal_value(self, n: ast.AST) -> Any:
        """A scalar literal (possibly a negated number) for 'in' lists / literal args, else raise."""
        if isinstance(n, ast.Constant) and not isinstance(n.value, (bytes, complex)) and n.value is not ...:
            if n.value is None:
                self.fail(n, "None is not allowed in an 'in' list; use 'x is None'")
            self.check_int_range(n, n.value)
            return n.value
        if (
            isinstance(n, ast.UnaryOp)
            and isinstance(n.op, ast.USub)
            and isinstance(n.operand, ast.Constant)
            and isinstance(n.operand.value, (int, float))
            and not isinstance(n.operand.value, bool)
        ):
            self.check_int_range(n, -n.operand.value)
            return -n.operand.value
        self.fail(n, f"only literals are allowed here, not {self.seg(n)[:60]!r}")

    def compare(self, n: ast.Compare) -> Node:
        col, src = self.col(n), self.seg(n)
        special = (ast.In, ast.NotIn, ast.Is, ast.IsNot)
        if len(n.ops) > 1 and any(isinstance(o, special) for o in n.ops):
            self.fail(n, "'in', 'not in', 'is' and 'is not' cannot be chained with other comparisons")
        op = n.ops[0]
        right = n.comparators[0]
        if isinstance(op, (ast.Is, ast.IsNot)):
            if not (isinstance(right, ast.Constant) and right.value is None):
                self.fail(right, "'is' / 'is not' are only allowed as 'x is None' / 'x is not None'")
            return IsNull(self.convert(n.left), isinstance(op, ast.IsNot), col, src)
        if isinstance(op, (ast.In, ast.NotIn)):
            if isinstance(right, (ast.List, ast.Tuple)):
                values = [self.literal_value(e) for e in right.elts]
                return InList(self.convert(n.left), values, isinstance(op, ast.NotIn), col, src)
            if isinstance(n.left, ast.Constant) and isinstance(n.left.value, str):
                self.fail(right, "the right side of 'in' must be a list of literals; for substrings use contains(s, sub)")
            self.fail(right, "the right side of 'in' / 'not in' must be a list of literals like ['a', 'b']")
        ops, rights = [], []
        for o, c in zip(n.ops, n.comparators):
            sym = _CMPOPS.get(type(o))
            if sym is None:  # pragma: no cover - all cmpops handled above
                self.not_allowed(n, f"the comparison {type(o).__name__}")
            if isinstance(c, ast.Constant) and c.value is None:
                self.fail(c, f"comparing with None using '{sym}' is not allowed; use 'x is None' / 'x is not None'")
            ops.append(sym)
            rights.append(self.convert(c))
        if isinstance(n.left, ast.Constant) and n.left.value is None:
            self.fail(n.left, "comparing None is not allowed; use 'x is None' / 'x is not None'")
        return Compare(self.convert(n.left), ops, rights, col, src)

    def call(self, n: ast.Call) -> Node:
        col, src = self.col(n), self.seg(n)
        if not isinstance(n.func, ast.Name):
            if isinstance(n.func, ast.Attribute):
                self.not_allowed(n.func, f"attribute access / method calls ('.{n.func.attr}(...)')")
            self.not_allowed(n.func, "calling anything other than a function name")
        if n.func.id in self.quoted.names:
            self.fail(n.func, f"{self.seg(n.func)} is a quoted column name, and a column cannot be called; "
                              "functions are written bare, as in lower(x)")
        name = self.name_of(n.func)
        self.check_name(n.func, name)
        spec = FUNCTIONS.get(name)
        if spec is None:
            allowed = ", ".join(sorted(FUNCTIONS))
            self.fail(
                n.func,
                f"calling '{name}' is not allowed: unknown function"
                + (f"; use {_FUNCTION_SYNONYMS[name.lower()]}()" if name.lower() in _FUNCTION_SYNONYMS
                   else _hint(name, FUNCTIONS)) + f" (allowed functions: {allowed})",
            )
        for a in n.args:
            if isinstance(a, ast.Starred):
                self.not_allowed(a, "starred arguments ('*args')")
        args: list[ast.AST | None] = list(n.args)
        kwargs: dict[str, Any] = {}
        for kw in n.keywords:
            if kw.arg is None:
                self.not_allowed(kw.value, "'**' keyword unpacking")
            if kw.arg is not None and (written := self.seg(kw).split("=", 1)[0].strip()) != kw.arg:
                self.fail(kw, f"the keyword {written!r} is read by Python as {kw.arg!r} (its letters are "
                              "normalised, NFKC); write it in plain letters")
            if kw.arg in self.quoted.names:
                self.fail(kw.value, f"a keyword argument's name is written bare, not quoted (allowed keywords of "
                                    f"{name}(): {', '.join(spec.keywords) or 'none'})")
            if kw.arg not in spec.keywords:
                allowed_kw = ", ".join(spec.keywords) or "none"
                self.fail(
                    kw.value,
                    f"keyword argument '{kw.arg}' is not allowed for {name}() (allowed keywords: {allowed_kw})",
                )
            pos = spec.keywords[kw.arg]
            if kw.arg in kwargs:  # pragma: no cover - python rejects duplicate keywords itself
                self.fail(kw.value, f"keyword argument '{kw.arg}' given twice")
            if pos >= 0:
                if pos < len(n.args):
                    self.fail(kw.value, f"{name}() got argument '{kw.arg}' both by position and by keyword")
                while len(args) <= pos:
                    args.append(None)
                args[pos] = kw.value
            else:
                value = self.literal_value(kw.value)
                if not isinstance(value, int) or isinstance(value, bool):
                    self.fail(kw.value, f"'{kw.arg}' of {name}() must be an integer literal")
                if kw.arg == "seed" and not (0 <= value <= _UINT64_MAX):
                    self.fail(kw.value, "'seed' must be between 0 and 2**64-1")
                kwargs[kw.arg] = value
        if any(a is None for a in args):
            self.fail(n, f"{name}() is missing a positional argument")
        nargs = len(args)
        if nargs < spec.min_args or (spec.max_args is not None and nargs > spec.max_args):
            if spec.max_args is None:
                want = f"at least {spec.min_args}"
            elif spec.min_args == spec.max_args:
                want = str(spec.min_args)
            else:
                want = f"{spec.min_args} to {spec.max_args}"
            self.fail(n, f"{name}() takes {want} argument(s), got {nargs}; usage: {spec.signature}")
        nodes: list[Node] = []
        for i, a in enumerate(args):
            kind = spec.literal_args.get(i)
            if kind is None:
                allow_null = name == "coalesce" or (name == "if_else" and i > 0)
                nodes.append(self.convert(a, allow_null=allow_null))
                continue
            value = self.literal_value(a)
            if kind in ("str", "regex") and not isinstance(value, str):
                self.fail(a, f"argument {i + 1} of {name}() must be a string literal; usage: {spec.signature}")
            if kind == "int" and (not isinstance(value, int) or isinstance(value, bool)):
                self.fail(a, f"argument {i + 1} of {name}() must be an integer literal; usage: {spec.signature}")
            if kind == "regex" and (why := regex_problem(value)):
                self.fail(a, f"invalid regular expression {value[:60]!r} in {name}(): {why}")
            if name == "substr" and not 0 <= value <= MAX_SUBSTR:
                self.fail(a, f"substr() start and length must be between 0 and {MAX_SUBSTR}")
            if name == "replace" and i == 1 and value == "":
                self.fail(a, "replace() needs a non-empty text to replace (an empty one would insert the "
                             "new text between every two characters)")
            if name == "round" and not -18 <= value <= 30:
                self.fail(a, "round() ndigits must be between -18 and 30")
            nodes.append(Literal(value, self.col(a), self.seg(a)))
        return Call(name, nodes, kwargs, col, src)


# Habits from SQL, C and JavaScript, and what to write here instead: (pattern, advice).
_SYNTAX_HINTS = (
    (r"&&", "use 'and' instead of '&&'"),
    (r"\|\|", "use 'or' instead of '||'"),
    (r"===", "use '==' to compare"),
    (r"<>", "use '!=' instead of '<>'"),
    (r"(?:\band|\bor|\bnot|[-+*/%<>=,(])\s*$", "the expression ends in the middle: something is missing at the end"),
    (r"(?<![=!<>])=(?!=)", "use '==' to compare ('=' assigns nothing here)"),
    (r"!(?!=)", "use 'not' instead of '!'"),
    (r"\b(?:AND|OR|NOT)\b", "write and / or / not in lower case"),
    (r"(?<![\w.])(?!(?:and|or|not|in|is|if|else|None|True|False)\b)[^\W\d]\w*"
     r"(?:\s+(?!(?:and|or|not|in|is|if|else)\b)[^\W\d]\w*)+\b(?!\s*\()",
     "a column name with spaces is written in backticks: `{}`"),
)
# string literals and `quoted names`, which no hint looks into
_STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`(?:[^`]|``)*`")


def _syntax_hint(src: str) -> tuple[int, str] | None:
    """(column, advice) for the first known habit in `src` outside string literals."""
    code = _STRING_LITERAL.sub(lambda m: "_" * len(m.group()), src)
    for pattern, advice in _SYNTAX_HINTS:
        for match in re.finditer(pattern, code):
            if match.group() == "=" and re.search(r"\b(?:seed|ndigits)\s*$", code[:match.start()]):
                continue          # a keyword argument, not a comparison
            return (len(code.rstrip()) if "ends in the middle" in advice else match.start()), \
                advice.replace("{}", match.group())
    return None


# Names of functions in other languages -> the function here.
_FUNCTION_SYNONYMS = {
    "regexp": "matches", "regexp_like": "matches", "rlike": "matches", "regex": "matches", "re_match": "matches",
    "search": "matches", "like": "matches (a regular expression) or contains", "length": "len",
    "char_length": "len", "strlen": "len", "trim": "strip", "lowercase": "lower", "lcase": "lower",
    "uppercase": "upper", "ucase": "upper", "substring": "substr", "ifnull": "coalesce", "nvl": "coalesce",
    "isnull": "is_null", "iif": "if_else", "if": "if_else", "str_contains": "contains",
}


def regex_problem(pattern: str) -> str | None:
    """Why RE2, the engine every backend can run a pattern with (pyarrow on the CPU, and the GPU
    backend's fallback), rejects `pattern`, or None. A backend checks its own dialect at plan
    time (Backend.check_regex / regex_error)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        pc.match_substring_regex(pa.array([""], type=pa.string()), pattern=pattern)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        message = str(err).replace("Invalid regular expression: ", "")
        if re.search(r"\(\?<?[=!]|\\[1-9]", pattern):
            message += " (RE2 has no lookarounds and no backreferences)"
        return f"RE2 cannot run it: {message}"
    return None


class _Quoted(NamedTuple):
    """An expression with its backtick-quoted column names replaced by placeholder identifiers."""

    code: str                  # what ast.parse reads
    names: dict[str, str]      # placeholder -> the column name it stands for
    char_map: list[int]        # code's character index -> the user's character index (one extra at the end)


def quote_name(name: str) -> str:
    """`name` as an expression writes it: bare where Python would read it as that identifier,
    else in backticks with each backtick doubled (`US Gross`, `connections.active`)."""
    import keyword
    import unicodedata

    if (name.isidentifier() and not keyword.iskeyword(name) and name not in FUNCTIONS
            and unicodedata.normalize("NFKC", name) == name):
        return name
    return "`" + name.replace("`", "``") + "`"


def _unquote(src: str) -> _Quoted:
    """Replace each `quoted name` outside string literals by a fresh identifier, remembering
    where every character of the result came from, so errors point into the user's text."""
    prefix = "_q"
    while prefix in src:
        prefix += "q"
    out: list[str] = []
    char_map: list[int] = []
    names: dict[str, str] = {}
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c in "'\"":
            quote = src[i:i + 3] if src[i:i + 3] in (3 * "\'", 3 * '"') else c
            j = i + len(quote)
            while j < n and not src.startswith(quote, j):
                j += 2 if src[j] == "\\" else 1
            j = min(j + len(quote), n)
            out.append(src[i:j])
            char_map.extend(range(i, j))
            i = j
            continue
        if c != "`":
            out.append(c)
            char_map.append(i)
            i += 1
            continue
        j, name = i + 1, []
        while True:
            k = src.find("`", j)
            if k < 0:
                raise ExprError(
                    f"invalid expression {_quote(src)} at column {i}: the quoted name opened by this backtick "
                    "is not closed (a backtick inside a name is doubled: `a``b`)", expression=src, col=i)
            name.append(src[j:k])
            if src.startswith("``", k):
                name.append("`")
                j = k + 2
                continue
            j = k + 1
            break
        column = "".join(name)
        if not column:
            raise ExprError(f"invalid expression {_quote(src)} at column {i}: an empty quoted name (``)",
                            expression=src, col=i)
        placeholder = f"{prefix}{len(names)}"
        names[placeholder] = column
        # a space on either side where a word touches it: `a`and b must not glue into one token
        lead = " " if out and (out[-1][-1].isalnum() or out[-1][-1] == "_") else ""
        out.append(f"{lead}{placeholder} ")
        char_map.extend([i] * (len(lead) + len(placeholder)) + [j])
        i = j
    char_map.append(n)
    return _Quoted("".join(out), names, char_map)


def parse_expression(text: str) -> "Expr":
    """Parse ``text`` into an :class:`Expr`, or raise :class:`ExprError`."""
    if not isinstance(text, str):
        raise ExprError(f"an expression must be a string, got {type(text).__name__}: {text!r:.60}")
    if len(text) > MAX_TEXT_LENGTH:
        raise ExprError(
            f"invalid expression {_quote(text)}: it is {len(text)} characters long; the limit is {MAX_TEXT_LENGTH}",
            expression=text,
            col=MAX_TEXT_LENGTH,
        )
    # YAML block scalars may spread an expression over several lines.
    src = text.replace("\r", " ").replace("\n", " ").strip()
    if not src:
        raise ExprError("invalid expression: it is empty", expression=text, col=0)
    if bad := _SURROGATE.search(src):
        raise ExprError(f"invalid expression {_quote(src)} at column {bad.start()}: it holds {ascii(bad.group())}, "
                        "half of a UTF-16 surrogate pair, which is not a character", expression=src, col=bad.start())
    quoted = _unquote(src)
    try:
        tree = ast.parse(quoted.code, mode="eval")
    except SyntaxError as e:
        msg = str(e.msg or "invalid syntax")
        if "nested" in msg or "too complex" in msg:
            raise ExprError(
                f"invalid expression {_quote(src)}: it is nested too deeply (limit {MAX_DEPTH} levels)",
                expression=src,
                col=0,
            ) from None
        col = quoted.char_map[min(max((e.offset or 1) - 1, 0), len(quoted.char_map) - 1)]
        hint = _syntax_hint(src)
        if hint:
            col, advice = hint
            msg = f"{msg}; {advice}"
        raise ExprError(
            f"invalid expression {_quote(src)} at column {col}: syntax error: {msg}", expression=src, col=col
        ) from None
    except (RecursionError, MemoryError):
        raise ExprError(
            f"invalid expression {_quote(src)}: it is nested too deeply or too complex (limit {MAX_DEPTH} levels)",
            expression=src,
            col=0,
        ) from None
    except Exception as e:  # e.g. ValueError for NUL bytes, UnicodeEncodeError for lone surrogates
        raise ExprError(f"invalid expression {_quote(src)}: cannot parse: {e}", expression=src, col=0) from None
    parser = _Parser(text, src, quoted)
    parser.check_limits(tree)
    root = parser.convert(tree.body)
    return Expr(src, root)


# --------------------------------------------------------------------------
# type inference
# --------------------------------------------------------------------------


class _TypeEnv:
    def __init__(self, expr: "Expr", schema: Mapping[str, Any], names=None):
        self.expr = expr
        self.schema = schema
        self.names = list(schema) if names is None else list(names)
        self.cache: dict[int, str] = {}

    def fail(self, node: Node, msg: str):
        raise ExprTypeError(
            f"type error in expression {_quote(self.expr.text)} at column {node.col}: {msg}",
            expression=self.expr.text,
            col=node.col,
        )

    def type_of(self, node: Node) -> str:
        t = self.cache.get(id(node))
        if t is None:
            t = _INFER[type(node)](node, self)
            self.cache[id(node)] = t
        return t


def _describe(node: Node, t: str) -> str:
    if isinstance(node, Column):
        return f"{t} column '{node.name}'"
    if isinstance(node, Literal):
        v = node.value
        kind = "bool" if isinstance(v, bool) else "string" if isinstance(v, str) else "null" if v is None else (
            "integer" if isinstance(v, int) else "float"
        )
        return f"{'an' if kind == 'integer' else 'a'} {kind} literal {node.src}"
    return f"{t} value `{node.src}`"


def _infer_column(node: Column, env: _TypeEnv) -> str:
    if node.name not in env.schema:
        advice = _hint(node.name, env.names)
        close = difflib.get_close_matches(node.name, [str(c) for c in env.names], n=1, cutoff=0.6)
        if close and quote_name(close[0]) != close[0]:
            advice = f"; did you mean {quote_name(close[0])}?"
        if node.name.lower() in ("null", "nil", "none"):
            advice = "; to test for a missing value write 'x is None' or 'x is not None'"
        elif node.name.lower() in ("true", "false"):
            advice = f"; the constant is written {node.name.capitalize()}"
        env.fail(node, f"unknown column '{node.name}'{advice}")
    t = normalize_type(env.schema[node.name])
    if t is None:
        env.fail(node, f"column '{node.name}' has type {env.schema[node.name]!r}, which expressions cannot use")
    return t


def _infer_literal(node: Literal, env: _TypeEnv) -> str:
    v = node.value
    if v is None:
        return NULL
    if isinstance(v, bool):
        return BOOL
    if isinstance(v, int):
        return "uint64" if v > _INT64_MAX else "int64"
    if isinstance(v, float):
        return "float64"
    return STRING


def _infer_neg(node: Neg, env: _TypeEnv) -> str:
    t = env.type_of(node.operand)
    if not _is_num(t):
        env.fail(node, f"unary '-' needs a number, but {_describe(node.operand, t)} is not numeric")
    return "float64" if _is_float(t) else "int64"


def _infer_not(node: Not, env: _TypeEnv) -> str:
    t = env.type_of(node.operand)
    if t != BOOL:
        env.fail(node, f"'not' needs a bool operand, but {_describe(node.operand, t)} is {t}")
    return BOOL


def _infer_boolop(node: BoolOp, env: _TypeEnv) -> str:
    for v in node.values:
        t = env.type_of(v)
        if t != BOOL:
            env.fail(v, f"'{node.op}' needs bool operands, but {_describe(v, t)} is {t}")
    return BOOL


def _infer_binop(node: BinOp, env: _TypeEnv) -> str:
    lt, rt = env.type_of(node.left), env.type_of(node.right)
    if node.op == "+" and lt == STRING and rt == STRING:
        return STRING
    if not (_is_num(lt) and _is_num(rt)):
        bad, bt = (node.left, lt) if not _is_num(lt) else (node.right, rt)
        extra = " ('+' also concatenates two strings)" if node.op == "+" else ""
        env.fail(node, f"'{node.op}' needs numbers, but {_describe(bad, bt)} is not numeric{extra}")
    if node.op == "/" or _is_float(lt) or _is_float(rt):
        return "float64"
    for side in (node.left, node.right):
        if _past_int64(side):
            env.fail(side, f"the integer {side.src} does not fit in int64, the type of integer arithmetic")
    return "int64"


def _comparable(lnode: Node, lt: str, rnode: Node, rt: str) -> bool:
    if _is_num(lt) and _is_num(rt):
        return True
    if lt == rt and lt in (STRING, BOOL, TIMESTAMP):
        return True
    for a, at, b, bt in ((lnode, lt, rnode, rt), (rnode, rt, lnode, lt)):
        if at == TIMESTAMP and isinstance(b, Literal) and isinstance(b.value, str):
            return True
    return False


def _infer_compare(node: Compare, env: _TypeEnv) -> str:
    operands = (node.left,) + node.rights
    for op, l, r in zip(node.ops, operands, operands[1:]):
        lt, rt = env.type_of(l), env.type_of(r)
        if not _comparable(l, lt, r, rt):
            env.fail(node, f"'{op}' compares {_describe(l, lt)} with {_describe(r, rt)}")
        for a, at, b in ((l, lt, r), (r, rt, l)):
            if _is_int(at) and at != "uint64" and _past_int64(b):
                env.fail(b, f"the integer {b.src} does not fit in {_describe(a, at)}'s type, int64")
            if at == TIMESTAMP and isinstance(b, Literal) and isinstance(b.value, str):
                if not _valid_timestamp_literal(b.value):
                    env.fail(b, f"{b.src} is not a valid timestamp to compare with {_describe(a, at)}")
    return BOOL


def _infer_inlist(node: InList, env: _TypeEnv) -> str:
    t = env.type_of(node.operand)
    for v in node.values:
        if _is_num(t):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        elif t == BOOL:
            ok = isinstance(v, bool)
        elif t == STRING:
            ok = isinstance(v, str)
        elif t == TIMESTAMP:
            ok = isinstance(v, str) and _valid_timestamp_literal(v)
        else:  # pragma: no cover
            ok = False
        if ok and _is_int(t) and t != "uint64" and isinstance(v, int) and v > _INT64_MAX:
            env.fail(node, f"the list element {v} does not fit in {_describe(node.operand, t)}'s type, int64")
        if not ok:
            word = "not in" if node.negate else "in"
            env.fail(node, f"'{word}' compares {_describe(node.operand, t)} with the list element {v!r}")
    return BOOL


def _past_int64(node: Node) -> bool:
    return isinstance(node, Literal) and isinstance(node.value, int) and not isinstance(node.value, bool) \
        and node.value > _INT64_MAX


def _infer_isnull(node: IsNull, env: _TypeEnv) -> str:
    env.type_of(node.operand)
    return BOOL


def _infer_call(node: Call, env: _TypeEnv) -> str:
    name = node.name
    args = node.args
    ts = [env.type_of(a) for a in args]

    def need(i: int, ok: bool, what: str):
        if not ok:
            env.fail(args[i], f"{name}() needs {what}, but {_describe(args[i], ts[i])} is {ts[i]}")

    if name in _STRING_UNARY or name in _STRING_PREDICATES or name in ("len", "replace", "substr"):
        need(0, ts[0] == STRING, "a string")
        if name in _STRING_PREDICATES:
            return BOOL
        return "int64" if name == "len" else STRING
    if name in _DATE_PARTS:
        need(0, ts[0] == TIMESTAMP, "a timestamp")
        return "int32"
    if name == "abs":
        need(0, _is_num(ts[0]), "a number")
        return ts[0]
    if name in ("round", "floor", "ceil"):
        need(0, _is_num(ts[0]), "a number")
        return "float64" if _is_float(ts[0]) else "int64"
    if name == "hash":
        return "uint64"
    if name in ("is_null", "not_null"):
        return BOOL
    if name == "coalesce":
        result = NULL
        for i, t in enumerate(ts):
            c = _common_type(result, t)
            if c is None:
                env.fail(args[i], f"coalesce() arguments must share a type, but {_describe(args[i], t)} is {t} "
                                  f"while earlier arguments are {result}")
            result = c
        return result
    if name == "if_else":
        need(0, ts[0] == BOOL, "a bool condition")
        c = _common_type(ts[1], ts[2])
        if c is None:
            env.fail(node, f"if_else() branches must share a type, but {_describe(args[1], ts[1])} is {ts[1]} "
                           f"and {_describe(args[2], ts[2])} is {ts[2]}")
        return c
    raise AssertionError(f"no type rule for {name}")  # pragma: no cover


_INFER = {
    Column: _infer_column,
    Literal: _infer_literal,
    Neg: _infer_neg,
    Not: _infer_not,
    BoolOp: _infer_boolop,
    BinOp: _infer_binop,
    Compare: _infer_compare,
    InList: _infer_inlist,
    IsNull: _infer_isnull,
    Call: _infer_call,
}


# --------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------


def _cpu_backend():
    from ..backends.cpu import CpuBackend

    return CpuBackend()


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, str, pd.Timestamp, np.generic))


class _EvalCtx:
    def __init__(self, df, backend, env: _TypeEnv, refusals: Refusals | None = None):
        self.refusals = refusals     # where refused records go; None: stop with ExprValueError
        self.df = df
        self.backend = backend
        self.env = env
        self.xp = backend.xp
        self.xd = backend.xd
        self.n = len(df)

    def type_of(self, node: Node) -> str:
        return self.env.type_of(node)

    def refuse(self, node: Node, mask, why: str):
        """Records (a bool Series, null = fine) where `node` cannot give a value: collected, or
        the run stops. Returns the plain mask, or None when no record is refused."""
        mask = self.true_mask(mask)
        if not bool(mask.any()):
            return None
        if self.refusals is None:
            raise value_error(self.env.expr, f"`{node.src}` {why}", int(mask.sum()))
        self.refusals.add(mask, f"`{node.src}` {why}", self.backend)
        return mask

    def eval(self, node: Node):
        return _EVAL[type(node)](node, self)

    # -- helpers ----------------------------------------------------------
    def full(self, value: Any, typ: str):
        idx = self.df.index
        if value is None:
            dtype = self.backend.nullable_dtype(typ) if typ == BOOL or _is_int(typ) else (
                None if typ in (STRING, NULL) else typ
            )
            if typ == TIMESTAMP:
                dtype = "datetime64[ns]"
            return self.xd.Series([None] * self.n, index=idx, dtype=dtype)
        if typ == STRING:
            return self.xd.Series([value] * self.n, index=idx)
        return self.xd.Series(self.xp.full(self.n, value, dtype=typ), index=idx)

    def series(self, v: Any, typ: str):
        return self.full(v, typ) if _is_scalar(v) else v

    def cast(self, s, typ: str):
        """Cast a Series to the logical type ``typ`` (nullable dtype in pandas when it has nulls)."""
        if _is_scalar(s) or typ in (STRING, TIMESTAMP, NULL):
            return s
        if _dtype_to_type(s.dtype) == typ:
            return s
        if (typ == BOOL or _is_int(typ)) and bool(s.isna().any()):
            return s.astype(self.backend.nullable_dtype(typ))
        return s.astype(typ)

    def set_null(self, s, mask, typ: str):
        """Set ``s`` to null where the plain-bool Series ``mask`` is true."""
        if mask is None:
            return s
        if (typ == BOOL or _is_int(typ)) and isinstance(s.dtype, np.dtype) and s.dtype.kind in "biu":
            s = s.astype(self.backend.nullable_dtype(typ if typ == BOOL else str(s.dtype)))
        return s.mask(mask)

    @staticmethod
    def isna(*values):
        mask = None
        for v in values:
            if _is_scalar(v):
                continue
            m = v.isna()
            mask = m if mask is None else (mask | m)
        return mask

    @staticmethod
    def true_mask(s):
        """Plain bool Series: true where ``s`` is true (null counts as false)."""
        return s.fillna(False).astype(bool)

    def finalize(self, result, typ: str):
        if typ == NULL:  # pragma: no cover - rejected by infer
            typ = "float64"
        result = self.series(result, typ)
        return self.cast(result, typ)


def _ts_literal(value: str, s, backend):
    ts = pd.Timestamp(value)
    tz = None if _is_scalar(s) else backend.timezone(s)
    if tz is not None and ts.tzinfo is None:
        ts = ts.tz_localize(tz)
    elif tz is None and ts.tzinfo is not None:
        ts = ts.tz_convert("UTC").tz_localize(None)
    return ts


def _eval_column(node: Column, ctx: _EvalCtx):
    return ctx.df[node.name]


def _eval_literal(node: Literal, ctx: _EvalCtx):
    return node.value


def _eval_neg(node: Neg, ctx: _EvalCtx):
    typ = ctx.type_of(node)
    s = ctx.cast(ctx.series(ctx.eval(node.operand), ctx.type_of(node.operand)), typ)
    if _is_int(typ):
        overflow = ctx.refuse(node, s == _INT64_MIN, "overflows int64")
        if overflow is not None:
            return ctx.set_null(-s.mask(overflow, 0), overflow, typ)
    return -s


def _length(v):
    return len(v) if isinstance(v, str) else v.str.len()


def _limit_growth(node: Node, ctx: _EvalCtx, projected, inputs: tuple):
    """Refuse records whose new string would pass MAX_VALUE_CHARS, from the length it would
    have (computed before the string is made); null those inputs so the string is never made.
    Stop when the partition's column as a whole would pass MAX_COLUMN_CHARS."""
    too_long = ctx.refuse(node, projected > MAX_VALUE_CHARS,
                          f"would make a value of more than {MAX_VALUE_CHARS} characters")
    if too_long is not None:
        inputs = tuple(v if isinstance(v, str) else v.mask(too_long) for v in inputs)
        projected = projected.mask(too_long, 0)
    total = int(projected.sum()) if not isinstance(projected, int) else projected * ctx.n
    if total > MAX_COLUMN_CHARS:
        raise ExprValueError(f"expression {_quote(ctx.env.expr.text)}: `{node.src}` would make {total} characters "
                             f"in one partition; the limit is {MAX_COLUMN_CHARS}",
                             hint="lower source.blocksize, or make the expression grow its values less")
    return inputs


def _checked(node: BinOp, ctx: _EvalCtx, l, r):
    """int64 +, -, * with overflow found before it happens: (l, r, overflow mask or None),
    the refused records' operands replaced by 0 so the operation itself cannot overflow."""
    l, r = ctx.series(l, "int64"), ctx.series(r, "int64")
    if node.op == "+":
        over = ((r > 0) & (l > _INT64_MAX - r.clip(lower=0))) | ((r < 0) & (l < _INT64_MIN - r.clip(upper=0)))
    elif node.op == "-":
        over = ((r < 0) & (l > _INT64_MAX + r.clip(upper=0))) | ((r > 0) & (l < _INT64_MIN + r.clip(lower=0)))
    else:   # '*': a float product far from the limit decides; the few near it are checked exactly
        near = ctx.true_mask((l.astype("float64") * r.astype("float64")).abs() >= 2.0**62)
        over = near.copy()
        if bool(near.any()):
            exact = [a is not None and b is not None and not (pd.isna(a) or pd.isna(b))
                     and not _INT64_MIN <= int(a) * int(b) <= _INT64_MAX
                     for a, b in zip(ctx.backend.to_pylist(l[near]), ctx.backend.to_pylist(r[near]))]
            over[near] = exact
    overflow = ctx.refuse(node, over, "overflows int64")
    if overflow is not None:
        l, r = l.mask(overflow, 0), r.mask(overflow, 0)
    return l, r, overflow


def _eval_not(node: Not, ctx: _EvalCtx):
    s = ctx.series(ctx.eval(node.operand), BOOL)
    return ~s


def _eval_boolop(node: BoolOp, ctx: _EvalCtx):
    values = [ctx.eval(v) for v in node.values]
    if all(_is_scalar(v) for v in values):
        values[0] = ctx.full(values[0], BOOL)
    if _is_scalar(values[0]):
        i = next(i for i, v in enumerate(values) if not _is_scalar(v))
        values[0], values[i] = values[i], values[0]
    result = values[0]
    for v in values[1:]:
        result = (result & v) if node.op == "and" else (result | v)
    return result


_ARITH = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
}


def _eval_binop(node: BinOp, ctx: _EvalCtx):
    typ = ctx.type_of(node)
    lt = ctx.type_of(node.left)
    l, r = ctx.eval(node.left), ctx.eval(node.right)
    if _is_scalar(l) and _is_scalar(r):
        l = ctx.full(l, lt)
    if typ != STRING:
        l, r = ctx.cast(l, typ), ctx.cast(r, typ)
    fn = _ARITH[node.op]
    if typ == STRING:
        l, r = _limit_growth(node, ctx, _length(l) + _length(r), (l, r))
        return fn(l, r)
    if _is_int(typ) and node.op in ("+", "-", "*"):
        l, r, overflow = _checked(node, ctx, l, r)
        return ctx.set_null(fn(l, r), overflow, typ)
    if _is_int(typ) and node.op == "//" and (not _is_scalar(r) or r == -1):   # MIN // -1
        overflow = ctx.refuse(node, (l == _INT64_MIN) & (r == -1), "overflows int64")
        if overflow is not None:
            l = ctx.series(l, typ).mask(overflow, 0)
            return ctx.set_null(_eval_division(fn, l, r, ctx, typ), overflow, typ)
    return _eval_division(fn, l, r, ctx, typ)


def _eval_division(fn, l, r, ctx: _EvalCtx, typ: str):
    if fn not in (_ARITH["/"], _ARITH["//"], _ARITH["%"]):
        return fn(l, r)
    if fn is _ARITH["%"]:
        fn = lambda a, b: ctx.backend.mod(ctx.series(a, typ), b, typ)  # noqa: E731
    # division / modulo by zero -> null
    if _is_scalar(r):
        if r == 0:
            return ctx.full(None, typ)
        return fn(l, r)
    zero = ctx.true_mask(r == 0)
    safe = r.mask(zero, 1)
    return ctx.set_null(fn(l, safe), zero, typ)


_CMP = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _eval_compare(node: Compare, ctx: _EvalCtx):
    operands = (node.left,) + node.rights
    values = [_as_uint64(ctx.eval(o)) for o in operands]
    types = [ctx.type_of(o) for o in operands]
    result = None
    for i, op in enumerate(node.ops):
        l, r = values[i], values[i + 1]
        lt, rt = types[i], types[i + 1]
        if lt == TIMESTAMP and rt == STRING and isinstance(r, str):
            r = _ts_literal(r, l, ctx.backend)
        elif rt == TIMESTAMP and lt == STRING and isinstance(l, str):
            l = _ts_literal(l, r, ctx.backend)
        if _is_scalar(l) and _is_scalar(r):
            l = ctx.full(l, lt)
        if _is_scalar(l):  # keep the Series on the left for backend compatibility
            flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
            res = _CMP[flipped](r, l)
        else:
            res = _CMP[op](l, r)
        res = ctx.set_null(res, ctx.isna(l, r), BOOL)
        result = res if result is None else (result & res)
    return result


def _eval_inlist(node: InList, ctx: _EvalCtx):
    t = ctx.type_of(node.operand)
    s = ctx.series(ctx.eval(node.operand), t)
    values = list(node.values)
    if t == TIMESTAMP:
        values = [_ts_literal(v, s, ctx.backend) for v in values]
    elif _is_int(t):   # one type for the list: what is not whole or out of the type's range equals no value
        info = np.iinfo(t)
        values = [getattr(np, t)(int(v)) for v in values
                  if float(v).is_integer() and info.min <= int(v) <= info.max]
    elif _is_float(t):
        values = [float(v) for v in values]
    res = s.isin(values)
    if node.negate:
        res = ~res
    return ctx.set_null(res, ctx.isna(s), BOOL)


def _as_uint64(value):
    """An integer literal past int64 as numpy's uint64 (Arrow cannot infer a type for it)."""
    return np.uint64(value) if isinstance(value, int) and not isinstance(value, bool) and value > _INT64_MAX else value


def _eval_isnull(node: IsNull, ctx: _EvalCtx):
    s = ctx.series(ctx.eval(node.operand), ctx.type_of(node.operand))
    return s.notna() if node.negate else s.isna()


def _eval_call(node: Call, ctx: _EvalCtx):
    name = node.name
    typ = ctx.type_of(node)
    args = node.args
    spec = FUNCTIONS[name]

    def arg(i: int):
        return ctx.series(ctx.eval(args[i]), ctx.type_of(args[i]))

    def lit(i: int):
        return args[i].value

    if name == "lower":               # the backend's: one meaning of case and white space on both
        return ctx.backend.text_lower(arg(0))
    if name == "upper":
        return ctx.backend.text_upper(arg(0))
    if name == "strip":
        return ctx.backend.text_strip(arg(0))
    if name == "len":
        return arg(0).str.len()
    if name in _STRING_PREDICATES:
        s = arg(0)
        if name == "contains":
            res = s.str.contains(lit(1), regex=False)
        elif name == "matches":
            # through the backend: the GPU translates RE2 into libcudf's dialect, or runs the
            # pattern on the host where libcudf cannot give RE2's meaning (counted)
            res = ctx.backend.contains_regex(s, lit(1))
        elif name == "startswith":
            res = s.str.startswith(lit(1))
        else:
            res = s.str.endswith(lit(1))
        return ctx.set_null(res, ctx.isna(s), BOOL)
    if name == "replace":
        s, old, new = arg(0), lit(1), lit(2)
        if len(new) > len(old):
            projected = s.str.len() + s.str.count(re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", old)) * (len(new) - len(old))
            s, = _limit_growth(node, ctx, projected, (s,))
        return s.str.replace(old, new, regex=False)
    if name == "substr":
        start, length = lit(1), lit(2)
        return arg(0).str.slice(start, start + length)
    if name in _DATE_PARTS:
        if name == "weekday":
            return ctx.backend.weekday(arg(0))
        return getattr(arg(0).dt, name)
    if name == "abs":
        s = arg(0)
        if _is_int(typ):
            overflow = ctx.refuse(node, s == _INT64_MIN, "overflows int64")
            if overflow is not None:
                return ctx.set_null(s.mask(overflow, 0).abs(), overflow, typ)
        return s.abs()
    if name == "round":
        s = ctx.cast(arg(0), typ)
        ndigits = lit(1) if len(args) > 1 else 0
        if _is_int(typ):
            if ndigits >= 0:
                return s                          # a whole number has no decimals to round
            unit = 10 ** -ndigits                 # the rounded value must stay within int64
            edge = (_INT64_MAX // unit) * unit + unit // 2
            overflow = ctx.refuse(node, (s >= edge) | (s <= -edge), "overflows int64") if edge <= _INT64_MAX else None
            if overflow is not None:
                return ctx.set_null(s.mask(overflow, 0).round(ndigits), overflow, typ)
            return s.round(ndigits)
        if ndigits > 0:    # from 2**53 on a float is whole: scaling it by 10**ndigits could overflow
            whole = ctx.true_mask(s.abs() >= 2.0**53)
            if bool(whole.any()):
                return s.mask(whole, 0).round(ndigits).mask(whole, s)
        return s.round(ndigits)
    if name in ("floor", "ceil"):
        s = ctx.cast(arg(0), typ)
        if _is_int(typ):
            return s
        return np.floor(s) if name == "floor" else np.ceil(s)
    if name == "hash":
        cols = [arg(i) for i in range(len(args))]
        return ctx.backend.hash_columns(cols, seed=node.kwargs.get("seed", 0))
    if name == "is_null":
        return arg(0).isna()
    if name == "not_null":
        return arg(0).notna()
    if name == "coalesce":
        values = [ctx.eval(a) for a in args]
        values = [v for v in values if v is not None]
        if not values:  # pragma: no cover - rejected by infer (type null)
            return ctx.full(None, typ)
        result = ctx.cast(ctx.series(values[0], typ), typ)
        for v in values[1:]:
            if _is_scalar(result) or not bool(result.isna().any()):
                break
            result = result.fillna(ctx.cast(v, typ))
        return result
    if name == "if_else":
        cond = ctx.true_mask(arg(0))
        a, b = ctx.eval(args[1]), ctx.eval(args[2])
        if a is None:
            return ctx.cast(ctx.series(b, typ), typ).mask(cond)
        a = ctx.cast(ctx.series(a, typ), typ)
        if b is None:
            return a.where(cond)
        return a.where(cond, ctx.cast(b, typ))
    raise AssertionError(f"no evaluation rule for {name} ({spec.signature})")  # pragma: no cover


_EVAL = {
    Column: _eval_column,
    Literal: _eval_literal,
    Neg: _eval_neg,
    Not: _eval_not,
    BoolOp: _eval_boolop,
    BinOp: _eval_binop,
    Compare: _eval_compare,
    InList: _eval_inlist,
    IsNull: _eval_isnull,
    Call: _eval_call,
}


# --------------------------------------------------------------------------
# public expression object
# --------------------------------------------------------------------------


class Expr:
    """A parsed, whitelisted expression.  Immutable and safe to share across threads."""

    __slots__ = ("text", "root")

    def __init__(self, text: str, root: Node):
        self.text = text
        self.root = root

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expr) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __getstate__(self):
        return {"text": self.text}

    def __setstate__(self, state):
        parsed = parse_expression(state["text"])
        self.text = parsed.text
        self.root = parsed.root

    def columns(self) -> set[str]:
        """Names of all columns the expression reads."""
        return {n.name for n in _walk(self.root) if isinstance(n, Column)}

    def regexes(self) -> list[str]:
        """The regular expressions the expression runs (matches() patterns)."""
        return [n.args[1].value for n in _walk(self.root) if isinstance(n, Call) and n.name == "matches"]

    def functions(self) -> set[str]:
        """Names of all functions the expression calls."""
        return {n.name for n in _walk(self.root) if isinstance(n, Call)}

    def infer_type(self, schema: Mapping[str, str]) -> str:
        """Result type (one of TYPE_NAMES) given column name -> type name; raises ExprTypeError."""
        env = _TypeEnv(self, schema)
        t = env.type_of(self.root)
        if t == NULL:
            env.fail(self.root, "the expression is always null, so its type cannot be inferred")
        return t

    def check_predicate(self, schema: Mapping[str, str]) -> None:
        """Raise ExprTypeError unless the expression is a bool predicate (for ``filter``)."""
        t = self.infer_type(schema)
        if t != BOOL:
            raise ExprTypeError(
                f"type error in expression {_quote(self.text)}: a filter must be a bool predicate, "
                f"but the expression is {t} (did you forget a comparison such as '== ...'?)",
                expression=self.text,
                col=0,
            )

    def _env_for(self, df) -> _TypeEnv:
        schema: dict[str, str] = {}
        present = set(df.columns)
        for name in self.columns():
            if name in present:
                t = _dtype_to_type(df[name].dtype)
                if t is None:
                    raise ExprTypeError(
                        f"type error in expression {_quote(self.text)}: column '{name}' has dtype "
                        f"{df[name].dtype}, which expressions cannot use",
                        expression=self.text,
                        col=0,
                    )
                schema[name] = t
        return _TypeEnv(self, schema, names=list(df.columns))

    def may_refuse(self) -> bool:
        """Whether some record could get no value (int64 overflow, a value grown too long)."""
        return any(isinstance(n, (BinOp, Neg)) or (isinstance(n, Call) and n.name in ("abs", "replace", "round"))
                   for n in _walk(self.root))

    def evaluate(self, df, backend=None, refusals: Refusals | None = None):
        """Evaluate on a pandas/cuDF DataFrame; returns a Series aligned with ``df.index``.

        ``backend``: the frame's backend (gpuetl.backends), the CPU backend when None.
        """
        backend = backend if backend is not None else _cpu_backend()
        env = self._env_for(df)
        typ = env.type_of(self.root)
        if typ == NULL:
            env.fail(self.root, "the expression is always null, so its type cannot be inferred")
        ctx = _EvalCtx(df, backend, env, refusals)
        return ctx.finalize(ctx.eval(self.root), typ)

    def evaluate_predicate(self, df, backend=None, refusals: Refusals | None = None):
        """Evaluate a bool expression as a filter mask: plain bool Series, null -> False."""
        backend = backend if backend is not None else _cpu_backend()
        env = self._env_for(df)
        t = env.type_of(self.root)
        if t != BOOL:
            raise ExprTypeError(
                f"type error in expression {_quote(self.text)}: a filter must be a bool predicate, "
                f"but the expression is {t}",
                expression=self.text,
                col=0,
            )
        ctx = _EvalCtx(df, backend, env, refusals)
        result = ctx.series(ctx.eval(self.root), BOOL)
        return ctx.true_mask(result)
