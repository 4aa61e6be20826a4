"""The import layers of pyproject.toml's [tool.importlinter] hold: `make test` and `make test-fast` run
`lint-imports` here, once."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports() -> Path:
    tool = Path(sys.executable).parent / "lint-imports"
    if not tool.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    return tool


def test_the_layers_hold():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(_lint_imports())], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"Contracts: [1-9]\d* kept, 0 broken", done.stdout), done.stdout     # every contract kept


def test_an_upward_import_breaks_them(tmp_path):
    """The contract can fail: a copy of the package where parsing imports the runtime is refused."""
    import shutil

    shutil.copytree(ROOT / "gpuetl", tmp_path / "gpuetl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "gpuetl" / "parsing" / "template.py", "a") as f:
        f.write("\nfrom ..runtime import run as _upward  # noqa: E402,F401\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([str(_lint_imports())], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "gpuetl.parsing is not allowed to import gpuetl.runtime" in done.stdout
