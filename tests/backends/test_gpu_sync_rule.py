"""The sync budget's rule (docs/gpu.md, "The sync budget"): every device -> host read of a value
in the GPU backend goes through gpu_device.to_host_value, which counts it. Read from the source
(no RAPIDS needed): outside to_host_value (and nonzero_rows, CuPy's nonzero whose size is read),
no module of the GPU backend copies to the host (`asnumpy`, `.get()`, `.item()`, `.values_host`,
`.to_pandas()`, `.to_arrow()`), finds nonzero rows (`flatnonzero`, `nonzero`, `argwhere`), or
turns a reduction into a Python value (`int(x.sum())`, `if x.any():`, `not x.all()`). The few
calls of those names that read no device value are listed here with the reason."""

from __future__ import annotations

import ast
from pathlib import Path

import gpuetl

BACKENDS = Path(gpuetl.__file__).parent / "backends"
COPIES = {"asnumpy", "get", "item", "to_pandas", "to_arrow"}
NONZERO = {"flatnonzero", "nonzero", "argwhere"}
REDUCTIONS = {"any", "all", "sum", "min", "max", "mean", "count_nonzero"}
COUNTED = {("gpu_device.py", "to_host_value"), ("gpu_device.py", "nonzero_rows")}
# calls of those names that read no device value: (file, the call's source text) -> why
NOT_DEVICE_READS = {
    ("gpu.py", "self._reads.get()"): "KvikIO's statistics (host counters)",
    ("gpu.py", "fh.pread(dest, len(dest), file_offset).get()"): "waits for KvikIO's read future (bytes read)",
    ("gpu.py", "remote.pread(dest, len(dest), file_offset).get()"): "waits for KvikIO's read future (bytes read)",
    ("gpu_spill.py", "dtype.to_arrow()"): "a cuDF dtype's Arrow type (no data)",
    ("gpu_images.py", "cp.asnumpy(self.data[lo:hi], stream=stream, out=staged[pos:pos + hi - lo], "
                      "blocking=stream is None)"): "pixels staged to pinned memory on a stream (images: the "
                                                   "ledger's bytes; not a read of a value)",
}


def gpu_modules() -> list[Path]:
    """The GPU backend's modules: backends/gpu*.py, or a backends/gpu/ package once it grows."""
    return sorted(p for p in BACKENDS.rglob("*.py") if p.relative_to(BACKENDS).as_posix().startswith("gpu"))


def _name(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _is_reduction(node) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in REDUCTIONS


def device_reads(source: str, filename: str) -> list[str]:
    """Every device -> host read in `source` that is not made by the counted functions."""
    tree = ast.parse(source)
    found: list[str] = []
    skip: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and (filename, fn.name) in COUNTED:
            skip |= {id(n) for n in ast.walk(fn)}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        what = None
        if isinstance(node, ast.Call):
            name = _name(node)
            if name in COPIES and (name != "get" or not node.args) and isinstance(node.func, ast.Attribute):
                what = f"a copy to the host ({name})"
            elif name in NONZERO:
                what = f"a nonzero search whose size is read ({name})"
            elif name in ("int", "float", "bool") and len(node.args) == 1 and _is_reduction(node.args[0]):
                what = f"a reduction read as a Python {name}"
        elif isinstance(node, ast.Attribute) and node.attr == "values_host":
            what = "a copy to the host (values_host)"
        elif isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)) and _is_reduction(node.test):
            what = "a reduction tested in Python"
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and _is_reduction(node.operand):
            what = "a reduction tested in Python"
        elif isinstance(node, ast.BoolOp) and any(_is_reduction(v) for v in node.values):
            what = "a reduction tested in Python"
        if what is None:
            continue
        text = ast.unparse(node)
        if (filename, text) in NOT_DEVICE_READS:
            continue
        found.append(f"{filename}:{node.lineno}: {what}: {text}")
    return found


def test_every_device_to_host_read_goes_through_the_counted_function():
    modules = gpu_modules()
    # the backend and its facets, and the pure-Python modules split by job (each may hold xp code
    # a device runs: utf8_bad_bytes, group_starts)
    assert {"gpu.py", "gpu_device.py", "gpu_records.py", "gpu_spill.py", "gpu_text.py", "gpu_images.py",
            "gpu_detect.py", "gpu_tallies.py", "gpu_values.py", "gpu_pieces.py", "gpu_regex.py", "gpu_formats.py",
            "gpu_kvikio.py", "gpu_worker.py"} <= {p.name for p in modules}
    found = [hit for p in modules for hit in device_reads(p.read_text(), p.relative_to(BACKENDS).as_posix())]
    assert found == []


def test_the_rule_sees_each_form_of_read():
    sample = '''
def f(x, cp, s, fh):
    a = cp.asnumpy(x)
    b = x.get()
    c = int(x.sum())
    if x.any():
        pass
    d = not s.all()
    e = s.values_host
    g = s.to_pandas()
    h = cp.flatnonzero(x)
    i = x.item()
    j = x.get("key")            # a dict's get: no device read
    k = len(x)                  # host metadata
    return fh.pread(x, 1, 0).get()
'''
    found = device_reads(sample, "sample.py")
    assert sorted(int(line.split(":")[1]) for line in found) == [3, 4, 5, 6, 8, 9, 10, 11, 12, 15]
    counted = "def to_host_value(values, why):\n    return cp.asnumpy(values)\n"
    assert device_reads(counted, "gpu_device.py") == []
    assert device_reads(counted, "gpu.py") != []
