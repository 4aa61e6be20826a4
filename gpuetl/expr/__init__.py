"""Safe expression language for the ``filter`` and ``derive`` steps.

Pipeline files contain small expressions such as::

    status >= 200 and method in ['GET', 'POST']
    hour(time)
    coalesce(referrer, '-')

This package parses them with :func:`ast.parse` (``mode="eval"``) and converts
the Python syntax tree into a tree of the language's own small node classes.
Only a whitelisted subset of Python syntax is accepted; everything else is
rejected at parse time with an :class:`ExprError` that quotes the expression
and gives the column offset of the offending part.  User text is never passed
to ``eval``/``exec``/``compile``; evaluation walks our own node classes and
only calls pandas/cuDF-compatible Series methods.

Modules
-------
``nodes`` (the tree), ``parser`` (text -> tree), ``inference`` (types at plan time),
``evaluation`` (the tree on a frame), ``functions`` (the function table), ``expression``
(``Expr``, ``parse_expression``), and the small ``limits``, ``errors`` and ``typenames`` they share.
Each imports only the ones before it in: limits, errors, typenames, functions, nodes, parser,
inference, evaluation, expression. The language is not a step: ``steps/filter.py`` and
``steps/derive.py`` use it.

Public API (imported from ``gpuetl.expr``)
------------------------------------------
``parse_expression(text) -> Expr``
``Expr.columns() -> set[str]``
``Expr.infer_type(schema) -> str``            (plan-time type checking)
``Expr.check_predicate(schema) -> None``      (raises unless the type is bool)
``Expr.evaluate(df, backend)``                (-> Series of len(df); the frame's backend)
``Expr.evaluate_predicate(df, backend)``      (-> non-null bool Series)
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

from .limits import MAX_DEPTH, MAX_NODES, MAX_STRING_LITERAL, MAX_TEXT_LENGTH
from .errors import ExprError, ExprTypeError, ExprValueError, Refusals, value_error
from .typenames import TYPE_NAMES, normalize_type
from .functions import FUNCTIONS, FunctionSpec
from .parser import quote_name, regex_problem
from .expression import Expr, parse_expression

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
    "value_error",
    "quote_name",
]
