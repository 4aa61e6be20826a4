"""The Loader's CUDA path (backends/gpu_loader.py) run without a GPU: pylibcudf's tables are stood
in for by pyarrow tables and CuPy by numpy, written from what the real calls do (libcudf's Parquet
reader reads the row group asked for, by path; `copying.gather` reorders rows; `copying.slice`
and a column's data view copy nothing). Everything else is the device path's own code: the read
through the shard's descriptor, a window permuted once and cut into slices, the outputs and the
null check. It must give the CPU path's batches, in the same order, for every setting that
shapes the order. The real calls are bound in tests/backends/test_gpu_loader_api.py; the image
decode's emulation, which needs nvImageCodec's header parser, in tests/backends/test_gpu_loader_images.py."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.backends import gpu_loader
from gpuetl.errors import DataError
from gpuetl.loader import loader as loader_mod
from loaderdata import ArrowTables

COLUMNS = ["_offset", "status", "time"]


@pytest.fixture
def emulated(monkeypatch):
    """device='cuda' on the stand-ins: the device check passes, device_batches builds gpu_loader's
    DeviceBatches over ArrowTables and numpy."""
    made = []

    def device_batches(spec):
        tables = ArrowTables()
        made.append(tables)
        return gpu_loader.DeviceBatches(spec, tables, np)

    monkeypatch.setattr(loader_mod, "check_device", lambda: None)
    monkeypatch.setattr(loader_mod, "device_batches", device_batches)
    return made


def _rows(batches):
    """Each batch as a list of (offset, status, time) tuples, times as their int64 storage."""
    out = []
    for b in batches:
        t = b["time"].view(np.int64) if b["time"].dtype.kind == "M" else b["time"]
        out.append(list(zip(b["_offset"].tolist(), b["status"].tolist(), t.tolist())))
    return out


SETTINGS = [
    dict(seed=3, batch_size=64),
    dict(seed=3, batch_size=64, shuffle=False),
    dict(seed=4, epoch=2, batch_size=50, shuffle_buffer=120),                  # batches across windows
    dict(seed=5, batch_size=64, world_size=2, rank=1, drop_last=False),       # a rank, the padding wraps
    dict(seed=6, batch_size=500, shuffle_buffer=300, drop_last=False, world_size=3, rank=2),
    dict(seed=7, batch_size=32, num_workers=0, prefetch=0),
]


@pytest.mark.parametrize("kw", SETTINGS, ids=[",".join(f"{k}={v}" for k, v in s.items()) for s in SETTINGS])
def test_the_cuda_path_yields_the_cpu_paths_batches_in_the_same_order(loader_dataset, emulated, kw):
    want = list(gpuetl.Loader(loader_dataset, columns=COLUMNS, **kw))
    got = list(gpuetl.Loader(loader_dataset, columns=COLUMNS, device="cuda", output="cupy", **kw))
    assert len(got) == len(want) > 0
    assert _rows(got) == _rows(want)
    first = got[0]
    assert first["status"].dtype == np.int16 and first["_offset"].dtype == np.int64
    assert first["time"].dtype == np.int64            # CuPy has no datetime64: the int64 storage


def test_a_window_is_permuted_once_and_batches_are_slices_of_it(loader_dataset, emulated):
    loader = gpuetl.Loader(loader_dataset, columns=COLUMNS, device="cuda", output="cupy", batch_size=20,
                           shuffle_buffer=100, seed=1, drop_last=True, num_workers=0, prefetch=0)
    batches = list(loader)
    tables = emulated[0]
    assert len(batches) == loader.rows // 20
    windows = -(-len(batches) * 20 // 100)                        # the windows the batches reach
    assert len(batches) > windows
    assert tables.calls["gather"] == windows                    # one gather a window, none a batch
    assert tables.calls.get("concat", 0) <= 2 * windows           # joins only where row groups or batches cross
    assert tables.calls["read"] == loader.stats()["row_groups_read"] <= len(loader.units)


def test_the_device_reads_each_shard_through_the_descriptor_the_loader_opened(loader_dataset, emulated):
    """libcudf is handed /proc/self/fd/N of the file the dataset opened with O_NOFOLLOW, not the
    path again (a link swapped in after the footer check is not followed)."""
    list(gpuetl.Loader(loader_dataset, columns=COLUMNS, device="cuda", output="cupy", batch_size=64,
                       num_workers=0, prefetch=0))
    paths = emulated[0].paths
    assert paths and all(p.startswith("/proc/self/fd/") for p in paths)


def test_resuming_on_the_cuda_path_continues_the_cpu_paths_epoch(loader_dataset, emulated):
    kw = dict(columns=COLUMNS, batch_size=64, seed=9, epoch=1)
    whole = _rows(gpuetl.Loader(loader_dataset, **kw))
    first = gpuetl.Loader(loader_dataset, device="cuda", output="cupy", **kw)
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    it.close()
    resumed = gpuetl.Loader(loader_dataset, device="cuda", output="cupy", num_workers=0, **kw)
    resumed.load_state_dict(state)
    assert _rows(resumed) == whole[3:]


def test_nulls_and_strings_are_refused_on_the_device(loader_dataset, emulated):
    with pytest.raises(gpuetl.errors.SpecError, match="output='cupy' takes numeric"):
        gpuetl.Loader(loader_dataset, columns=["status", "ip"], device="cuda", output="cupy")
    with pytest.raises(gpuetl.errors.SpecError, match="gives output 'cupy', 'torch', not 'numpy'"):
        gpuetl.Loader(loader_dataset, columns=["status"], device="cuda", output="numpy")
    with pytest.raises(DataError, match="column 'size' holds nulls"):
        for _ in gpuetl.Loader(loader_dataset, columns=["size"], device="cuda", output="cupy", batch_size=500,
                               drop_last=False):
            pass


def test_a_shard_swapped_for_a_link_is_not_read_on_the_device(dataset_copy, emulated, tmp_path):
    loader = gpuetl.Loader(dataset_copy, columns=COLUMNS, device="cuda", output="cupy", batch_size=64,
                           shuffle=False, num_workers=0, prefetch=0)
    shard = dataset_copy / loader.data.shards[0].path
    outside = tmp_path / "outside.parquet"
    os.replace(shard, outside)
    os.symlink(outside, shard)
    with pytest.raises(DataError, match="cannot be read"):
        next(iter(loader))
    assert outside.exists() and shard.is_symlink()


@pytest.mark.torch
def test_torch_output_shares_the_arrays_memory_through_dlpack(loader_dataset, emulated, monkeypatch):
    """output='torch' on the device hands each column's array to torch.from_dlpack: the tensor is
    the array's memory (on a GPU, the CuPy view of the device buffer), not a copy."""
    torch = pytest.importorskip("torch")
    handed = []
    original = gpu_loader.DeviceBatches._torch

    def keeping(array):
        handed.append(array)
        return original(array)

    monkeypatch.setattr(gpu_loader.DeviceBatches, "_torch", staticmethod(keeping))
    batch = next(iter(gpuetl.Loader(loader_dataset, columns=COLUMNS, device="cuda", output="torch", batch_size=32,
                                    num_workers=0, prefetch=0)))
    assert [type(t) for t in batch.values()] == [torch.Tensor] * 3
    for tensor, array in zip(batch.values(), handed):
        assert tensor.data_ptr() == array.ctypes.data
    assert batch["status"].dtype == torch.int16 and batch["time"].dtype == torch.int64


