"""Several machines, nothing shared but the bucket: a run on a cluster reached by its address,
whose workers each have a temporary folder and a working folder of their own, writes an s3://
dataset byte for byte equal to the local run's, with every file another task or the client reads
going through the store (sinks/runstore.py)."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import yaml

from gpuetl import Pipeline
from gpuetl.samples import write_access_logs
from gpuetl.sinks import objectstore

pytestmark = pytest.mark.slow        # three processes start, each importing dask (and gpuetl's libraries)


def spec(source, sink):
    return {"version": 1, "name": "cluster", "source": {"type": "text", "path": source, "blocksize": "64KiB",
                                                        "provenance": True},
            "parse": {"preset": "apache_combined"}, "steps": [{"dedupe": {"on": ["ip", "time", "request"]}}],
            "on_error": "quarantine",
            "shard": {"count": 2, "key": ["ip"], "shuffle": True, "seed": 3, "splits": {"train": 0.75, "val": 0.25}},
            "sink": {"path": sink, "mode": "overwrite"}}


@pytest.fixture
def cluster(tmp_path):
    """`dask scheduler` and two `dask worker` processes on loopback, each worker with its own
    TMPDIR, local directory and working folder (none of them the client's)."""
    dask_cli = shutil.which("dask", path=os.path.dirname(sys.executable))
    if dask_cli is None:
        pytest.skip("the dask command is not installed next to this Python")
    procs, homes = [], []
    import gpuetl

    root = os.path.dirname(os.path.dirname(gpuetl.__file__))          # the workers import this gpuetl
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    address_file = tmp_path / "scheduler.json"
    try:
        procs.append(subprocess.Popen([dask_cli, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                       "--scheduler-file", str(address_file)], cwd=tmp_path,
                                      env={**env, "TMPDIR": str(tmp_path)},
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for name in ("w1", "w2"):
            home = tmp_path / name
            (home / "tmp").mkdir(parents=True)
            (home / "cwd").mkdir()
            homes.append(home)
            procs.append(subprocess.Popen(
                [dask_cli, "worker", "--scheduler-file", str(address_file), "--nthreads", "2", "--no-nanny",
                 "--no-dashboard", "--host", "127.0.0.1", "--local-directory", str(home / "dask")],
                cwd=home / "cwd", env={**env, "TMPDIR": str(home / "tmp")},
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from distributed import Client

        deadline = time.monotonic() + 120
        while not address_file.exists():
            assert time.monotonic() < deadline and procs[0].poll() is None, "the scheduler did not start"
            time.sleep(0.1)
        address = json.loads(address_file.read_text())["address"]
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=120)
        yield address, homes
        with Client(address, timeout="60s") as client:
            client.shutdown()          # the scheduler closes its workers, then itself: quicker than signals
        for proc in procs:
            proc.wait(timeout=30)
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_a_cluster_without_a_shared_disk_writes_the_local_runs_dataset_through_the_store(s3, tmp_path, cluster,
                                                                                       monkeypatch):
    address, homes = cluster
    (tmp_path / "in").mkdir()
    for n in range(3):
        write_access_logs(tmp_path / "in" / f"{n}.log", lines=700, seed=n, bad_every=150)
        data = (tmp_path / "in" / f"{n}.log").read_bytes()
        s3.put(f"logs/{n}.log", data + data[: len(data) // 3].split(b"\n", 1)[1])   # repeated lines: dedupe drops them
    (tmp_path / "local.yaml").write_text(yaml.safe_dump(spec(s3.url("logs/*.log"), str(tmp_path / "local-out"))))
    local = Pipeline.from_file(tmp_path / "local.yaml").run(backend="cpu", scheduler="sync")
    assert local.counts["deduplicated"] > 0 and local.counts["quarantined"] > 0

    seen_at_commit = {}

    def look(rel):               # the commit's first copy into place: what lies where, at that moment
        if not seen_at_commit:
            staging = [os.path.join(d, f) for root in (tmp_path / "tmp").glob("gpuetl-staging-*")
                       for d, _, fs in os.walk(root) for f in fs]
            seen_at_commit.update(staging=staging, store=s3.keys("out/_tmp/"))

    monkeypatch.setitem(objectstore.HOOKS, "copying", look)
    (tmp_path / "remote.yaml").write_text(yaml.safe_dump(spec(s3.url("logs/*.log"), s3.url("out"))))
    work = tmp_path / "client-cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    remote = Pipeline.from_file(tmp_path / "remote.yaml").run(backend="cpu", scheduler=address)

    assert remote.counts == local.counts
    assert [(s["path"], s["sha256"]) for s in remote.manifest["shards"]] == \
        [(s["path"], s["sha256"]) for s in local.manifest["shards"]]
    for shard in local.manifest["shards"] + local.manifest["quarantine"]:
        assert s3.get(f"out/{shard['path']}") == (tmp_path / "local-out" / shard["path"]).read_bytes()
    # The pieces, shard records and shards went through the store; the client's staging folder
    # held its own state and the run report only.
    store = seen_at_commit["store"]
    assert any("/spill/" in k for k in store) and any("/shards/" in k for k in store)
    assert any(k.endswith("/data/train/part-00000.parquet") for k in store)
    staged = {os.path.basename(p) for p in seen_at_commit["staging"]}
    assert staged <= {"_lock", "_owner.json", "_state.json", "_report.json", "_report.html"}, staged
    # Each worker used its own temporary folder and left nothing there or in its working folder
    for home in homes:
        assert list((home / "cwd").iterdir()) == []
        assert [p.name for p in (home / "tmp").iterdir() if p.name.startswith("gpuetl")] == []
    assert list(work.iterdir()) == []
    assert s3.keys("out/_tmp/") == []
    from gpuetl.cli import main

    assert main(["verify", s3.url("out")]) == 0
