"""Parity: the same pipeline gives the same dataset however it runs.

- Within a backend the shards' bytes are identical whatever the scheduler, worker count or
  blocksize: on the CPU every way of running gives the bytes of the plain run (the `sync`
  scheduler, the default blocksize): dask's threaded scheduler, gpuetl's default local cluster,
  a two-worker cluster, and blocksizes that cut the input into many or few partitions. Same
  counts and stages, byte-identical shards (sha256), the same quarantine rows.
- Across backends the dataset is *logically* identical: the same rows in the same order with the
  same values and the same Arrow schema, the same quarantine rows and counts (each backend
  encodes Parquet with its own writer: pyarrow's, libcudf's). With `pytest -m gpu` on a GPU
  machine the GPU backend joins, through `scheduler="sync"` and through its LocalCUDACluster, and
  must also stay on the device: its fallback counters are zero wherever the device path is
  expected.
"""

import importlib.util
from contextlib import contextmanager

import pyarrow.parquet as pq
import pytest

from conftest import access_spec
from gpuetl import Pipeline

CASES = {
    "combined": {},
    "steps": {"steps": [{"filter": "status >= 200 and method in ['GET', 'POST']"},
                        {"derive": {"hour": "hour(time)", "path_len": "len(path)"}},
                        {"dedupe": {"on": ["ip", "time", "request"]}}, {"drop": ["ident"]}]},
    "shards": {"shard": {"count": 3, "key": ["ip"], "shuffle": True, "seed": 7,
                         "splits": {"train": 0.8, "val": 0.1, "test": 0.1}}},
    "template": {"parse": {"template": r"<ip> <ident> <user> \[<time>\] <rest>"},
                 "columns": {"ip": "string"}},
    "regex-fallback": {"parse": {"regex": r"(?i)^(?P<ip>\S+) .*\b(?P<status>\d{3}) "}},
    "provenance": {"source": {"type": "text", "path": "in/*", "blocksize": "7KiB", "provenance": True}},
}

# how the CPU runs, against the reference (sync, the case's own blocksize)
RUNS = {
    "threads": {"scheduler": "threads"},
    "local-cluster": {"scheduler": "local"},               # gpuetl's own cluster: one in-process worker
    "two-workers": {"workers": 2},                         # a distributed cluster the caller brings
    "blocksize-16KiB": {"blocksize": "16KiB"},             # many partitions (~30 over 6,000 lines)
    "blocksize-1MiB": {"blocksize": "1MiB"},               # one partition per file
}


def _run(tmp_path, name, label, backend="cpu", scheduler="sync", blocksize=None, workers=None, inputs=None):
    """Runs the case on `inputs`/in (default: tmp_path/in) into tmp_path/out-<label>."""
    out = tmp_path / f"out-{label}"
    spec = access_spec(sink__path=str(out), **CASES[name])
    if blocksize:
        spec["source"] = {**spec["source"], "blocksize": blocksize}
    pipeline = Pipeline.from_dict(spec, base_dir=inputs or tmp_path)
    with _cluster(workers) as client:
        result = pipeline.run(backend=backend, scheduler=scheduler, client=client)
    quarantine = [pq.read_table(out / q["path"]).to_pylist() for q in result.quarantine]
    return result, {s["path"]: s["sha256"] for s in result.shards}, quarantine, len(pipeline.plan().partitions)


@contextmanager
def _cluster(workers):
    if not workers:
        yield None
        return
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        assert len(client.nthreads()) == workers
        yield client


def _same(got, expected):
    result, sha, quarantine, _ = got
    reference, reference_sha, reference_q, _ = expected
    assert result.counts == reference.counts
    assert result.stages == reference.stages
    assert sha == reference_sha
    assert quarantine == reference_q
    assert result.bad_records == reference.bad_records
    assert result.counts["rows_in"] == 6000


def _matrix():
    """Each partition-sensitive case on every run; provenance (byte offsets) where the cuts move.
    The cluster runs and the many-partition ones are `slow`."""
    slow = ("local-cluster", "two-workers", "blocksize-16KiB")
    cases = [(name, run) for name in ("combined", "steps", "shards") for run in sorted(RUNS)]
    cases += [("provenance", run) for run in sorted(RUNS) if run.startswith("blocksize")]
    return [pytest.param(name, run, id=f"{name}-{run}", marks=[pytest.mark.slow] if run in slow else [])
            for name, run in cases]


@pytest.fixture(scope="module")
def sync_run(shared_access_logs, tmp_path_factory):
    """name → the case's reference run (sync, its own blocksize), made once for the module: every
    run of the matrix is compared with it, none changes it."""
    inputs, done = shared_access_logs.parent, {}

    def get(name):
        if name not in done:
            done[name] = _run(tmp_path_factory.mktemp(f"sync-{name}"), name, "sync", inputs=inputs)
        return done[name]
    return get


@pytest.mark.parametrize("name, run", _matrix())
def test_cpu_gives_the_same_bytes_on_every_scheduler_worker_count_and_blocksize(tmp_path, shared_access_logs, sync_run,
                                                                              name, run):
    reference = sync_run(name)
    got = _run(tmp_path, name, run, inputs=shared_access_logs.parent, **RUNS[run])
    if "blocksize" in RUNS[run]:
        assert got[3] != reference[3]                   # the input was cut differently
    _same(got, reference)


HOST_BY_DESIGN = {"regex-fallback"}        # cases whose regex the device cannot run
GPU_RUNS = [pytest.param("sync", marks=pytest.mark.gpu, id="gpu-sync"),
            pytest.param(None, marks=[pytest.mark.gpu, pytest.mark.slow], id="gpu-cluster")]


def _tables(result):
    return {s["path"]: pq.read_table(result.out_dir / s["path"]) for s in result.shards}


@pytest.mark.skipif(importlib.util.find_spec("cudf") is None, reason="needs RAPIDS (cudf)")
@pytest.mark.parametrize("scheduler", GPU_RUNS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_gives_the_cpu_dataset(tmp_path, access_logs, name, scheduler):
    expected = _run(tmp_path, name, "cpu")
    got = _run(tmp_path, name, f"gpu-{scheduler}", backend="gpu", scheduler=scheduler)
    result, reference = got[0], expected[0]
    assert result.counts == reference.counts and result.stages == reference.stages
    assert got[2] == expected[2] and result.bad_records == reference.bad_records
    shards, expected_shards = _tables(result), _tables(reference)
    assert sorted(shards) == sorted(expected_shards)
    for path, table in expected_shards.items():
        assert shards[path].schema.remove_metadata() == table.schema.remove_metadata(), path
        assert shards[path].to_pylist() == table.to_pylist(), path
    fallbacks = result.manifest["fallbacks"]
    assert (fallbacks != {}) if name in HOST_BY_DESIGN else (fallbacks == {}), fallbacks
    moved = result.manifest["host_transfer"]
    read = sum(r["bytes"] for path, r in moved["reads"].items() if path.startswith("kvikio"))
    assert read > 0 and moved["input_bytes"] == result.input_bytes


@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("cudf") is None, reason="needs RAPIDS (cudf)")
def test_gpu_bytes_do_not_depend_on_the_blocksize(tmp_path, access_logs):
    sha = [_run(tmp_path, "combined", f"gpu-{b}", backend="gpu", blocksize=b)[1] for b in ("64KiB", "7KiB", "3KiB")]
    assert sha[0] == sha[1] == sha[2]


def test_cpu_fixed_counts(sync_run):
    result, _, quarantine, _ = sync_run("combined")
    assert result.counts["quarantined"] == 10 and sum(len(q) for q in quarantine) == 10
