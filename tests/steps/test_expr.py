"""Tests for the safe expression language (gpuetl.expr), evaluated on the CPU backend's own
frames (Arrow-backed pandas columns) with the CPU backend."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

try:
    import gpuetl.expr  # noqa: F401
except ImportError:  # repo root not on sys.path (tests/steps has no __init__.py)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuetl.backends.cpu import CpuBackend  # noqa: E402
from gpuetl.types import ARROW_TYPES  # noqa: E402
from gpuetl.expr import (  # noqa: E402
    FUNCTIONS,
    TYPE_NAMES,
    Expr,
    ExprError,
    ExprTypeError,
    parse_expression,
)


class CountingBackend(CpuBackend):
    """The CPU backend, counting its hash_columns calls."""

    def __init__(self):
        super().__init__()
        self.hash_calls = []

    def hash_columns(self, columns, seed=0):
        self.hash_calls.append((len(columns), seed))
        return super().hash_columns(columns, seed=seed)




@pytest.fixture
def backend():
    return CountingBackend()


def frame(columns: dict, types: dict):
    """A frame as the CPU backend makes them: Arrow-backed (pd.ArrowDtype) columns."""
    return CpuBackend().from_arrow(pa.table({name: pa.array(values, ARROW_TYPES[types[name]])
                                             for name, values in columns.items()}))


@pytest.fixture
def df():
    return frame(
        {
            "status": [200, 404, 500, None, 301],
            "code": [1, 2, 3, 0, -7],
            "method": ["GET", "post", None, "PUT", " Get "],
            "path": ["/a/b", "/static/x.png", None, "/api/v1/", "/A/B"],
            "lat": [1.5, 2.5, None, -3.25, 0.0],
            "ok": [True, False, None, True, False],
            "time": pd.to_datetime(["2024-01-01 05:06", "2024-03-02 23:59", None, "2024-12-31 00:00",
                                    "2023-07-16 12:30"], utc=True),
        },
        {"status": "int16", "code": "int32", "method": "string", "path": "string", "lat": "float64",
         "ok": "bool", "time": "timestamp"},
    )


SCHEMA = {
    "status": "int16",
    "code": "int32",
    "method": "string",
    "path": "string",
    "lat": "float64",
    "ok": "bool",
    "time": "timestamp",
    "size": "uint64",
    "score": "float32",
}


CPU = CpuBackend()


def ev(text, df, backend=None):
    return parse_expression(text).evaluate(df, backend=backend or CountingBackend())


def type_of(series) -> str:
    """gpuetl's name for a result's type: Arrow-backed columns by their Arrow type."""
    if isinstance(series.dtype, pd.ArrowDtype):
        return next(name for name, t in ARROW_TYPES.items() if t == series.dtype.pyarrow_dtype)
    return str(series.dtype).lower()


def values(series):
    """tolist() with every kind of null normalised to None."""
    return [None if (v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and np.isnan(v))) else v
            for v in series.tolist()]


# ---------------------------------------------------------------------------
# parsing & public API
# ---------------------------------------------------------------------------


def test_parse_returns_expr_and_columns():
    e = parse_expression("status >= 200 and method in ['GET', 'POST'] or len(path) > 3")
    assert isinstance(e, Expr)
    assert e.columns() == {"status", "method", "path"}
    assert e.functions() == {"len"}
    assert str(e) == "status >= 200 and method in ['GET', 'POST'] or len(path) > 3"


def test_multiline_and_whitespace_is_accepted():
    e = parse_expression("  status >= 200\n  and status < 300\n")
    assert e.infer_type(SCHEMA) == "bool"


def test_expr_pickles_for_dask(df):
    e = parse_expression("hour(time) + 1")
    e2 = pickle.loads(pickle.dumps(e))
    assert e2 == e
    assert values(e2.evaluate(df, CPU)) == [6, 24, None, 1, 13]


def test_functions_table_is_documented():
    expected = {
        "lower", "upper", "strip", "len", "contains", "startswith", "endswith", "matches", "replace", "substr",
        "coalesce", "if_else", "year", "month", "day", "hour", "minute", "weekday", "abs", "round", "floor",
        "ceil", "hash", "is_null", "not_null",
    }
    assert set(FUNCTIONS) == expected
    for name, spec in FUNCTIONS.items():
        signature, doc, example = spec[:3]
        assert signature.startswith(name + "(")
        assert doc
        # every documented example parses, and uses the function it documents
        assert name in parse_expression(example).functions()
    assert FUNCTIONS["lower"][0] == "lower(s)" and FUNCTIONS["lower"][1].startswith("lowercase a string")
    assert FUNCTIONS["lower"][2] == "lower(method) == 'get'"


# ---------------------------------------------------------------------------
# evaluation: operators
# ---------------------------------------------------------------------------


def test_comparison_and_in(df, backend):
    r = ev("status >= 200 and method in ['GET', 'post']", df, backend)
    assert values(r) == [True, True, None, False, False]
    assert parse_expression("status >= 200 and method in ['GET', 'post']").evaluate_predicate(df, CPU).tolist() == [
        True, True, False, False, False,
    ]


def test_chained_comparison(df):
    assert values(ev("200 <= status < 500", df)) == [True, True, False, None, True]
    assert values(ev("0 < code <= 2", df)) == [True, True, False, False, False]
    assert values(ev("-10 < code < 0 < 1", df)) == [False, False, False, False, True]


def test_literal_on_left(df):
    assert values(ev("1 < code", df)) == [False, True, True, False, False]
    assert values(ev("2 == code", df)) == [False, True, False, False, False]


def test_not_in_with_nulls(df):
    r = parse_expression("status not in [200, 500]").evaluate_predicate(df, CPU)
    # null status -> null -> filtered out (SQL semantics)
    assert r.tolist() == [False, True, False, False, True]
    assert r.dtype == bool


def test_in_negative_numbers_and_tuples(df):
    assert values(ev("code in (-7, 3)", df)) == [False, False, True, False, True]


def test_null_checks(df):
    assert ev("status is None", df).tolist() == [False, False, False, True, False]
    assert ev("status is not None", df).tolist() == [True, True, True, False, True]
    assert ev("is_null(path)", df).tolist() == [False, False, True, False, False]
    assert ev("not_null(path)", df).tolist() == [True, True, False, True, True]
    assert ev("is_null(time)", df).tolist() == [False, False, True, False, False]


def test_null_comparisons_are_false_in_filter(df):
    p = parse_expression("status != 200").evaluate_predicate(df, CPU)
    assert p.tolist() == [False, True, True, False, True]
    p = parse_expression("lat != 1.5").evaluate_predicate(df, CPU)
    assert p.tolist() == [False, True, False, True, True]
    p = parse_expression("path != '/a/b'").evaluate_predicate(df, CPU)  # default str dtype, NaN nulls
    assert p.tolist() == [False, True, False, True, True]
    p = parse_expression("not (status > 300)").evaluate_predicate(df, CPU)
    assert p.tolist() == [True, False, False, False, False]


def test_bool_ops(df):
    assert values(ev("ok and code > 0", df)) == [True, False, None, False, False]
    assert values(ev("ok or code > 2", df)) == [True, False, True, True, False]
    assert values(ev("not ok", df)) == [False, True, None, False, True]


def test_arithmetic_and_null_propagation(df):
    r = ev("status + code", df)
    assert r.dtype == "Int64"
    assert values(r) == [201, 406, 503, None, 294]
    assert values(ev("lat * 2", df)) == [3.0, 5.0, None, -6.5, 0.0]
    assert values(ev("code - 1", df)) == [0, 1, 2, -1, -8]
    assert values(ev("-code", df)) == [-1, -2, -3, 0, 7]
    assert values(ev("code % 2", df)) == [1, 0, 1, 0, 1]
    assert values(ev("code // 2", df)) == [0, 1, 1, 0, -4]
    r = ev("code / 2", df)
    assert r.dtype == "float64"
    assert values(r) == [0.5, 1.0, 1.5, 0.0, -3.5]


def test_division_by_zero_is_null(df):
    assert values(ev("10 // code", df)) == [10, 5, 3, None, -2]
    assert values(ev("10 / code", df)) == [10.0, 5.0, 10 / 3, None, 10 / -7]
    assert values(ev("code % 0", df)) == [None] * 5
    assert values(ev("lat / 0", df)) == [None] * 5


def test_constant_expressions_broadcast(df):
    r = ev("1 + 2", df)
    assert len(r) == len(df) and r.tolist() == [3] * 5
    assert r.index.equals(df.index)
    assert ev("True", df).tolist() == [True] * 5
    assert ev("upper(strip(' x '))", df).tolist() == ["X"] * 5


def test_string_concatenation(df):
    assert values(ev("path + '!'", df)) == ["/a/b!", "/static/x.png!", None, "/api/v1/!", "/A/B!"]


def test_timestamp_compared_with_string_literal(df):
    assert values(ev("time >= '2024-02-01'", df)) == [False, True, None, True, False]
    assert values(ev("time in ['2024-01-01 05:06:00']", df)) == [True, False, None, False, False]


# ---------------------------------------------------------------------------
# evaluation: functions
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("lower(method)", ["get", "post", None, "put", " get "]),
        ("upper(path)", ["/A/B", "/STATIC/X.PNG", None, "/API/V1/", "/A/B"]),
        ("strip(method)", ["GET", "post", None, "PUT", "Get"]),
        ("len(path)", [4, 13, None, 8, 4]),
        ("len(method)", [3, 4, None, 3, 5]),
        ("contains(path, '/a')", [True, False, None, True, False]),
        ("contains(path, '.')", [False, True, None, False, False]),  # literal, not regex
        ("startswith(path, '/static')", [False, True, None, False, False]),
        ("endswith(path, '.png')", [False, True, None, False, False]),
        ("matches(path, '^/[a-z]+/v[0-9]+/$')", [False, False, None, True, False]),
        ("matches(method, '(?i)get')", [True, False, None, False, True]),
        ("replace(path, '/', '_')", ["_a_b", "_static_x.png", None, "_api_v1_", "_A_B"]),
        ("replace(path, '.', '!')", ["/a/b", "/static/x!png", None, "/api/v1/", "/A/B"]),
        ("substr(path, 1, 3)", ["a/b", "sta", None, "api", "A/B"]),
        ("substr(method, 0, 1)", ["G", "p", None, "P", " "]),
        ("coalesce(path, '-')", ["/a/b", "/static/x.png", "-", "/api/v1/", "/A/B"]),
        ("coalesce(status, code)", [200, 404, 500, 0, 301]),
        ("coalesce(lat, None, 9)", [1.5, 2.5, 9.0, -3.25, 0.0]),
        ("if_else(status >= 500, 'err', 'ok')", ["ok", "ok", "err", "ok", "ok"]),
        ("if_else(code > 1, None, lat)", [1.5, None, None, -3.25, 0.0]),
        ("if_else(code > 1, code, None)", [None, 2, 3, None, None]),
        ("year(time)", [2024, 2024, None, 2024, 2023]),
        ("month(time)", [1, 3, None, 12, 7]),
        ("day(time)", [1, 2, None, 31, 16]),
        ("hour(time)", [5, 23, None, 0, 12]),
        ("minute(time)", [6, 59, None, 0, 30]),
        ("weekday(time)", [0, 5, None, 1, 6]),  # Monday=0
        ("abs(lat)", [1.5, 2.5, None, 3.25, 0.0]),
        ("abs(code)", [1, 2, 3, 0, 7]),
        ("round(lat)", [2.0, 2.0, None, -3.0, 0.0]),  # half to even
        ("round(lat, 1)", [1.5, 2.5, None, -3.2, 0.0]),
        ("round(lat, ndigits=1)", [1.5, 2.5, None, -3.2, 0.0]),
        ("round(code)", [1, 2, 3, 0, -7]),
        ("floor(lat)", [1.0, 2.0, None, -4.0, 0.0]),
        ("ceil(lat)", [2.0, 3.0, None, -3.0, 0.0]),
        ("ceil(code / 2)", [1.0, 1.0, 2.0, 0.0, -3.0]),
    ],
)
def test_functions(df, backend, text, expected):
    e = parse_expression(text)
    result = e.evaluate(df, backend=backend)
    assert len(result) == len(df)
    assert values(result) == expected
    # the evaluated dtype agrees with the plan-time type
    t = e.infer_type(SCHEMA)
    if t == "string":
        assert pd.api.types.is_string_dtype(result.dtype) or result.dtype == object
    else:
        assert type_of(result) in (t, "boolean" if t == "bool" else t)


def test_hash_uses_backend(df, backend):
    r = parse_expression("hash(method, code, seed=7)").evaluate(df, backend=backend)
    assert type_of(r) == "uint64"
    assert backend.hash_calls == [(2, 7)]
    assert r.nunique() == len(df)
    again = parse_expression("hash(method, code, seed=7)").evaluate(df, backend=CountingBackend())
    assert r.tolist() == again.tolist()
    other_seed = parse_expression("hash(method, code, seed=8)").evaluate(df, backend=CountingBackend())
    assert r.tolist() != other_seed.tolist()
    bucket = parse_expression("hash(path) % 10 < 3").evaluate_predicate(df, backend=backend)
    assert bucket.dtype == bool and len(bucket) == len(df)


def test_hash_on_the_cpu_backend_is_its_hash64(df):
    r = parse_expression("hash(path)").evaluate(df, CPU)
    assert type_of(r) == "uint64" and len(r) == len(df)
    assert r.tolist() == CpuBackend().hash64([df["path"]], 0).tolist()


@pytest.mark.parametrize("text, columns, seed", [
    ("hash(path)", ["path"], 0),
    ("hash(method, code, seed=7)", ["method", "code"], 7),
    ("hash(status, lat, ok, time, seed=18446744073709551615)", ["status", "lat", "ok", "time"], 2**64 - 1),
])
def test_hash_equals_the_backends_hash64(df, text, columns, seed):
    """hash() is the backends' hash64 (the same on every backend and version), nulls included."""
    cpu = CpuBackend()
    r = parse_expression(text).evaluate(df, backend=cpu)
    assert r.tolist() == [int(v) for v in cpu.hash64([df[c] for c in columns], seed)]


