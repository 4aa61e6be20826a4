"""The GPU image code checked against the installed nvImageCodec and CV-CUDA, without a GPU
(`make gpu-api`, marker gpu_api; skipped cleanly where they are not installed): every call in
gpu_images.IMAGE_CALLS exists and accepts the arguments used, and every enum member named exists.
nvImageCodec imports without a GPU (its pybind11 signatures are read from the docstrings);
CV-CUDA does not (it loads libcuda), so its calls are bound against its .pyi stub, read with ast."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu_api

try:
    from nvidia import nvimgcodec  # noqa: F401
except Exception as err:            # noqa: BLE001 (not installed, or a broken install)
    pytest.skip(f"nvImageCodec does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)
_CVCUDA = importlib.util.find_spec("cvcuda")           # finds the package without running it
if _CVCUDA is None:
    pytest.skip("CV-CUDA is not installed here; run `make gpu-api`", allow_module_level=True)
STUB = ast.parse((Path(_CVCUDA.origin).parent / "__init__.pyi").read_text())

from gpuetl.backends.gpu_images import IMAGE_CALLS, IMAGE_ENUMS  # noqa: E402


def _split(params: str) -> list[str]:
    """Split a docstring's parameter list at the commas outside brackets."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(params):
        depth += ch in "[(<" and 1 or 0
        depth -= ch in "])>" and 1 or 0
        if ch == "," and depth == 0:
            out.append(params[start:i].strip())
            start = i + 1
    tail = params[start:].strip()
    return out + [tail] if tail else out


def _signature_from_text(params: str) -> inspect.Signature:
    kind, out = inspect.Parameter.POSITIONAL_OR_KEYWORD, []
    for item in _split(params):
        if item == "*":
            kind = inspect.Parameter.KEYWORD_ONLY
            continue
        name = item.split(":")[0].split("=")[0].strip()
        if name.startswith("**"):
            out.append(inspect.Parameter(name[2:], inspect.Parameter.VAR_KEYWORD))
        elif name.startswith("*"):
            out.append(inspect.Parameter(name[1:], inspect.Parameter.VAR_POSITIONAL))
            kind = inspect.Parameter.KEYWORD_ONLY
        else:
            out.append(inspect.Parameter(name, kind, default=None if "=" in item else inspect.Parameter.empty))
    if out and out[0].name == "self":
        out = out[1:]
    return inspect.Signature(out)


def _pybind_signatures(obj) -> list[inspect.Signature]:
    """Every overload a pybind11 function, method or class constructor documents."""
    doc = (obj.__init__ if inspect.isclass(obj) else obj).__doc__ or ""
    name = "__init__" if inspect.isclass(obj) else obj.__name__
    found = [m.group(1) for m in re.finditer(rf"^(?:\d+\. )?{name}\((.*)\) ->", doc, re.M)]
    return [_signature_from_text(params) for params in found if params not in ("*args, **kwargs",)]


def _stub_signatures(name: str) -> list[inspect.Signature]:
    """Every overload of a module-level function in CV-CUDA's stub."""
    out = []
    for node in STUB.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            a = node.args
            positional = a.posonlyargs + a.args
            defaults = [False] * (len(positional) - len(a.defaults)) + [True] * len(a.defaults)
            params = [inspect.Parameter(p.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=None if d else inspect.Parameter.empty)
                      for p, d in zip(positional, defaults)]
            params += [inspect.Parameter(p.arg, inspect.Parameter.KEYWORD_ONLY,
                                         default=None if d is not None else inspect.Parameter.empty)
                       for p, d in zip(a.kwonlyargs, a.kw_defaults)]
            out.append(inspect.Signature(params))
    return out


def _signatures(dotted: str) -> list[inspect.Signature]:
    if dotted.startswith("cvcuda."):
        return _stub_signatures(dotted.split(".", 1)[1])
    obj = nvimgcodec
    for name in dotted.removeprefix("nvidia.nvimgcodec.").split("."):
        obj = getattr(obj, name)
    return _pybind_signatures(obj)


def _binds(dotted: str, positional: int, keywords) -> bool:
    signatures = _signatures(dotted)
    assert signatures, f"{dotted}: no signature found"
    for sig in signatures:
        try:
            sig.bind(*[None] * positional, **{k: None for k in keywords})
            return True
        except TypeError:
            continue
    return False


@pytest.mark.parametrize("dotted, positional, keywords", IMAGE_CALLS, ids=[c[0] for c in IMAGE_CALLS])
def test_every_image_call_exists_and_accepts_the_arguments_used(dotted, positional, keywords):
    assert _binds(dotted, positional, keywords), f"{dotted}({positional} positional, {keywords}) does not bind"


@pytest.mark.parametrize("dotted", IMAGE_ENUMS)
def test_every_enum_member_named_exists(dotted):
    *owner, cls, member = dotted.split(".")
    if owner == ["cvcuda"]:
        (node,) = [n for n in STUB.body if isinstance(n, ast.ClassDef) and n.name == cls]
        names = {t.id for item in node.body for t in getattr(item, "targets", [getattr(item, "target", None)])
                 if isinstance(t, ast.Name)}
        assert member in names, f"cvcuda.{cls} has no {member}"
    else:
        assert hasattr(getattr(importlib.import_module(".".join(owner)), cls), member), dotted


def test_the_binding_can_fail():
    assert not _binds("nvidia.nvimgcodec.DecodeParams", 0, ("color_space",))
    assert not _binds("cvcuda.hq_resize", 2, ("region",))
    assert not _binds("nvidia.nvimgcodec.Decoder.decode", 2, ())
