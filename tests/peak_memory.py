"""Peak memory of a `gpuetl` command, for the slow tier's bounds tests.

The command runs under a small wrapper process that reports its children's peak resident set
(`RUSAGE_CHILDREN`'s ru_maxrss: the largest process among the command and its reaped workers).
The wrapper matters: a process started from pytest inherits pytest's own high-water mark through
fork (or vfork) and exec, so measured directly it would read pytest's size, not the command's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

WRAPPER = ("import json, resource, subprocess, sys\n"
           "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
           "print(json.dumps({'rc': r.returncode, 'out': r.stdout[-4000:], 'err': r.stderr[-4000:],\n"
           "                  'peak_mib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))\n")


def gpuetl_peak(*args: str, cwd=None, timeout: float = 600) -> dict:
    """{'rc', 'out', 'err', 'peak_mib'} of `python -m gpuetl ARGS...` (the largest process's peak RSS)."""
    import gpuetl

    here = os.path.dirname(os.path.dirname(os.path.abspath(gpuetl.__file__)))      # the gpuetl under test
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", WRAPPER, sys.executable, "-m", "gpuetl", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def write_in_chunks(fh, byte: bytes, n: int, chunk: int = 1 << 20) -> None:
    """n copies of `byte` written a chunk at a time (never held whole: this process's size is not
    what is measured, but it stays small anyway)."""
    while n > 0:
        k = min(n, chunk)
        fh.write(byte * k)
        n -= k