def test_works_on_plain_numpy_and_str_dtypes():
    d = pd.DataFrame({"a": [1, 2, 3], "s": ["x", "yy", "zzz"]})
    assert parse_expression("a > 1 and len(s) < 3").evaluate_predicate(d, CPU).tolist() == [False, True, False]
    assert parse_expression("a * 2").evaluate(d, CPU).tolist() == [2, 4, 6]


def test_evaluate_non_default_index(df):
    d = df.set_index(pd.Index([10, 20, 30, 40, 50]))
    r = ev("if_else(code > 1, 'big', coalesce(path, '?'))", d)
    assert r.index.equals(d.index)
    assert r.tolist() == ["/a/b", "big", "big", "/api/v1/", "/A/B"]


# ---------------------------------------------------------------------------
# type inference
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("status > 1", "bool"),
        ("status + code", "int64"),
        ("status + 1", "int64"),
        ("size + 1", "int64"),
        ("status + lat", "float64"),
        ("score * 2", "float64"),
        ("code / 2", "float64"),
        ("code // 2", "int64"),
        ("-status", "int64"),
        ("len(path)", "int64"),
        ("hash(path, status)", "uint64"),
        ("year(time)", "int32"),
        ("weekday(time)", "int32"),
        ("round(lat, 2)", "float64"),
        ("floor(score)", "float64"),
        ("ceil(code)", "int64"),
        ("abs(status)", "int16"),
        ("lower(path)", "string"),
        ("path + method", "string"),
        ("coalesce(path, method, 'x')", "string"),
        ("coalesce(status, 0)", "int64"),
        ("coalesce(status, lat)", "float64"),
        ("coalesce(status, None)", "int16"),
        ("if_else(ok, status, code)", "int64"),
        ("if_else(ok, 'a', None)", "string"),
        ("if_else(ok, time, None)", "timestamp"),
        ("matches(path, 'x+')", "bool"),
        ("time < '2024-01-01T00:00:00Z'", "bool"),
        ("status is None", "bool"),
        ("ok == True", "bool"),
        ("1.5", "float64"),
    ],
)
def test_infer_type(text, expected):
    t = parse_expression(text).infer_type(SCHEMA)
    assert t == expected
    assert t in TYPE_NAMES


