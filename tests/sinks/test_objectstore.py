"""s3:// sinks: the commit without rename (upload under _tmp/<run-id>/, journal, copy into place,
manifest, _SUCCESS last), verify against the store, the lock, and the deletion rule."""

import json
import subprocess
import sys
import textwrap

import pytest
import yaml

from gpuetl import Pipeline
from gpuetl.cli import main
from gpuetl.errors import OutputError
from gpuetl.samples import write_access_logs


def spec(sink, mode="overwrite", source="in/*.log"):
    return {"version": 1, "name": "sink", "source": {"type": "text", "path": source, "blocksize": "64KiB"},
            "parse": {"preset": "apache_combined"}, "shard": {"count": 3, "splits": {"train": 0.8, "val": 0.2}},
            "sink": {"path": sink, "mode": mode}}


def write_inputs(base):
    (base / "in").mkdir()
    write_access_logs(base / "in" / "a.log", lines=1500, seed=4, bad_every=300)
    return base


@pytest.fixture
def inputs(tmp_path):
    return write_inputs(tmp_path)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The local run of spec() on the same inputs, made once: the shards each s3:// run must equal
    (tests only read it). → (its result, its folder)."""
    base = write_inputs(tmp_path_factory.mktemp("reference"))
    return run(base, spec("reference")), base / "reference"


def run(tmp_path, data):
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    return Pipeline.from_file(tmp_path / "p.yaml").run(backend="cpu", scheduler="sync")


def visible(s3, prefix="out/"):
    return [k for k in s3.keys(prefix) if "/_tmp/" not in k]


def test_s3_sink_commits_the_local_runs_shards_and_verifies(s3, inputs, reference, capsys):
    local, local_out = reference
    remote = run(inputs, spec(s3.url("out")))
    assert [(s["path"], s["sha256"]) for s in remote.manifest["shards"]] == \
        [(s["path"], s["sha256"]) for s in local.manifest["shards"]]
    for shard in local.manifest["shards"]:
        assert s3.get(f"out/{shard['path']}") == (local_out / shard["path"]).read_bytes()
    assert s3.keys("out/_tmp/") == []                 # uploads, journal, owner record and lock removed
    manifest = json.loads(s3.get("out/_manifest.json"))
    assert manifest["shards"] == remote.manifest["shards"]
    assert main(["verify", s3.url("out")]) == 0
    assert main(["inspect", s3.url("out")]) == 0
    assert "complete" in capsys.readouterr().out
    assert main(["report", s3.url("out")]) == 0               # the run report, read from the store
    assert str(remote.manifest["counts"]["rows_out"]) in capsys.readouterr().out.replace(",", "")
    s3.put("out/" + local.manifest["shards"][0]["path"], b"not parquet")          # tampered
    s3.put("out/stray.parquet", b"x")
    assert main(["verify", s3.url("out")]) == 1
    out = capsys.readouterr().out
    assert local.manifest["shards"][0]["path"] in out and "stray.parquet: not in the manifest" in out


def test_overwrite_removes_only_the_previous_datasets_files_and_refuses_foreign_keys(s3, inputs):
    run(inputs, spec(s3.url("out")))
    first = set(visible(s3))
    s3.put("out-old/keep.txt", b"a sibling prefix, not inside out/")
    data = spec(s3.url("out"))
    data["shard"] = {"count": 1}
    run(inputs, data)
    assert set(visible(s3)) == {"out/part-00000.parquet", "out/_quarantine/part-00000.parquet",
                                "out/_manifest.json", "out/_SUCCESS", "out/_report.json", "out/_report.html"}
    assert first - set(visible(s3))                 # the split folders' shards were removed: they were listed
    assert s3.get("out-old/keep.txt") == b"a sibling prefix, not inside out/"
    s3.put("out/notes.txt", b"mine")
    with pytest.raises(OutputError, match="notes.txt"):
        run(inputs, data)
    assert s3.get("out/notes.txt") == b"mine"
    assert "out/_SUCCESS" in s3.keys("out/")


def test_mode_error_refuses_and_resume_of_a_complete_dataset_does_nothing(s3, inputs):
    run(inputs, spec(s3.url("out")))
    before = {k: s3.get(k) for k in s3.keys("out/")}
    with pytest.raises(OutputError, match="already holds a complete dataset"):
        run(inputs, spec(s3.url("out"), mode="error"))
    run(inputs, spec(s3.url("out"), mode="resume"))
    assert {k: s3.get(k) for k in s3.keys("out/")} == before


def test_the_lock_is_a_conditional_put(s3, inputs):
    from gpuetl.sinks.objectstore import ObjectStoreFolder

    with ObjectStoreFolder(s3.url("out")):
        assert "out/_tmp/_lock" in s3.keys("out/")
        with pytest.raises(OutputError, match="in use by another gpuetl run"):
            run(inputs, spec(s3.url("out")))
    assert s3.keys("out/") == []
    s3.put("out/_tmp/_lock", json.dumps({"format": "gpuetl-lock/1", "host": "elsewhere", "pid": 1}).encode())
    with pytest.raises(OutputError, match="host elsewhere"):
        run(inputs, spec(s3.url("out")))


def test_input_and_sink_prefixes_are_compared_up_to_a_slash(s3, inputs):
    s3.put("logs/a.log", (inputs / "in" / "a.log").read_bytes())
    with pytest.raises(OutputError, match="lies where source.path"):
        run(inputs, spec(s3.url("logs/out"), source=s3.url("logs/*")))
    run(inputs, spec(s3.url("logs-out"), source=s3.url("logs/*")))       # logs-out/ is not inside logs/
    assert "logs-out/_SUCCESS" in s3.keys("logs-out/")



@pytest.mark.parametrize("source_scheme, sink_scheme", [("s3", "s3a"), ("S3", "S3A")])
def test_one_store_spelled_two_ways_is_one_store(s3, inputs, source_scheme, sink_scheme):
    """s3a:// names s3:// objects, and a scheme is case-blind: a sink spelled one way over inputs
    spelled the other is refused as the same spelling is (an s3a:// sink over s3:// inputs
    replaced them with its output), and an upper-case source scheme lists its objects."""
    s3.put("logs/a.log", (inputs / "in" / "a.log").read_bytes())
    before = {k: s3.get(k) for k in s3.keys("logs/")}
    source = s3.url("logs/a.log").replace("s3://", f"{source_scheme}://")
    with pytest.raises(OutputError, match="holds the input"):
        run(inputs, spec(s3.url("logs").replace("s3://", f"{sink_scheme}://"), source=source))
    with pytest.raises(OutputError, match="lies where source.path"):
        run(inputs, spec(s3.url("logs/out").replace("s3://", f"{sink_scheme}://"), source=source.replace("a.log", "*")))
    assert {k: s3.get(k) for k in s3.keys("logs/")} == before
    result = run(inputs, spec(s3.url("elsewhere").replace("s3://", f"{sink_scheme}://"), source=source))
    assert result.counts["rows_in"] == 1500

KILLER = textwrap.dedent("""
    import os, sys
    from gpuetl.cli import main
    from gpuetl.sinks import objectstore
    point, after = sys.argv[1], int(sys.argv[2])
    seen = []
    def kill(rel):
        seen.append(rel)
        if len(seen) > after:
            os._exit(9)
    objectstore.HOOKS[point] = kill
    sys.exit(main(["run", sys.argv[3], "--backend", "cpu", "--scheduler", "sync"]))
