"""Hostile runs on worker processes (`scheduler="processes"`): a worker process that dies mid-run
(SIGKILL) and a plugin step that the worker processes cannot import fail the run at once with
gpuetl's error naming the cause (not a hang waiting for a worker nobody starts again, nor
distributed's KilledWorker), commit nothing, leave no worker process behind and change nothing
outside the dataset folder."""

from __future__ import annotations

import os
from pathlib import Path
import sys
import textwrap
import time

import pytest

import gpuetl
from gpuetl.errors import GpuetlError
from gpuetl.samples import write_access_logs
from gpuetl.steps.base import STEPS

from .test_worker_processes_script import children

PLUGIN = textwrap.dedent('''
    import os, signal
    from pydantic import RootModel
    import gpuetl
    from gpuetl.steps.base import RowStep

    class Times(RootModel[int]):
        """unused"""

    class DieOnce(RowStep):
        name = "hostile_die_once"
        summary = "SIGKILL the process running the first task that sees no flag file."
        example = "- hostile_die_once: 1"
        Params = Times

        def transform(self, df, backend):
            flag = os.environ.get("HOSTILE_DIE_FLAG")
            if flag and not os.path.exists(flag):
                open(flag, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            return df

    gpuetl.register_step(DieOnce)
''')


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A plugin module outside every installed path, imported (and its step registered) in this
    process only → the folder it lies in."""
    folder = tmp_path / "plugin"
    folder.mkdir()
    (folder / "hostile_die_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(folder))
    import hostile_die_plugin  # noqa: F401

    yield folder
    STEPS.pop("hostile_die_once", None)
    sys.modules.pop("hostile_die_plugin", None)


def pipeline(work):
    (work / "in").mkdir(parents=True)
    write_access_logs(work / "in" / "a.log", lines=3000, bad_every=40)
    return {"version": 1, "name": "die", "source": {"type": "text", "path": "in/*.log", "blocksize": "32KiB"},
            "parse": {"preset": "apache_combined"}, "steps": [{"hostile_die_once": 1}],
            "on_error": "quarantine", "sink": {"path": "out"}}


def failed_run(work, surroundings) -> tuple[GpuetlError, float]:
    spec = pipeline(work)
    before = children()
    started = time.monotonic()
    with surroundings(work, dataset=work / "out"), pytest.raises(GpuetlError) as err:
        gpuetl.Pipeline.from_dict(spec, base_dir=work).run(backend="cpu", scheduler="processes")
    took = time.monotonic() - started
    assert children() == before, "a worker process was left behind"
    out = work / "out"
    assert not (out / "_SUCCESS").exists() and not (out / "_manifest.json").exists()
    assert not any(p.suffix == ".parquet" and "_tmp" not in p.parts for p in out.rglob("*")) if out.exists() else True
    return err.value, took


@pytest.mark.slow
def test_a_worker_process_killed_mid_run_fails_the_run_at_once_and_commits_nothing(tmp_path, plugin, monkeypatch,
                                                                                  surroundings):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(plugin), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("HOSTILE_DIE_FLAG", str(tmp_path / "died"))
    err, took = failed_run(tmp_path / "work", surroundings)
    assert (tmp_path / "died").exists(), "the worker process was killed"
    assert "a worker process of this run died" in str(err) and "nothing was committed" in str(err)
    assert err.hint and took < 60


@pytest.mark.slow
def test_a_plugin_the_worker_processes_cannot_import_is_a_clear_error_not_a_hang(tmp_path, plugin, surroundings):
    """The step's module is on this process's sys.path only: each worker fails to unpickle the
    task and dies. Before, the run waited forever for a worker; now it fails in seconds."""
    err, took = failed_run(tmp_path / "work", surroundings)
    assert "a worker process of this run died" in str(err) and "plugin" in str(err)
    assert "PYTHONPATH" in err.hint and took < 60


SLOW_PLUGIN = textwrap.dedent('''
    import time
    from pydantic import RootModel
    import gpuetl
    from gpuetl.steps.base import RowStep

    class Seconds(RootModel[float]):
        """how long each partition sleeps"""

    class Nap(RowStep):
        name = "hostile_nap"
        summary = "Sleep in each partition."
        example = "- hostile_nap: 1"
        Params = Seconds

        def transform(self, df, backend):
            time.sleep(self.params.root)
            return df

    gpuetl.register_step(Nap)
''')

CALLER = textwrap.dedent('''
    import sys
    import hostile_nap_plugin
    import gpuetl
    spec = {"version": 1, "name": "nap", "source": {"type": "text", "path": "in/*.log", "blocksize": "8KiB"},
            "parse": {"preset": "apache_combined"}, "steps": [{"hostile_nap": 1.0}],
            "on_error": "quarantine", "sink": {"path": "out"}}
    gpuetl.Pipeline.from_dict(spec, base_dir=sys.argv[1]).run(backend="cpu", scheduler="processes")
''')


def _children_of(pid: int) -> list[int]:
    found = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(p) for p in f.read().split()]
    except FileNotFoundError:
        pass
    return found


@pytest.mark.slow
def test_ctrl_c_in_the_caller_leaves_no_worker_process_and_commits_nothing(tmp_path, surroundings):
    import signal
    import subprocess

    root = Path(__file__).resolve().parents[2]
    work = tmp_path / "work"
    (work / "in").mkdir(parents=True)
    write_access_logs(work / "in" / "a.log", lines=3000, bad_every=40)
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "hostile_nap_plugin.py").write_text(SLOW_PLUGIN)
    (tmp_path / "caller.py").write_text(CALLER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(tmp_path / "plugin")])}
    with surroundings(work, dataset=work / "out"):
        caller = subprocess.Popen([sys.executable, str(tmp_path / "caller.py"), str(work)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        workers: list[int] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not workers:
            workers = _children_of(caller.pid)
            time.sleep(0.1)
        time.sleep(4)                            # the worker processes connect and run the naps (~35 s in all)
        workers = _children_of(caller.pid) or workers
        assert caller.poll() is None, "the run was still going"
        assert workers, "the run started worker processes"
        caller.send_signal(signal.SIGINT)
        _, err = caller.communicate(timeout=60)
    assert caller.returncode != 0 and "KeyboardInterrupt" in err
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{pid}") for pid in workers):
        time.sleep(0.1)
    assert not [pid for pid in workers if os.path.exists(f"/proc/{pid}")], "a worker process outlived Ctrl-C"
    assert not (work / "out" / "_SUCCESS").exists() and not (work / "out" / "_manifest.json").exists()


def test_a_run_given_a_client_starts_no_worker_process(tmp_path, monkeypatch, surroundings):
    """client=: the caller's cluster runs the tasks; gpuetl starts no process of its own, even
    when the caller also says scheduler='processes'."""
    import asyncio
    import subprocess

    from distributed import Client, LocalCluster

    started = []
    real_exec, real_popen = asyncio.create_subprocess_exec, subprocess.Popen

    async def exec_(*args, **kw):
        started.append(args)
        return await real_exec(*args, **kw)

    def popen(*args, **kw):
        started.append(args)
        return real_popen(*args, **kw)

    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "a.log", lines=500, bad_every=40)
    spec = {"version": 1, "name": "given", "source": {"type": "text", "path": "in/*.log"},
            "parse": {"preset": "apache_combined"}, "on_error": "quarantine", "sink": {"path": "out"}}
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        before = children()
        monkeypatch.setattr(asyncio, "create_subprocess_exec", exec_)
        monkeypatch.setattr(subprocess, "Popen", popen)
        with surroundings(tmp_path, dataset=tmp_path / "out"):
            result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", client=client,
                                                                             scheduler="processes")
        assert children() == before and not started
    c = result.counts
    assert c["rows_in"] == 500 and c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
