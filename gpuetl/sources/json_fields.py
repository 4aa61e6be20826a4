"""Which JSON values a jsonl source reads: its columns as top-level keys or paths into nested
values (`user.id`, `items[0].sku`), the Arrow schema the block readers read them with, and the
record-by-record lookup the careful readers use. Both backends read through this description,
so a record gives the same row on either.

An exact top-level key wins over a path: OpenTelemetry and ECS logs write flat keys such as
`"service.name"`, so that column reads the key `service.name` where a record has it (not null),
and the path `service` -> `name` where it does not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from ..types import ARROW_TYPES

Step = str | int
_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")
_FIRST = re.compile(r"[^.\[\]]+")


def parse_path(name: str) -> tuple[Step, ...] | None:
    """`user.id` -> ('user', 'id'); `items[0].sku` -> ('items', 0, 'sku'); None for a name that
    is one key (no '.' or '[') or is not a well-formed path (`a..b`, `a[x]`): a flat key only."""
    if "." not in name and "[" not in name:
        return None
    first = _FIRST.match(name)
    if not first:
        return None
    steps: list[Step] = [first.group(0)]
    pos = first.end()
    while pos < len(name):
        m = _STEP.match(name, pos)
        if not m:
            return None
        steps.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
        pos = m.end()
    return tuple(steps)


def path_pattern(steps) -> str:
    """A path with its list indices left out, as the sampler records what it saw: `items[].sku`."""
    out = ""
    for step in steps:
        out += "[]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


@dataclass(frozen=True)
class JsonColumn:
    name: str                          # the output column, named as written
    type: str                          # the type read (timestamps: their text, cast afterwards)
    path: tuple[Step, ...] | None      # where the value is when the record has no key `name`


Position = tuple[str | None, ...]       # keys from the record down; None: an array's items


@dataclass(frozen=True)
class JsonRead:
    """What to read from each JSON object. `strict`: JSON strings are not read as numbers;
    `extra`: what a record's other top-level keys get (drop | keep | error).

    For a schema inferred from a sample (`inferred`): `raw`, the positions whose values the
    sample saw in more than one shape, read as each value's source text (a string keeps its
    quotes); `texts`, the string positions the sample saw only as values. A record where an
    inferred field has another shape than the sample's is bad, with a reason naming both."""

    columns: tuple[JsonColumn, ...]
    strict: bool = False
    extra: str = "drop"
    inferred: bool = False
    raw: frozenset[Position] = frozenset()
    texts: frozenset[Position] = frozenset()

    @property
    def schema(self) -> dict[str, str]:
        out = {c.name: c.type for c in self.columns}
        if self.extra == "keep":
            out["_extra"] = "string"
        return out

    @property
    def roots(self) -> frozenset[str]:
        """The top-level keys the columns read: the others are extra fields."""
        return frozenset([c.name for c in self.columns] + [c.path[0] for c in self.columns if c.path])

    def arrow_schema(self) -> pa.Schema:
        """The schema the block reader reads with: each column's flat key with its type, and
        each path's root as a struct/list of just the values the paths reach."""
        fields: dict[str, object] = {}
        readers: dict[str, str] = {}           # a top-level key -> the first column that reads it
        for col in self.columns:
            reads = [(col.name, ARROW_TYPES[col.type])]
            if col.path:
                node: object = ARROW_TYPES[col.type]
                for step in reversed(col.path[1:]):
                    node = {"list": node} if isinstance(step, int) else {"struct": {step: node}}
                reads.append((col.path[0], node))
            for key, node in reads:
                if key in fields:
                    fields[key] = _merge(fields[key], node, ColumnClash(col.name, readers[key], key))
                else:
                    fields[key], readers[key] = node, col.name
        return pa.schema([(name, _to_arrow(node)) for name, node in fields.items()])


class ColumnClash(ValueError):
    """Two declared columns read one value in ways that cannot both hold: `column` (named in the
    message, and where the error is located) and `other`, the column that read it first."""

    def __init__(self, column: str, other: str, where: str):
        super().__init__(column)
        self.column, self.other, self.where = column, other, where

    def at(self, where: str, mine, theirs) -> "ColumnClash":
        self.where = where
        if isinstance(theirs, pa.DataType) and _is_nested(theirs) and isinstance(mine, dict):
            why = (f"the column {self.column!r} reaches inside {where!r}, which the column {self.other!r} "
                   f"reads whole as {theirs}; a path cannot read into a value another column reads whole")
        elif isinstance(mine, pa.DataType) and _is_nested(mine) and isinstance(theirs, dict):
            why = (f"the column {self.column!r} reads {where!r} whole as {mine}, and the column {self.other!r} "
                   "reaches inside it; a path cannot read into a value another column reads whole")
        else:
            why = (f"the column {self.column!r} reads {where!r} as {_describe(mine)}, and the column "
                   f"{self.other!r} reads it as {_describe(theirs)}")
        self.args = (why,)
        return self


def _is_nested(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_struct(t)


def _merge(a, b, clash: ColumnClash, where: str | None = None):
    """One tree of what the columns read below a key; a clash (a value read both as a number
    and as an object, or read whole by one column and reached into by another) is a
    ColumnClash naming both columns."""
    where = where or clash.where
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        if "list" in a:
            return {"list": _merge(a["list"], b["list"], clash, where + "[]")}
        out = dict(a["struct"])
        for k, v in b["struct"].items():
            out[k] = _merge(out[k], v, clash, f"{where}.{k}") if k in out else v
        return {"struct": out}
    if not isinstance(a, dict) and not isinstance(b, dict) and a == b:
        return a
    raise clash.at(where, b, a)


def _describe(node) -> str:
    if isinstance(node, dict):
        return "a list" if "list" in node else "an object"
    return str(node)


def _to_arrow(node) -> pa.DataType:
    if isinstance(node, dict):
        if "list" in node:
            return pa.list_(_to_arrow(node["list"]))
        return pa.struct([(k, _to_arrow(v)) for k, v in node["struct"].items()])
    return node


_KINDS = ((bool, "true/false"), (dict, "an object"), (list, "an array"), (str, "a string"), ((int, float), "a number"),
          (type(None), "null"))


def json_kind(value) -> str:
    """What a value Python's json gave is, in JSON's words (a float subclass is a number)."""
    return next((kind for types, kind in _KINDS if isinstance(value, types)), "a value")


def lookup(obj: dict, col: JsonColumn):
    """(value, problem): the column's value in one record; None when absent. A path through a
    value of the wrong kind (`user.id` where `user` is a string) is a problem, not a null."""
    flat = obj.get(col.name)
    if flat is not None or not col.path:     # the block reader cannot tell a null key from none
        return flat, None
    value = obj
    for i, step in enumerate(col.path):
        if value is None:
            return None, None
        if isinstance(step, int):
            if not isinstance(value, list):
                return None, _wrong_kind(col, i, value, "an array")
            value = value[step] if step < len(value) else None
        else:
            if not isinstance(value, dict):
                return None, _wrong_kind(col, i, value, "an object")
            value = value.get(step)
    return value, None


def _wrong_kind(col: JsonColumn, i: int, value, expected: str) -> str:
    where = path_text(col.path[:i]) or "the record"
    return f"field {col.name!r}: {where} is {json_kind(value)}, not {expected}"


def path_text(steps) -> str:
    out = ""
    for step in steps:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


def position_text(at) -> str:
    """A position (JsonRead.raw) as written in notes and reasons: `geometry.coordinates`, `items[].x`."""
    out = ""
    for step in at:
        out += "[]" if step is None else (f".{step}" if out else step)
    return out
