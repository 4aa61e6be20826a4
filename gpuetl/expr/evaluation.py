"""Evaluation: the tree walked with Series operations that pandas and cuDF share, through the
backend where they differ; nothing is `eval`'d."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from .limits import INT64_MAX, INT64_MIN, MAX_COLUMN_CHARS, MAX_VALUE_CHARS
from .errors import ExprValueError, Refusals, quote_text, value_error
from .typenames import BOOL, NULL, STRING, TIMESTAMP, dtype_to_type, is_float, is_int
from .functions import DATE_PARTS, FUNCTIONS, STRING_PREDICATES
from .nodes import BinOp, BoolOp, Call, Column, Compare, InList, IsNull, Literal, Neg, Node, Not
from .inference import TypeEnv


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, str, pd.Timestamp, np.generic))


class EvalContext:
    def __init__(self, df, backend, env: TypeEnv, refusals: Refusals | None = None):
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
            dtype = self.backend.nullable_dtype(typ) if typ == BOOL or is_int(typ) else (
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
        if dtype_to_type(s.dtype) == typ:
            return s
        if (typ == BOOL or is_int(typ)) and bool(s.isna().any()):
            return s.astype(self.backend.nullable_dtype(typ))
        return s.astype(typ)

    def set_null(self, s, mask, typ: str):
        """Set ``s`` to null where the plain-bool Series ``mask`` is true."""
        if mask is None:
            return s
        if (typ == BOOL or is_int(typ)) and isinstance(s.dtype, np.dtype) and s.dtype.kind in "biu":
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


def _eval_column(node: Column, ctx: EvalContext):
    return ctx.df[node.name]


def _eval_literal(node: Literal, ctx: EvalContext):
    return node.value


def _eval_neg(node: Neg, ctx: EvalContext):
    typ = ctx.type_of(node)
    s = ctx.cast(ctx.series(ctx.eval(node.operand), ctx.type_of(node.operand)), typ)
    if is_int(typ):
        overflow = ctx.refuse(node, s == INT64_MIN, "overflows int64")
        if overflow is not None:
            return ctx.set_null(-s.mask(overflow, 0), overflow, typ)
    return -s


def _length(v):
    return len(v) if isinstance(v, str) else v.str.len()


def _limit_growth(node: Node, ctx: EvalContext, projected, inputs: tuple):
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
        raise ExprValueError(f"expression {quote_text(ctx.env.expr.text)}: `{node.src}` would make {total} characters "
                             f"in one partition; the limit is {MAX_COLUMN_CHARS}",
                             hint="lower source.blocksize, or make the expression grow its values less")
    return inputs


def _checked(node: BinOp, ctx: EvalContext, l, r):
    """int64 +, -, * with overflow found before it happens: (l, r, overflow mask or None),
    the refused records' operands replaced by 0 so the operation itself cannot overflow."""
    l, r = ctx.series(l, "int64"), ctx.series(r, "int64")
    if node.op == "+":
        over = ((r > 0) & (l > INT64_MAX - r.clip(lower=0))) | ((r < 0) & (l < INT64_MIN - r.clip(upper=0)))
    elif node.op == "-":
        over = ((r < 0) & (l > INT64_MAX + r.clip(upper=0))) | ((r > 0) & (l < INT64_MIN + r.clip(lower=0)))
    else:   # '*': a float product far from the limit decides; the few near it are checked exactly
        near = ctx.true_mask((l.astype("float64") * r.astype("float64")).abs() >= 2.0**62)
        over = near.copy()
        if bool(near.any()):
            exact = [a is not None and b is not None and not (pd.isna(a) or pd.isna(b))
                     and not INT64_MIN <= int(a) * int(b) <= INT64_MAX
                     for a, b in zip(ctx.backend.to_pylist(l[near]), ctx.backend.to_pylist(r[near]))]
            over[near] = exact
    overflow = ctx.refuse(node, over, "overflows int64")
    if overflow is not None:
        l, r = l.mask(overflow, 0), r.mask(overflow, 0)
    return l, r, overflow


def _eval_not(node: Not, ctx: EvalContext):
    s = ctx.series(ctx.eval(node.operand), BOOL)
    return ~s


def _eval_boolop(node: BoolOp, ctx: EvalContext):
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


def _eval_binop(node: BinOp, ctx: EvalContext):
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
    if is_int(typ) and node.op in ("+", "-", "*"):
        l, r, overflow = _checked(node, ctx, l, r)
        return ctx.set_null(fn(l, r), overflow, typ)
    if is_int(typ) and node.op == "//" and (not _is_scalar(r) or r == -1):   # MIN // -1
        overflow = ctx.refuse(node, (l == INT64_MIN) & (r == -1), "overflows int64")
        if overflow is not None:
            l = ctx.series(l, typ).mask(overflow, 0)
            return ctx.set_null(_eval_division(fn, l, r, ctx, typ), overflow, typ)
    return _eval_division(fn, l, r, ctx, typ)


def _eval_division(fn, l, r, ctx: EvalContext, typ: str):
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


def _eval_compare(node: Compare, ctx: EvalContext):
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


def _eval_inlist(node: InList, ctx: EvalContext):
    t = ctx.type_of(node.operand)
    s = ctx.series(ctx.eval(node.operand), t)
    values = list(node.values)
    if t == TIMESTAMP:
        values = [_ts_literal(v, s, ctx.backend) for v in values]
    elif is_int(t):   # one type for the list: what is not whole or out of the type's range equals no value
        info = np.iinfo(t)
        values = [getattr(np, t)(int(v)) for v in values
                  if float(v).is_integer() and info.min <= int(v) <= info.max]
    elif is_float(t):
        values = [float(v) for v in values]
    res = s.isin(values)
    if node.negate:
        res = ~res
    return ctx.set_null(res, ctx.isna(s), BOOL)


def _as_uint64(value):
    """An integer literal past int64 as numpy's uint64 (Arrow cannot infer a type for it)."""
    return np.uint64(value) if isinstance(value, int) and not isinstance(value, bool) and value > INT64_MAX else value


def _eval_isnull(node: IsNull, ctx: EvalContext):
    s = ctx.series(ctx.eval(node.operand), ctx.type_of(node.operand))
    return s.notna() if node.negate else s.isna()


def _eval_call(node: Call, ctx: EvalContext):
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
    if name in STRING_PREDICATES:
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
    if name in DATE_PARTS:
        if name == "weekday":
            return ctx.backend.weekday(arg(0))
        return getattr(arg(0).dt, name)
    if name == "abs":
        s = arg(0)
        if is_int(typ):
            overflow = ctx.refuse(node, s == INT64_MIN, "overflows int64")
            if overflow is not None:
                return ctx.set_null(s.mask(overflow, 0).abs(), overflow, typ)
        return s.abs()
    if name == "round":
        s = ctx.cast(arg(0), typ)
        ndigits = lit(1) if len(args) > 1 else 0
        if is_int(typ):
            if ndigits >= 0:
                return s                          # a whole number has no decimals to round
            unit = 10 ** -ndigits                 # the rounded value must stay within int64
            edge = (INT64_MAX // unit) * unit + unit // 2
            overflow = ctx.refuse(node, (s >= edge) | (s <= -edge), "overflows int64") if edge <= INT64_MAX else None
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
        if is_int(typ):
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
