"""Whole runs on the CPU backend: accounting, determinism, layout of the output."""

import json

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from conftest import access_spec
from gpuetl import Pipeline
from gpuetl.errors import SpecError

STEPS = [
    {"filter": "status >= 200 and method in ['GET', 'POST']"},
    {"derive": {"hour": "hour(time)", "path_len": "len(path)"}},
    {"dedupe": {"on": ["ip", "time", "request"]}},
    {"drop": ["ident"]},
    {"rename": {"size": "bytes"}},
]


def run(tmp_path, scheduler="sync", **overrides):
    return Pipeline.from_dict(access_spec(**overrides), base_dir=tmp_path).run(backend="cpu", scheduler=scheduler)


def identity(counts):
    return counts["rows_out"] + counts["filtered"] + counts["deduplicated"] + counts["quarantined"]


def test_accounting_identity_holds_overall_and_per_stage(tmp_path, access_logs):
    result = run(tmp_path, steps=STEPS)
    c = result.counts
    assert c["rows_in"] == 6000 and identity(c) == 6000
    assert c["quarantined"] == 10          # bad_every=250 in b.log
    assert c["filtered"] > 0 and c["deduplicated"] > 0
    for stage in result.stages:
        assert stage["rows_in"] == stage["rows_out"] + stage["filtered"] + stage["deduplicated"] + stage["quarantined"]
    assert [s["name"] for s in result.stages] == ["read-parse", "filter", "derive", "dedupe", "drop", "rename"]
    assert result.stages[-1]["rows_out"] == c["rows_out"]
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["counts"] == c and manifest["format"] == "gpuetl-manifest/1"
    table = pq.read_table(tmp_path / "out" / "part-00000.parquet")
    assert table.num_rows == c["rows_out"]
    assert "ident" not in table.column_names and "bytes" in table.column_names
    assert str(table.schema.field("time").type) == "timestamp[us, tz=UTC]"


def test_output_is_byte_identical_across_blocksizes_and_schedulers(tmp_path, access_logs):
    first = run(tmp_path, steps=STEPS, source__blocksize="100KiB").shards
    second = run(tmp_path, steps=STEPS, source__blocksize="4MiB", scheduler="threads").shards
    assert first == second
    in_order = run(tmp_path, source__blocksize="30KiB").shards
    assert in_order == run(tmp_path, source__blocksize="1MiB", scheduler="threads").shards


@pytest.mark.slow
def test_a_local_cluster_gives_the_same_bytes(tmp_path, access_logs):
    """A local cluster, the streamed writer for in-order output, dedupe's tasks across it."""
    for steps in ([], STEPS):
        alone = run(tmp_path, steps=steps, source__blocksize="4MiB").shards
        assert run(tmp_path, scheduler="local", steps=steps, source__blocksize="160KiB").shards == alone


@pytest.mark.parametrize("steps", [[], STEPS])
def test_rows_keep_input_order_without_shuffle(tmp_path, access_logs, steps):
    """Dedupe drops rows where they are: the output stays in (file, offset) order."""
    run(tmp_path, source__provenance=True, source__blocksize="64KiB", steps=steps)
    table = pq.read_table(tmp_path / "out" / "part-00000.parquet", columns=["_file", "_offset"]).to_pylist()
    keys = [(r["_file"], r["_offset"]) for r in table]
    assert keys == sorted(keys) and len(keys) > 4000


def test_splits_shards_and_keys(tmp_path, access_logs):
    shard = {"count": 6, "key": ["ip"], "shuffle": True, "seed": 7, "splits": {"train": 0.8, "val": 0.1, "test": 0.1}}
    result = run(tmp_path, shard=shard)
    by_split = {}
    for s in result.shards:
        by_split.setdefault(s["split"], []).append(s)
    assert sorted(by_split) == ["test", "train", "val"]
    assert sum(len(v) for v in by_split.values()) == 6
    assert all(s["path"].startswith(f"{s['split']}/part-") for s in result.shards)
    data = ds.dataset(tmp_path / "out", format="parquet", partitioning=None)
    assert data.count_rows() == result.counts["rows_out"]
    # no key crosses a split or a shard
    where = {}
    for s in result.shards:
        for ip in pq.read_table(tmp_path / "out" / s["path"], columns=["ip"]).column("ip").to_pylist():
            assert where.setdefault(ip, s["path"]) == s["path"]
    train = sum(s["rows"] for s in by_split["train"]) / result.counts["rows_out"]
    assert 0.7 < train < 0.9
    # a different seed moves rows; the same seed does not
    assert run(tmp_path, shard=shard).shards == result.shards
    assert run(tmp_path, shard={**shard, "seed": 8}).shards != result.shards