""")


@pytest.mark.slow                     # a run killed in a subprocess, a run more
@pytest.mark.parametrize("point,after", [("uploaded", 1), ("copying", 0), ("copied", 3)])
def test_a_killed_commit_leaves_nothing_visible_and_resume_completes_it(s3, inputs, reference, point, after):
    reference = reference[0]          # the local run's shards: an s3:// run's equal them (the first test)
    (inputs / "p.yaml").write_text(yaml.safe_dump(spec(s3.url("out"), mode="resume")))
    proc = subprocess.run([sys.executable, "-c", KILLER, point, str(after), str(inputs / "p.yaml")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 9, proc.stderr[-2000:]
    keys = s3.keys("out/")
    assert "out/_SUCCESS" not in keys and "out/_manifest.json" not in keys
    shown = [k for k in keys if not k.startswith("out/_tmp/")]
    if point == "copied":          # no rename: what was copied before the kill is there, without _SUCCESS
        assert len(shown) == after + 1
    else:
        assert shown == []
    if point == "copying":          # the journal is there: verify --repair finishes the commit
        assert main(["verify", s3.url("out"), "--repair"]) == 0
        assert "out/_SUCCESS" in s3.keys("out/")
    assert main(["run", str(inputs / "p.yaml"), "--backend", "cpu", "--scheduler", "sync"]) == 0
    assert [(s["path"], s["sha256"]) for s in json.loads(s3.get("out/_manifest.json"))["shards"]] == \
        [(s["path"], s["sha256"]) for s in reference.manifest["shards"]]
    assert s3.keys("out/_tmp/") == []
    assert main(["verify", s3.url("out")]) == 0


@pytest.mark.slow                     # a run killed in a subprocess, three runs more
@pytest.mark.parametrize("point,after", [("removing", 4), ("copied", 3)])
def test_a_commit_killed_over_a_previous_dataset_never_shows_files_of_both(s3, inputs, reference, point, after,
                                                                         capsys):
    """The old dataset's files go before any new one is copied in, the old manifest last: after
    a kill, what a listing shows is part of one dataset, never a mix (the shard names are the
    same, their bytes differ)."""
    old = spec(s3.url("out"))
    old["shard"]["seed"] = 7
    old_result = run(inputs, old)
    old_bytes = {s["path"]: s3.get(f"out/{s['path']}") for s in old_result.manifest["shards"]}
    reference, reference_out = reference
    new_bytes = {s["path"]: (reference_out / s["path"]).read_bytes() for s in reference.manifest["shards"]}
    assert set(old_bytes) == set(new_bytes) and all(old_bytes[p] != new_bytes[p] for p in old_bytes)
    (inputs / "p.yaml").write_text(yaml.safe_dump(spec(s3.url("out"))))
    proc = subprocess.run([sys.executable, "-c", KILLER, point, str(after), str(inputs / "p.yaml")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 9, proc.stderr[-2000:]
    keys = visible(s3)
    assert "out/_SUCCESS" not in keys
    shards = {k[len("out/"):]: s3.get(k) for k in keys if k.endswith(".parquet") and "/_quarantine/" not in k}
    assert shards
    if point == "removing":      # the old dataset, less what was removed (the quarantine, the reports, a
        #                          shard); its manifest still there
        assert all(old_bytes[p] == b for p, b in shards.items()) and len(shards) < len(old_bytes)
        assert "out/_manifest.json" in keys
    else:                        # the new dataset's first shards, no manifest
        assert all(new_bytes[p] == b for p, b in shards.items()) and len(shards) == 1
        assert "out/_manifest.json" not in keys
    capsys.readouterr()
    assert main(["verify", s3.url("out")]) == 1
    said = capsys.readouterr()
    assert "verify --repair" in said.out + said.err
    assert main(["verify", s3.url("out"), "--repair"]) == 0          # finishes the commit from its journal
    assert {k[len("out/"):]: s3.get(k) for k in visible(s3) if k.endswith(".parquet") and "_quarantine" not in k} \
        == new_bytes
    assert s3.keys("out/_tmp/") == []
    assert main(["verify", s3.url("out")]) == 0


@pytest.fixture
def through_store(monkeypatch):
    """Runs as on a cluster whose workers share no disk with this process (sinks/runstore.py),
    here with dask's local scheduler: the same tasks, quickly."""
    from gpuetl.runtime import run as run_module

    monkeypatch.setattr(run_module, "workers_share_disk", lambda executor: False)


