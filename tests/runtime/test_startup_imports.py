"""Start-up imports only what every run needs: Pillow comes with the first image step, not with
the step registry (`import gpuetl`, the command's start)."""

import subprocess
import sys


def test_importing_gpuetl_and_its_command_leaves_pillow_out():
    code = ("import sys, gpuetl, gpuetl.cli; from gpuetl.steps.base import discover; "
            "assert 'decode' in discover(); "
            "print('PIL' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_importing_gpuetl_loads_no_heavy_library_until_it_is_used():
    """`import gpuetl` (a library caller's, or the command's first line) loads no pandas, Dask,
    distributed, polars, bokeh or backend: they come with the first pipeline loaded or run."""
    heavy = ("pandas", "dask", "distributed", "polars", "bokeh", "gpuetl.backends")
    code = ("import sys, gpuetl; "
            f"print(sorted(m for m in sys.modules if m.startswith({heavy!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    code = "import sys, gpuetl; gpuetl.load; print('pandas' in sys.modules)"     # and they do come
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
