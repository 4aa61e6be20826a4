"""Run a Plan: map phase (read → stages → spill), checks, reduce phase (shards), commit."""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import dask

from .. import __version__
from ..backends.base import STATUS_DEDUPLICATED, STATUS_FILTERED, STATUS_QUARANTINED
from ..errors import DataError, OutputError
from ..plan.compile import Plan
from ..plan.graph import build_frame
from ..sinks import commit as commit_protocol
from ..sinks.layout import Layout, cut_points
from ..sinks.parquet import ShardTask, WriteOptions, write_quarantine, write_shard
from ..sinks.spill import MapResult, spill_partition

MANIFEST_FORMAT = "gpuetl-manifest/1"


@dataclass
class RunResult:
    """What a run did: counts, where the dataset went, and the manifest written there."""

    out_dir: Path
    counts: dict
    stages: list[dict]
    shards: list[dict]
    quarantine: list[dict]
    bad_records: dict
    backend: str
    seconds: float
    input_bytes: int
    manifest: dict = field(repr=False, default_factory=dict)

    @property
    def rows_out(self) -> int:
        return self.counts["rows_out"]


def layout_of(plan: Plan) -> Layout:
    shard = plan.spec.shard
    return Layout(
        splits=tuple((shard.splits or {}).items()),
        key=tuple(shard.key or ()),
        shuffle=shard.shuffle,
        seed=shard.seed,
        count=shard.count,
        target_bytes=shard.target_bytes,
    )


def run_plan(plan: Plan, backend, executor, *, progress: bool = False, log=print) -> RunResult:
    started = time.perf_counter()
    spec = plan.spec
    out = plan.out_dir
    commit_protocol.prepare(out, spec.sink.mode)
    for stale in commit_protocol.stale_runs(out):
        if commit_protocol.is_running(stale):
            raise OutputError(f"sink.path: another gpuetl run ({stale.name}) is writing to {out} right now",
                              hint="wait for it, or choose another sink.path")
        log(f"removing the temporary files of an earlier run that did not finish: {stale.name}")
        commit_protocol.abandon(stale)
    run_id = commit_protocol.new_run_id()
    run_tmp = commit_protocol.tmp_dir(out, run_id)
    try:
        result = _run(plan, backend, executor, run_tmp, progress)
        result.seconds = time.perf_counter() - started
        result.manifest["run"]["seconds"] = round(result.seconds, 3)
    except BaseException:
        commit_protocol.abandon(run_tmp)
        raise
    try:
        commit_protocol.commit(out, run_tmp, result.manifest)
    except OSError as err:   # the journal is written: the next command that opens `out` finishes it
        raise OutputError(f"sink.path: committing to {out} failed part-way ({err}); the dataset is not "
                          "complete (no _SUCCESS)", hint=f"free the space or fix the cause, then run "
                          f"`gpuetl verify {out}`: it finishes the commit from its journal") from None
    return result


def _run(plan: Plan, backend, executor, run_tmp: Path, progress: bool) -> RunResult:
    spec = plan.spec
    layout = layout_of(plan)
    ranged = bool(layout.target_bytes) or max(layout.shard_counts({}, {})) > 1
    schema = plan.output_schema
    stage_names = [f"{s.index}:{s.name}" for s in plan.stages]
    file_names = [f.display for f in plan.files]

    frame = build_frame(plan, backend)
    parts = frame.to_delayed()
    spill = dask.delayed(spill_partition, pure=False)
    maps = [spill(part, i, layout=layout, schema=schema, tmp_dir=str(run_tmp), ranged=ranged,
                  file_names=file_names, stage_names=stage_names, backend=backend, dask_key_name=f"spill-{i}")
            for i, part in enumerate(parts)]
    # Rows still in input order (no shuffle, no global step) and one shard per split: stream
    # each piece into its shard as soon as it exists, while the other partitions are parsed.
    presorted = not ranged and not layout.shuffle and len(plan.segments) == 1
    options = WriteOptions(spec.sink.compression, spec.sink.row_group_rows, spec.sink.row_group_bytes)
    streamed = None
    if presorted and executor.shares_files:
        results, streamed = _map_and_stream(plan, layout, maps, executor, run_tmp, options)
    else:
        results = executor.compute(maps, progress=progress)

    counts, stages = _account(plan, results)
    bad = dict(sorted(_merge(r.reasons for r in results).items(), key=lambda kv: (-kv[1], kv[0]))[:50])
    _check_errors(plan, counts, bad)

    tasks = _shard_tasks(layout, results, ranged)
    write = dask.delayed(write_shard, pure=False)
    writes = [] if streamed is not None else [
        write(task, [r.pieces[task.split] for r in results if task.split in r.pieces], schema=schema,
              tmp_dir=str(run_tmp), options=options, shuffle=layout.shuffle, ranged=ranged, presorted=presorted,
              dask_key_name=f"write-shard-{task.split_name or 'all'}-{task.index}")
        for task in tasks]
    quarantine_pieces = [r.quarantine for r in results if r.quarantine]
    if quarantine_pieces:
        writes.append(dask.delayed(write_quarantine, pure=False)(quarantine_pieces, str(run_tmp), options,
                                                                  dask_key_name="write-quarantine"))
    written = executor.compute(writes, progress=progress)
    quarantine = [vars(q) for q in written.pop()] if quarantine_pieces else []
    shards = [vars(s) for s in (written if streamed is None else streamed)]
    manifest = _manifest(plan, backend, counts, stages, shards, quarantine, bad, layout, run_tmp.name)
    return RunResult(plan.out_dir, counts, stages, shards, quarantine, bad, backend.name, 0.0,
                     plan.input_bytes, manifest)