def big_blocks(data):
    data["source"]["blocksize"] = "128KiB"         # fewer partitions: fewer pieces, fewer requests
    return data


def staged_files(inputs):
    return sorted(p.name for p in (inputs / "tmp").rglob("*") if p.is_file())


@pytest.mark.slow
def test_through_the_store_the_shards_cut_by_size_equal_the_local_runs(s3, inputs, through_store, monkeypatch):
    data = big_blocks(spec(s3.url("out")))
    data["shard"] = {"target_bytes": "64KiB", "shuffle": True, "key": ["ip"], "splits": {"train": 0.8, "val": 0.2}}
    local_data = {**data, "sink": {"path": "local-out", "mode": "overwrite"}}
    local = run(inputs, local_data)
    seen = []
    monkeypatch.setitem(__import__("gpuetl.sinks.objectstore", fromlist=["HOOKS"]).HOOKS, "copying",
                        lambda rel: seen.append((staged_files(inputs), s3.keys("out/_tmp/"))))
    remote = run(inputs, data)
    assert len(local.manifest["shards"]) >= 2
    assert [(s["path"], s["sha256"]) for s in remote.manifest["shards"]] == \
        [(s["path"], s["sha256"]) for s in local.manifest["shards"]]
    assert json.loads(s3.get("out/_report.json"))["columns"]          # the profile read from the shards in the store
    staged, in_store = seen[0]
    assert not any(name.endswith((".arrow", ".parquet")) for name in staged), staged
    assert any("/spill/" in k for k in in_store) and any("/shards/" in k for k in in_store)
    assert s3.keys("out/_tmp/") == []
    assert main(["verify", s3.url("out")]) == 0


