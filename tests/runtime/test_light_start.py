"""A light start: with no scheduler named, a run on the CPU starts no cluster (dask's schedulers
on a thread pool in this process, results handed over in order); a named scheduler, an
asked-for dashboard, a person at a terminal with an input worth watching or a backend with a
cluster of its own (GPUs) get the cluster."""

import json
import subprocess
import sys
import textwrap
from contextlib import nullcontext
from pathlib import Path

import dask
import pytest

from gpuetl.backends.cpu import CpuBackend
from gpuetl.runtime.executor import DASHBOARD_WORTH_BYTES, chosen_scheduler, open_executor

ROOT = Path(__file__).resolve().parents[2]


class OwnClusterBackend:
    """A backend that brings its own cluster, as the GPU backend does (local_cluster gives a
    context manager rather than None)."""

    def local_cluster(self, *, quiet=True, dashboard_address=None):
        return nullcontext()


def test_a_run_on_the_cpu_starts_no_cluster_unless_something_asks_for_one():
    cpu = CpuBackend()
    small, large = DASHBOARD_WORTH_BYTES - 1, DASHBOARD_WORTH_BYTES
    for size in (0, small, large, 100 * large, None):
        assert chosen_scheduler(None, cpu, size) == "threads", size
    assert chosen_scheduler(None, cpu, small, watched=True) == "threads"     # too short to watch
    assert chosen_scheduler(None, cpu, large, watched=True) is None           # the local cluster, its dashboard
    assert chosen_scheduler(None, cpu, None, watched=True) is None            # size unknown
    assert chosen_scheduler("local", cpu, small) == "local"                   # named: kept
    assert chosen_scheduler("sync", cpu, large) == "sync"
    assert chosen_scheduler("tcp://10.0.0.5:8786", cpu, small) == "tcp://10.0.0.5:8786"
    assert chosen_scheduler(None, cpu, small, dashboard_address="127.0.0.1:0") is None
    assert chosen_scheduler(None, OwnClusterBackend(), small) is None


@pytest.mark.parametrize("size", [1000, 10 * DASHBOARD_WORTH_BYTES])
def test_open_executor_on_the_cpu_starts_no_cluster(size):
    with open_executor(None, CpuBackend(), input_bytes=size) as executor:
        assert executor.client is None and executor.scheduler == "threads"
        assert executor.in_process


def test_ordered_hands_results_over_in_task_order_with_at_most_ahead_started_beyond_the_one_taken():
    """Independent tasks run on the pool in task order, whatever order they finish in; a task is
    started only while fewer than `ahead` results wait beyond the one the caller holds."""
    import threading
    import time

    started, lock = [], threading.Lock()

    def work(i):
        with lock:
            started.append(i)
        time.sleep(0.02 * (i % 3))         # later tasks may finish first
        return i

    tasks = [dask.delayed(work, pure=False)(i, dask_key_name=f"work-{i}") for i in range(12)]
    with open_executor("threads", CpuBackend()) as executor:
        taken = []
        for result in executor.ordered(tasks, ahead=2):
            with lock:
                assert len(started) <= len(taken) + 1 + 2 + 1, (started, taken)   # this one, 2 ahead, the next
            taken.append(result)
    assert taken == list(range(12))


def test_ordered_tasks_that_share_work_do_it_once_and_come_back_in_order():
    calls = []
    shared = dask.delayed(lambda: calls.append(1) or 10, pure=False)(dask_key_name="shared")
    tasks = [dask.delayed(lambda s, i: s + i, pure=False)(shared, i, dask_key_name=f"use-{i}") for i in range(6)]
    with open_executor("threads", CpuBackend()) as executor:
        assert list(executor.ordered(tasks, independent=False)) == [10 + i for i in range(6)]
    assert calls == [1]


@pytest.mark.parametrize("independent", [True, False])
def test_ordered_raises_the_tasks_error_and_starts_nothing_after_it(independent):
    from gpuetl.errors import GpuetlError

    ran = []

    def work(i):
        ran.append(i)
        if i == 2:
            raise GpuetlError("partition 2 is broken")
        return i

    tasks = [dask.delayed(work, pure=False)(i, dask_key_name=f"w-{i}") for i in range(40)]
    with open_executor("threads", CpuBackend()) as executor:
        got = []
        with pytest.raises(GpuetlError, match="partition 2 is broken"):
            for result in executor.ordered(tasks, independent=independent, ahead=2):
                got.append(result)
        executor.settle()
    if independent:
        assert got == [0, 1]
        assert max(ran) <= 2 + 2 + 2, ran          # the window, not all 40
    else:                                          # one scheduler call: results before the error, in order
        assert got == list(range(len(got))) and len(got) <= 2


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
