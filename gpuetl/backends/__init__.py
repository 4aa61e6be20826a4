"""Backend selection. The CPU backend is always there; the GPU backend is imported only when
asked for or detected, and it is the only module that imports GPU libraries."""

from __future__ import annotations

from ..errors import SpecError
from .base import Backend

BACKENDS = ("auto", "cpu", "gpu")


def get_backend(name: str = "auto", *, for_planning: bool = False) -> Backend:
    """Return the backend object; 'auto' picks the GPU when NVML reports one. for_planning:
    planning touches no device, so a plan for the GPU can be checked on any machine."""
    if name not in BACKENDS:
        raise SpecError(f"--backend {name!r}: choose one of {', '.join(BACKENDS)}")
    if name == "auto":
        from .gpu_support import gpu_count, rapids_available

        name = "gpu" if gpu_count() > 0 and rapids_available() else "cpu"
    if name == "cpu":
        from .cpu import CpuBackend

        return CpuBackend()
    if for_planning:               # planning touches no device and needs no RAPIDS
        from .gpu_support import GpuPlanning

        return GpuPlanning()
    from .gpu_support import gpu_count, rapids_available

    if gpu_count() == 0:
        raise SpecError("--backend gpu: no NVIDIA GPU is visible (NVML reports none, or CUDA_VISIBLE_DEVICES hides them)",
                        hint="use --backend cpu or auto")
    if not rapids_available():
        raise SpecError("--backend gpu: RAPIDS is not installed",
                        hint="pip install 'gpuetl[gpu]' (cuDF, dask-cuDF, dask-cuda, KvikIO, RMM, CuPy)")
    from .gpu import GpuBackend

    return GpuBackend()