@pytest.mark.slow
def test_through_the_store_a_failed_run_removes_its_keys_and_resume_reuses_uploaded_shards(s3, inputs, through_store,
                                                                                         monkeypatch):
    from gpuetl.errors import DataError
    from gpuetl.sinks import runstore

    failing = {**big_blocks(spec(s3.url("out"))), "max_error_ratio": 0.0001}
    with pytest.raises(DataError, match="max_error_ratio"):
        run(inputs, failing)
    assert s3.keys("out/") == []                   # its pieces, records and owner record removed
    reference = run(inputs, big_blocks(spec("reference")))
    s3.put("out/_tmp/someone-elses/file", b"not gpuetl's")

    uploads = []
    real = runstore.RunStore.upload

    def upload(self, local, rel):
        uploads.append(rel)
        if rel.startswith("data/") and len([u for u in uploads if u.startswith("data/")]) == 2:
            raise KeyboardInterrupt            # the run stops after one shard was uploaded
        return real(self, local, rel)

    monkeypatch.setattr(runstore.RunStore, "upload", upload)
    with pytest.raises(KeyboardInterrupt):
        run(inputs, big_blocks(spec(s3.url("out"), mode="resume")))
    assert visible(s3) == []
    uploads.clear()
    monkeypatch.setattr(runstore.RunStore, "upload", lambda self, local, rel: uploads.append(rel) or real(self, local, rel))
    run(inputs, big_blocks(spec(s3.url("out"), mode="resume")))
    shards = [u for u in uploads if u.startswith("data/") and u.endswith(".parquet") and "_quarantine" not in u]
    assert len(shards) == len(reference.manifest["shards"]) - 1          # the uploaded one was kept
    assert [(s["path"], s["sha256"]) for s in json.loads(s3.get("out/_manifest.json"))["shards"]] == \
        [(s["path"], s["sha256"]) for s in reference.manifest["shards"]]
    assert s3.keys("out/_tmp/") == ["out/_tmp/someone-elses/file"]


def test_only_a_cluster_reached_by_address_is_taken_to_share_no_disk():
    from types import SimpleNamespace

    from distributed import LocalCluster

    from gpuetl.sinks.runstore import workers_share_disk

    def executor(client, in_process=False):
        return SimpleNamespace(client=client, in_process=in_process)

    assert workers_share_disk(executor(None, True))                                  # dask's local schedulers
    assert workers_share_disk(executor(SimpleNamespace(cluster=None), True))         # a cluster in this process
    local = object.__new__(LocalCluster)                                             # its worker processes here
    assert workers_share_disk(executor(SimpleNamespace(cluster=local)))
    assert not workers_share_disk(executor(SimpleNamespace(cluster=None)))           # --scheduler tcp://…