def test_type_error_compares_int_with_string():
    with pytest.raises(ExprTypeError) as ei:
        parse_expression("status > 'x'").infer_type({"status": "int16"})
    msg = str(ei.value)
    assert "compares int16 column 'status' with a string" in msg
    assert "status > 'x'" in msg


def test_unknown_column_has_hint():
    with pytest.raises(ExprTypeError) as ei:
        parse_expression("stauts >= 200").infer_type(SCHEMA)
    msg = str(ei.value)
    assert "'stauts'" in msg and "did you mean 'status'" in msg and "stauts >= 200" in msg


def test_unknown_column_at_evaluate(df):
    with pytest.raises(ExprTypeError, match="unknown column 'pth'.*did you mean 'path'"):
        parse_expression("len(pth)").evaluate(df, CPU)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("lower(status)", "lower() needs a string, but int16 column 'status'"),
        ("len(lat)", "len() needs a string"),
        ("abs(path)", "abs() needs a number, but string column 'path'"),
        ("round(method)", "round() needs a number"),
        ("hour(path)", "hour() needs a timestamp, but string column 'path'"),
        ("year(status)", "year() needs a timestamp"),
        ("status and ok", "'and' needs bool operands, but int16 column 'status'"),
        ("ok or path", "'or' needs bool operands"),
        ("not status", "'not' needs a bool operand"),
        ("path - 1", "'-' needs numbers"),
        ("path + 1", "'+' needs numbers"),
        ("-path", "unary '-' needs a number"),
        ("ok + 1", "'+' needs numbers"),
        ("path == 1", "compares string column 'path' with an integer literal 1"),
        ("ok == 1", "compares bool column 'ok' with an integer literal 1"),
        ("time > 5", "compares timestamp column 'time'"),
        ("time > 'yesterday-ish'", "not a valid timestamp"),
        ("status in ['a']", "'in' compares int16 column 'status' with the list element 'a'"),
        ("path not in [1, 2]", "'not in' compares string column 'path'"),
        ("coalesce(path, 1)", "coalesce() arguments must share a type"),
        ("if_else(ok, 'a', 1)", "if_else() branches must share a type"),
        ("if_else(status, 1, 2)", "if_else() needs a bool condition"),
        ("coalesce(None, None)", "always null"),
    ],
)
def test_type_errors(text, fragment):
    with pytest.raises(ExprTypeError) as ei:
        parse_expression(text).infer_type(SCHEMA)
    assert fragment in str(ei.value)
    assert repr(text) in str(ei.value) or text in str(ei.value)


