"""runtime/graph.py builds a run's tasks into one dict (TaskGraph): a task costs the same
whatever came before it, its arguments are handed over whole, and two builds never share a key."""

from __future__ import annotations

import json

import dask
import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.backends import get_backend
from gpuetl.runtime.graph import TaskGraph, build_partitions, count_tasks


def plan_of(tmp_path, rows: int, steps=({"dedupe": {"on": ["k"]}},)):
    """A JSON-lines plan of about rows / 20 partitions (1 KiB each)."""
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"k": f"key{i % 40}", "n": i}) + "\n" for i in range(rows)))
    spec = {"version": 1, "name": "graph", "source": {"type": "jsonl", "path": "a.jsonl", "blocksize": "1KiB"},
            "columns": {"k": "string", "n": "int64"}, "steps": list(steps), "sink": {"path": "out"}}
    return gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).plan(get_backend("cpu"))


@pytest.mark.parametrize("in_order", [True, False], ids=["in order", "at once"])
def test_a_global_steps_chain_is_one_dict_with_a_fixed_number_of_tasks_a_partition(tmp_path, in_order):
    """dask.delayed copied every layer a task depends on into the task's own graph: along a
    global step's chain that is n² in time and memory. Every handle here is a view of one dict,
    which holds the tasks the handles need, a fixed number a partition."""
    sizes = {}
    for rows in (2000, 4000):
        (tmp_path / str(rows)).mkdir()
        plan = plan_of(tmp_path / str(rows), rows)
        parts = build_partitions(plan, get_backend("cpu"), in_order=in_order, ahead=2 if in_order else None)
        assert len(parts) == len(plan.partitions) > 40
        assert len({id(part.dask) for part in parts}) == 1
        # the dict holds the tasks the handles need, and in order the chain's final state besides
        assert len(parts[0].dask) - count_tasks(parts) == (1 if in_order else 0)
        sizes[rows] = (len(parts), count_tasks(parts))
    # a partition's tasks: read, keys, decide (in order: and its two outputs, the chain's state
    # and the decision; at once: candidates), mark, the steps after. Shared: in order the
    # chain's start (its last state is needed by none), at once the repeats and the decision.
    per_partition, shared = (7, 0) if in_order else (5, 2)
    assert all(tasks == per_partition * n + shared for n, tasks in sizes.values()), sizes


def test_independent_partitions_each_carry_only_their_own_tasks(tmp_path):
    """Without a global step each partition is computed alone (Executor.ordered): a handle over
    the build's whole dict would have dask go through every partition's tasks each time."""
    plan = plan_of(tmp_path, 2000, steps=({"filter": "n > 3"},))
    parts = build_partitions(plan, get_backend("cpu"))
    assert len(parts) > 40 and all(list(part.dask) == [part.key] for part in parts)
    assert dask.compute(parts[5], scheduler="sync")[0].frame is not None


def test_a_tasks_arguments_are_handed_over_whole(tmp_path):
    """The partition and its segment (dataclasses holding the steps, the files) are not walked
    into graph nodes: the read task holds the very objects."""
    plan = plan_of(tmp_path, 400, steps=())
    parts = build_partitions(plan, get_backend("cpu"))
    task = parts[3].dask[parts[3].key]
    assert task.args[0] is plan.partitions[3]
    assert type(task.args[1]).__name__ == "Segment"


def test_two_builds_of_one_plan_share_no_key(tmp_path):
    """Two runs of one plan on one cluster must not take each other's results for their own."""
    plan = plan_of(tmp_path, 400)
    first, second = (build_partitions(plan, get_backend("cpu"), in_order=True, ahead=2) for _ in range(2))
    assert not set(first[0].dask) & set(second[0].dask)


def test_handles_compute_as_delayed_objects_and_take_a_callers_delayed_argument():
    """A handle is a dask Delayed: dask.compute runs it on any scheduler. A caller's own delayed
    object as an argument brings its graph along."""
    graph = TaskGraph()
    caller = dask.delayed(lambda: 20)()
    total = graph.add(sum, "total", 0, [caller, graph.add(int, "one", 0, "1")])
    half, rest = graph.add(divmod, "halves", 0, total, 2, nout=2)
    assert dask.compute(total, half, rest, scheduler="sync") == (21, 10, 1)
    assert dask.compute(half, scheduler="threads") == (10,)
    with pytest.raises(ValueError, match="made twice"):
        graph.add(int, "one", 0, "2")
    with pytest.raises(TypeError, match="unrun"):            # only lists of handles are resolved
        graph.add(sum, "nested", 0, (total, 1))


