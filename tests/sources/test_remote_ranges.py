"""Uncompressed line-format objects without a cache: listed at plan time, never copied to a local
file; each partition reads its own byte range with a GET pinned to the listed ETag. Requests are
seen through the loopback proxy's log (tests/objectstore_server.py)."""

import json

import pytest
import yaml

from gpuetl import Pipeline
from gpuetl.errors import SourceError
from gpuetl.samples import write_access_logs
from gpuetl.sources.formats.jsonl import JSON_HEAD_BYTES

BLOCK = 16 << 10


def text_spec(path, sink):
    return {"version": 1, "name": "ranges", "source": {"type": "text", "path": path, "blocksize": BLOCK},
            "parse": {"preset": "apache_combined"}, "shard": {"count": 2},
            "sink": {"path": sink, "mode": "overwrite"}}


def jsonl_spec(path, sink):
    return {"version": 1, "name": "ranges", "source": {"type": "jsonl", "path": path, "blocksize": BLOCK},
            "shard": {"count": 2}, "sink": {"path": sink, "mode": "overwrite"}}


def write_text(path):
    write_access_logs(path, lines=200, seed=3, bad_every=40)


def write_jsonl(path):
    path.write_text("".join(json.dumps({"id": i, "msg": "m" * (i % 97), "ok": i % 3 == 0}) + "\n"
                            for i in range(560)) + '{"id": "broken"\n')


def run(tmp_path, data, name):
    (tmp_path / name).write_text(yaml.safe_dump(data))
    return Pipeline.from_file(tmp_path / name).run(backend="cpu", scheduler="sync")


def object_gets(proxy, bucket, key):
    return [r for r in proxy.requests if r[0] == "GET" and r[1].split("?")[0] == f"/{bucket}/{key}"]


def local_copies(root, name):
    """Files under root named like the object, outside the local input folder and the outputs."""
    return [p for p in root.rglob(f"*{name}") if p.is_file() and "in" not in p.relative_to(root).parts[:1]
            and not p.relative_to(root).parts[0].startswith("out")]


@pytest.mark.parametrize("kind", ["text", "jsonl"])
def test_an_uncompressed_object_is_read_in_byte_ranges_with_the_local_runs_shards(faulty_s3, tmp_path, kind):
    from gpuetl import storage

    s3, proxy = faulty_s3
    spec, write = (text_spec, write_text) if kind == "text" else (jsonl_spec, write_jsonl)
    (tmp_path / "in").mkdir()
    source = tmp_path / "in" / "a.log"
    write(source)
    size = source.stat().st_size
    assert 2 * BLOCK < size <= 3 * BLOCK                   # three partitions
    s3.put("raw/a.log", source.read_bytes())
    local = run(tmp_path, spec(str(source), "out-local"), "local.yaml")
    copies_seen = []
    storage.HOOKS["fetched"] = lambda url: copies_seen.extend(local_copies(tmp_path, "a.log"))
    try:
        remote = run(tmp_path, spec(s3.url("raw/a.log"), "out-remote"), "remote.yaml")
    finally:
        storage.HOOKS.clear()
    assert [(s["path"], s["rows"], s["sha256"]) for s in remote.manifest["shards"]] == \
        [(s["path"], s["rows"], s["sha256"]) for s in local.manifest["shards"]]
    assert remote.counts == local.counts and remote.counts["quarantined"] > 0
    assert copies_seen == [] and local_copies(tmp_path, "a.log") == []      # never written to a local file
    assert not any(p.name.startswith("gpuetl-inputs-") for p in (tmp_path / "tmp").iterdir())
    gets = object_gets(proxy, s3.bucket, "raw/a.log")
    assert gets and all(r[2] and r[2].startswith("bytes=") for r in gets)   # no whole-object GET
    read = sum(r[3] for r in gets)
    sample = min(size, JSON_HEAD_BYTES) if kind == "jsonl" else 0     # the plan samples a jsonl object's head
    assert size + sample <= read < size * 1.25 + sample, (read, size)    # each byte about once, not per partition
    assert len(gets) >= 3
    tiers = remote.manifest["input_tiers"]
    assert (tiers["remote_bytes"], tiers["remote_objects"], tiers["ranged_objects"]) == (size, 1, 1)
    assert remote.manifest["inputs"][0]["etag"]


def test_an_object_replaced_after_the_plan_is_an_error_naming_it(s3, tmp_path):
    from gpuetl.sources.ranges import read_range

    write_text(tmp_path / "a.log")
    s3.put("raw/a.log", (tmp_path / "a.log").read_bytes())
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(text_spec(s3.url("raw/a.log"), "out")))
    plan = Pipeline.from_file(tmp_path / "p.yaml").plan()
    f = plan.files[0]
    assert f.in_store and f.path == s3.url("raw/a.log") and len(plan.partitions) == 3
    first = plan.partitions[1].ranges[0]
    before = bytes(read_range(f, first).data)
    assert before and before.endswith(b"\n")
    s3.put("raw/a.log", (tmp_path / "a.log").read_bytes().replace(b"GET", b"PUT"))     # same size, new ETag
    with pytest.raises(SourceError, match=f"{s3.url('raw/a.log')} changed during the run"):
        read_range(f, first)
    s3.fs.rm(f"{s3.bucket}/raw/a.log")
    with pytest.raises(SourceError, match="raw/a.log"):
        read_range(f, first)


def test_validate_lists_objects_and_fetches_no_body(faulty_s3, tmp_path, capsys):
    from gpuetl.cli import main

    s3, proxy = faulty_s3
    write_text(tmp_path / "a.log")
    s3.put("raw/a.log", (tmp_path / "a.log").read_bytes())
    s3.put("raw/b.log", (tmp_path / "a.log").read_bytes())
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(text_spec(s3.url("raw/*.log"), "out")))
    assert main(["validate", str(tmp_path / "p.yaml")]) == 0
    assert "2 input files" in capsys.readouterr().out
    assert proxy.requests                                  # it did list, through the proxy
    assert object_gets(proxy, s3.bucket, "raw/a.log") == object_gets(proxy, s3.bucket, "raw/b.log") == []
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("source", [{"type": "csv"}, {"type": "text", "multiline": {"start": "^\\d"}}])
def test_csv_and_multiline_objects_are_fetched_whole(s3, tmp_path, source):
    s3.put("raw/a.log", b"a,b\n1,2\n3,\"x\ny\"\n")
    data = {"version": 1, "name": "whole", "source": {**source, "path": s3.url("raw/a.log")},
            "sink": {"path": "out"}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    plan = Pipeline.from_file(tmp_path / "p.yaml").plan()
    f = plan.files[0]
    assert not f.in_store and f.path != f.url and open(f.path, "rb").read() == b"a,b\n1,2\n3,\"x\ny\"\n"
    assert plan.metadata["input_tiers"]["ranged_objects"] == 0
