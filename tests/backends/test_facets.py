"""A backend is a set of small declared facets (backends/base.py: typing.Protocols that carry no
behaviour), each implemented once per backend: every backend defines every facet method itself
(or in a class of its own modules), so a new backend inherits nothing by accident; no module
outside backends/ builds a backend of its own; the calendar arithmetic is written once."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Protocol

import pytest

from gpuetl.backends import base, get_backend
from gpuetl.backends.base import FACETS, Backend, facet_members
from gpuetl.backends.cpu import CpuBackend

PACKAGE = Path(__file__).resolve().parents[2] / "gpuetl"
BACKENDS = PACKAGE / "backends"


def _is_docstring_or_ellipsis(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and (
        isinstance(node.value.value, str) or node.value.value is Ellipsis)


def test_every_facet_is_a_protocol_that_carries_no_behaviour():
    """A facet declares; it does not implement: every method body in base.py's facets is only a
    docstring (or `...`), and no facet gives an attribute a value a backend could inherit."""
    tree = ast.parse(inspect.getsource(base))
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for facet in (*FACETS, Backend):
        assert Protocol in facet.__mro__ and getattr(facet, "_is_runtime_protocol", False), facet
        for node in classes[facet.__name__].body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert all(_is_docstring_or_ellipsis(s) for s in node.body), f"{facet.__name__}.{node.name} has a body"
            elif isinstance(node, ast.Assign) or (isinstance(node, ast.AnnAssign) and node.value is not None):
                raise AssertionError(f"{facet.__name__} gives an attribute a value: line {node.lineno}")
    # the facets together are the whole backend, and no name is declared twice
    members = [m for f in FACETS for m in facet_members(f)]
    assert len(members) == len(set(members)), sorted(m for m in members if members.count(m) > 1)
    assert all(f in Backend.__mro__ for f in FACETS)


def test_the_cpu_backend_satisfies_every_facet():
    backend = get_backend("cpu")
    assert [f.__name__ for f in FACETS if not isinstance(backend, f)] == []
    assert isinstance(backend, Backend)


def test_the_cpu_backend_defines_every_facet_member_itself():
    """Each member comes from CpuBackend or a facet class of the CPU's own modules (cpu*.py),
    never from a base a second backend could share."""
    foreign = {}
    for facet in FACETS:
        for name in facet_members(facet):
            owner = next((k for k in CpuBackend.__mro__ if name in vars(k)), None)
            if owner is None or not owner.__module__.startswith("gpuetl.backends.cpu"):
                foreign[f"{facet.__name__}.{name}"] = owner
    assert foreign == {}
    assert all(k.__module__.startswith("gpuetl.backends.cpu") for k in CpuBackend.__mro__[:-1]), CpuBackend.__mro__


def _gpu_class_members() -> tuple[set[str], list[str]]:
    """(the names GpuBackend and its bases define, its bases' names), read from the source: this
    runs where RAPIDS is not installed. Each base must be a class of a gpu*.py module."""
    defined: dict[str, tuple[str, ast.ClassDef]] = {}
    for path in sorted(BACKENDS.glob("gpu*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                defined[node.name] = (path.name, node)
    _, gpu = defined["GpuBackend"]
    bases = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in gpu.bases]
    names: set[str] = set()
    for cls in [gpu, *(defined[b][1] for b in bases if b in defined)]:
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return names, [b for b in bases if b not in defined]


def test_the_gpu_backend_defines_every_facet_member_itself():
    """Read from gpu*.py's source (no RAPIDS needed): GpuBackend and its own facet classes
    (gpu_spill, gpu_records, gpu_text) define every member; it has no other base."""
    names, foreign_bases = _gpu_class_members()
    assert foreign_bases == []
    missing = [f"{f.__name__}.{n}" for f in FACETS for n in facet_members(f) if n not in names]
    assert missing == []


def test_the_check_sees_a_member_left_to_a_base():
    """The check fails for a class that leaves a member to a base with behaviour."""
    class Lazy(CpuBackend):
        pass

    class Shared:
        def mod(self, a, b, type_name):
            return a % b

    class Third(Shared, CpuBackend):
        pass

    owner = next(k for k in Third.__mro__ if "mod" in vars(k))
    assert not owner.__module__.startswith("gpuetl.backends.cpu")
    assert next(k for k in Lazy.__mro__ if "mod" in vars(k)) is CpuBackend


@pytest.mark.gpu_api
def test_the_gpu_backend_satisfies_every_facet():
    gpu = pytest.importorskip("gpuetl.backends.gpu", exc_type=ImportError)
    backend = gpu.GpuBackend.__new__(gpu.GpuBackend)
    backend.__setstate__({})
    assert [f.__name__ for f in FACETS if not isinstance(backend, f)] == []
    shared = set(CpuBackend.__mro__) & set(gpu.GpuBackend.__mro__)
    assert shared == {object}, shared
    for facet in FACETS:
        for name in facet_members(facet):
            owner = next(k for k in gpu.GpuBackend.__mro__ if name in vars(k))
            assert owner.__module__.startswith("gpuetl.backends.gpu"), (name, owner)


def test_no_module_outside_backends_builds_a_backend_or_dispatches_image_steps_by_name():
    """Backends come from the registry (backends.get_backend); image steps call typed methods,
    and the backends call their image kernels as functions, not looked up by a name."""
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        text = path.read_text(encoding="utf-8")
        if not rel.startswith("backends/") and re.search(r"\b(Cpu|Gpu)Backend\(", text):
            hits.append(f"{rel}: builds a backend")
        if re.search(r"\bimage_step\(|getattr\(\s*(cpu|gpu)_images\b", text):
            hits.append(f"{rel}: an image kernel looked up by its name")
    assert hits == []


def test_the_calendar_arithmetic_is_written_once():
    """days-from-civil (H. Hinnant's constants) lives in civil.py alone, which the CPU's CLF time
    parser and the GPU's timestamp forms both import."""
    holders = sorted(p.name for p in BACKENDS.glob("*.py") if "719468" in p.read_text(encoding="utf-8"))
    assert holders == ["civil.py"]
    for module in ("cpu_clf.py", "gpu.py"):
        imports = [n for n in ast.parse((BACKENDS / module).read_text(encoding="utf-8")).body
                   if isinstance(n, ast.ImportFrom) and n.module == "civil"]
        assert imports, f"{module} does not use civil.py"


def test_civil_arithmetic_equals_pythons_calendar():
    """One function for numpy and CuPy: checked here with numpy against datetime, leap days and
    centuries included."""
    import datetime

    import numpy as np

    from gpuetl.backends.civil import civil_to_days, days_in_month

    dates = [datetime.date(y, m, d) for y in (1, 1600, 1899, 1900, 1970, 2000, 2024, 2100, 9999)
             for m, d in ((1, 1), (2, 28), (3, 1), (12, 31))] + [datetime.date(2000, 2, 29), datetime.date(2024, 2, 29)]
    y = np.array([d.year for d in dates], dtype=np.int64)
    m = np.array([d.month for d in dates], dtype=np.int64)
    d = np.array([d.day for d in dates], dtype=np.int64)
    epoch = datetime.date(1970, 1, 1).toordinal()
    assert civil_to_days(np, y, m, d).tolist() == [x.toordinal() - epoch for x in dates]
    feb = days_in_month(np, np.array([1900, 2000, 2023, 2024]), np.array([2, 2, 2, 2]))
    assert feb.tolist() == [28, 29, 28, 29]
