"""The map phase (the finished partitions → Mapped): every partition read, run through its
steps and set aside by the tasks of runtime/graph.py, ending in one spill task a partition
(sinks/spill.py), its MapResult taken in partition order.

Where the tasks run in this process (the default CPU cluster, dask's local schedulers) and rows
stay in input order with one shard per split, each partition's rows go into their shard as soon
as the partition is done, so writing overlaps parsing: here the "client" is the worker. On a
cluster of worker processes (a LocalCUDACluster, a scheduler address) nothing is streamed: the
workers write the shards (phases/sharding.py) and this process only commits."""

from __future__ import annotations

import functools

from ...sinks.parquet import ShardTask
from ...sinks.runstore import spill_through_store
from ...sinks.spill import MapResult, spill_partition
from ..graph import build_partitions, independent_partitions
from .context import Mapped, RunContext
from .cuts import histograms, shard_tasks

READ_AHEAD = 1          # partitions read ahead of the last one spilled, per thread (global steps in order)


def streams(ctx: RunContext) -> bool:
    """Whether this run streams its rows into their shards as partitions finish: rows still in
    input order with one shard per split, and the tasks in this very process (their results
    handed over, never read back from a worker's files)."""
    return ctx.plan.layout.in_input_order and ctx.executor.in_process and ctx.store is None


def run_map(ctx: RunContext, finished: dict[int, MapResult]) -> Mapped:
    """Build the partitions' tasks (those of `finished` aside) and run them."""
    plan, executor, store = ctx.plan, ctx.executor, ctx.store
    stream = streams(ctx)
    stage_names = [f"{s.index}:{s.name}" for s in plan.stages]
    file_names = [f.display for f in plan.files]
    spill = functools.partial(spill_partition, layout=plan.layout, schema=plan.output_schema,
                              tmp_dir=str(ctx.run_tmp), file_names=file_names, stage_names=stage_names,
                              backend=ctx.backend, in_memory=stream and plan.spec.sink.mode != "resume")
    if store is not None:
        spill = functools.partial(spill_through_store, store, **spill.keywords)

    def spilled(graph, i: int, part):
        return None if i in finished else graph.add(spill, "spill", i, part, i)

    # In this process global steps are settled partition by partition in input order: their
    # state stays bounded, and a streamed run writes while it parses (docs/design.md, "Global
    # steps without moving rows"). A partition is read only once the one READ_AHEAD × threads
    # before it is spilled, so the frames between the read and the spill stay bounded.
    parts = build_partitions(plan, ctx.backend, in_order=executor.in_process,
                             scratch=str(ctx.run_tmp / "spill" / "keys"),
                             ahead=READ_AHEAD * executor.threads, finish=spilled)
    maps = {i: task for i, task in enumerate(parts) if task is not None}
    return _take_results(ctx, maps, finished, stream)


def _take_results(ctx: RunContext, maps: dict, finished: dict, stream: bool) -> Mapped:
    """Run the map tasks, taking their results in partition order (at most a few ahead of the
    one taken). With `stream`, each one's pieces go to its split's writer as it arrives."""
    plan, backend, watch = ctx.plan, ctx.backend, ctx.watch
    sink = ctx.sink
    tasks: list[ShardTask] = shard_tasks(plan.layout, sink, histograms(plan.layout, [])) if stream else []
    writers = {t.split: sink.shard_writer(backend, str(ctx.run_tmp / "data" / t.relpath), plan.output_schema,
                                          ctx.options, t)
               for t in tasks}
    computed = ctx.executor.ordered(list(maps.values()), independent=independent_partitions(plan),
                                    on_result=watch.partition_done)
    if stream:
        watch.writing(None)
    results = []
    try:
        for i in range(len(plan.partitions)):
            result = finished[i] if i in finished else next(computed)
            results.append(result)
            if stream:
                for split, path in sorted(result.pieces.items()):
                    writers[split].write(backend.read_spill(path))
                for split, table in sorted(result.tables.items()):
                    writers[split].write(table)
                result.tables = {}           # written: let the memory go
            watch.partition_done(result)
            if stream:
                watch.written(sum(result.rows.values()), partition=i)
        if not stream:
            return Mapped(results)
        shards = [writers[t.split].close() for t in tasks]
        for shard in shards:            # the bytes of a streamed shard are known once it closes
            watch.written(0, shard.bytes)
        return Mapped(results, shards)
    finally:
        for w in writers.values():
            w.abort()
        computed.close()
