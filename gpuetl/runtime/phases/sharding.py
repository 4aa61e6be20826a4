"""The shard phase (Mapped → Written): the shards cut from the map's placement-hash histograms,
then one write-shard task a shard and one write-quarantine task, all on the workers: each reads
the spilled pieces and encodes its file there, so this process reads no piece and encodes no
shard (on a GPU the pieces stay on the device that wrote them). Each shard's result brings
back what its footer says of the columns (sinks/column_stats.py), for the run report and the
empty-column check: this process opens no shard file either. Shards a resumed run already wrote
are kept with their saved results; shards the map phase streamed are taken as they are."""

from __future__ import annotations

import json
from pathlib import Path

import dask
import numpy as np

from ...sinks.column_stats import footer_columns
from ...sinks.parquet import ShardTask
from ...sinks.runstore import RunStore
from ...sinks.shard_writer import ShardResult
from ...sinks.spill import MapResult
from .context import Mapped, RunContext, Written
from .cuts import histograms, shard_tasks


def write_shards(ctx: RunContext, mapped: Mapped) -> Written:
    """Every shard and the quarantine written, in the run's data/ folder (or in the store)."""
    shards = mapped.streamed
    if shards is None:
        shards = _write_from_pieces(ctx, mapped.results)
    _read_missing_footers(ctx, shards)
    quarantine = _write_quarantine(ctx, mapped.results)
    return Written([s.entry() for s in shards], [q.entry() for q in quarantine], shards, quarantine)


def _read_missing_footers(ctx: RunContext, shards: list[ShardResult]) -> None:
    """A Parquet shard whose result came without its column statistics (saved by an older run
    and kept by this one, or written by another sink's writer) has them read from its footer,
    in a task, where the shards are: this process opens no shard file."""
    missing = [k for k, s in enumerate(shards) if s.columns is None and s.path.endswith(".parquet")]
    if not missing:
        return
    at = ctx.shards_at()
    read = dask.delayed(footer_columns, pure=False)
    found = ctx.executor.compute([read(str(Path(at["data_dir"]) / shards[k].path), at.get("filesystem"),
                                       dask_key_name=f"read-footer-{k}") for k in missing])
    for k, columns in zip(missing, found):
        shards[k].columns = columns


def _size_ratio(ctx: RunContext, results: list[MapResult], hist: dict[int, np.ndarray]) -> float:
    """The sink's Parquet bytes per row byte, from a sample of the pieces, in a task: the pieces
    are read where the tasks run."""
    pieces = [p for r in results for p in r.pieces.values()]
    task = dask.delayed(ctx.sink.size_ratio, pure=False)(pieces, sum(hist.values()), ctx.plan.output_schema,
                                                         ctx.options, dask_key_name="size-ratio")
    return ctx.executor.compute([task])[0]


def _write_from_pieces(ctx: RunContext, results: list[MapResult]) -> list[ShardResult]:
    """Write each shard from the spilled pieces, one task a shard; a shard a resumed run
    already wrote is kept."""
    plan, run_tmp, store, watch = ctx.plan, ctx.run_tmp, ctx.store, ctx.watch
    layout, schema, sink = plan.layout, plan.output_schema, ctx.sink
    shard_state = run_tmp / "shards"
    shard_state.mkdir(exist_ok=True)
    hist = histograms(layout, results)
    tasks = shard_tasks(layout, sink, hist, _size_ratio(ctx, results, hist) if layout.target_bytes else None)
    shards, todo = [], []
    for task in tasks:
        name = f"{task.split}-{task.index}.json"
        if store is None:
            saved = _load_json(shard_state / name)
            kept = saved and _size_of(run_tmp / "data" / saved["path"]) == saved.get("bytes")   # a cut can empty it
        else:
            saved = _json_or_none(store.get_bytes(f"shards/{name}"))
            kept = (isinstance(saved, dict) and saved.get("path") == task.relpath
                    and store.size(f"data/{task.relpath}") == saved.get("bytes"))
        if kept:
            shards.append(ShardResult(**saved))
        else:
            todo.append(task)
    if len(todo) < len(tasks):
        ctx.log(f"resuming: {len(tasks) - len(todo)} of {len(tasks)} shards already written, skipped")
    write = dask.delayed(write_and_record, pure=False)
    writes = [write(sink, task, [r.pieces[task.split] for r in results if task.split in r.pieces],
                    store or str(shard_state),
                    schema=schema, tmp_dir=str(run_tmp), options=ctx.options, layout=layout, backend=ctx.backend,
                    dask_key_name=f"write-shard-{task.split_name or 'all'}-{task.index}") for task in todo]
    watch.writing(sum(sum(r.rows.values()) for r in results))
    for done in shards:
        watch.written(done.rows, done.bytes)
    shards += ctx.executor.compute(writes, on_result=lambda shard: watch.written(shard.rows, shard.bytes))
    order = {t.relpath: k for k, t in enumerate(tasks)}
    return sorted(shards, key=lambda r: order[r.path])


def write_and_record(sink, task: ShardTask, pieces: list[str], state_dir: str | RunStore, **kwargs) -> ShardResult:
    """Write one shard, then record it, so a resumed run skips it (state_dir: a folder, or the
    run's folder in the store). Runs as a task, on a worker."""
    result = sink.write_shard(task, pieces, **kwargs)
    if isinstance(state_dir, RunStore):
        state_dir.put_bytes(f"shards/{task.split}-{task.index}.json", json.dumps(vars(result)).encode())
        return result
    path = Path(state_dir) / f"{task.split}-{task.index}.json"
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(vars(result)))
    tmp.replace(path)
    return result


def _write_quarantine(ctx: RunContext, results: list[MapResult]) -> list[ShardResult]:
    pieces = [r.quarantine for r in results if r.quarantine]
    if not pieces:
        return []
    task = dask.delayed(ctx.sink.write_quarantine, pure=False)(pieces, str(ctx.run_tmp), ctx.options,
                                                               dask_key_name="write-quarantine")
    return ctx.executor.compute([task])[0]


def _load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None


def _size_of(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _json_or_none(raw: bytes | None):
    try:
        return json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError):
        return None
