"""The Loader's CUDA path on a GPU (`pytest -m gpu`; skipped cleanly elsewhere: conftest skips
`gpu` tests where NVML sees no device, and this module where CuPy or pylibcudf do not import).
The batches equal the CPU path's, column for column, in the same order; the arrays live on the
device (CuPy) or are CUDA tensors sharing that memory (torch, where importable); image decode on
the device gives Pillow's pixels within the GPU image path's bounds."""

from __future__ import annotations

import numpy as np
import pytest

for _module in ("cupy", "pylibcudf"):
    try:
        __import__(_module)
    except Exception as err:   # noqa: BLE001 - any failure to load means: not here
        pytest.skip(f"needs {_module} on a GPU machine ({type(err).__name__}: {err})", allow_module_level=True)

import gpuetl  # noqa: E402

pytestmark = pytest.mark.gpu
COLUMNS = ["_offset", "status", "time"]


def _host(batch):
    import cupy as cp

    out = {}
    for k, v in batch.items():
        if isinstance(v, cp.ndarray):
            out[k] = cp.asnumpy(v)
        elif hasattr(v, "cpu"):                    # a torch tensor
            out[k] = v.cpu().numpy()
        else:
            out[k] = np.asarray(v)
        if out[k].dtype.kind == "M":
            out[k] = out[k].view(np.int64)
    return out


@pytest.mark.parametrize("kw", [dict(seed=3, batch_size=64), dict(seed=4, batch_size=50, shuffle_buffer=120,
                                                                   world_size=2, rank=1, drop_last=False)])
def test_cupy_batches_are_the_cpu_batches_on_the_device(loader_dataset, kw):
    import cupy as cp

    want = [_host(b) for b in gpuetl.Loader(loader_dataset, columns=COLUMNS, **kw)]
    got = list(gpuetl.Loader(loader_dataset, columns=COLUMNS, device="cuda", output="cupy", **kw))
    assert len(got) == len(want) > 0
    assert all(isinstance(v, cp.ndarray) for b in got for v in b.values())
    for g, w in zip(got, want):
        g = _host(g)
        for name in COLUMNS:
            np.testing.assert_array_equal(g[name], w[name])


def test_torch_batches_are_cuda_tensors(loader_dataset):
    torch = pytest.importorskip("torch")
    batch = next(iter(gpuetl.Loader(loader_dataset, columns=COLUMNS, device="cuda", output="torch", batch_size=32)))
    assert all(t.is_cuda for t in batch.values())
    assert batch["status"].dtype == torch.int16 and batch["time"].dtype == torch.int64
    batch["status"] += 1                           # writable in place, as a training step may
