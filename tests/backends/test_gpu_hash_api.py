"""The GPU backend's row hash (exact dedupe's key hash) run with numpy in place of CuPy (marker
gpu_api: `make gpu-api`): the values cuDF's `duplicated` holds equal must hash equal, as the
CPU's polars row hash makes -0.0 and every NaN canonical before hashing."""

from __future__ import annotations

import os
import struct
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

pytestmark = pytest.mark.gpu_api

try:                                        # RAPIDS installed: import it without touching CUDA
    os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")
    from gpuetl.backends import gpu
except Exception as err:                    # noqa: BLE001 (no RAPIDS, or a broken install)
    pytest.skip(f"RAPIDS does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

from gpuetl.backends.cpu import CpuBackend  # noqa: E402


def _float(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


# 0.0, -0.0, the quiet NaN, a NaN with a payload, a negative NaN, 1.5, null
VALUES = [0.0, -0.0, float("nan"), _float(0x7FF0000000000001), _float(0xFFF8000000000000), 1.5, None]


class DeviceFloats:
    """A cuDF float column stand-in: its values (nulls undefined) and validity, as numpy."""

    def __init__(self, values, dtype):
        self.dtype = np.dtype(dtype)
        self.raw = np.array([0.0 if v is None else v for v in values], dtype=self.dtype)
        self.valid = np.array([v is not None for v in values])

    def notna(self):
        return SimpleNamespace(values=self.valid)

    def __len__(self):
        return len(self.raw)


@pytest.fixture
def device(monkeypatch):
    numpy = SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("_")})
    monkeypatch.setattr(gpu, "cp", numpy)
    monkeypatch.setattr(gpu, "device_values", lambda col: col.raw)
    backend = gpu.GpuBackend.__new__(gpu.GpuBackend)
    backend.xp = numpy
    backend.dtype = lambda type_name: np.dtype("object")     # cuDF's string dtype asks the driver
    return backend


def _groups(hashes) -> list[int]:
    """Each row's first row with the same hash."""
    first: dict = {}
    return [first.setdefault(int(h), i) for i, h in enumerate(hashes)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gpu_row_hash_makes_zero_and_nan_canonical_as_the_cpu(device, dtype):
    """0.0 and -0.0 meet, every NaN meets every other, as on the CPU; raw float bits would keep
    them apart and GPU dedupe would keep rows the CPU drops."""
    values = VALUES if dtype == "float64" else [v if v is None or v == v else float("nan") for v in VALUES]
    got = _groups(device.row_hash([DeviceFloats(values, dtype)]))
    cpu = CpuBackend()
    expected = _groups(cpu.row_hash([cpu.series(pa.array(values, getattr(pa, dtype)()), dtype)]))
    assert got == expected == [0, 0, 2, 2, 2, 5, 6]
