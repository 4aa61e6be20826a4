"""The loader on a dataset in an object store (moto's S3 server on loopback): the same batches as
from the local folder, and the same refusals."""

from __future__ import annotations

import pytest

import gpuetl
from gpuetl.errors import DataError


def upload(store, root, prefix="data"):
    for path in sorted(root.rglob("*")):
        if path.is_file():
            store.put(f"{prefix}/{path.relative_to(root).as_posix()}", path.read_bytes())
    return store.url(prefix)


def batches(root, **kw):
    return [(b["_file"].to_pylist(), b["_offset"].tolist())
            for b in gpuetl.Loader(root, columns=["_file", "_offset"], batch_size=100, **kw)]


def test_a_dataset_in_a_store_gives_the_batches_of_the_local_copy(s3, loader_dataset):
    url = upload(s3, loader_dataset)
    remote = batches(url, seed=4, world_size=2, rank=1, num_workers=2, verify=True)
    assert remote == batches(loader_dataset, seed=4, world_size=2, rank=1) and len(remote) > 5


def test_a_store_dataset_without_success_is_refused(s3, loader_dataset):
    url = upload(s3, loader_dataset)
    s3.fs.rm(f"{s3.bucket}/data/_SUCCESS")
    with pytest.raises(DataError, match=r"data/_SUCCESS: missing"):
        gpuetl.Loader(url)


def test_with_a_cache_the_shards_are_fetched_once_and_read_from_it(s3, loader_dataset, tmp_path):
    url = upload(s3, loader_dataset)
    cache = {"path": str(tmp_path / "cache"), "max_bytes": "1GiB"}
    want = batches(loader_dataset, seed=6)
    first = gpuetl.Loader(url, columns=["_file", "_offset"], batch_size=100, seed=6, cache=cache)
    assert first.data.local_copies and all(p.startswith(str(tmp_path / "cache")) for p in first.data.local_copies.values())
    assert [(b["_file"].to_pylist(), b["_offset"].tolist()) for b in first] == want
    assert first.data._inputs.summary()["remote_objects"] == len(first.data.shards)
    again = gpuetl.Loader(url, columns=["_file", "_offset"], batch_size=100, seed=6, cache=cache)
    summary = again.data._inputs.summary()
    assert summary["remote_objects"] == 0 and summary["cache_objects"] == len(again.data.shards)
    assert [(b["_file"].to_pylist(), b["_offset"].tolist()) for b in again] == want