def test_check_predicate():
    parse_expression("status > 1").check_predicate(SCHEMA)
    parse_expression("ok").check_predicate(SCHEMA)
    with pytest.raises(ExprTypeError, match="must be a bool predicate.*int16"):
        parse_expression("status").check_predicate(SCHEMA)
    with pytest.raises(ExprTypeError, match="bool predicate"):
        parse_expression("lower(path)").check_predicate(SCHEMA)


def test_evaluate_predicate_requires_bool(df):
    with pytest.raises(ExprTypeError):
        parse_expression("code + 1").evaluate_predicate(df, CPU)


def test_unsupported_schema_type():
    with pytest.raises(ExprTypeError, match="cannot use"):
        parse_expression("x > 1").infer_type({"x": "list<int64>"})


def test_schema_aliases():
    assert parse_expression("len(s)").infer_type({"s": "str"}) == "int64"
    assert parse_expression("hour(t)").infer_type({"t": "timestamp[us, tz=UTC]"}) == "int32"


# ---------------------------------------------------------------------------
# rejected syntax
# ---------------------------------------------------------------------------

HOSTILE = [
    "__import__('os')",
    "().__class__.__bases__",
    "status.__class__",
    "a.b.c",
    "x[0]",
    "lambda: 1",
    "[x for x in y]",
    "f'{x}'",
    "open('/etc/passwd')",
    "(x := 1)",
    "(" * 10000 + "1" + ")" * 10000,
    "-" * 10000 + "1",
    "'" + "a" * 1_000_000 + "'",
    "getattr(x, 'y')",
    "eval('1')",
    "exec('1')",
    "compile('1', 'f', 'eval')",
    "__builtins__",
    "x.__dict__",
    "lower(x).__class__",
    "{**x}",
    "lower(*x)",
    "round(x, **k)",
    "lower(x)(y)",
    "(lambda x: x)(1)",
    "x if y else z",
    "{1: 2}",
    "{1, 2}",
    "[1, 2]",
    "(1, 2)",
    "x ** 2",
    "x & y",
    "x | y",
    "~x",
    "+x",
    "b'abc'",
    "1j",
    "...",
    "x in y",
    "x is y",
    "x == None",
    "None",
    "x + None",
    "lower(None)",
    "x < y in [1]",
    "x in [y]",
    "x in [None]",
    "99999999999999999999999",
    "import os",
    "x = 1",
    "x; y",
    "",
    "   ",
    "\x00",
    "\ud800",
    "(" * 3000 + "1" + ")" * 3000,
    "-" * 9000 + "1",
    "not " * 2400 + "x",
    "[" * 4000 + "]" * 4000,
    "lower(" * 100 + "x" + ")" * 100,
    "+".join(["x"] * 600),
    " and ".join(["x"] * 1200),
    "'" + "a" * 1001 + "'",
    "contains(x, y)",
    "matches(x, '(')",
    "substr(x, -1, 2)",
    "round(x, 'a')",
    "round(x, 1, 2)",
    "round(x, 1, ndigits=2)",
    "lower()",
    "hash(x, seed=-1)",
    "hash(x, seed=y)",
    "coalesce(x)",
    "if_else(a, b)",
    "lower(x, y)",
    "__x",
]


