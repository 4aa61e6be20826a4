"""The public expression object: Expr (parse_expression's result) with its columns, its type
and its evaluation."""

from __future__ import annotations

from typing import Mapping

from .errors import ExprTypeError, Refusals, quote_text
from .typenames import BOOL, NULL, dtype_to_type
from .nodes import BinOp, Call, Column, Neg, Node, walk
from .parser import parse_tree
from .inference import TypeEnv
from .evaluation import EvalContext


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
        return {n.name for n in walk(self.root) if isinstance(n, Column)}

    def regexes(self) -> list[str]:
        """The regular expressions the expression runs (matches() patterns)."""
        return [n.args[1].value for n in walk(self.root) if isinstance(n, Call) and n.name == "matches"]

    def functions(self) -> set[str]:
        """Names of all functions the expression calls."""
        return {n.name for n in walk(self.root) if isinstance(n, Call)}

    def infer_type(self, schema: Mapping[str, str]) -> str:
        """Result type (one of TYPE_NAMES) given column name -> type name; raises ExprTypeError."""
        env = TypeEnv(self, schema)
        t = env.type_of(self.root)
        if t == NULL:
            env.fail(self.root, "the expression is always null, so its type cannot be inferred")
        return t

    def check_predicate(self, schema: Mapping[str, str]) -> None:
        """Raise ExprTypeError unless the expression is a bool predicate (for ``filter``)."""
        t = self.infer_type(schema)
        if t != BOOL:
            raise ExprTypeError(
                f"type error in expression {quote_text(self.text)}: a filter must be a bool predicate, "
                f"but the expression is {t} (did you forget a comparison such as '== ...'?)",
                expression=self.text,
                col=0,
            )

    def _env_for(self, df) -> TypeEnv:
        schema: dict[str, str] = {}
        present = set(df.columns)
        for name in self.columns():
            if name in present:
                t = dtype_to_type(df[name].dtype)
                if t is None:
                    raise ExprTypeError(
                        f"type error in expression {quote_text(self.text)}: column '{name}' has dtype "
                        f"{df[name].dtype}, which expressions cannot use",
                        expression=self.text,
                        col=0,
                    )
                schema[name] = t
        return TypeEnv(self, schema, names=list(df.columns))

    def may_refuse(self) -> bool:
        """Whether some record could get no value (int64 overflow, a value grown too long)."""
        return any(isinstance(n, (BinOp, Neg)) or (isinstance(n, Call) and n.name in ("abs", "replace", "round"))
                   for n in walk(self.root))

    def evaluate(self, df, backend, refusals: Refusals | None = None):
        """Evaluate on a pandas/cuDF DataFrame; returns a Series aligned with ``df.index``.

        ``backend``: the frame's backend (gpuetl.backends), handed in: the language builds none.
        """
        env = self._env_for(df)
        typ = env.type_of(self.root)
        if typ == NULL:
            env.fail(self.root, "the expression is always null, so its type cannot be inferred")
        ctx = EvalContext(df, backend, env, refusals)
        return ctx.finalize(ctx.eval(self.root), typ)

    def evaluate_predicate(self, df, backend, refusals: Refusals | None = None):
        """Evaluate a bool expression as a filter mask: plain bool Series, null -> False."""
        env = self._env_for(df)
        t = env.type_of(self.root)
        if t != BOOL:
            raise ExprTypeError(
                f"type error in expression {quote_text(self.text)}: a filter must be a bool predicate, "
                f"but the expression is {t}",
                expression=self.text,
                col=0,
            )
        ctx = EvalContext(df, backend, env, refusals)
        result = ctx.series(ctx.eval(self.root), BOOL)
        return ctx.true_mask(result)


def parse_expression(text: str) -> Expr:
    """Parse ``text`` into an :class:`Expr`, or raise :class:`ExprError`."""
    return Expr(*parse_tree(text))
