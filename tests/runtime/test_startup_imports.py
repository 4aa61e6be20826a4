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
