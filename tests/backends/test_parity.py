"""Parity, written once: the same pipelines on every available backend give the CPU's bytes.

On CI only the CPU runs (the test then checks the CPU against itself across schedulers and its
fixed counts); with `pytest -m gpu` on a GPU machine the GPU backend joins and must produce
byte-identical shards (sha256), the same quarantine rows and the same counts.
"""

import importlib.util

import pyarrow.parquet as pq
import pytest

from conftest import access_spec
from gpuetl import Pipeline

BACKENDS = ["cpu"] + (["gpu"] if importlib.util.find_spec("cudf") else [])

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


def _run(tmp_path, backend, name):
    out = tmp_path / f"out-{backend}-{name}"
    spec = access_spec(sink__path=str(out), **CASES[name])
    result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend=backend, scheduler="sync")
    quarantine = [pq.read_table(out / q["path"]).to_pylist() for q in result.quarantine]
    return result, {s["path"]: s["sha256"] for s in result.shards}, quarantine


def _params():
    return [pytest.param(b, marks=pytest.mark.gpu) if b == "gpu" else b for b in BACKENDS]


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("backend", _params())
def test_backend_gives_the_cpu_bytes(tmp_path, access_logs, backend, name):
    expected, expected_sha, expected_q = _run(tmp_path, "cpu", name)
    result, sha, quarantine = _run(tmp_path, backend, name)
    assert result.counts == expected.counts
    assert result.stages == expected.stages
    assert sha == expected_sha
    assert quarantine == expected_q
    assert result.bad_records == expected.bad_records
    assert result.counts["rows_in"] == 6000


def test_cpu_fixed_counts(tmp_path, access_logs):
    result, _, quarantine = _run(tmp_path, "cpu", "combined")
    assert result.counts["quarantined"] == 10 and sum(len(q) for q in quarantine) == 10