@pytest.mark.parametrize("text", HOSTILE, ids=lambda t: repr(t[:30]) + f"..len{len(t)}")
def test_hostile_expressions_rejected(text):
    with pytest.raises(ExprError) as ei:
        parse_expression(text)
    msg = str(ei.value)
    assert isinstance(ei.value, ValueError)
    assert len(msg) < 2000  # the expression is quoted, but truncated


def test_error_messages_quote_expression_and_column():
    with pytest.raises(ExprError) as ei:
        parse_expression("status > 1 and path.upper() == 'X'")
    msg = str(ei.value)
    assert "status > 1 and path.upper() == 'X'" in msg
    assert "attribute access" in msg and "column 15" in msg
    assert ei.value.col == 15

    with pytest.raises(ExprError) as ei:
        parse_expression("x[0]")
    assert "subscript" in str(ei.value)


def test_unknown_function_hint():
    with pytest.raises(ExprError) as ei:
        parse_expression("lowr(method) == 'get'")
    msg = str(ei.value)
    assert "'lowr'" in msg and "did you mean 'lower'" in msg and "lowr(method) == 'get'" in msg


def test_bad_keyword_argument():
    with pytest.raises(ExprError, match="keyword argument 'digits' is not allowed for round"):
        parse_expression("round(x, digits=2)")
    with pytest.raises(ExprError, match="keyword argument 'seed' is not allowed for lower"):
        parse_expression("lower(x, seed=2)")