def test_a_store_dataset_is_read_on_the_host_and_copied_unless_cached(s3, loader_dataset, emulated, tmp_path):
    """In an object store without a cache copy, a row group is read by pyarrow and copied to the
    device (upload); with `cache=`, the local copy is read by the device reader through its
    descriptor. Both give the CPU path's batches."""
    for path in sorted(loader_dataset.rglob("*")):
        if path.is_file():
            s3.put(f"data/{path.relative_to(loader_dataset).as_posix()}", path.read_bytes())
    url = s3.url("data")
    want = _rows(gpuetl.Loader(loader_dataset, columns=COLUMNS, batch_size=64, seed=2))
    remote = gpuetl.Loader(url, columns=COLUMNS, device="cuda", output="cupy", batch_size=64, seed=2)
    assert _rows(remote) == want
    assert emulated[-1].calls.get("read", 0) == 0 and emulated[-1].calls["upload"] == remote.stats()["row_groups_read"]
    cached = gpuetl.Loader(url, columns=COLUMNS, device="cuda", output="cupy", batch_size=64, seed=2,
                           cache={"path": str(tmp_path / "cache"), "max_bytes": "1GiB"})
    assert _rows(cached) == want
    assert emulated[-1].calls.get("upload", 0) == 0 and emulated[-1].paths
    assert all(p.startswith("/proc/self/fd/") for p in emulated[-1].paths)
