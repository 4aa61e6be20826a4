"""s3:// sources: listing with '**', prefixes up to a '/', the same rows as local files, and the
cache tier (a second run reads nothing from the store)."""

import json

import pytest
import yaml

from gpuetl import Pipeline
from gpuetl.errors import InputsNotFound, SpecError
from gpuetl.samples import write_access_logs


def logs(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    write_access_logs(folder / "a.log", lines=800, seed=1, bad_every=100)
    write_access_logs(folder / "b.log.gz", lines=600, seed=2, gzip=True)
    return folder


def upload(s3, folder, prefix):
    for p in sorted(folder.iterdir()):
        s3.put(f"{prefix}/{p.name}", p.read_bytes())


def spec(path, sink="out", **extra):
    return {"version": 1, "name": "s3", "source": {"type": "text", "path": path, "blocksize": "16KiB"},
            "parse": {"preset": "apache_combined"}, "shard": {"count": 2},
            "sink": {"path": sink, "mode": "overwrite"}, **extra}


def run(tmp_path, data, name="p.yaml"):
    (tmp_path / name).write_text(yaml.safe_dump(data))
    return Pipeline.from_file(tmp_path / name).run(backend="cpu", scheduler="sync")


def shard_hashes(manifest):
    return [(s["path"], s["rows"], s["sha256"]) for s in manifest["shards"]]


def test_listing_matches_nested_keys_and_compares_prefixes_with_a_slash(s3, tmp_path):
    from gpuetl.cache import RemoteInputs
    from gpuetl.sources.files import resolve_inputs

    for key in ["logs/a.gz", "logs/x/b.gz", "logs/x/y/c.gz", "logs/readme.txt", "logs-old/d.gz"]:
        s3.put(key, b"")
    files = resolve_inputs([s3.url("logs/**/*.gz")], tmp_path, "infer", [], RemoteInputs())
    assert [f.display for f in files] == [s3.url(k) for k in ["logs/a.gz", "logs/x/b.gz", "logs/x/y/c.gz"]]
    assert all(f.compression == "gzip" and f.etag for f in files)
    with pytest.raises(InputsNotFound, match="matches no object"):
        resolve_inputs([s3.url("log/*.gz")], tmp_path, "infer", [], RemoteInputs())


@pytest.mark.parametrize("pattern, keys", [
    ("m/*.log", ["m/a.log", "m/b.log"]),
    ("**", ["m/a.log", "m/a.log/old.log", "m/b.log"]),
])
def test_an_object_whose_key_is_also_a_prefix_is_listed(s3, pattern, keys):
    """`m/a.log` beside `m/a.log/old.log`: the store lists the key as an object and as a prefix,
    and fsspec's glob kept only the prefix, so the object was never read, without a word."""
    from gpuetl.storage import list_objects

    for key, data in [("m/a.log", b"a" * 200), ("m/b.log", b"b"), ("m/a.log/old.log", b"old")]:
        s3.put(key, data)
    found = list_objects(s3.url(pattern))
    assert [o.url for o in found] == [s3.url(k) for k in keys]
    assert found[0].size == 200 and found[0].etag

def test_s3_source_gives_the_local_runs_shards_and_pins_etags(s3, tmp_path):
    folder = logs(tmp_path)
    upload(s3, folder, "raw")
    local = run(tmp_path, spec(f"file://{folder}/*", "out-local"))       # file:// is a plain path
    remote = run(tmp_path, spec(s3.url("raw/*"), "out-remote"))
    assert shard_hashes(remote.manifest) == shard_hashes(local.manifest)
    assert remote.counts == local.counts
    pins = remote.manifest["inputs"]
    assert [p["path"] for p in pins] == [s3.url("raw/a.log"), s3.url("raw/b.log.gz")]
    assert all(p["etag"] and p["bytes"] > 0 for p in pins)
    assert remote.manifest["input_tiers"]["remote_bytes"] == sum(p["bytes"] for p in pins)


def test_second_run_with_the_cache_reads_nothing_from_the_store(s3, tmp_path):
    upload(s3, logs(tmp_path), "raw")
    cache = {"path": str(tmp_path / "cache"), "max_bytes": "1GiB"}
    first = run(tmp_path, spec(s3.url("raw/*"), "out1", cache=cache))
    second = run(tmp_path, spec(s3.url("raw/*"), "out2", cache=cache))
    total = sum(p["bytes"] for p in first.manifest["inputs"])
    assert first.manifest["input_tiers"]["remote_bytes"] == total
    assert second.manifest["input_tiers"] == {"remote_bytes": 0, "cache_bytes": total, "remote_objects": 0,
                                              "cache_objects": 2, "ranged_objects": 0}
    assert shard_hashes(first.manifest) == shard_hashes(second.manifest)
    # an object replaced under the same name is fetched again (its ETag differs)
    from gpuetl.cache import RemoteInputs
    from gpuetl.storage import list_objects

    s3.put("raw/a.log", b"1.2.3.4 - - changed\n")
    remote = RemoteInputs(None, cache["path"], 1 << 30)
    copies = remote.local_copies(list_objects(s3.url("raw/*")))
    assert (remote.objects_remote, remote.objects_cache) == (1, 1)
    assert open(copies[s3.url("raw/a.log")], "rb").read() == b"1.2.3.4 - - changed\n"


def test_cache_evicts_least_recently_used_entries_it_lists_and_nothing_else(s3, tmp_path):
    from gpuetl.cache import InputCache, RemoteInputs
    from gpuetl.storage import list_objects

    for i in range(4):
        s3.put(f"raw/{i}.log", bytes([65 + i]) * 1000)
    root = tmp_path / "cache"
    stranger = root / "gpuetl" / "objects" / "not-ours.log"
    stranger.parent.mkdir(parents=True)
    stranger.write_bytes(b"x" * 5000)
    (root / "mine.txt").write_bytes(b"keep")
    objects = list_objects(s3.url("raw/*"))
    for obj in objects:                          # one object per run: each run reads one
        RemoteInputs(None, root, 2500).local_copies([obj])
    cache = InputCache(root, 2500)
    assert sorted(cache.entries) == [s3.url("raw/2.log"), s3.url("raw/3.log")]
    assert len(list((root / "gpuetl" / "objects").iterdir())) == 3       # two entries and the stranger
    assert stranger.read_bytes() == b"x" * 5000 and (root / "mine.txt").read_bytes() == b"keep"


def test_cache_path_must_be_local(tmp_path):
    with pytest.raises(SpecError, match="cache is a local folder"):
        run(tmp_path, spec("in/*", cache={"path": "s3://b/cache"}))


def test_gs_and_az_need_their_packages(tmp_path):
    import importlib.util

    for url, package in (("gs://b/x/*.log", "gcsfs"), ("az://c/x/*.log", "adlfs")):
        if importlib.util.find_spec(package):
            continue
        with pytest.raises(SpecError, match=f"needs the {package} package"):
            run(tmp_path, spec(url))


def test_validate_lists_s3_patterns_instead_of_globbing_locally(s3, tmp_path, capsys):
    from gpuetl.cli import main

    (tmp_path / "p.yaml").write_text(yaml.safe_dump(spec(s3.url("nothing/*.log"))))
    assert main(["validate", str(tmp_path / "p.yaml")]) == 2          # as run would
    err = capsys.readouterr().err
    assert "matches no object" in err and "looked in" not in err
    upload(s3, logs(tmp_path), "raw")
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(spec(s3.url("raw/*"))))
    assert main(["validate", str(tmp_path / "p.yaml")]) == 0
    assert "2 input files" in capsys.readouterr().out


