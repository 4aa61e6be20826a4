"""`--scheduler processes`: gpuetl's own cluster with a worker process per core, each started as
its own program (`python -m gpuetl.runtime.worker`, never multiprocessing re-running the
caller's script). The bytes do not depend on the worker count; the run's tasks really run in
other processes; nothing of the cluster outlives the run."""

import hashlib
import json
import os

import pytest

from conftest import access_spec
from hostile.test_worker_processes_script import children
from gpuetl import Pipeline
from gpuetl.runtime import executor

STEPS = [
    {"filter": "status >= 200 and method in ['GET', 'POST']"},
    {"derive": {"path_len": "len(path)"}},
    {"dedupe": {"on": ["ip", "time", "request"]}},
]
SHARDED = {"count": 3, "key": ["ip"], "shuffle": True, "splits": {"a": 0.7, "b": 0.3}}


def files_sha256(out) -> dict:
    """Every shard and quarantine file of the dataset, by path: its sha256."""
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*.parquet"))}


@pytest.mark.slow
@pytest.mark.parametrize("shard, counts", [({}, (2,)), (SHARDED, (1, 2))], ids=["in-order", "sharded"])
def test_one_or_two_worker_processes_write_the_same_bytes_as_threads(tmp_path, access_logs, shard, counts,
                                                                     monkeypatch):
    spec = access_spec(steps=STEPS, shard=shard, source__blocksize="120KiB", on_error="quarantine")
    before = children()
    expected = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="threads")
    want = files_sha256(tmp_path / "out")
    assert any(p.startswith("_quarantine") for p in want) and len(want) > 1
    c = expected.counts
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"] == 6000
    for workers in counts:
        monkeypatch.setattr(executor, "local_threads", lambda: workers)
        result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="processes")
        assert files_sha256(tmp_path / "out") == want, workers
        assert result.shards == expected.shards and result.counts == expected.counts
        assert result.quarantine == expected.quarantine
        manifest = {k: v for k, v in result.manifest.items() if k not in ("run", "reports")}
        assert manifest == {k: v for k, v in expected.manifest.items() if k not in ("run", "reports")}
    assert children() == before          # every worker process ended with its run


@pytest.mark.slow
def test_the_workers_are_processes_of_their_own_running_gpuetls_worker_program(monkeypatch):
    from gpuetl.backends.cpu import CpuBackend

    monkeypatch.setattr(executor, "local_threads", lambda: 2)
    with executor.open_executor("processes", CpuBackend(), quiet=True) as ex:
        assert ex.own and not ex.in_process and ex.shares_files and ex.threads == 2
        pids = ex.client.run(os.getpid)
        assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()
        for pid in pids.values():
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            assert argv[1:3] == [b"-m", b"gpuetl.runtime.worker"], argv
            assert pid in children()
    assert not set(pids.values()) & set(children())


@pytest.mark.slow
def test_the_worker_processes_leave_no_scratch_folder_behind(tmp_path, monkeypatch):
    """A worker told to go (its stdin closed) closes itself, which removes its scratch folder
    under the temporary directory, before it exits."""
    from gpuetl.backends.cpu import CpuBackend

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))          # the workers' environment is a copy of this one
    monkeypatch.setattr(executor, "local_threads", lambda: 2)
    with executor.open_executor("processes", CpuBackend(), quiet=True) as ex:
        folders = ex.client.run(lambda dask_worker: dask_worker.local_directory)
        assert all(f.startswith(str(scratch)) and os.path.isdir(f) for f in folders.values()), folders
    assert not [f for f in folders.values() if os.path.exists(f)]
    assert not [p.name for p in scratch.rglob("worker-*")]
