"""Parity, written once. Within a backend the shards' bytes are identical whatever the blocksize
and scheduler; across backends the dataset is *logically* identical: the same rows in the same
order with the same values and the same Arrow schema, the same quarantine rows and the same
counts (each backend encodes Parquet with its own writer: pyarrow's, libcudf's).

On CI only the CPU runs; with `pytest -m gpu` on a GPU machine the GPU backend joins, through
`scheduler="sync"` and through its LocalCUDACluster, and must also stay on the device: its
fallback counters are zero wherever the device path is expected.
"""

import importlib.util

import pyarrow.parquet as pq
import pytest

from conftest import access_spec
from gpuetl import Pipeline

HAS_RAPIDS = importlib.util.find_spec("cudf") is not None

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
HOST_BY_DESIGN = {"regex-fallback"}        # cases whose regex the device cannot run


def _run(tmp_path, backend, name, scheduler="sync", **extra):
    out = tmp_path / f"out-{backend}-{scheduler}-{name}-{len(extra)}"
    spec = access_spec(sink__path=str(out), **{**CASES[name], **extra})
    result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend=backend, scheduler=scheduler)
    shards = {s["path"]: pq.read_table(out / s["path"]) for s in result.shards}
    quarantine = [pq.read_table(out / q["path"]).to_pylist() for q in result.quarantine]
    return result, shards, quarantine


def _logically_equal(shards, expected):
    assert sorted(shards) == sorted(expected)
    for path, table in expected.items():
        got = shards[path]
        assert got.schema.remove_metadata() == table.schema.remove_metadata(), path
        assert got.to_pylist() == table.to_pylist(), path


def _params():
    out = ["cpu"]
    if HAS_RAPIDS:
        out += [pytest.param("gpu", "sync", marks=pytest.mark.gpu, id="gpu-sync"),
                pytest.param("gpu", "local", marks=[pytest.mark.gpu, pytest.mark.slow], id="gpu-cluster")]
    return [p if not isinstance(p, str) else pytest.param(p, "sync", id=f"{p}-sync") for p in out]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("backend, scheduler", _params())
def test_backend_gives_the_cpu_dataset(tmp_path, access_logs, backend, scheduler, name):
    expected, expected_shards, expected_q = _run(tmp_path, "cpu", name)
    result, shards, quarantine = _run(tmp_path, backend, name, scheduler)
    assert result.counts == expected.counts
    assert result.stages == expected.stages
    _logically_equal(shards, expected_shards)
    assert quarantine == expected_q
    assert result.bad_records == expected.bad_records
    assert result.counts["rows_in"] == 6000
    if backend == "gpu":
        fallbacks = result.manifest["fallbacks"]
        assert (fallbacks != {}) if name in HOST_BY_DESIGN else (fallbacks == {}), fallbacks
        moved = result.manifest["host_transfer"]
        read = sum(r["bytes"] for path, r in moved["reads"].items() if path.startswith("kvikio"))
        assert read > 0 and moved["input_bytes"] == result.input_bytes


@pytest.mark.parametrize("backend", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_bytes_within_a_backend_do_not_depend_on_the_blocksize(tmp_path, access_logs, backend):
    sha = []
    for blocksize in ("64KiB", "7KiB", "3KiB"):
        result, _, _ = _run(tmp_path, backend, "combined", source={"type": "text", "path": "in/*", "blocksize": blocksize})
        sha.append({s["path"]: s["sha256"] for s in result.shards})
    assert sha[0] == sha[1] == sha[2]


def test_cpu_fixed_counts(tmp_path, access_logs):
    result, _, quarantine = _run(tmp_path, "cpu", "combined")
    assert result.counts["quarantined"] == 10 and sum(len(q) for q in quarantine) == 10
