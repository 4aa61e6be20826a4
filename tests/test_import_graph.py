"""DESIGN.md's layout rule: no import cycles between gpuetl's modules, and no `_private` name of
one module used by another.

The graph is grimp's (the library import-linter builds on). grimp records every import statement
it finds, a function's own imports included (those that run only when the function is called), so
a cycle closed by an import inside a function counts. A package's `__init__` importing from its
own modules, to hand their names on, is not counted as an edge: importing the package from one of
its modules is then no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

import gpuetl

PACKAGE = Path(gpuetl.__file__).parent


# -- cycles ---------------------------------------------------------------------------------------

def module_edges(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    """importer -> imported, leaving out a package's imports of its own descendants."""
    packages = {m for m in graph.modules if graph.find_children(m)}
    edges: dict[str, set[str]] = {}
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            if importer in packages and imported.startswith(importer + "."):
                continue
            edges.setdefault(importer, set()).add(imported)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    nodes = sorted(set(edges) | {m for targets in edges.values() for m in targets})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(edges.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def _describe(graph: grimp.ImportGraph, edges: dict[str, set[str]], group: list[str]) -> str:
    lines = [" <-> ".join(group)]
    for importer in group:
        for imported in sorted(edges.get(importer, set()) & set(group)):
            where = [d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported)]
            lines.append(f"    {importer} -> {imported} (lines {where})")
    return "\n".join(lines)


def test_no_module_imports_itself_back():
    graph = grimp.build_graph("gpuetl", cache_dir=None)
    edges = module_edges(graph)
    found = cycles(edges)
    assert not found, "import cycles:\n" + "\n".join(_describe(graph, edges, group) for group in found)


def test_the_cycle_check_sees_cycles_through_function_imports_but_not_a_package_handing_names_on():
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.sub", "pkg.sub.x"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b", line_number=1, line_contents="from . import b")
    graph.add_import(importer="pkg.b", imported="pkg.c", line_number=9, line_contents="    from .c import f")
    graph.add_import(importer="pkg.c", imported="pkg.a", line_number=3, line_contents="    from .a import g")
    graph.add_import(importer="pkg.sub", imported="pkg.sub.x", line_number=1, line_contents="from .x import y")
    graph.add_import(importer="pkg.sub.x", imported="pkg.sub", line_number=1, line_contents="from . import z")
    assert cycles(module_edges(graph)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_grimp_records_an_import_made_inside_a_function():
    """What the cycle check rests on: gpuetl.backends imports its backends only inside functions."""
    graph = grimp.build_graph("gpuetl", cache_dir=None)
    details = graph.get_import_details(importer="gpuetl.backends", imported="gpuetl.backends.cpu")
    assert details and all(d["line_contents"].startswith("from .cpu import") for d in details)
    source = (PACKAGE / "backends" / "__init__.py").read_text().splitlines()
    assert source[details[0]["line_number"] - 1].startswith("    ")   # indented: inside a function


# -- private names --------------------------------------------------------------------------------

def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    if not level:
        return name or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _dotted(node: ast.AST) -> list[str] | None:
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(names)]


def private_names_used_across_modules(root: Path) -> list[str]:
    """`from x import _y` and `x._y` where x is another module of the package under root: each as
    'file:line uses x._y'."""
    files = sorted(root.rglob("*.py"))
    modules = {_module_name(path, root) for path in files}
    top = root.name
    found = []
    for path in files:
        module = _module_name(path, root)
        tree = ast.parse(path.read_text(), filename=str(path))
        bound: dict[str, str] = {}          # local name -> the package module it stands for
        attributes = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                if _private(node.attr):
                    attributes.append(node)
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(module, path.name == "__init__.py", node.level, node.module)
                if source != top and not source.startswith(top + "."):
                    continue
                for alias in node.names:
                    if f"{source}.{alias.name}" in modules:
                        bound[alias.asname or alias.name] = f"{source}.{alias.name}"
                    if _private(alias.name) and source != module:
                        found.append((path, node.lineno, f"{source}.{alias.name}"))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == top or alias.name.startswith(top + "."):
                        if alias.asname:
                            bound[alias.asname] = alias.name
                        else:
                            bound[top] = top
        for node in attributes:
            names = _dotted(node.value)
            if not names or names[0] not in bound:
                continue
            owner = ".".join([bound[names[0]], *names[1:]])
            if owner in modules and owner != module:
                found.append((path, node.lineno, f"{owner}.{node.attr}"))
    return sorted(f"{p.relative_to(root.parent)}:{line} uses {name}" for p, line, name in set(found))


def test_no_module_uses_another_modules_private_names():
    assert private_names_used_across_modules(PACKAGE) == []


def test_the_private_name_check_sees_each_form(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import public\n__version__ = '1'\n")
    (pkg / "a.py").write_text("def public(): pass\ndef _own(): pass\n_own()\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text(
        "import pkg.a\n"
        "import pkg.a as alias\n"
        "from .. import a\n"
        "from ..a import _own, public\n"
        "from pkg import __version__\n"
        "def f():\n"
        "    from pkg.a import _own as mine\n"
        "    a._own()\n"
        "    alias._own()\n"
        "    pkg.a._own()\n"
        "    return public._x, mine\n")      # public is a function: its attributes are its own
    assert private_names_used_across_modules(pkg) == [
        "pkg/sub/b.py:10 uses pkg.a._own",
        "pkg/sub/b.py:4 uses pkg.a._own",
        "pkg/sub/b.py:7 uses pkg.a._own",
        "pkg/sub/b.py:8 uses pkg.a._own",
        "pkg/sub/b.py:9 uses pkg.a._own",
    ]
