"""The expression tree: the language's own small node classes, which parsing builds and inference
and evaluation walk."""

from __future__ import annotations

from typing import Any, Iterator


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


def walk(root: Node) -> Iterator[Node]:
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children())
