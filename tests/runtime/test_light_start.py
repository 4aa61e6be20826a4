"""A light start: with no scheduler named, an input a cluster cannot pay for runs without one
(dask's threaded scheduler in this process); a named scheduler, an asked-for dashboard, a larger
input or a backend with a cluster of its own (GPUs) keep the cluster."""

import json
import subprocess
import sys
import textwrap
from contextlib import nullcontext
from pathlib import Path

import pytest

from gpuetl.backends.cpu import CpuBackend
from gpuetl.runtime.executor import LIGHT_START_BYTES, chosen_scheduler, open_executor

ROOT = Path(__file__).resolve().parents[2]


class OwnClusterBackend:
    """A backend that brings its own cluster, as the GPU backend does (local_cluster gives a
    context manager rather than None)."""

    def local_cluster(self, *, quiet=True, dashboard_address=None):
        return nullcontext()


def test_a_small_input_on_the_cpu_runs_without_a_cluster_unless_something_asks_for_one():
    cpu = CpuBackend()
    small, large = LIGHT_START_BYTES - 1, LIGHT_START_BYTES
    assert chosen_scheduler(None, cpu, small) == "threads"
    assert chosen_scheduler(None, cpu, 0) == "threads"
    assert chosen_scheduler(None, cpu, large) is None                       # the local cluster
    assert chosen_scheduler(None, cpu, None) is None                        # size unknown
    assert chosen_scheduler("local", cpu, small) == "local"                 # named: kept
    assert chosen_scheduler("sync", cpu, small) == "sync"
    assert chosen_scheduler("tcp://10.0.0.5:8786", cpu, small) == "tcp://10.0.0.5:8786"
    assert chosen_scheduler(None, cpu, small, dashboard_address="127.0.0.1:0") is None
    assert chosen_scheduler(None, OwnClusterBackend(), small) is None


def test_open_executor_with_a_small_input_starts_no_cluster():
    with open_executor(None, CpuBackend(), input_bytes=1000) as executor:
        assert executor.client is None and executor.scheduler == "threads"
        assert executor.in_process


RUN = textwrap.dedent("""
    import json, sys, time
    import gpuetl
    spec = json.loads(sys.argv[1])
    result = gpuetl.Pipeline.from_dict(spec, base_dir=sys.argv[2]).run(backend="cpu")
    print(json.dumps({"counts": result.counts, "distributed": "distributed" in sys.modules}))
""")


@pytest.mark.slow
def test_a_library_run_of_a_small_input_never_imports_distributed(tmp_path):
    """The whole run, in a fresh interpreter as a caller's program: the dataset is committed, the
    accounting holds, and no cluster was started (distributed is not even imported)."""
    line = '10.0.0.{i} - - [10/Oct/2000:13:55:36 -0700] "GET /a{i} HTTP/1.0" {s} 2326 "-" "curl"\n'
    (tmp_path / "access.log").write_text("".join(line.format(i=i, s=200 + 300 * (i % 2)) for i in range(40))
                                         + "garbage\n")
    spec = {"version": 1, "name": "light", "source": {"type": "text", "path": "access.log"},
            "parse": {"preset": "apache_combined"}, "steps": [{"filter": "status < 400"}],
            "on_error": "quarantine", "sink": {"type": "parquet", "path": "out"}}
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", RUN, json.dumps(spec), str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    c = got["counts"]
    assert (c["rows_in"], c["rows_out"], c["filtered"], c["quarantined"]) == (41, 20, 20, 1)
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    assert got["distributed"] is False
    assert (tmp_path / "out" / "_SUCCESS").exists()


@pytest.mark.slow
def test_the_command_at_a_terminal_runs_a_small_input_without_a_cluster_or_dashboard(tmp_path, monkeypatch):
    """A person at a terminal gets the light start too: no cluster, so no dashboard link; the
    dataset is committed all the same."""
    import io

    import yaml

    from gpuetl import samples
    from gpuetl.cli import main

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    samples.write_access_logs(tmp_path / "a.log", lines=40, bad_every=10)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "name": "light", "source": {"type": "text", "path": "a.log"},
                                    "parse": {"preset": "apache_combined"}, "on_error": "quarantine",
                                    "sink": {"path": "out"}}))
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert main(["run", str(path), "--backend", "cpu", "--no-progress", "--json"]) == 0
    assert "dashboard" not in sys.stderr.getvalue()
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    c = manifest["counts"]
    assert (c["rows_in"], c["quarantined"]) == (40, 4)
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
