"""Torch outputs and the IterableDataset adapter (the `torch` tier: skipped without torch)."""

from __future__ import annotations

import numpy as np
import pytest

import gpuetl

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch", reason="torch is not installed (the torch tier installs it)")

COLUMNS = ["status", "_offset", "time"]


def test_torch_output_gives_cpu_tensors_of_the_numpy_values(loader_dataset):
    ref = next(iter(gpuetl.Loader(loader_dataset, columns=COLUMNS, batch_size=32, seed=1)))
    got = next(iter(gpuetl.Loader(loader_dataset, columns=COLUMNS, batch_size=32, seed=1, output="torch")))
    assert got["status"].dtype == torch.int16 and got["status"].device.type == "cpu"
    assert np.array_equal(got["status"].numpy(), ref["status"])
    assert np.array_equal(got["time"].numpy(), ref["time"].view(np.int64))
    before = got["status"].clone()
    got["status"].add_(1)                      # a training loop may write in place: its own memory
    assert torch.equal(got["status"], before + 1)


def test_the_adapter_feeds_a_dataloader_and_resumes_through_its_state(loader_dataset):
    from torch.utils.data import DataLoader

    def make():
        return gpuetl.Loader(loader_dataset, columns=["_offset"], batch_size=32, seed=2, output="torch")

    whole = [b["_offset"].tolist() for b in DataLoader(make().torch_dataset(), batch_size=None)]
    first = make().torch_dataset()
    it = iter(DataLoader(first, batch_size=None))
    head = [next(it)["_offset"].tolist() for _ in range(3)]
    state = first.state_dict()
    again = make().torch_dataset()
    again.load_state_dict(state)
    rest = [b["_offset"].tolist() for b in DataLoader(again, batch_size=None)]
    assert head + rest == whole and len(whole) == len(first)