def test_large_objects_are_streamed_to_disk_and_checked(s3, tmp_path, monkeypatch):
    from gpuetl import storage
    from gpuetl.cache import RemoteInputs
    from gpuetl.errors import SourceError
    from gpuetl.storage import RemoteObject, list_objects

    monkeypatch.setattr(storage, "SMALL_OBJECT", 100)
    s3.put("raw/big.log", b"x" * 1000)
    s3.put("raw/small.log", b"y" * 10)
    remote = RemoteInputs(None, tmp_path / "cache")
    copies = remote.local_copies(list_objects(s3.url("raw/*")))
    assert open(copies[s3.url("raw/big.log")], "rb").read() == b"x" * 1000
    assert open(copies[s3.url("raw/small.log")], "rb").read() == b"y" * 10
    stale = RemoteObject(s3.url("raw/big.log"), 1000, "0" * 32, None, 0)       # listed before a rewrite
    with pytest.raises(SourceError, match="big.log: the object changed while gpuetl read it"):
        RemoteInputs(None, tmp_path / "cache2").local_copies([stale])
    assert [p.name for p in (tmp_path / "cache2" / "gpuetl" / "objects").iterdir()] == []   # no partial file left


HOLDER = """
import json, sys
from gpuetl.cache import RemoteInputs
from gpuetl.storage import list_objects
remote = RemoteInputs(None, sys.argv[1], int(sys.argv[2]))
print(json.dumps(remote.local_copies(list_objects(sys.argv[3]))), flush=True)
sys.stdin.read()                 # reads its copies until told to end
"""


@pytest.mark.slow                     # a second process imports gpuetl
def test_two_processes_sharing_a_cache_keep_each_others_entries_and_evict_nothing_the_other_reads(s3, tmp_path):
    import os
    import subprocess
    import sys

    import gpuetl
    from gpuetl.cache import InputCache, RemoteInputs
    from gpuetl.storage import list_objects

    for name in "abc":
        s3.put(f"raw/{name}.log", name.encode() * 1000)
    a, b, c = (list_objects(s3.url(f"raw/{name}.log"))[0] for name in "abc")
    root = tmp_path / "cache"
    mine = RemoteInputs(None, root, 1500)          # room for one object
    assert mine.cache.entries == {}                # this process read the (empty) index first
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(gpuetl.__file__))}
    other = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), "1500", a.url], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=env, text=True)
    try:
        a_copy = json.loads(other.stdout.readline())[a.url]
        b_copy = mine.local_copies([b])[b.url]     # over max_bytes: `a` is the least recently used, but read
        assert sorted(InputCache(root, 1500).entries) == [a.url, b.url]      # neither run lost the other's entry
        assert open(a_copy, "rb").read() == b"a" * 1000 and open(b_copy, "rb").read() == b"b" * 1000
    finally:
        other.stdin.close()
        assert other.wait(timeout=60) == 0
    RemoteInputs(None, root, 1500).local_copies([c])   # the other run is gone: its `a` may go now; `b` is still read
    assert sorted(InputCache(root, 1500).entries) == [b.url, c.url]
    assert not os.path.exists(a_copy) and open(b_copy, "rb").read() == b"b" * 1000
    assert [p.name for p in (root / "gpuetl" / "readers").iterdir()] == [mine.cache.reading.path.name]
