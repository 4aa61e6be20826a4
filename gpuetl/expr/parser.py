"""Parsing: the user's text through Python's `ast` (mode="eval"), converted into the language's
own nodes; only a whitelisted subset of Python's syntax is accepted, each refusal located."""

from __future__ import annotations

import ast
import math
import re
from typing import Any, NamedTuple

from .limits import INT64_MIN, MAX_DEPTH, MAX_NODES, MAX_STRING_LITERAL, MAX_SUBSTR, MAX_TEXT_LENGTH, UINT64_MAX
from .errors import ExprError, name_hint, quote_text
from .functions import FUNCTIONS
from .nodes import BinOp, BoolOp, Call, Column, Compare, InList, IsNull, Literal, Neg, Node, Not


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
            f"invalid expression {quote_text(self.src)} at column {col}: {msg}", expression=self.src, col=col
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
            if value < INT64_MIN or value > UINT64_MAX:
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
                   else name_hint(name, FUNCTIONS)) + f" (allowed functions: {allowed})",
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
                if kw.arg == "seed" and not (0 <= value <= UINT64_MAX):
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


# what may follow a backslash in a Python string literal; after anything else (`'\d'`) Python keeps
# the backslash, with a warning (SyntaxWarning from 3.12): _unquote writes it doubled instead
_ESCAPES = frozenset("\n\\'\"abfnrtv01234567xNuU")
# a raw string's prefix: the whole word before the quote (`or'\d'` is the keyword and a string)
_RAW_PREFIX = re.compile(r"(?<![\w])(?:[rR][bBfF]?|[bBfF][rR])$")


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
            raw = _RAW_PREFIX.search(src, 0, i) is not None        # r'...', rb'...'; not `or'...'`
            k = i
            while k < j:
                if not raw and src[k] == "\\" and k + 1 < j:
                    if src[k + 1] not in _ESCAPES:   # Python keeps such a backslash, with a warning: double it
                        out.append("\\")
                        char_map.append(k)
                    out.append(src[k:k + 2])
                    char_map.extend((k, k + 1))
                    k += 2
                    continue
                out.append(src[k])
                char_map.append(k)
                k += 1
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
                    f"invalid expression {quote_text(src)} at column {i}: the quoted name opened by this backtick "
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
            raise ExprError(f"invalid expression {quote_text(src)} at column {i}: an empty quoted name (``)",
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


def parse_tree(text: str) -> tuple[str, Node]:
    """Parse ``text`` into (its source text on one line, the root node), or raise :class:`ExprError`."""
    if not isinstance(text, str):
        raise ExprError(f"an expression must be a string, got {type(text).__name__}: {text!r:.60}")
    if len(text) > MAX_TEXT_LENGTH:
        raise ExprError(
            f"invalid expression {quote_text(text)}: it is {len(text)} characters long; the limit is {MAX_TEXT_LENGTH}",
            expression=text,
            col=MAX_TEXT_LENGTH,
        )
    # YAML block scalars may spread an expression over several lines.
    src = text.replace("\r", " ").replace("\n", " ").strip()
    if not src:
        raise ExprError("invalid expression: it is empty", expression=text, col=0)
    if bad := _SURROGATE.search(src):
        raise ExprError(f"invalid expression {quote_text(src)} at column {bad.start()}: it holds {ascii(bad.group())}, "
                        "half of a UTF-16 surrogate pair, which is not a character", expression=src, col=bad.start())
    quoted = _unquote(src)
    try:
        tree = ast.parse(quoted.code, mode="eval")
    except SyntaxError as e:
        msg = str(e.msg or "invalid syntax")
        if "nested" in msg or "too complex" in msg:
            raise ExprError(
                f"invalid expression {quote_text(src)}: it is nested too deeply (limit {MAX_DEPTH} levels)",
                expression=src,
                col=0,
            ) from None
        col = quoted.char_map[min(max((e.offset or 1) - 1, 0), len(quoted.char_map) - 1)]
        hint = _syntax_hint(src)
        if hint:
            col, advice = hint
            msg = f"{msg}; {advice}"
        raise ExprError(
            f"invalid expression {quote_text(src)} at column {col}: syntax error: {msg}", expression=src, col=col
        ) from None
    except (RecursionError, MemoryError):
        raise ExprError(
            f"invalid expression {quote_text(src)}: it is nested too deeply or too complex (limit {MAX_DEPTH} levels)",
            expression=src,
            col=0,
        ) from None
    except Exception as e:  # e.g. ValueError for NUL bytes, UnicodeEncodeError for lone surrogates
        raise ExprError(f"invalid expression {quote_text(src)}: cannot parse: {e}", expression=src, col=0) from None
    parser = _Parser(text, src, quoted)
    parser.check_limits(tree)
    root = parser.convert(tree.body)
    return src, root
