"""The backend registry: names, availability with a reason, and the CLI's --backend choices."""

from __future__ import annotations

import pytest

from gpuetl import backends
from gpuetl.backends import (BACKENDS, BackendEntry, Unavailable, backend_choices, get_backend, register_backend,
                             unavailable)
from gpuetl.backends.base import Backend, PlanningBackend
from gpuetl.backends.cpu import CpuBackend
from gpuetl.cli import build_parser
from gpuetl.errors import SpecError


@pytest.fixture
def registry(monkeypatch):
    """The registry, restored after the test (a test may register its own backends)."""
    monkeypatch.setattr(backends, "BACKENDS", dict(BACKENDS))
    return backends.BACKENDS


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(SpecError) as err:
        get_backend("tpu")
    assert "'tpu'" in str(err.value)
    for name in ("auto", "cpu", "gpu"):
        assert name in str(err.value)


def test_unavailable_backend_says_why_and_what_to_do(registry):
    register_backend(BackendEntry("fake", CpuBackend, CpuBackend,
                                  lambda: Unavailable("FakeLib is not installed", "pip install fakelib")))
    assert unavailable("fake").reason == "FakeLib is not installed"
    with pytest.raises(SpecError) as err:
        get_backend("fake")
    assert "--backend fake: FakeLib is not installed" in str(err.value)
    assert err.value.hint == "pip install fakelib"
    assert get_backend("fake", for_planning=True).name == "cpu"     # planning needs nothing installed


def test_gpu_unavailable_reason_names_what_is_missing(monkeypatch):
    from gpuetl.backends import gpu_detect

    monkeypatch.setattr(gpu_detect, "gpu_count", lambda: 1)
    monkeypatch.setattr(gpu_detect, "rapids_available", lambda: False)
    why = unavailable("gpu")
    assert why.reason == "RAPIDS is not installed" and "gpuetl[gpu]" in why.hint
    monkeypatch.setattr(gpu_detect, "gpu_count", lambda: 0)
    assert "no NVIDIA GPU is visible" in unavailable("gpu").reason
    assert get_backend("auto").name == "cpu"        # auto falls back to what can run here


def test_cli_backend_choices_come_from_the_registry(registry):
    register_backend(BackendEntry("fake", CpuBackend, CpuBackend, lambda: None))
    assert backend_choices() == ["auto", "cpu", "gpu", "fake"]
    parser = build_parser()
    args = parser.parse_args(["run", "pipeline.yaml", "--backend", "fake"])
    assert args.backend == "fake"
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "pipeline.yaml", "--backend", "tpu"])


def test_auto_is_not_a_backend_name(registry):
    with pytest.raises(ValueError):
        register_backend(BackendEntry("auto", CpuBackend, CpuBackend, lambda: None))


def test_planning_views_satisfy_the_declared_protocol():
    from gpuetl.backends.gpu_detect import GpuPlanning

    for view in (GpuPlanning(), get_backend("gpu", for_planning=True), CpuBackend()):
        assert isinstance(view, PlanningBackend)
    assert isinstance(get_backend("cpu"), Backend)


def test_cpu_backend_declares_what_callers_use():
    """Callers use these without checking for them (runtime/run.py, executor.py, sinks/spill.py)."""
    cpu = CpuBackend()
    assert cpu.local_cluster(quiet=True, dashboard_address=None) is None     # the runner's own cluster
    assert cpu.versions() == {} and isinstance(cpu.io_path(), str)
    s = cpu.series([1, 2], "int64")
    assert cpu.to_pandas(s) is s and cpu.to_pylist(s) == [1, 2]
