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


def _stub_signatures(dotted: str) -> list[inspect.Signature]:
    """Every overload in CV-CUDA's stub of a module-level function (`hq_resize`), a class's
    constructor (`TensorBatch`) or a method (`TensorBatch.pushback`; self dropped)."""
    body, name = STUB.body, dotted
    if "." in dotted or any(isinstance(n, ast.ClassDef) and n.name == dotted for n in STUB.body):
        cls, _, name = dotted.partition(".")
        (node,) = [n for n in STUB.body if isinstance(n, ast.ClassDef) and n.name == cls]
        body, name = node.body, name or "__init__"
    out = []
    for node in body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            a = node.args
            positional = a.posonlyargs + a.args
            defaults = [False] * (len(positional) - len(a.defaults)) + [True] * len(a.defaults)
            params = [inspect.Parameter(p.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=None if d else inspect.Parameter.empty)
                      for p, d in zip(positional, defaults) if p.arg != "self"]
            params += [inspect.Parameter(p.arg, inspect.Parameter.KEYWORD_ONLY,
                                         default=None if d is not None else inspect.Parameter.empty)
                       for p, d in zip(a.kwonlyargs, a.kw_defaults)]
            out.append(inspect.Signature(params))
    return out


def _cupy_signatures(dotted: str) -> list[inspect.Signature]:
    """A CuPy function's signature; a Cython one's from its docstring's first line (embedsignature:
    `alloc_pinned_memory(size_t size)`, C types dropped)."""
    obj = pytest.importorskip("cupy")
    for name in dotted.split(".")[1:]:
        obj = getattr(obj, name)
    try:
        return [inspect.signature(obj)]
    except (TypeError, ValueError):
        found = re.match(rf"{obj.__name__}\((.*)\)", (obj.__doc__ or "").strip())
        if not found:
            return []
        return [_signature_from_text(", ".join(p.split()[-1] for p in found.group(1).split(",") if p.strip()))]


def _signatures(dotted: str) -> list[inspect.Signature]:
    if dotted.startswith("cvcuda."):
        return _stub_signatures(dotted.split(".", 1)[1])
    if dotted.startswith("cupy."):
        return _cupy_signatures(dotted)
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
    assert not _binds("cvcuda.TensorBatch.pushback", 2, ())


# -- which images the device decodes: nvImageCodec's header parser runs on the host -------------

def _encoded(mode: str, fmt: str, **save) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new(mode, (40, 30), 90 if mode in ("L", "I;16") else (90,) * len(mode)).save(buf, fmt, **save)
    return buf.getvalue()


@pytest.mark.parametrize("mode, fmt, save, why", [
    ("RGB", "JPEG", {}, None),
    ("L", "JPEG", {}, None),
    ("RGB", "JPEG", {"progressive": True}, None),
    ("CMYK", "JPEG", {}, "HOST_CHANNELS"),
    ("RGB", "PNG", {}, "HOST_FORMAT"),
    ("RGBA", "PNG", {}, "HOST_FORMAT"),
    ("RGB", "WEBP", {}, "HOST_FORMAT"),
], ids=["rgb-jpeg", "grey-jpeg", "progressive-jpeg", "cmyk-jpeg", "png", "rgba-png", "webp"])
def test_the_device_decodes_8_bit_grey_and_colour_jpegs_and_pillow_the_rest(mode, fmt, save, why):
    import pyarrow as pa

    from gpuetl.backends import gpu_images

    data = _encoded(mode, fmt, **save)
    for form in (data, memoryview(pa.py_buffer(data))):        # steps hand memoryviews into Arrow buffers
        stream, reason = gpu_images.device_route(form, nvimgcodec)
        assert reason == (why and getattr(gpu_images, why))
        assert (stream is None) == (why is not None)
        if stream is not None:
            assert (stream.width, stream.height) == (40, 30)


def test_a_jpeg_cut_short_or_with_a_broken_header_goes_to_pillow_which_gives_the_cpu_reason():
    from gpuetl.backends import gpu_images

    data = _encoded("RGB", "JPEG")
    assert gpu_images.device_route(data[: len(data) // 2], nvimgcodec) == (None, gpu_images.HOST_UNFINISHED)
    assert gpu_images.device_route(data + b"\x00\x00", nvimgcodec)[1] is None     # zero padding after EOI is fine
    broken = data[:2] + b"\xff\xc0\x00\x02" + data[-2:]                           # SOI, a short SOF, EOI
    assert gpu_images.device_route(broken, nvimgcodec) == (None, gpu_images.HOST_UNPARSED)
