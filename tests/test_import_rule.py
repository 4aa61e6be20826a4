"""DESIGN.md's one-place rule: only gpuetl/backends/gpu* imports GPU libraries."""

import ast
from pathlib import Path

import gpuetl

GPU_MODULES = {"cudf", "cupy", "cupyx", "kvikio", "rmm", "dask_cudf", "dask_cuda", "pylibcudf", "pynvml",
               "nvidia", "cvcuda"}   # nvidia: nvImageCodec (from nvidia import nvimgcodec)
PACKAGE = Path(gpuetl.__file__).parent


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module.split(".")[0]


def test_gpu_libraries_are_imported_only_by_the_gpu_backend():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("backends/gpu"):
            continue
        offenders += [f"{rel}:{line} imports {name}" for line, name in _imports(path) if name in GPU_MODULES]
    assert offenders == []


def test_the_rule_checker_sees_imports(tmp_path):
    sample = tmp_path / "x.py"
    sample.write_text("import cudf\nfrom cupy import asarray\nimport os\n")
    assert [name for _, name in _imports(sample)] == ["cudf", "cupy", "os"]


def test_importing_gpuetl_loads_no_gpu_library():
    import subprocess
    import sys

    code = ("import sys, gpuetl, gpuetl.cli, gpuetl.runtime.graph, gpuetl.runtime.run; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(GPU_MODULES)!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
