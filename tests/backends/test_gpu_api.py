"""The GPU code checked against the real RAPIDS release, on a machine with RAPIDS but no GPU
(`make gpu-api`, marker gpu_api; skipped cleanly where cuDF does not import):

* the backend module imports with the real libraries;
* every RAPIDS call the backend makes (gpu.RAPIDS_CALLS) exists and accepts the arguments used,
  bound against the installed release's signature, or its .pyi stub for Cython classes;
* every regex the presets, the templates, the dialect translator and the backend itself hand to
  libcudf compiles in libcudf's own regex compiler (it runs on the host).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re

import pytest

pytestmark = pytest.mark.gpu_api

try:                                        # RAPIDS installed: import it without touching CUDA
    os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")
    import cudf  # noqa: F401
    import pylibcudf as plc
except Exception as err:                    # noqa: BLE001 (no RAPIDS, or a broken install)
    pytest.skip(f"RAPIDS does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

from gpuetl.backends import gpu  # noqa: E402
from gpuetl.backends.gpu_regex import check_regex, leading_dotall, to_cudf_regex  # noqa: E402
from gpuetl.backends.gpu_values import timestamp_plan  # noqa: E402
from gpuetl.parsing import PRESETS, preset, template_to_regex  # noqa: E402


def test_the_backend_module_imports_with_the_real_libraries():
    from gpuetl.types import ARROW_TYPES

    assert gpu.GpuBackend.name == "gpu" and gpu.GpuBackend.xd is cudf
    assert len(gpu.RAPIDS_CALLS) >= 20
    assert set(ARROW_TYPES) <= set(gpu._PLC_TYPES)        # every contract type has device nulls


# -- RAPIDS calls ------------------------------------------------------------------------------

def _resolve(dotted: str):
    """The object the backend's code reaches by that path: attributes first (as `plc.X` does),
    importing a submodule only where no attribute has the name."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for k, name in enumerate(parts[1:], start=2):
        obj = getattr(obj, name) if hasattr(obj, name) else importlib.import_module(".".join(parts[:k]))
    return obj


def _stub_signature(obj) -> inspect.Signature:
    """A Cython class's or method's signature from the package's .pyi stub."""
    owner = obj if inspect.isclass(obj) else getattr(obj, "__objclass__", None)
    module = importlib.import_module((owner or obj).__module__)
    stub = os.path.join(os.path.dirname(module.__file__), os.path.basename(module.__file__).split(".")[0] + ".pyi")
    tree = ast.parse(open(stub).read())
    cls_name = (owner or obj).__name__ if owner is not None else None
    func_name = "__init__" if inspect.isclass(obj) else obj.__name__
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == func_name:
                    return _from_ast(item, drop_first=not any(
                        isinstance(d, ast.Name) and d.id == "staticmethod" for d in item.decorator_list))
    raise LookupError(f"no stub for {obj!r} in {stub}")


