"""The GPU backend: cuDF frames, CuPy arrays, KvikIO file reads, RMM memory.

This is the only module of gpuetl that imports cudf, cupy, kvikio, rmm, dask_cudf or dask_cuda
(tests/test_import_rule.py enforces it). The imports are lazy: importing this module on a
machine without a GPU costs nothing, and GPUs are counted through NVML without creating a CUDA
context in the client process, so dask-cuda workers can start cleanly.
"""

from __future__ import annotations

import importlib.util

from ..errors import SpecError


def gpu_count() -> int:
    """GPUs visible to NVML (0 without a driver). Never initialises CUDA."""
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no device, a container without NVML: all mean "no GPU"
        return 0


def rapids_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("cudf", "cupy", "dask_cudf"))


class GpuBackend:
    """Placeholder until the GPU issue lands: says clearly what is missing."""

    name = "gpu"

    @classmethod
    def create(cls):
        if gpu_count() == 0:
            raise SpecError("--backend gpu: no NVIDIA GPU is visible (NVML reports none)",
                            hint="use --backend cpu or auto")
        if not rapids_available():
            raise SpecError("--backend gpu: RAPIDS is not installed",
                            hint="pip install 'gpuetl[gpu]' (cuDF, dask-cuDF, dask-cuda, KvikIO, CuPy)")
        raise SpecError("--backend gpu: the GPU backend is not built yet", hint="use --backend cpu")
