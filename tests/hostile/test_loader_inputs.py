"""The loader on datasets that are not what their manifest says: each refusal names the path and
says what to do, and reading changes nothing anywhere (the loader only reads)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import gpuetl
from gpuetl.errors import DataError

from .conftest import snapshot


@pytest.fixture
def built(loader_dataset):
    return loader_dataset


@pytest.fixture
def data(dataset_copy):
    return dataset_copy


def first_train_shard(root):
    manifest = json.loads((root / "_manifest.json").read_bytes())
    return root / next(s["path"] for s in manifest["shards"] if s["split"] == "train")


def refused(root, match, **kw):
    """The loader refuses (when made or while reading) with `match`, and nothing under root's
    parent changed."""
    before = snapshot(root.parent)
    with pytest.raises(DataError, match=match) as err:
        for _ in gpuetl.Loader(root, columns=["_offset"], batch_size=50, **kw):
            pass
    assert snapshot(root.parent) == before
    return str(err.value)


def test_no_success_is_refused_naming_the_path(data):
    (data / "_SUCCESS").unlink()
    message = refused(data, "_SUCCESS: missing")
    assert str(data) in message and "verify --repair" in message


def test_a_success_naming_another_manifest_is_refused(data):
    (data / "_SUCCESS").write_text(json.dumps({"manifest_sha256": "0" * 64}) + "\n")
    refused(data, "does not hold the sha256")


def test_an_edited_manifest_is_refused(data):
    manifest = json.loads((data / "_manifest.json").read_bytes())
    manifest["shards"] = manifest["shards"][1:]
    (data / "_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    refused(data, "does not hold the sha256")


def test_a_truncated_shard_is_refused_before_any_batch(data):
    shard = first_train_shard(data)
    raw = shard.read_bytes()
    shard.write_bytes(raw[:-100])
    message = refused(data, "bytes, the manifest says")
    assert str(shard) in message


def test_a_damaged_shard_of_the_same_size_is_refused_with_verify(data):
    shard = first_train_shard(data)
    raw = bytearray(shard.read_bytes())
    raw[200:260] = bytes(60)                     # inside the data pages, the footer intact
    shard.write_bytes(bytes(raw))
    message = refused(data, "sha256 .*the manifest says", verify=True)
    assert str(shard) in message


def test_a_shard_replaced_by_a_link_is_refused(data, tmp_path):
    shard = first_train_shard(data)
    outside = tmp_path / "elsewhere.parquet"
    shutil.copyfile(shard, outside)
    shard.unlink()
    os.symlink(outside, shard)
    refused(data, "symbolic link")


def test_a_missing_shard_is_refused(data):
    first_train_shard(data).unlink()
    refused(data, "missing; the manifest lists it")


def test_a_manifest_whose_rows_disagree_with_the_footer_is_refused(data):
    from gpuetl.sinks.commit import manifest_bytes, success_bytes

    manifest = json.loads((data / "_manifest.json").read_bytes())
    shard = next(s for s in manifest["shards"] if s["split"] == "train")
    shard["rows"] += 1
    raw = manifest_bytes(manifest)
    (data / "_manifest.json").write_bytes(raw)
    (data / "_SUCCESS").write_bytes(success_bytes(raw))        # a consistent commit of a wrong manifest
    message = refused(data, "its footer holds")
    assert shard["path"] in message


def test_files_the_manifest_does_not_list_are_not_read(data, built):
    def epoch(root):
        return [b["_offset"].tolist() for b in gpuetl.Loader(root, columns=["_offset"], batch_size=50, seed=3)]

    clean = epoch(built)
    shutil.copyfile(first_train_shard(data), data / "train" / "part-99999.parquet")   # a stray shard
    (data / "train" / "notes.txt").write_text("not data")
    assert epoch(data) == clean


@pytest.mark.parametrize("workers", [0, 2])
def test_a_shard_damaged_inside_its_pages_is_a_data_error_from_the_reader_threads_too(data, workers):
    """Without verify, pages that do not decode are a DataError naming the shard, whether the row
    group is read inline or decoded in chunks by a reader thread (the error travels to the window
    that takes the rows, and on to the consumer): never a bare pyarrow error, never a hang."""
    import pyarrow.parquet as pq

    shard = first_train_shard(data)
    meta = pq.ParquetFile(shard).metadata
    chunk = meta.row_group(0).column(meta.schema.to_arrow_schema().get_field_index("_offset"))
    at = chunk.dictionary_page_offset or chunk.data_page_offset
    raw = bytearray(shard.read_bytes())
    raw[at:at + 64] = b"\xff" * 64               # the read column's first page header, the footer intact
    shard.write_bytes(bytes(raw))
    message = refused(data, "cannot be read", shuffle=False, num_workers=workers, prefetch=2)
    assert str(shard) in message and "gpuetl verify" in message