def _from_ast(fn: ast.FunctionDef, drop_first: bool) -> inspect.Signature:
    args = fn.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [inspect.Parameter(a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                default=inspect.Parameter.empty if d is None else None)
              for a, d in zip(positional, defaults)]
    if args.vararg:
        params.append(inspect.Parameter(args.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    params += [inspect.Parameter(a.arg, inspect.Parameter.KEYWORD_ONLY,
                                 default=inspect.Parameter.empty if d is None else None)
               for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        params.append(inspect.Parameter(args.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params[1:] if drop_first and params else params)


def _doc_signature(obj) -> inspect.Signature:
    """A Cython class's signature from the first line of its docstring (Cython's embedsignature:
    `UnownedMemory(intptr_t ptr, size_t size, owner, int device_id=-1)`), C types dropped."""
    for line in (obj.__doc__ or "").splitlines():
        m = re.match(r"\s*(?:\w+)\((.*)\)\s*$", line)
        if m:
            params = []
            for item in filter(None, (x.strip() for x in m.group(1).split(","))):
                name, _, default = item.partition("=")
                params.append(inspect.Parameter(name.split()[-1], inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                default=None if default else inspect.Parameter.empty))
            return inspect.Signature(params)
    raise LookupError(f"no signature for {obj!r}")


def _signature(obj) -> inspect.Signature:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        pass
    try:
        return _stub_signature(obj)
    except (OSError, LookupError):
        return _doc_signature(obj)


def _class_keywords(cls) -> set[str]:
    """Keywords a class's constructor passes on through **kwargs: its bases' named parameters."""
    names: set[str] = set()
    for base in cls.__mro__[1:]:
        try:
            names |= set(inspect.signature(base.__init__).parameters)
        except (TypeError, ValueError):
            pass
    from distributed import LocalCluster, Nanny

    if issubclass(cls, LocalCluster):   # its **worker_kwargs become each worker's Nanny's (preload, ...)
        names |= set(inspect.signature(Nanny.__init__).parameters)
    return names


@pytest.mark.parametrize("dotted, positional, keywords", gpu.RAPIDS_CALLS, ids=[c[0] for c in gpu.RAPIDS_CALLS])
def test_every_rapids_call_exists_and_accepts_the_arguments_used(dotted, positional, keywords):
    obj = _resolve(dotted)
    sig = _signature(obj)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()) and keywords \
            and not set(keywords) & set(sig.parameters):
        sig = _doc_signature(obj)          # a bare (*args, **kwargs) wrapper: the docstring's
    params = list(sig.parameters.values())
    unbound_method = not inspect.isclass(obj) and params and params[0].name == "self"   # taken from the class
    args = [None] * (positional + (1 if unbound_method else 0))
    sig.bind(*args, **{k: None for k in keywords})
    named = {p.name for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD}
    passed_on = set(keywords) - named
    if passed_on:                # taken by **kwargs: a base class must name each one
        assert inspect.isclass(obj), f"{dotted}: {sorted(passed_on)} vanish into **kwargs"
        assert passed_on <= _class_keywords(obj), f"{dotted}: no base takes {sorted(passed_on - _class_keywords(obj))}"


@pytest.mark.parametrize("dotted", gpu.RAPIDS_CONSTANTS)
def test_every_enum_member_the_backend_names_exists(dotted):
    module, _, member = dotted.rpartition(".")
    assert hasattr(_resolve(module), member), dotted


def test_the_signature_check_can_fail():
    with pytest.raises(TypeError):
        _signature(_resolve("pylibcudf.strings.extract.extract")).bind(None, None, nonexistent=1)
    with pytest.raises(TypeError):
        _signature(_resolve("pylibcudf.Column")).bind(None)
    with pytest.raises(TypeError):
        _doc_signature(_resolve("cupy.ndarray")).bind(None, memptr=None, nonexistent=1)
    assert list(_doc_signature(_resolve("cupy.cuda.UnownedMemory")).parameters) == ["ptr", "size", "owner", "device_id"]


# -- regexes -----------------------------------------------------------------------------------

def _compile(pattern: str):
    return plc.strings.regex_program.RegexProgram.create(pattern, plc.strings.regex_flags.RegexFlags.DEFAULT)


TEMPLATES = ["<Date> <Time> <Level>: <Content>", r"\[<Time>\] <Level> <Component> - <Content>",
             r"\(<A>\) (?:x|y)<B> [(]<C>", "<<PRI>> ?<Msg>", "<Content>", r"<Component>\[<PID>\]?: <Content>"]
FORMATS = [None, "%d/%b/%Y:%H:%M:%S %z", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d", "%d %b %Y", "%Y/%m/%d %H:%M:%S%%"]
USER_PATTERNS = [r"^(?P<a>\d+)\s+(?P<b>\S*)\W(?P<c>[\w.-]+)$", r"\d{3}-\d{4}", r"[^\s@]+@[^\s@]+\.[a-z]{2,}",
                 r"(?:ab|cd)+\z", r"^\x41[\x00-\x1f]*$", r"a{0,999}", r"\$\{[A-Z_]+\}", r"[\]\[\\-]",
                 r"(?P<k>[A-Za-z_]+)=(?P<v>\"[^\"]*\"|\S+)", r"^\A\t\n\r\f\v"]


def _translated_patterns():
    out = []
    for name in sorted(PRESETS):
        if name != "json":
            out.append((f"preset {name}", to_cudf_regex(preset(name).regex)))
    out += [(f"template {t!r}", to_cudf_regex(template_to_regex(t)[0])) for t in TEMPLATES]
    out += [(f"user {p!r}", to_cudf_regex(p)) for p in USER_PATTERNS]
    out += [(f"timestamp {f!r}", timestamp_plan(f).regex) for f in FORMATS]
    out += [(f"backend #{i}", p) for i, p in enumerate(gpu.device_patterns())]
    from gpuetl.steps.mask import PATTERNS

    out += [(f"mask {k}", to_cudf_regex(p)) for k, p in sorted(PATTERNS.items())]
    return out


@pytest.mark.parametrize("what, pattern", _translated_patterns(), ids=[w for w, _ in _translated_patterns()])
def test_every_regex_handed_to_libcudf_compiles_there(what, pattern):
    assert _compile(pattern) is not None


def test_user_patterns_are_ones_the_dialect_accepts():
    assert all(check_regex(p) is None for p in USER_PATTERNS)


def _multiline_patterns():
    """Multi-line records (source.multiline): templates and regexes under (?s), which the backend
    runs with libcudf's DOTALL flag."""
    import yaml
    from pathlib import Path

    java = yaml.safe_load((Path(__file__).resolve().parents[2] / "pipelines" / "java_app.yaml").read_text())
    patterns = [template_to_regex(t, multiline=True)[0] for t in TEMPLATES] + [java["parse"]["regex"],
                                                                                r"(?s)^S (?P<rest>.*)$"]
    return [leading_dotall(p) for p in patterns]


@pytest.mark.parametrize("body, dotall", _multiline_patterns())
def test_multiline_regexes_compile_with_dotall(body, dotall):
    assert dotall and check_regex("(?s)" + body) is None
    flags = plc.strings.regex_flags.RegexFlags
    assert plc.strings.regex_program.RegexProgram.create(to_cudf_regex(body), flags.DOTALL) is not None


@pytest.mark.parametrize("pattern", [r"(?=x)", r"a**", r"(ab", r"[z-a]"])
def test_libcudfs_compiler_refuses_what_it_cannot_run(pattern):
    """The compile check above can fail: libcudf raises for patterns it cannot run."""
    with pytest.raises(RuntimeError):
        _compile(pattern)


def test_no_real_control_characters_reach_the_compiler():
    """A pattern must spell control characters as escapes (a raw NUL never matches in libcudf)."""
    for what, pattern in _translated_patterns():
        assert not re.search(r"[\x00-\x08\x0e-\x1f]", pattern), what


def test_every_sink_compression_has_a_libcudf_codec():
    import typing

    from gpuetl.spec.models import Sink

    choices = typing.get_args(Sink.model_fields["compression"].annotation)
    assert "zstd" in choices
    for name in choices:
        assert name == "none" or hasattr(plc.io.types.CompressionType, name.upper()), name


# -- the readers' settings, built with the real pylibcudf (no device needed to build them) ------

JSON_COLUMN_SETS = [["a"], ["a", "user.id", "user.name"], ["items[0].sku", "items[1].qty", "m[0][1]"],
                    ["service.name", "service.version", "x"]]


@pytest.mark.parametrize("names", JSON_COLUMN_SETS, ids=["+".join(n) for n in JSON_COLUMN_SETS])
def test_the_json_reader_takes_the_settings_and_dtypes_the_backend_builds(names):
    from gpuetl.backends.gpu_records import json_reader_options
    from gpuetl.backends.gpu_formats import json_read_tree
    from gpuetl.sources.json_fields import JsonColumn, JsonRead, parse_path

    tree = json_read_tree(JsonRead(tuple(JsonColumn(n, "int64", parse_path(n)) for n in names)))
    options = json_reader_options(plc.io.SourceInfo([b'{"r": {}}\n']), tree)
    assert isinstance(options, plc.io.json.JsonReaderOptions)


@pytest.mark.parametrize("delimiter, null_values", [(",", ("",)), ("\t", ("", "NA")), (";", ()), ("|", ("NA",))])
def test_the_csv_reader_takes_the_settings_the_backend_builds(delimiter, null_values):
    from gpuetl.backends.gpu_records import csv_reader_options

    options = csv_reader_options(plc.io.SourceInfo([b"a,b\n"]), ("a", "b", "c"), delimiter, null_values)
    assert isinstance(options, plc.io.csv.CsvReaderOptions)


def test_a_malformed_dtype_tree_is_refused_by_the_reader_options():
    """The options check above can fail: a child list that is not (name, type, children)."""
    with pytest.raises((ValueError, TypeError)):
        plc.io.json.JsonReaderOptions.builder(plc.io.SourceInfo([b"{}\n"])).dtypes(
            [("r", plc.DataType(plc.TypeId.STRUCT), [("a", "string", [])])]).build()
