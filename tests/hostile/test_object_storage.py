"""Object storage, hostile: no credentials, a missing bucket, a denied object, throttling and
dropped connections (through a loopback proxy), an object changed mid-run (a test hook), and
secrets that must never reach an output file or stderr. Each: a clear message naming the object,
the exit code, and nothing half-written."""

import json
import os

import pytest
import yaml

from gpuetl.cli import main
from gpuetl.samples import write_access_logs

SECRET = "sEcReT-never-written-9f3b"


def spec(source, sink, **source_extra):
    return {"version": 1, "name": "hostile-s3",
            "source": {"type": "text", "path": source, "blocksize": "16KiB", **source_extra},
            "parse": {"preset": "apache_combined"}, "sink": {"path": sink, "mode": "overwrite"}}


@pytest.fixture
def raw(s3, tmp_path):
    """Two log objects under raw/, and their bytes."""
    data = {}
    for i, name in enumerate(["a.log", "b.log"]):
        write_access_logs(tmp_path / name, lines=300, seed=i, bad_every=50)
        data[name] = (tmp_path / name).read_bytes()
        s3.put(f"raw/{name}", data[name])
        (tmp_path / name).unlink()
    return data


def gpuetl_run(tmp_path, data, capsys):
    if data is not None:
        (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    code = main(["run", str(tmp_path / "p.yaml"), "--backend", "cpu", "--scheduler", "sync"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_no_credentials_is_a_clear_error_naming_the_object(s3, raw, tmp_path, capsys, monkeypatch, surroundings):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(spec(s3.url("raw/*.log"), "out")))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        code, _, err = gpuetl_run(tmp_path, None, capsys)
    assert code == 1, err
    assert "no usable credentials" in err and s3.url("raw/*.log") in err and "AWS_ACCESS_KEY_ID" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_a_missing_bucket_is_named_for_sources_and_sinks(s3, raw, tmp_path, capsys):
    code, _, err = gpuetl_run(tmp_path, spec("s3://no-such-bucket-gpuetl/raw/*.log", "out"), capsys)
    assert code == 2 and "the bucket no-such-bucket-gpuetl does not exist" in err
    code, _, err = gpuetl_run(tmp_path, spec(s3.url("raw/*.log"), "s3://no-such-bucket-gpuetl/out"), capsys)
    assert code == 2 and "the bucket no-such-bucket-gpuetl does not exist" in err
    assert not (tmp_path / "out").exists()


def test_a_denied_object_is_named_and_nothing_is_written(faulty_s3, raw, tmp_path, capsys):
    s3, proxy = faulty_s3
    proxy.faults.append(["GET", "/raw/b.log", "403", None])
    code, _, err = gpuetl_run(tmp_path, spec(s3.url("raw/*.log"), s3.url("out")), capsys)
    assert code == 1 and f"{s3.url('raw/b.log')}: access denied" in err
    assert s3.keys("out/") == []


@pytest.mark.slow          # five retries, each after the client's backoff
def test_throttling_and_dropped_connections_are_retried(faulty_s3, raw, tmp_path, capsys):
    s3, proxy = faulty_s3
    proxy.faults += [["GET", "/raw/a.log", "503", 2], ["GET", "/raw/b.log", "reset", 2],
                     ["PUT", "/out/_tmp/", "503", 1]]
    code, _, err = gpuetl_run(tmp_path, spec(s3.url("raw/*.log"), s3.url("out")), capsys)
    assert code == 0, err
    assert proxy.hits == {"503": 3, "reset": 2}
    assert main(["verify", s3.url("out")]) == 0


@pytest.mark.slow          # every retry after the client's backoff
def test_a_store_that_keeps_failing_stops_the_run_after_bounded_retries(faulty_s3, raw, tmp_path, capsys):
    s3, proxy = faulty_s3
    proxy.faults.append(["GET", "/raw/a.log", "503", None])
    fast = {"config_kwargs": {"retries": {"max_attempts": 1, "mode": "standard"}}}
    code, _, err = gpuetl_run(tmp_path, spec(s3.url("raw/*.log"), s3.url("out"), storage_options=fast), capsys)
    assert code == 1 and s3.url("raw/a.log") in err and "SlowDown" in err
    assert 1 < proxy.hits["503"] <= 15
    assert s3.keys("out/") == []


@pytest.mark.slow
def test_an_upload_that_keeps_failing_leaves_nothing_visible(faulty_s3, raw, tmp_path, capsys):
    s3, proxy = faulty_s3
    proxy.faults.append(["PUT", "/out/_tmp/", "503", None])
    proxy.faults.append(["POST", "/out/_tmp/", "503", None])
    data = spec(s3.url("raw/*.log"), s3.url("out"))
    data["sink"]["storage_options"] = {"config_kwargs": {"retries": {"max_attempts": 1, "mode": "standard"}}}
    code, _, err = gpuetl_run(tmp_path, data, capsys)
    assert code == 1 and s3.url("out") in err and "Traceback" not in err
    assert [k for k in s3.keys("out/") if "_tmp/" not in k] == []


def test_an_object_changed_during_the_run_stops_the_commit(s3, raw, tmp_path, capsys, surroundings):
    from gpuetl import storage

    changed = []

    def replace(url):
        if url.endswith("a.log") and not changed:
            s3.put("raw/a.log", raw["a.log"] + raw["a.log"][:200])
            changed.append(url)

    storage.HOOKS["fetched"] = replace
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(spec(s3.url("raw/*.log"), "out")))
    try:
        with surroundings(tmp_path, dataset=tmp_path / "out"):
            code, _, err = gpuetl_run(tmp_path, None, capsys)
    finally:
        storage.HOOKS.clear()
    assert changed and code == 1
    assert f"{s3.url('raw/a.log')} changed during the run" in err and "nothing was committed" in err
    assert not (tmp_path / "out" / "_SUCCESS").exists() and not (tmp_path / "out" / "_manifest.json").exists()


def test_an_object_that_does_not_match_its_listing_is_refused(s3, tmp_path):
    from gpuetl.errors import SourceError
    from gpuetl.storage import RemoteObject, fetch

    s3.put("raw/x.log", b"new bytes\n")
    listed = RemoteObject(s3.url("raw/x.log"), 10, "0" * 32, None, 0)      # as listed before a replacement
    with pytest.raises(SourceError, match="raw/x.log: the object changed while gpuetl read it"):
        list(fetch([listed]))


def test_verify_inputs_says_whether_the_pinned_inputs_are_unchanged(s3, raw, tmp_path, capsys):
    (tmp_path / "local.log").write_bytes(raw["a.log"])
    data = spec([s3.url("raw/*.log"), "local.log"], s3.url("out"))
    assert gpuetl_run(tmp_path, data, capsys)[0] == 0
    assert main(["verify", s3.url("out"), "--inputs"]) == 0
    assert "3 inputs are the bytes" in capsys.readouterr().out
    os.utime(tmp_path / "local.log", ns=(1, 1))          # touched: its ranges are hashed again, the same
    assert main(["verify", s3.url("out"), "--inputs"]) == 0
    assert "local.log: identity changed (mtime, ctime)" in capsys.readouterr().out
    s3.put("raw/b.log", raw["b.log"][:-10])
    (tmp_path / "local.log").write_bytes(raw["a.log"][::-1])          # same size, other bytes
    os.utime(tmp_path / "local.log", ns=(1, 1))
    assert main(["verify", s3.url("out"), "--inputs"]) == 1
    out = capsys.readouterr().out
    assert f"INPUT {s3.url('raw/b.log')}: changed" in out and "INPUT local.log: other bytes than the run read" in out
    assert main(["verify", s3.url("out")]) == 0            # the dataset itself is intact


@pytest.mark.slow          # its second run retries a refused endpoint, after the client's backoffs
def test_secrets_in_storage_options_never_reach_files_or_stderr(s3, raw, tmp_path, capsys):
    options = {"key": "testing", "secret": SECRET}
    data = spec(s3.url("raw/*.log"), s3.url("out"), storage_options=options)
    data["sink"]["storage_options"] = options
    data["cache"] = {"path": "cache"}
    code, out, err = gpuetl_run(tmp_path, data, capsys)
    assert code == 0, err
    code, out2, err2 = gpuetl_run(tmp_path, spec(s3.url("raw/*.log"), "local-out", storage_options={
        "key": "testing", "secret": SECRET, "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}), capsys)
    assert code == 1 and "failed to list" in err2, err2       # a failure with the options in the client
    (tmp_path / "p.yaml").unlink()                             # the pipeline file itself holds it, of course
    for text in (out, err, out2, err2):
        assert SECRET not in text
    for folder, _, files in os.walk(tmp_path):
        for name in files:
            assert SECRET.encode() not in open(os.path.join(folder, name), "rb").read(), name
    for key in s3.keys():
        assert SECRET.encode() not in s3.get(key), key
    manifest = json.loads(s3.get("out/_manifest.json"))
    assert "storage_options" not in json.dumps(manifest)


def test_odd_keys_are_read_and_their_local_copies_stay_in_the_cache(s3, raw, tmp_path, capsys):
    from hostile.conftest import snapshot

    keys = ["odd/with space.log", "odd/ünï cödé.log", "odd/100%.log", "odd/../up.log", "odd/a/./b.log",
            "odd/" + "n" * 900 + ".log"]
    for key in keys:
        s3.put(key, raw["a.log"][:400] + b"\n")
    data = spec(s3.url("odd/**"), "out")
    data["cache"] = {"path": "cache"}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    before = snapshot(tmp_path)
    code, _, err = gpuetl_run(tmp_path, None, capsys)
    assert code == 0, err
    after = snapshot(tmp_path)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert changed and all(k == "out" or k.startswith("out/") or k in ("cache", "cache/gpuetl")
                           or k.startswith("cache/gpuetl/") for k in changed), sorted(changed)
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert sorted(i["path"] for i in manifest["inputs"]) == sorted(s3.url(k) for k in keys)
    objects = tmp_path / "cache" / "gpuetl" / "objects"
    assert len(list(objects.iterdir())) == len(keys) and all(len(p.name) < 120 for p in objects.iterdir())


def test_a_broken_cache_index_starts_afresh_and_deletes_nothing_it_does_not_list(s3, tmp_path):
    from gpuetl.cache import RemoteInputs
    from gpuetl.storage import list_objects

    s3.put("raw/a.log", b"a" * 100)
    objects = tmp_path / "cache" / "gpuetl" / "objects"
    objects.mkdir(parents=True)
    (objects / "old-entry.log").write_bytes(b"z" * 10_000)
    for garbage in (b"{not json", b"[]", json.dumps({"format": "gpuetl-cache/1", "entries": {
            "s3://x/y": {"file": "../../../victim", "size": 1, "etag": None, "version_id": None, "used": 0}}}).encode()):
        (tmp_path / "cache" / "gpuetl" / "index.json").write_bytes(garbage)
        (tmp_path / "victim").write_bytes(b"keep")
        remote = RemoteInputs(None, tmp_path / "cache", max_bytes=50)       # over the bound at once
        remote.local_copies(list_objects(s3.url("raw/*")))
        assert (objects / "old-entry.log").read_bytes() == b"z" * 10_000
        assert (tmp_path / "victim").read_bytes() == b"keep"


def test_a_cache_folder_that_is_a_link_is_refused(tmp_path):
    from gpuetl.cache import InputCache
    from gpuetl.errors import SpecError

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "cache").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "cache" / "gpuetl")
    with pytest.raises(SpecError, match="symbolic link"):
        InputCache(tmp_path / "cache", None)
    assert list((tmp_path / "elsewhere").iterdir()) == []
