"""GPU detection and cluster sizing, and the GPU backend as planning sees it. Pure Python: NVML
only (no CUDA context in the client process, CUDA_VISIBLE_DEVICES honoured), no RAPIDS import,
so `gpuetl plan --backend gpu` and these rules run anywhere."""

from __future__ import annotations

import importlib.util
import os

from .gpu_regex import check_regex


# ---------------------------------------------------------------------------------------------
# detection and cluster sizing (NVML only: never a CUDA context in the client)


def visible_devices(env: str | None, count: int) -> list[str]:
    """The devices a CUDA process may use, as NVML indices ("0") or UUIDs ("GPU-...", "MIG-..."),
    from CUDA_VISIBLE_DEVICES the way the CUDA runtime reads it: unset means all; the list stops
    at the first entry that names no device; an empty value means none."""
    if env is None:
        return [str(i) for i in range(count)]
    out: list[str] = []
    for item in (x.strip() for x in env.split(",")):
        if item.isdigit():
            if int(item) >= count or item in out:
                break
            out.append(str(int(item)))
        elif item.startswith(("GPU-", "MIG-")):
            out.append(item)
        else:
            break
    return out


def _nvml():
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:        # no driver, no device, a container without NVML: all mean "no GPU"
        return None
    return pynvml


def gpu_memory() -> list[tuple[int, int]]:
    """(free, total) bytes of each GPU this process may use (CUDA_VISIBLE_DEVICES), from NVML;
    [] without one."""
    nvml = _nvml()
    if nvml is None:
        return []
    try:
        out = []
        for dev in visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), int(nvml.nvmlDeviceGetCount())):
            handle = (nvml.nvmlDeviceGetHandleByIndex(int(dev)) if dev.isdigit()
                      else nvml.nvmlDeviceGetHandleByUUID(dev))
            info = nvml.nvmlDeviceGetMemoryInfo(handle)
            out.append((int(info.free), int(info.total)))
        return out
    except Exception:
        return []
    finally:
        nvml.nvmlShutdown()


def gpu_count() -> int:
    """GPUs this process may use (0 without a driver). Never initialises CUDA."""
    return len(gpu_memory())


def rapids_available() -> bool:
    return all(importlib.util.find_spec(m) is not None
               for m in ("cudf", "cupy", "dask_cudf", "dask_cuda", "kvikio", "rmm", "pylibcudf"))


POOL_FRACTION = 0.8        # of each device's memory: the RMM pool every allocation comes from
# Two task threads per GPU worker: while one partition is computed on the device, the next one's
# file read (KvikIO, into device memory) goes on in the other thread (docs/gpu.md, "Overlap").
THREADS_PER_WORKER = 2
WORKER_PRELOAD = "gpuetl.backends.gpu_worker"     # run in each worker process gpuetl starts
SPILL_FRACTION = 0.6       # dask-cuda moves finished partitions to host memory past this


def cluster_settings(memory: list[tuple[int, int]], pool_fraction: float = POOL_FRACTION,
                     spill_fraction: float = SPILL_FRACTION) -> dict:
    """LocalCUDACluster arguments for the visible GPUs' (free, total) memory (docs/gpu.md,
    "Memory"): one worker per GPU; an RMM pool of `pool_fraction` of the smallest device's
    memory (rounded down to 256 MiB, and never more than it has free) that CuPy allocates
    from too; dask-cuda spills whole finished partitions to host past `spill_fraction`; cuDF's
    own spilling stays off (one spilling mechanism: cuDF's moves buffers under the views the
    backend takes with to_pylibcudf and CuPy)."""
    if not memory:
        raise ValueError("no GPU")
    free = min(f for f, _ in memory)
    total = min(t for _, t in memory)
    step = 256 << 20
    pool = max(step, min(int(total * pool_fraction), free) // step * step)
    return {"n_workers": len(memory), "threads_per_worker": THREADS_PER_WORKER, "rmm_pool_size": pool,
            "rmm_allocator_external_lib_list": ["cupy"],
            "device_memory_limit": min(int(total * spill_fraction), pool), "enable_cudf_spill": False,
            "protocol": "tcp"}


BLOCKSIZE_SHARE = 16        # a partition's default size: this fraction of the RMM pool
BLOCKSIZE_STEP = 64 << 20
MAX_GPU_BLOCKSIZE = 1 << 30     # spec.models.MAX_BLOCKSIZE: a partition is held whole


def gpu_blocksize(memory: list[tuple[int, int]]) -> int | None:
    """The GPU's default `source.blocksize` for the visible GPUs' (free, total) memory: a 16th
    of the RMM pool cluster_settings gives each worker (a partition's bytes grow several times
    as typed columns and their temporaries, and two partitions are in flight per worker: one
    read while the other is computed), in whole 64 MiB, between 64 MiB and 1 GiB; None
    without a GPU (the pipeline file's default stays). An H200 (141 GiB) gets 1 GiB, a
    16 GiB device 768 MiB."""
    if not memory:
        return None
    pool = cluster_settings(memory)["rmm_pool_size"]
    return max(BLOCKSIZE_STEP, min(MAX_GPU_BLOCKSIZE, pool // BLOCKSIZE_SHARE // BLOCKSIZE_STEP * BLOCKSIZE_STEP))


class GpuPlanning:
    """The GPU backend as planning sees it (base.PlanningBackend): a name, the regex checks and
    the device's default blocksize. Needs no RAPIDS."""

    name = "gpu"
    images_on_gpu = False       # base.Backend.images_on_gpu

    def default_blocksize(self) -> int | None:
        """source.blocksize where the pipeline file sets none: sized for this machine's GPUs."""
        return gpu_blocksize(gpu_memory())

    @property
    def runs_images(self) -> bool:
        return self.images_on_gpu

    def check_regex(self, pattern: str) -> str | None:
        return check_regex(pattern)

    def regex_error(self, pattern: str) -> str | None:
        """Never: a pattern libcudf cannot run goes to the CPU kernel (check_regex notes it)."""
        return None