def test_deep_nesting_rejected_cleanly():
    for text in ["(" * 10000 + "1" + ")" * 10000, "-" * 10000 + "1", "abs(" * 65 + "1" + ")" * 65, "-" * 66 + "1"]:
        with pytest.raises(ExprError, match="characters long|nested"):
            parse_expression(text)
    # moderate nesting is fine
    assert parse_expression("(" * 30 + "x" + ")" * 30).columns() == {"x"}
    assert parse_expression("-" * 20 + "x").infer_type({"x": "int8"}) == "int64"


def test_limits():
    with pytest.raises(ExprError, match="characters long"):
        parse_expression("x" * 10_001)
    with pytest.raises(ExprError, match="string literal is 1001 characters"):
        parse_expression("'" + "a" * 1001 + "'")
    assert parse_expression("x == '" + "a" * 1000 + "'").columns() == {"x"}
    with pytest.raises(ExprError, match="more than 1000"):
        parse_expression("x in [" + ",".join(["1"] * 1200) + "]")


def test_none_hint():
    with pytest.raises(ExprError, match="use 'x is None'"):
        parse_expression("x == None")
    with pytest.raises(ExprError, match="contains"):
        parse_expression("'abc' in path")


def test_not_a_string():
    with pytest.raises(ExprError):
        parse_expression(True)  # type: ignore[arg-type]
    with pytest.raises(ExprError):
        parse_expression(None)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# property tests
