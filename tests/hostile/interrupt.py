"""Ctrl-C in a `gpuetl run`, as a person gives it at a terminal: shared by the hostile tests."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def interrupted_run(pipe: Path, ready, *argv: str) -> subprocess.CompletedProcess:
    """`gpuetl run pipe` (stderr a pipe, so no dashboard), SIGINT once ready() says so. The child
    starts with SIGINT at its default, as a shell's foreground job. A run that ends before it can
    be interrupted (a fast machine) skips the test."""
    proc = subprocess.Popen([sys.executable, "-m", "gpuetl", "run", str(pipe), "--no-progress", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while proc.poll() is None and time.time() < deadline and not ready():
        time.sleep(0.01)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the run finished before it could be interrupted (a fast machine)")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
