"""Type inference at plan time: the type of each node from the input schema, or an ExprTypeError
that says where and why."""

from __future__ import annotations

import difflib
from typing import Any, Mapping

from .limits import INT64_MAX
from .errors import ExprTypeError, name_hint, quote_text
from .typenames import BOOL, NULL, STRING, TIMESTAMP, common_type, is_float, is_int, is_num, normalize_type, valid_timestamp_literal
from .functions import DATE_PARTS, STRING_PREDICATES, STRING_UNARY
from .nodes import BinOp, BoolOp, Call, Column, Compare, InList, IsNull, Literal, Neg, Node, Not
from .parser import quote_name


class TypeEnv:
    def __init__(self, expr, schema: Mapping[str, Any], names=None):      # expr: the Expr (expression.py)
        self.expr = expr
        self.schema = schema
        self.names = list(schema) if names is None else list(names)
        self.cache: dict[int, str] = {}

    def fail(self, node: Node, msg: str):
        raise ExprTypeError(
            f"type error in expression {quote_text(self.expr.text)} at column {node.col}: {msg}",
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


def _infer_column(node: Column, env: TypeEnv) -> str:
    if node.name not in env.schema:
        advice = name_hint(node.name, env.names)
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


def _infer_literal(node: Literal, env: TypeEnv) -> str:
    v = node.value
    if v is None:
        return NULL
    if isinstance(v, bool):
        return BOOL
    if isinstance(v, int):
        return "uint64" if v > INT64_MAX else "int64"
    if isinstance(v, float):
        return "float64"
    return STRING


def _infer_neg(node: Neg, env: TypeEnv) -> str:
    t = env.type_of(node.operand)
    if not is_num(t):
        env.fail(node, f"unary '-' needs a number, but {_describe(node.operand, t)} is not numeric")
    return "float64" if is_float(t) else "int64"


def _infer_not(node: Not, env: TypeEnv) -> str:
    t = env.type_of(node.operand)
    if t != BOOL:
        env.fail(node, f"'not' needs a bool operand, but {_describe(node.operand, t)} is {t}")
    return BOOL


def _infer_boolop(node: BoolOp, env: TypeEnv) -> str:
    for v in node.values:
        t = env.type_of(v)
        if t != BOOL:
            env.fail(v, f"'{node.op}' needs bool operands, but {_describe(v, t)} is {t}")
    return BOOL


def _infer_binop(node: BinOp, env: TypeEnv) -> str:
    lt, rt = env.type_of(node.left), env.type_of(node.right)
    if node.op == "+" and lt == STRING and rt == STRING:
        return STRING
    if not (is_num(lt) and is_num(rt)):
        bad, bt = (node.left, lt) if not is_num(lt) else (node.right, rt)
        extra = " ('+' also concatenates two strings)" if node.op == "+" else ""
        env.fail(node, f"'{node.op}' needs numbers, but {_describe(bad, bt)} is not numeric{extra}")
    if node.op == "/" or is_float(lt) or is_float(rt):
        return "float64"
    for side in (node.left, node.right):
        if _past_int64(side):
            env.fail(side, f"the integer {side.src} does not fit in int64, the type of integer arithmetic")
    return "int64"


def _comparable(lnode: Node, lt: str, rnode: Node, rt: str) -> bool:
    if is_num(lt) and is_num(rt):
        return True
    if lt == rt and lt in (STRING, BOOL, TIMESTAMP):
        return True
    for a, at, b, bt in ((lnode, lt, rnode, rt), (rnode, rt, lnode, lt)):
        if at == TIMESTAMP and isinstance(b, Literal) and isinstance(b.value, str):
            return True
    return False


def _infer_compare(node: Compare, env: TypeEnv) -> str:
    operands = (node.left,) + node.rights
    for op, l, r in zip(node.ops, operands, operands[1:]):
        lt, rt = env.type_of(l), env.type_of(r)
        if not _comparable(l, lt, r, rt):
            env.fail(node, f"'{op}' compares {_describe(l, lt)} with {_describe(r, rt)}")
        for a, at, b in ((l, lt, r), (r, rt, l)):
            if is_int(at) and at != "uint64" and _past_int64(b):
                env.fail(b, f"the integer {b.src} does not fit in {_describe(a, at)}'s type, int64")
            if at == TIMESTAMP and isinstance(b, Literal) and isinstance(b.value, str):
                if not valid_timestamp_literal(b.value):
                    env.fail(b, f"{b.src} is not a valid timestamp to compare with {_describe(a, at)}")
    return BOOL


def _infer_inlist(node: InList, env: TypeEnv) -> str:
    t = env.type_of(node.operand)
    for v in node.values:
        if is_num(t):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        elif t == BOOL:
            ok = isinstance(v, bool)
        elif t == STRING:
            ok = isinstance(v, str)
        elif t == TIMESTAMP:
            ok = isinstance(v, str) and valid_timestamp_literal(v)
        else:  # pragma: no cover
            ok = False
        if ok and is_int(t) and t != "uint64" and isinstance(v, int) and v > INT64_MAX:
            env.fail(node, f"the list element {v} does not fit in {_describe(node.operand, t)}'s type, int64")
        if not ok:
            word = "not in" if node.negate else "in"
            env.fail(node, f"'{word}' compares {_describe(node.operand, t)} with the list element {v!r}")
    return BOOL


def _past_int64(node: Node) -> bool:
    return isinstance(node, Literal) and isinstance(node.value, int) and not isinstance(node.value, bool) \
        and node.value > INT64_MAX


def _infer_isnull(node: IsNull, env: TypeEnv) -> str:
    env.type_of(node.operand)
    return BOOL


def _infer_call(node: Call, env: TypeEnv) -> str:
    name = node.name
    args = node.args
    ts = [env.type_of(a) for a in args]

    def need(i: int, ok: bool, what: str):
        if not ok:
            env.fail(args[i], f"{name}() needs {what}, but {_describe(args[i], ts[i])} is {ts[i]}")

    if name in STRING_UNARY or name in STRING_PREDICATES or name in ("len", "replace", "substr"):
        need(0, ts[0] == STRING, "a string")
        if name in STRING_PREDICATES:
            return BOOL
        return "int64" if name == "len" else STRING
    if name in DATE_PARTS:
        need(0, ts[0] == TIMESTAMP, "a timestamp")
        return "int32"
    if name == "abs":
        need(0, is_num(ts[0]), "a number")
        return ts[0]
    if name in ("round", "floor", "ceil"):
        need(0, is_num(ts[0]), "a number")
        return "float64" if is_float(ts[0]) else "int64"
    if name == "hash":
        return "uint64"
    if name in ("is_null", "not_null"):
        return BOOL
    if name == "coalesce":
        result = NULL
        for i, t in enumerate(ts):
            c = common_type(result, t)
            if c is None:
                env.fail(args[i], f"coalesce() arguments must share a type, but {_describe(args[i], t)} is {t} "
                                  f"while earlier arguments are {result}")
            result = c
        return result
    if name == "if_else":
        need(0, ts[0] == BOOL, "a bool condition")
        c = common_type(ts[1], ts[2])
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