# ---------------------------------------------------------------------------

_TOKENS = [
    "x", "y", "status", "path", "time", "1", "0", "-", "+", "*", "/", "//", "%", "(", ")", "[", "]", ",", ".",
    "'a'", "None", "True", "and", "or", "not", "in", "is", "==", "<", ">=", "lower", "len", "hash", "coalesce",
    "if_else", "round", "ndigits=", "__class__", "lambda", ":", "=", "**", "{", "}", "f'", "1.5", "matches",
    "'('", "substr", "contains",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_random_text_only_raises_expr_error(text):
    try:
        e = parse_expression(text)
    except ExprError:
        return
    assert isinstance(e, Expr)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_TOKENS), max_size=25).map(" ".join))
def test_random_token_soup_only_raises_expr_error(text):
    try:
        e = parse_expression(text)
    except ExprError:
        return
    schema = {"x": "int64", "y": "float64", "status": "int16", "path": "string", "time": "timestamp"}
    try:
        e.infer_type(schema)
    except ExprTypeError:
        return


_SCHEMA = {"x": "int64", "y": "float64", "status": "int16", "path": "string", "time": "timestamp"}
_COLS = {
    "x": [1, None, 3, 0],
    "y": [0.5, None, -2.0, 4.0],
    "status": [200, 404, 500, 0],
    "path": ["/a", None, "/b(", ""],
    "time": pd.to_datetime(["2024-01-01 00:00:00", None, "2024-06-01 12:00:00", "2020-02-29 00:00:00"], utc=True),
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_TOKENS), max_size=15).map(" ".join))
def test_random_valid_expressions_evaluate(text):
    try:
        e = parse_expression(text)
        t = e.infer_type(_SCHEMA)
    except ExprError:
        return
    d = frame(_COLS, _SCHEMA)
    r = e.evaluate(d, backend=CountingBackend())
    assert len(r) == len(d)
    if t == "bool":
        assert e.evaluate_predicate(d, backend=CountingBackend()).dtype == bool


@pytest.mark.parametrize("text, column, advice", [
    ("a && b", 2, "use 'and' instead of '&&'"),
    ("a == 'x&&y' or", 14, "the expression ends in the middle"),     # '&&' inside a string is text
    ("round(x, ndigits=1) = 3", 20, "use '=='"),                     # a keyword argument is no '='
    ("hash(x, seed = 1) >", 19, "the expression ends in the middle"),
    ("a <> 1", 2, "use '!=' instead of '<>'"),
    ("a == 1 OR b == 2", 7, "write and / or / not in lower case"),
])
def test_syntax_errors_point_at_the_habit_and_say_what_to_write(text, column, advice):
    with pytest.raises(ExprError) as err:
        parse_expression(text)
    assert err.value.col == column and f"at column {column}:" in str(err.value)
    assert advice in str(err.value)