@pytest.mark.parametrize("scheduler", ["sync", None])
def test_the_row_steps_between_two_global_steps_run(tmp_path, scheduler):
    """Each segment's own row steps run after its global step: a filter between two dedupes
    removes its rows (building the segments lazily once ran every segment with the last one's
    steps, and the filter silently never ran)."""
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"k": f"key{i % 30}", "n": i % 11}) + "\n"
                                              for i in range(3000)))
    spec = {"version": 1, "name": "two", "source": {"type": "jsonl", "path": "a.jsonl", "blocksize": "4KiB"},
            "columns": {"k": "string", "n": "int64"},
            "steps": [{"dedupe": {}}, {"filter": "n > 5"}, {"dedupe": {"on": ["k"]}}], "sink": {"path": "out"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler=scheduler)
    c = result.counts
    # 330 distinct (k, n) pairs, 180 of them with n <= 5; of the 150 left, one row a key
    assert (c["rows_in"], c["filtered"], c["deduplicated"], c["rows_out"]) == (3000, 180, 2790, 30)
    kept = pq.read_table(result.out_dir / "part-00000.parquet").column("n").to_pylist()
    assert len(kept) == 30 and min(kept) > 5


@pytest.mark.parametrize("scheduler", [None, "sync"])
def test_a_compressed_files_partitions_are_decoded_once_each(tmp_path, monkeypatch, scheduler):
    """A compressed file's partitions share one chain of decompress tasks, front to back: they
    are not independent. Computed one by one, partition k ran the chain before it again: k(k+1)/2
    decodes in all (a gzip file of 165 partitions: 13,695)."""
    import gzip

    from gpuetl.runtime import graph as graph_module

    decoded = []
    real = graph_module.decode_range

    def counted(*args):
        decoded.append(args[2])
        return real(*args)

    monkeypatch.setattr(graph_module, "decode_range", counted)
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress("".join(
        json.dumps({"k": f"key{i % 40}", "n": i}) + "\n" for i in range(2000)).encode()))
    spec = {"version": 1, "name": "gz", "source": {"type": "jsonl", "path": "a.jsonl.gz", "blocksize": "1KiB"},
            "columns": {"k": "string", "n": "int64"}, "steps": [{"filter": "n > 3"}], "sink": {"path": "out"}}
    pipeline = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path)
    ranges = [r for p in pipeline.plan(get_backend("cpu")).partitions for r in p.ranges]
    result = pipeline.run(backend="cpu", scheduler=scheduler)
    assert result.counts["rows_out"] == 1996 and len(ranges) > 40
    assert sorted(decoded, key=lambda r: r.offset) == ranges


def test_a_compressed_files_reads_wait_for_the_partitions_before(tmp_path):
    """Computed in one call, a compressed file's decoding would run ahead of the parsing and
    hold the decoded bytes of every partition; the read gate bounds it as for a global step:
    partition i is decoded and read once partition i - ahead is finished."""
    import gzip

    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress("".join(
        json.dumps({"k": f"key{i % 40}", "n": i}) + "\n" for i in range(1000)).encode()))
    spec = {"version": 1, "name": "gz", "source": {"type": "jsonl", "path": "a.jsonl.gz", "blocksize": "1KiB"},
            "columns": {"k": "string", "n": "int64"}, "sink": {"path": "out"}}
    plan = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).plan(get_backend("cpu"))
    parts = build_partitions(plan, get_backend("cpu"), in_order=True, ahead=2)
    assert len(parts) > 20
    for i in range(2, len(parts)):
        tasks = parts[i].dask
        decode = [dep for dep in tasks[parts[i].key].dependencies if dep[0].startswith("decompress-")]
        assert parts[i - 2].key in tasks[parts[i].key].dependencies
        assert all(parts[i - 2].key in tasks[key[:3]].dependencies for key in decode)
