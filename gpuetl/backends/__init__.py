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
        from .gpu import gpu_count, rapids_available

        name = "gpu" if gpu_count() > 0 and rapids_available() else "cpu"
    if name == "cpu":
        from .cpu import CpuBackend

        return CpuBackend()
    from .gpu import GpuBackend

    return GpuBackend() if for_planning else GpuBackend.create()
