"""sink.mode: append on an object store (moto's S3 server on loopback): inputs in the store are
held by their ETag, each version is committed without rename (the earlier versions' objects
kept in place), and every version reads back and verifies from the store."""

from __future__ import annotations

import json

import pytest

import gpuetl
from gpuetl.cli import main
from gpuetl.errors import SourceError
from gpuetl.samples import write_access_logs


def spec(source: str, sink: str, delta: bool = False) -> dict:
    return {"version": 1, "name": "days", "source": {"type": "text", "path": source, "blocksize": "32KiB"},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
            "shard": {"count": 2, "splits": {"train": 0.8, "val": 0.2}},
            "sink": {"path": sink, "mode": "append", "row_group_rows": 500, "delta_log": delta}}


def run(tmp_path, data):
    return gpuetl.Pipeline.from_dict(data, base_dir=tmp_path).run(backend="cpu", scheduler="sync")


@pytest.mark.slow
def test_a_store_dataset_appends_versions_and_reads_each_back(s3, tmp_path, capsys):
    local = tmp_path / "local"
    local.mkdir()
    for n in (1, 2):
        write_access_logs(local / f"day{n}.log", lines=300, seed=n, bad_every=40)
    s3.put("in/day1.log", (local / "day1.log").read_bytes())
    data = spec(s3.url("in/*.log"), s3.url("out"))
    v1 = run(tmp_path, data)
    assert v1.manifest["dataset_version"] == 1
    v1_objects = {k: s3.get(k) for k in s3.keys("out/") if "part-v00001" in k}
    assert len(v1_objects) == 3                                # two splits and the quarantine
    s3.put("in/day2.log", (local / "day2.log").read_bytes())
    v2 = run(tmp_path, data)                                   # day 2 is new; day 1 is held (same ETag)
    assert v2.manifest["dataset_version"] == 2 and [i["dataset_version"] for i in v2.manifest["inputs"]] == [1, 2]
    assert v2.counts == v2.manifest["version_counts"] and v2.counts["rows_in"] == 300
    assert {k: s3.get(k) for k in v1_objects} == v1_objects, "version 1's objects are kept as they are"
    assert s3.keys("out/_tmp/") == []
    for version in (1, 2):
        assert main(["verify", s3.url("out"), "--dataset-version", str(version)]) == 0
        capsys.readouterr()
        assert main(["inspect", s3.url("out"), "--dataset-version", str(version), "--json"]) == 0
        info = json.loads(capsys.readouterr().out)
        assert info["manifest"]["dataset_version"] == version
        loader = gpuetl.Loader(s3.url("out"), split="train", dataset_version=version, output="arrow")
        assert len(loader.data.shards) == version
    assert run(tmp_path, data).nothing_to_append
    s3.put("in/day1.log", (local / "day1.log").read_bytes() + b"\n")        # day 1 rewritten: another ETag
    with pytest.raises(SourceError, match=r"day1.log changed since dataset version 1 read it \(ETag"):
        run(tmp_path, data)
    manifest = json.loads(s3.get("out/_manifest.json"))
    assert manifest["dataset_version"] == 2 and main(["verify", s3.url("out")]) == 0


@pytest.mark.slow          # three runs against the store server (~2.7 s)
def test_an_append_knows_the_objects_a_version_read_however_their_scheme_is_spelled(s3, tmp_path):
    """s3a:// and S3:// name s3:// objects: an append listing them another way than the version that
    read them has nothing to append (it read them all again: every row twice)."""
    local = tmp_path / "day1.log"
    write_access_logs(local, lines=50, seed=1)
    s3.put("in/day1.log", local.read_bytes())
    url = s3.url("in/*.log")
    v1 = run(tmp_path, spec(url.replace("s3://", "s3a://"), s3.url("out")))
    assert v1.manifest["dataset_version"] == 1
    for spelled in (url, url.replace("s3://", "S3://")):
        assert run(tmp_path, spec(spelled, s3.url("out"))).nothing_to_append

@pytest.mark.slow
def test_a_store_dataset_with_a_delta_log_reads_back_each_version_through_delta_rs(s3, tmp_path):
    deltalake = pytest.importorskip("deltalake")
    from gpuetl.sinks.delta import delta_options

    local = tmp_path / "local"
    local.mkdir()
    data = spec(s3.url("in/*.log"), s3.url("out"), delta=True)
    for n in (1, 2):
        write_access_logs(local / f"day{n}.log", lines=300, seed=n, bad_every=40)
        s3.put(f"in/day{n}.log", (local / f"day{n}.log").read_bytes())
        manifest = run(tmp_path, data).manifest
    assert [k for k in s3.keys("out/_delta_log/")] == [f"out/_delta_log/{k:020d}.json" for k in range(2)]
    options = delta_options(s3.url("out"), None)
    for k, entry in enumerate(manifest["versions"]):
        listed = {p for e in manifest["versions"][:k + 1] for p in e["shards"]}
        rows = sum(s["rows"] for s in manifest["shards"] if s["path"] in listed)
        table = deltalake.DeltaTable(s3.url("out"), version=k, storage_options=options)
        assert table.to_pyarrow_table().num_rows == rows
    assert main(["verify", s3.url("out")]) == 0
