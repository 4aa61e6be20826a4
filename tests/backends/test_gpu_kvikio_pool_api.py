"""KvikIO's thread pool sized for parallel reads, only in the worker processes gpuetl starts
(marker gpu_api: `make gpu-api`; nothing here touches a device). GpuBackend.local_cluster hands
dask-cuda a preload (gpu_worker.dask_setup), which dask-cuda keeps (it replaces the workers'
`env` and `plugins` with its own): the caller's process keeps KvikIO's settings and its
environment; a worker process (a fresh interpreter here) gets the pool."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu_api

try:
    os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")
    import dask_cuda
    import kvikio.defaults

    from gpuetl.backends import gpu, gpu_detect, gpu_kvikio
except Exception as err:                    # noqa: BLE001 (no RAPIDS, or a broken install)
    pytest.skip(f"RAPIDS does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]


class FakeCluster:
    """dask_cuda.LocalCUDACluster as local_cluster calls it: the arguments, no workers."""

    seen: dict = {}

    def __init__(self, **kwargs):
        FakeCluster.seen = kwargs

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_cluster_gpuetl_starts_sizes_kvikio_in_its_workers_not_in_the_caller(monkeypatch):
    monkeypatch.setattr(dask_cuda, "LocalCUDACluster", FakeCluster)
    monkeypatch.setattr(gpu, "gpu_memory", lambda: [(139 << 30, 141 << 30)])
    threads, environ = kvikio.defaults.get("num_threads"), dict(os.environ)
    with gpu.GpuBackend().local_cluster():
        pass
    assert FakeCluster.seen["preload"] == ["gpuetl.backends.gpu_worker"]
    assert FakeCluster.seen["threads_per_worker"] == 2                  # a read overlaps the other's compute
    assert "env" not in FakeCluster.seen and "plugins" not in FakeCluster.seen
    assert kvikio.defaults.get("num_threads") == threads                # the caller's KvikIO as it was
    assert dict(os.environ) == environ


def _in_a_worker_process(env_extra: dict) -> int:
    # the repository in front of what the caller's path holds (on the device and in the
    # rehearsal, the carried wheels are a folder on PYTHONPATH)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "RAPIDS_NO_INITIALIZE": "1", "PYTHONPATH": path, **env_extra}
    code = ("import kvikio.defaults; from gpuetl.backends import gpu_worker; gpu_worker.dask_setup(None); "
            "print(kvikio.defaults.get('num_threads'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_worker_process_gets_a_pool_of_its_share_of_the_cores():
    cpus = len(os.sched_getaffinity(0))
    assert _in_a_worker_process({}) == gpu_kvikio.kvikio_threads(cpus, gpu_detect.gpu_count()) >= 4


@pytest.mark.slow
def test_a_kvikio_nthreads_the_user_set_is_kept():
    assert _in_a_worker_process({"KVIKIO_NTHREADS": "3"}) == 3
