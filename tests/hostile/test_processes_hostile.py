"""Hostile runs on worker processes (`scheduler="processes"`): a worker process that dies mid-run
(SIGKILL) and a plugin step that the worker processes cannot import fail the run at once with
gpuetl's error naming the cause (not a hang waiting for a worker nobody starts again, nor
distributed's KilledWorker), commit nothing, leave no worker process behind and change nothing
outside the dataset folder."""

from __future__ import annotations

import os
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