def _map_and_stream(plan, layout, maps, executor, run_tmp: Path, options):
    """Run the map tasks; feed each one's pieces, in partition order, to its split's writer."""
    from ..sinks.parquet import ShardWriter
    from ..sinks.spill import read_ipc

    tasks = _shard_tasks(layout, [], ranged=False)
    writers = {t.split: ShardWriter(str(run_tmp / "data" / t.relpath), plan.output_schema, options, t) for t in tasks}
    results = []
    try:
        for result in executor.ordered(maps):
            results.append(result)
            for split, path in sorted(result.pieces.items()):
                writers[split].write(read_ipc(path))
                Path(path).unlink()
        return results, [writers[t.split].close() for t in tasks]
    finally:
        for w in writers.values():
            w.abort()


def _merge(dicts) -> dict:
    out: dict = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def _account(plan: Plan, results: list[MapResult]):
    """rows_in = rows_out + filtered + deduplicated + quarantined, overall and per stage."""
    tallies = _merge(r.tallies for r in results)
    rows_out = sum(sum(r.rows.values()) for r in results)
    by_status = {st: sum(n for (_, s), n in tallies.items() if s == st)
                 for st in (STATUS_FILTERED, STATUS_DEDUPLICATED, STATUS_QUARANTINED)}
    counts = {
        "rows_in": rows_out + sum(tallies.values()),
        "rows_out": rows_out,
        "filtered": by_status[STATUS_FILTERED],
        "deduplicated": by_status[STATUS_DEDUPLICATED],
        "quarantined": by_status[STATUS_QUARANTINED],
    }
    stages = []
    remaining = counts["rows_in"]
    for info in plan.stages:
        dropped = {name: tallies.get((info.index, st), 0) for name, st in
                   (("filtered", STATUS_FILTERED), ("deduplicated", STATUS_DEDUPLICATED),
                    ("quarantined", STATUS_QUARANTINED))}
        out = remaining - sum(dropped.values())
        stages.append({"stage": info.index, "name": info.name, "rows_in": remaining, "rows_out": out, **dropped})
        remaining = out
    assert remaining == rows_out, "accounting identity broken: a record was lost or counted twice"
    return counts, stages


def _check_errors(plan: Plan, counts: dict, bad: dict) -> None:
    limit = plan.spec.max_error_ratio
    if limit is None or counts["rows_in"] == 0:
        return
    ratio = counts["quarantined"] / counts["rows_in"]
    if ratio > limit:
        top = "; ".join(f"{n} × {reason}" for reason, n in list(bad.items())[:3])
        raise DataError(
            f"{counts['quarantined']} of {counts['rows_in']} records are bad ({ratio:.2%}), over max_error_ratio "
            f"{limit:g}; nothing was written to {plan.out_dir}\n  most common: {top}",
            hint="fix the input or the parse rule, or raise max_error_ratio",
        )


def _shard_tasks(layout: Layout, results: list[MapResult], ranged: bool) -> list[ShardTask]:
    import numpy as np

    from ..sinks.layout import BUCKETS

    names = layout.split_names
    rows = {i: sum(r.rows.get(i, 0) for r in results) for i in range(len(names))}
    hist = {i: sum((r.histograms[i] for r in results if i in r.histograms), np.zeros(BUCKETS)) for i in range(len(names))}
    size = {i: int(hist[i].sum()) for i in range(len(names))}
    counts = layout.shard_counts(rows, size)
    tasks = []
    for i, name in enumerate(names):
        cuts = cut_points(hist[i], counts[i]) if ranged else [0, BUCKETS]
        for k in range(counts[i]):
            rel = f"{name}/part-{k:05d}.parquet" if name else f"part-{k:05d}.parquet"
            tasks.append(ShardTask(i, name, k, cuts[k], cuts[k + 1], rel))
    return tasks


def _versions(backend) -> dict:
    import numpy
    import pandas
    import pyarrow

    versions = {"gpuetl": __version__, "python": platform.python_version(), "dask": dask.__version__,
                "pandas": pandas.__version__, "pyarrow": pyarrow.__version__, "numpy": numpy.__version__}
    versions.update(getattr(backend, "versions", lambda: {})())
    return versions


def _manifest(plan, backend, counts, stages, shards, quarantine, bad, layout, run_id) -> dict:
    spec = plan.spec
    return {
        "format": MANIFEST_FORMAT,
        "name": spec.name,
        "pipeline_sha256": plan.loaded.sha256,
        "seed": spec.shard.seed,
        "backend": backend.name,
        "io": getattr(backend, "io_path", lambda: "posix (python file reads)")(),
        "versions": _versions(backend),
        "inputs": [{"path": f.display, "bytes": f.size, "mtime_ns": f.mtime_ns} for f in plan.files],
        "counts": counts,
        "stages": stages,
        "bad_records": bad,
        "on_error": spec.on_error,
        "schema": [{"name": n, "type": t} for n, t in plan.output_schema.items()],
        "layout": {"splits": dict(layout.splits) or None, "key": list(layout.key) or None,
                   "shuffle": layout.shuffle, "count": layout.count, "target_bytes": layout.target_bytes},
        "shards": shards,
        "quarantine": quarantine,
        "run": {"id": run_id, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    }
