"""Backend selection through a registry: name -> how to make it, whether it can run here and
why not. The CPU backend is always there; the GPU backend's module (the only one that imports
GPU libraries) is imported only when a GPU run is asked for or detected."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import SpecError
from .base import Backend, PlanningBackend


@dataclass(frozen=True)
class Unavailable:
    """Why a backend cannot run on this machine, and what to do about it."""

    reason: str
    hint: str = ""


@dataclass(frozen=True)
class BackendEntry:
    name: str
    make: Callable[[], Backend]                    # the backend for a run
    plan: Callable[[], PlanningBackend]            # its planning view: touches no device
    unavailable: Callable[[], Unavailable | None]  # None: it can run here
    summary: str = ""


BACKENDS: dict[str, BackendEntry] = {}


def register_backend(entry: BackendEntry) -> None:
    """Add a backend; `--backend` offers every registered name (and 'auto')."""
    if entry.name == "auto":
        raise ValueError("'auto' is not a backend name: it picks one")
    BACKENDS[entry.name] = entry


def backend_choices() -> list[str]:
    """What --backend accepts: 'auto' and every registered backend."""
    return ["auto", *BACKENDS]


def unavailable(name: str) -> Unavailable | None:
    """Why the named backend cannot run here (None: it can)."""
    return _entry(name).unavailable()


def _entry(name: str) -> BackendEntry:
    if name not in BACKENDS:
        raise SpecError(f"--backend {name!r}: choose one of {', '.join(backend_choices())}")
    return BACKENDS[name]


def get_backend(name: str = "auto", *, for_planning: bool = False) -> Backend | PlanningBackend:
    """Return the backend object; 'auto' picks the GPU when it can run here, else the CPU.
    for_planning: planning touches no device, so a plan for the GPU can be checked on any machine."""
    if name == "auto":
        name = "gpu" if "gpu" in BACKENDS and BACKENDS["gpu"].unavailable() is None else "cpu"
    entry = _entry(name)
    if for_planning:
        return entry.plan()
    why = entry.unavailable()
    if why is not None:
        raise SpecError(f"--backend {name}: {why.reason}", hint=why.hint or None)
    return entry.make()


def _cpu() -> Backend:
    from .cpu import CpuBackend

    return CpuBackend()


def _gpu() -> Backend:
    from .gpu import GpuBackend

    return GpuBackend.create()


def _gpu_planning() -> PlanningBackend:
    from .gpu_detect import GpuPlanning

    return GpuPlanning()


def _gpu_unavailable() -> Unavailable | None:
    from .gpu_detect import gpu_count, rapids_available

    if gpu_count() == 0:
        return Unavailable("no NVIDIA GPU is visible (NVML reports none, or CUDA_VISIBLE_DEVICES hides them)",
                           "use --backend cpu or auto")
    if not rapids_available():
        return Unavailable("RAPIDS is not installed",
                           "pip install 'gpuetl[gpu]' (cuDF, dask-cuDF, dask-cuda, KvikIO, RMM, CuPy)")
    return None


register_backend(BackendEntry("cpu", _cpu, _cpu, lambda: None, "pandas, pyarrow, polars and numpy"))
register_backend(BackendEntry("gpu", _gpu, _gpu_planning, _gpu_unavailable, "cuDF and CuPy (RAPIDS)"))