def test_shuffle_changes_order_but_not_content(tmp_path, access_logs):
    plain = run(tmp_path).shards[0]
    plain_rows = pq.read_table(tmp_path / "out" / "part-00000.parquet").to_pylist()
    shuffled = run(tmp_path, shard={"shuffle": True, "seed": 3}).shards[0]
    shuffled_rows = pq.read_table(tmp_path / "out" / "part-00000.parquet").to_pylist()
    assert shuffled["rows"] == plain["rows"] and shuffled["sha256"] != plain["sha256"]
    assert shuffled_rows != plain_rows
    assert sorted(map(str, shuffled_rows)) == sorted(map(str, plain_rows))


def test_count_shards_are_balanced(tmp_path, access_logs):
    result = run(tmp_path, shard={"count": 4})
    rows = [s["rows"] for s in result.shards]
    assert sum(rows) == result.counts["rows_out"]
    assert max(rows) - min(rows) < 0.1 * max(rows)


def test_unknown_shard_key_is_a_plan_error(tmp_path, access_logs):
    with pytest.raises(SpecError, match="shard.key.*'ipp'.*did you mean 'ip'"):
        Pipeline.from_dict(access_spec(shard={"count": 2, "key": ["ipp"]}), base_dir=tmp_path).plan()


def test_quarantine_rows_are_sorted_and_located(tmp_path, access_logs):
    run(tmp_path, source__provenance=True)
    rows = pq.read_table(tmp_path / "out" / "_quarantine").to_pylist()
    assert len(rows) == 10
    assert all(r["_file"] == "in/b.log" and r["_reason"] for r in rows)
    assert [r["_offset"] for r in rows] == sorted(r["_offset"] for r in rows)
    raw = (tmp_path / "in" / "b.log").read_bytes()
    for r in rows:
        assert raw[r["_offset"]:].split(b"\n", 1)[0] == r["_raw"]


@pytest.mark.slow
@pytest.mark.parametrize("shard", [{}, {"count": 3, "key": ["ip"], "shuffle": True, "splits": {"a": 0.7, "b": 0.3}}])
def test_worker_count_does_not_change_the_bytes(tmp_path, access_logs, shard):
    """Determinism across workers {1, 2} × blocksize {small, large}."""
    from distributed import Client, LocalCluster

    outputs = []
    for workers, blocksize in ((1, "120KiB"), (2, "120KiB"), (1, "8MiB"), (2, "8MiB")):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
                Client(cluster) as client:
            spec = access_spec(steps=STEPS, shard=shard, source__blocksize=blocksize)
            result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", client=client)
            outputs.append((result.shards, result.counts))
    assert all(o == outputs[0] for o in outputs)


def test_a_key_too_coarse_to_balance_is_reported(tmp_path, access_logs):
    logs = []
    spec = access_spec(shard={"count": 6, "key": ["method"], "splits": {"a": 0.5, "b": 0.5}})
    result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync", log=logs.append)
    notes = result.manifest["notes"]
    assert any("shards are empty" in n and "'method'" in n for n in notes), notes
    assert any(line.startswith("warning: ") for line in logs)
    fine = Pipeline.from_dict(access_spec(shard={"count": 2, "key": ["ip"]}), base_dir=tmp_path).run(
        backend="cpu", scheduler="sync")
    assert fine.manifest["notes"] == []


@pytest.mark.slow          # a run in a fresh interpreter, to see what it imports
def test_a_run_with_a_global_step_never_imports_dask_dataframe(tmp_path, access_logs):
    """The graph is built from dask.delayed alone: importing dask.dataframe cost ~0.3 s before the
    first task of every run with a dedupe (runtime/graph.py)."""
    import subprocess
    import sys

    spec = access_spec(steps=STEPS)
    (tmp_path / "p.json").write_text(json.dumps(spec))
    code = ("import json, sys; from gpuetl import Pipeline; "
            f"p = Pipeline.from_dict(json.load(open({str(tmp_path / 'p.json')!r})), base_dir={str(tmp_path)!r}); "
            "r = p.run(backend='cpu', scheduler='sync'); "
            "assert r.counts['deduplicated'] > 0, r.counts; "
            "print('dask.dataframe' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