class RegexBackend(CpuBackend):
    """The CPU backend, recording the patterns handed to contains_regex."""

    def __init__(self):
        super().__init__()
        self.patterns = []

    def contains_regex(self, col, pattern):
        self.patterns.append(pattern)
        return super().contains_regex(col, pattern)


def test_matches_asks_the_backend_which_may_translate_the_regex(df):
    """matches() runs through Backend.contains_regex, where the GPU backend translates RE2 into
    libcudf's dialect or runs the pattern on the host; calling `.str.contains(regex=True)` on
    the column directly hands libcudf patterns it rejects ((?i), \\pL) or reads otherwise (\\d)."""
    backend = RegexBackend()
    result = ev("matches(method, '(?i)get') or matches(path, '\\d')", df, backend)
    assert backend.patterns == ["(?i)get", "\\d"]
    assert values(result) == [True, False, None, True, True]


@pytest.mark.parametrize("text, pattern", [
    (r"matches(path, '\d')", "\\d"),          # an escape Python does not know: the backslash is kept
    (r"matches(path, '\\d')", "\\d"),        # the same, written doubled
    (r"matches(path, r'\d')", "\\d"),         # a raw string
    (r"matches(path, '[\w.]+\.png$')", "[\\w.]+\\.png$"),
    (r"matches(path, 'a\'\s')", "a'\\s"),    # an escaped quote beside one
    (r"matches(path, '\t')", "\t"),            # an escape Python knows keeps its meaning
    (r"matches(path, '\d') or'\d' == path", "\\d"),   # `or` before a quote is no raw prefix
])
def test_a_regex_with_backslashes_in_a_string_literal_parses_without_a_warning(text, pattern):
    r"""Python keeps the backslash of an escape it does not know (`'\d'`) but warns each time it
    parses one (a SyntaxWarning from 3.12, shown to every user); the expression is read as
    written, with nothing printed."""
    import warnings

    backend = RegexBackend()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expr = parse_expression(text)
    df = frame({"path": ["a1", "x"]}, {"path": "string"})
    expr.evaluate(df, backend=backend)
    assert backend.patterns == [pattern]


def test_an_error_after_a_doubled_backslash_still_points_at_the_users_column():
    with pytest.raises(ExprError) as err:
        parse_expression(r"matches(path, '\d\d') and nope(path)")
    assert err.value.col == r"matches(path, '\d\d') and nope(path)".index("nope")


def test_case_and_white_space_have_one_meaning():
    """lower()/upper() map one character for one (Arrow's simple case mapping, which the GPU
    backend also gives: backends/gpu_text.py); strip() takes Unicode white space only."""
    df = frame({"s": ["İSTANBUL", "straße", "ﬁle", "\u3000 x\u00a0", "\x01x\x1f", None]}, {"s": "string"})
    assert values(ev("lower(s)", df)) == ["istanbul", "straße", "ﬁle", "\u3000 x\u00a0", "\x01x\x1f", None]
    assert values(ev("upper(s)", df))[:3] == ["İSTANBUL", "STRAẞE", "ﬁLE"]
    assert values(ev("strip(s)", df))[3:] == ["x", "\x01x", None]


def test_the_language_is_handed_its_backend_and_builds_none():
    """No module of gpuetl/expr imports a backend (an import inside a function counts): the
    frame's backend is an argument of evaluate and evaluate_predicate, never a default."""
    import ast

    import gpuetl.expr

    folder = Path(gpuetl.expr.__file__).parent
    imported = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                imported.add("." * node.level + (node.module or ""))
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
    assert not [m for m in imported if "backends" in m.split(".")], sorted(imported)
    df = pd.DataFrame({"a": [1, 2]})
    with pytest.raises(TypeError):
        parse_expression("a > 1").evaluate_predicate(df)
    assert parse_expression("a > 1").evaluate_predicate(df, CPU).tolist() == [False, True]
