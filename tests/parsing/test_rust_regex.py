"""User regexes on polars' engine (parsing/rust_regex.py, backends/cpu_text.py) give exactly the
captures RE2 gives (pyarrow's extract_regex, the parser's reference), on hostile lines: Unicode
spaces and digits, brackets, braces, backslashes, newlines; and what might differ stays on RE2."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuetl.backends.cpu_text import extract_groups_polars, polars_regex
from gpuetl.parsing.rust_regex import to_rust_regex

PATTERNS = [
    r'^(?P<ip>\S+) \S+ (?P<user>\S+) \[(?P<time>[^\]]+)\] "(?P<method>[A-Z]+) (?P<path>[^ "]*) [^"]*" '
    r'(?P<status>\d{3}) (?:(?P<size>\d+)|-) "(?:[^"\\]|\\.)*" "(?P<ua>(?:[^"\\]|\\.)*)"$',
    r"^(?P<a>\w+)\s+(?P<b>\d*)(?P<c>.*)$",
    r"(?P<word>\w+)-(?P<num>\d{1,3})",
    r"^(?P<k>[^=\s]+)=(?P<v>[^\s,]*)(?:,(?P<rest>.*))?$",
    r"(?s)^(?P<head>[^\n]*)\n?(?P<tail>.*)$",
    r"^(?P<x>[\d\s]+)(?P<y>[^\d\s]*)",
    r"^(?P<open>[][{}]+)(?P<br>a{2,}|\{|})?",
    r"^(?P<x>\W+)(?P<y>\D)(?P<z>\S?)",
    r"(?m)^(?P<line>\d+)$",
    r"^(?P<a>a|)(?P<b>b*?)(?P<c>\x41|\x{e9})?",
]
ALPHABET = list("aAbZ09_-=, \t\n\"\\[]{}.:é") + ["\u00a0", "\u0663", "\u2003", "\u0130"]
LINE = st.text(alphabet=st.sampled_from(ALPHABET), max_size=24)


def names_of(pattern: str) -> tuple[str, ...]:
    return tuple(re.findall(r"\(\?P<(\w+)>", pattern))


def re2(lines: pa.Array, pattern: str, names):
    struct = pc.extract_regex(lines, pattern=pattern)
    out = {}
    for name in names:
        field = pc.struct_field(struct, name)
        out[name] = pc.if_else(pc.equal(pc.binary_length(field), 0), pa.scalar(None, pa.string()), field).to_pylist()
    return out, struct.is_valid().to_pylist()


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=60, deadline=None)
@given(lines=st.lists(LINE, max_size=12))
def test_polars_captures_equal_re2s(pattern, lines):
    on_polars = polars_regex(pattern)
    assert on_polars is not None
    arr = pa.array(lines, pa.string())
    names = names_of(pattern)
    cols, matched = extract_groups_polars(arr, on_polars, names, dash_is_null=False)
    want_cols, want_matched = re2(arr, pattern, names)
    assert matched.tolist() == want_matched
    assert {n: c.to_pylist() for n, c in cols.items()} == want_cols


def test_chunked_input_comes_back_in_one_piece():
    pattern = PATTERNS[1]
    arr = pa.chunked_array([pa.array(["ab 12x", "nope!"]), pa.array(["c 3"])])
    cols, matched = extract_groups_polars(arr, polars_regex(pattern), names_of(pattern), dash_is_null=True)
    assert matched.tolist() == [True, False, True]
    assert cols["b"].to_pylist() == ["12", None, "3"] and isinstance(cols["b"], pa.Array)


@pytest.mark.parametrize("pattern", [
    r"(?i)^(?P<a>abc)", r"\b(?P<w>\w+)\b", r"^(?P<l>\pL+)", r"^(?P<a>[[:alpha:]]+)", r"^(?P<a>[a&&b])",
    r"^(?P<a>[\S])", r"^(?P<a>\Qa.b\E)", r"(?<name>x)", r"(?=x)(?P<a>x)",
])
def test_what_might_differ_stays_on_re2(pattern):
    assert to_rust_regex(pattern) is None


def test_ascii_classes_and_literal_braces():
    assert to_rust_regex(r"\d+\s\w") == r"[0-9]+[\t\n\f\r ][0-9A-Za-z_]"
    assert to_rust_regex(r"[\d.]{2}x{") == r"[0-9.]{2}x\{"
    assert to_rust_regex(r"[[]") == r"[\[]"
