"""Set-up of the dask-cuda worker processes gpuetl starts (GpuBackend.local_cluster passes this
module as the workers' `preload`): KvikIO's thread pool sized for parallel reads. It runs only in
those workers, never in the caller's process and never on a cluster the caller brings
(`client=`, `--scheduler`): library manners (docs/design.md). A KVIKIO_NTHREADS the user set in
the environment the workers inherit is kept."""

from __future__ import annotations

import os

from .gpu_detect import gpu_count
from .gpu_kvikio import kvikio_threads


def dask_setup(worker) -> None:
    """distributed's preload hook, called once in each worker process as it starts."""
    if os.environ.get("KVIKIO_NTHREADS"):
        return
    import kvikio.defaults

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    kvikio.defaults.set("num_threads", kvikio_threads(cpus, gpu_count()))
