"""Run a Plan: map phase (read → stages → spill), checks, reduce phase (shards), commit."""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import dask

from ..columns import STATUS_DEDUPLICATED, STATUS_FILTERED, STATUS_QUARANTINED
from ..errors import DataError, OutputError, OutputWriteFailed, SourceError
from ..plan.compile import Plan
from . import append
from .graph import build_partitions
from ..sinks import commit as commit_protocol
from ..sinks.layout import MIN_SHARD_ROWS, Layout, cut_points
from ..sinks.objectstore import check_remote_apart_from_inputs
from ..sinks.runstore import RunStore, SinkThroughStore, spill_through_store, workers_share_disk
from ..sources.files import check_objects_unchanged
from ..sources.pins import FilePin, Identity
from ..storage import bare, is_remote
from ..sinks.base import get_sink
from ..sinks.shard_writer import ShardResult
from ..sinks.versions import VersionedSink
from ..sinks.parquet import ShardTask
from ..sinks.spill import MapResult, load_result, spill_partition
from ..sources.formats.jsonl import dropped_fields_summary, empty_declared_columns
from ..sources.ranges import Whole
from .progress import RunProgress, display_for
from .reasons import group_reasons
from .report import REPORT_HTML, build_report, write_report
from .versions import __version__, recorded_versions

MANIFEST_FORMAT = commit_protocol.MANIFEST_FORMAT
READ_AHEAD = 1          # partitions read ahead of the last one spilled, per thread (global steps in order)


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
    report: Path | str | None = None    # the run report's HTML file (a URL on an object store)
    nothing_to_append: bool = False     # sink.mode append found no new input: no new version

    @property
    def rows_out(self) -> int:
        return self.counts["rows_out"]


def run_plan(plan: Plan, backend, executor, *, progress: bool = False, log=print, listeners=None,
             report: bool = True) -> RunResult:
    """Check the output folder (before any data is read), run, commit; under the folder's lock.
    listeners: what shows the run's progress (runtime/progress.py); by default a display when
    `progress`. report: write the run report next to the dataset (runtime/report.py)."""
    watch = RunProgress(plan, _listeners(listeners, progress, executor), backend=backend)
    say = watch.say if any(hasattr(x, "message") for x in watch.listeners) else log
    try:
        result = _run_plan(plan, backend, executor, watch, say, report)
        watch.finished(result)
        return result
    except BaseException as err:
        watch.failed(err)
        raise
    finally:
        watch.close()


def _listeners(listeners, progress: bool, executor) -> list:
    chosen = list(listeners) if listeners is not None else [d for d in [display_for(progress)] if d]
    if executor.client is not None:
        from .dashboard import DashboardFeed

        chosen.append(DashboardFeed(executor.client))
    return chosen


def _run_plan(plan: Plan, backend, executor, watch: RunProgress, log, report: bool) -> RunResult:
    started = time.perf_counter()
    spec = plan.spec
    mode = spec.sink.mode
    sink = get_sink(spec.sink.type)
    if is_remote(plan.out_dir):           # an object store: sinks/objectstore.py
        out = plan.out_dir
        check_remote_apart_from_inputs(out, [f.url or f.path for f in plan.files], spec.source.paths)
        output_folder = sink.output_folder(out, log, storage_options=spec.sink.storage_options)
    else:
        out = plan.out_dir = Path(os.path.normpath(os.path.abspath(plan.out_dir)))   # sink.path: out/new/..
        commit_protocol.check_apart_from_inputs(out, [f.path for f in plan.files], spec.source.paths,
                                                plan.loaded.base_dir)
        commit_protocol.survey_read_only(out, mode)
        output_folder = sink.output_folder(out, log)
        if not spec.sink.durable:             # sink.durable: false, for this folder only (gpuetl/durable.py)
            output_folder.durable = False
    if spec.sink.delta_log:
        from ..sinks.delta import check_schema

        check_schema(plan.output_schema)
    with output_folder as folder:
        folder.survey(mode)
        if mode == "append":                  # runtime/append.py: what this version reads
            plan = append.settle(plan, backend, folder, _pipeline_digest)
            if plan.nothing_to_append:
                log(f"nothing to append: every input of source.path is held by dataset version "
                    f"{plan.held.version} of {out} already")
                manifest = plan.held.manifest
                return RunResult(out, manifest["counts"], manifest["stages"], manifest["shards"],
                                 manifest["quarantine"], manifest.get("bad_records", {}), manifest["backend"], 0.0, 0,
                                 manifest, nothing_to_append=True)
        if mode == "resume":
            done = _already_complete(plan, out, folder.inventory.manifest, folder.inventory.complete)
            if done is not None:
                log(f"{out} already holds the complete output of this pipeline and these inputs: nothing to do")
                return done
        run_tmp = _earlier_runs(plan, backend, folder, log)
        fresh = run_tmp is None
        if fresh:
            run_tmp = folder.new_run(commit_protocol.new_run_id())
        watch.run_id = run_tmp.name
        try:
            watch.started()                       # may print: a closed pipe there is an early end too
            if fresh:
                _write_state(plan, backend, run_tmp)
            # Workers that may not share this machine's disk put what others read in the store
            store = folder.through_store(run_tmp) if is_remote(out) and not workers_share_disk(executor) else None
            copies = [f.display for f in plan.files if store is not None and (f.url is None or not f.in_store)]
            if copies:
                log(f"warning: {len(copies)} input(s) are read from this machine's disk ({copies[0]}"
                    f"{', …' if len(copies) > 1 else ''}): local files, or objects fetched whole (compressed, "
                    "csv, multi-line); workers on other machines must see the same path (a shared folder, "
                    "or a cache.path they share)")
            with executor.timed(watch):
                result = _run(plan, backend, executor, run_tmp, watch, log, store)
            check_objects_unchanged(plan.files, spec.source.paths, spec.source.storage_options)
            result.seconds = time.perf_counter() - started
            result.manifest["run"]["seconds"] = round(result.seconds, 3)
            if report:
                watch.shards_done()
                built = build_report(plan, backend, watch, result=result, **_shards_at(run_tmp, store))
                (run_tmp / "data").mkdir(exist_ok=True)        # a run through the store wrote no shard here
                result.manifest["reports"] = write_report(built, run_tmp / "data", durable=spec.sink.durable)
        except BaseException as err:
            if report and isinstance(err, DataError):
                _failed_report(plan, backend, watch, folder, run_tmp, err, log)
            if mode != "resume":                  # resume keeps finished work for the next try
                executor.settle()                 # no task of this run writes there any more
                folder.abandon(run_tmp)
            if isinstance(err, OSError) and _is_write_failure(err, out):
                raise OutputWriteFailed(
                    f"sink.path: writing {err.filename or run_tmp} failed: {err.strerror or err}; nothing was "
                    f"committed to {out}",
                    hint="free space on that disk or choose another sink.path, then run again"
                         + (" (sink.mode: resume keeps the finished work)" if mode == "resume" else "")) from None
            raise
        try:
            result.manifest = append.before_commit(plan, result.manifest, run_tmp)
            folder.commit(run_tmp, result.manifest)
        except OutputError:
            if not folder.journal_written and mode != "resume":      # nothing changed: nothing to finish
                folder.abandon(run_tmp)
            raise
    if report:
        result.report = f"{out.rstrip('/')}/{REPORT_HTML}" if isinstance(out, str) else out / REPORT_HTML
    return result


def _failed_report(plan, backend, watch, folder, run_tmp: Path, err: BaseException, log) -> None:
    """The report of a run whose data failed (too many bad records, on_error: fail), in a folder
    of its own under _tmp/; the next run there removes it, as it removes every earlier run's
    temporary folder. A run stopped by its output folder (a full disk, a link in the way) writes
    nothing more there."""
    try:
        place = folder.new_run(run_tmp.name + "-report")
        write_report(build_report(plan, backend, watch, error=err), place)
    except Exception as why:           # the run's own error matters more: say this one briefly
        log(f"note: the failed run's report was not written ({type(why).__name__}: {why})")
        return
    log(f"report of the failed run: {place / REPORT_HTML}")


def _earlier_runs(plan: Plan, backend, folder, log) -> Path | None:
    """Deal with the temporary folders earlier runs left: under resume, the one to continue;
    the others are removed (all of them gpuetl's: folder.runs() lists no other)."""
    resumed = None
    for stale in folder.runs(note=True):
        owner = folder.owner(stale)
        if owner and owner.get("pid") != os.getpid() and commit_protocol.is_alive(owner):
            raise OutputError(f"sink.path: another gpuetl run ({stale.name}, {commit_protocol.describe(owner)}) "
                              f"is writing to {folder.out} right now", hint="wait for it, or choose another sink.path")
        if plan.spec.sink.mode == "resume" and resumed is None and _resumable(plan, backend, stale):
            folder.refuse_links(stale)
            folder.claim(stale)
            resumed = stale
            continue
        log(f"removing the temporary files of an earlier run that did not finish: {stale.name}")
        folder.abandon(stale)
    return resumed


_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def _is_write_failure(err: OSError, out: Path) -> bool:
    """A full or read-only disk (pyarrow's own OSErrors carry the errno only in their text)."""
    if err.errno in _WRITE_ERRNOS or "No space left on device" in str(err):
        return True
    return bool(err.filename) and str(err.filename).startswith(str(out) + os.sep)


# -- resume -------------------------------------------------------------------------------------

STATE = "_state.json"


def _pipeline_digest(plan: Plan) -> str:
    """What decides the output, from the validated pipeline: everything but sink.mode (and, in
    append mode, source.path, whose inputs are tracked by their pins, and sink.path, where the
    dataset lies: sinks/versions.py)."""
    spec = plan.spec.model_dump(mode="json")
    if spec.get("sink", {}).pop("mode", None) == "append":
        spec.get("source", {}).pop("path", None)
        spec["sink"].pop("path", None)
    spec.pop("cache", None)               # where inputs are cached does not change the output
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def _fingerprint(plan: Plan, backend=None) -> dict:
    """What must not change for finished work to be reused: the pipeline (but sink.mode), every
    input, the backend and gpuetl's version."""
    return {"pipeline": _pipeline_digest(plan), "partitions": len(plan.partitions),
            "backend": backend.name if backend is not None else None, "gpuetl": __version__,
            "inputs": [f.pin() for f in plan.files]}


def _write_state(plan: Plan, backend, run_tmp: Path) -> None:
    (run_tmp / STATE).write_text(json.dumps(_fingerprint(plan, backend)))


def _input_changes(old: list[dict], new: list[dict]) -> tuple[list[str], dict[str, dict]]:
    """(what changed for certain: inputs gone or new, another size, another object; the earlier
    pins of the local files whose identity changed, by path: whether their bytes did is for their
    content hashes to say, sources/pins.py)."""
    before = {i["path"]: i for i in old if isinstance(i, dict) and "path" in i}
    after = {i["path"]: i for i in new}
    changes = [f"{p}: no longer an input" for p in before if p not in after]
    changes += [f"{p}: new input" for p in after if p not in before]
    recheck = {}
    for p in before.keys() & after.keys():
        a, b = before[p], after[p]
        if a.get("bytes") != b["bytes"]:
            changes.append(f"{p}: size {a.get('bytes')} -> {b['bytes']} bytes")
        elif "etag" in a or "etag" in b:
            if (a.get("etag"), a.get("version_id")) != (b.get("etag"), b.get("version_id")):
                changes.append(f"{p}: the object changed since the earlier run (ETag or version id)")
        elif a.get("identity") != b.get("identity") and not (      # pinned by an older gpuetl: its mtime
                a.get("identity") is None and a.get("mtime_ns") == b.get("mtime_ns")):
            recheck[p] = a
    return sorted(changes), recheck


def _resumable(plan: Plan, backend, run_tmp: Path) -> bool:
    """A stale run can be resumed when it ran this very pipeline on these very inputs, on the
    same backend and gpuetl version."""
    try:
        state = json.loads((run_tmp / STATE).read_text())
    except (OSError, ValueError, RecursionError):
        return False
    if not isinstance(state, dict):
        return False
    now = _fingerprint(plan, backend)
    changes, _ = _input_changes(state.get("inputs", []), now["inputs"])     # the rest: _check_skipped
    if changes:
        raise OutputError(
            f"sink.mode resume: the inputs changed since the interrupted run {run_tmp.name}:\n    "
            + "\n    ".join(changes[:10]),
            hint="the finished work no longer matches the inputs; set sink.mode: overwrite to start again")
    if state.get("backend") != now["backend"]:
        raise OutputError(
            f"sink.mode resume: the interrupted run {run_tmp.name} ran on the {state.get('backend')} backend, "
            f"this one on {now['backend']}",
            hint=f"resume with --backend {state.get('backend')}, or set sink.mode: overwrite to start again")
    if state.get("gpuetl") != now["gpuetl"]:
        raise OutputError(
            f"sink.mode resume: the interrupted run {run_tmp.name} ran gpuetl {state.get('gpuetl')}, this is "
            f"{now['gpuetl']}", hint="set sink.mode: overwrite to start again")
    if state.get("pipeline") != now["pipeline"] or state.get("partitions") != now["partitions"]:
        raise OutputError(
            f"sink.mode resume: the pipeline file changed since the interrupted run {run_tmp.name}",
            hint="resume continues the same pipeline; set sink.mode: overwrite to start again")
    return True


def _check_skipped(plan: Plan, run_tmp: Path, finished: dict, log) -> None:
    """Before a resumed run skips the partitions an interrupted run finished: the bytes they read
    are still there. A file whose identity is unchanged is trusted; one whose identity changed
    (touched, copied back, edited in place with its mtime set back) has the ranges the skipped
    partitions read hashed again, and any other bytes are a refusal naming the file."""
    state = _load_json(run_tmp / STATE)
    _, recheck = _input_changes(state.get("inputs", []) if isinstance(state, dict) else [],
                                [f.pin() for f in plan.files])
    if not recheck:
        return
    read: dict[int, list] = {}
    for result in finished.values():
        for pin in result.read_pins:
            read.setdefault(pin.file_index, []).append(pin)
    problems = []
    for f in plan.files:
        if f.display not in recheck:
            continue
        earlier = Identity.from_json(recheck[f.display].get("identity"))
        check = FilePin.of_reads(earlier, read.get(f.index, ()), f.compression).check(f.path)
        if check.same:
            log(f"resuming {run_tmp.name}: {f.display}: {check.compared()}: the same bytes")
        else:
            problems.append(f"{f.display}: {check.compared()}; " + "; ".join(map(str, check.mismatches[:3])))
    if problems:
        raise OutputError(
            f"sink.mode resume: the inputs changed since the interrupted run {run_tmp.name}: the finished "
            "partitions read other bytes than these files hold now:\n    " + "\n    ".join(problems[:10]),
            hint="the finished work no longer matches the inputs; use --set sink.mode=overwrite to start again")


def _already_complete(plan: Plan, out, manifest: dict | None, complete: bool) -> RunResult | None:
    if manifest is None or not complete:
        return None
    now = _fingerprint(plan)
    changes, recheck = _input_changes(manifest.get("inputs", []), now["inputs"])
    for f in plan.files:
        if f.display in recheck:        # the identity changed: are the pinned bytes still there?
            pin = FilePin.from_json(recheck[f.display])
            check = pin.check(f.path) if pin is not None else None
            if check is None or not check.same:
                changes.append(f"{f.display}: " + (check.compared() + "; " + "; ".join(map(str, check.mismatches[:3]))
                                                   if check else "modified since the earlier run (mtime or ctime)"))
    same_pipeline = manifest.get("fingerprint", {}).get("pipeline") == now["pipeline"]
    if changes or not same_pipeline:
        raise OutputError(f"sink.mode resume: {out} holds a complete dataset of "
                          + ("other inputs" if changes else "another pipeline file")
                          + (":\n    " + "\n    ".join(changes[:10]) if changes else ""),
                          hint="set sink.mode: overwrite to replace it")
    return RunResult(out, manifest["counts"], manifest["stages"], manifest["shards"], manifest["quarantine"],
                     manifest.get("bad_records", {}), manifest["backend"], 0.0, plan.input_bytes, manifest)


# -- the run ------------------------------------------------------------------------------------

def _shards_at(run_tmp: Path, store: RunStore | None) -> dict:
    """Where the run's shards are before the commit: its data/ folder here, or in the store."""
    if store is None:
        return {"data_dir": run_tmp / "data"}
    return {"data_dir": Path(bare(store.join("data"))), "filesystem": store.fs}


def _run(plan: Plan, backend, executor, run_tmp: Path, watch: RunProgress, log, store: RunStore | None = None
         ) -> RunResult:
    """store: the run's folder in the object store, when the tasks share no disk with this
    process (sinks/runstore.py); else its files are under run_tmp."""
    spec = plan.spec
    layout = plan.layout
    schema = plan.output_schema
    stage_names = [f"{s.index}:{s.name}" for s in plan.stages]
    file_names = Whole(f.display for f in plan.files)      # in every spill task: passed whole
    sink = _sink_of(plan)
    options = sink.write_options(spec.sink)
    backend.start_reports(executor.client)

    # A run through the store records no map work (its pieces are named by URL): resume redoes it
    finished = {} if store else {i: r for i in range(len(plan.partitions))
                                 if (r := load_result(str(run_tmp), i)) is not None}
    # The layout picks how the shards are written. Rows still in input order with one shard per
    # split stream into their shard as each partition finishes, while later ones still run;
    # otherwise each partition spills its rows and the shards are written from the pieces.
    stream = layout.in_input_order and executor.shares_files and store is None
    spill = dask.delayed(spill_partition, pure=False)
    if store is not None:
        spill = dask.delayed(functools.partial(spill_through_store, store), pure=False)
        sink = SinkThroughStore(sink, store, compute=executor.compute)

    def spilled(i: int, part):
        return None if i in finished else spill(
            part, i, layout=layout, schema=schema, tmp_dir=str(run_tmp), file_names=file_names,
            stage_names=stage_names, backend=backend, dask_key_name=f"spill-{i}",
            in_memory=stream and spec.sink.mode != "resume" and executor.in_process)

    # In this process global steps are settled partition by partition in input order: their
    # state stays bounded, and a streamed run writes while it parses (docs/design.md, "Global
    # steps without moving rows"). A partition is read only once the one READ_AHEAD × threads
    # before it is spilled, so the frames between the read and the spill stay bounded.
    parts = build_partitions(plan, backend, in_order=executor.in_process, scratch=str(run_tmp / "spill" / "keys"),
                             ahead=READ_AHEAD * executor.threads, finish=spilled)
    if finished:
        _check_skipped(plan, run_tmp, finished, log)
    for result in finished.values():
        watch.partition_done(result)
    if finished:
        log(f"resuming {run_tmp.name}: {len(finished)} of {len(parts)} partitions already done, skipped")
    maps = {i: task for i, task in enumerate(parts) if task is not None}
    results, shards = _map_partitions(plan, maps, finished, executor, run_tmp, options, watch, backend=backend,
                                      stream=stream)

    counts, stages = _account(plan, results)
    reasons = _merge(r.reasons for r in results)
    bad = dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:50])
    kinds = group_reasons(reasons)        # from every reason, not the top 50 alone
    _check_errors(plan, counts, bad, kinds)
    thin = _thin_shards(layout, counts["rows_out"])
    if thin:
        log(f"warning: {thin}")           # before the shards are written: it says why that takes long
    if shards is None:
        shards = _write_shards(plan, results, sink, options, run_tmp, executor, watch, log, backend=backend,
                               store=store)
    quarantine_pieces = [r.quarantine for r in results if r.quarantine]
    quarantine = executor.compute([dask.delayed(sink.write_quarantine, pure=False)(
        quarantine_pieces, str(run_tmp), options, dask_key_name="write-quarantine")])[0] if quarantine_pieces else []
    shards = [vars(s) for s in shards]
    quarantine = [vars(q) for q in quarantine]
    warnings = [thin] * bool(thin) + _balance_warnings(layout, shards, counts["rows_out"],
                                                     keyed=bool(plan.spec.shard.key))
    empty = empty_declared_columns(plan, **_shards_at(run_tmp, store), shards=shards)
    if empty:
        message = (f"declared column(s) {', '.join(map(repr, empty))} are null in every row: no record written "
                   "has a value there (a misspelt name, a path that does not reach it, or only in records "
                   "quarantined or filtered out?)")
        if spec.strict:
            raise DataError(message, hint="strict: true makes this an error; fix `columns` or set strict: false")
        warnings.append(message)
    for warning in warnings:
        log(f"warning: {warning}")
    pins = input_pins(plan.files, results)
    check_files_unchanged(plan.files, pins)
    manifest = _manifest(plan, backend, counts, stages, shards, quarantine, bad, layout, run_tmp.name, pins)
    manifest["bad_record_kinds"] = kinds
    manifest["empty_columns"] = empty
    manifest["fallbacks"] = backend.fallbacks(executor.client)
    manifest["host_transfer"] = backend.host_transfer(executor.client, plan.input_bytes)
    bad_share = _bad_share_warnings(counts, kinds)     # printed in the summary (cli), not logged
    manifest["notes"] = [*plan.notes, *warnings, *bad_share]
    manifest["warnings"] = [*warnings, *bad_share]
    manifest["bad_records_warning"] = bad_share[0] if bad_share else None
    manifest.update(plan.metadata)
    dropped = dropped_fields_summary(spec, [r.dropped_fields for r in results])
    if dropped is not None:
        manifest["extra_fields"] = {**manifest.get("extra_fields", {"mode": "drop"}), "dropped": dropped["dropped"]}
        log(f"note: {dropped['note']}")
        manifest["notes"].append(dropped["note"])
    return RunResult(plan.out_dir, counts, stages, shards, quarantine, bad, backend.name, 0.0,
                     plan.input_bytes, manifest)


def _thin_shards(layout: Layout, rows_out: int) -> str | None:
    """shard.count past the rows: each shard is a file, a footer and a task, whatever it holds
    (10,000 shards of 2,000 rows took 28 s to write)."""
    shards = sum(layout.shard_counts())
    if not layout.count or shards <= len(layout.split_names) or rows_out >= MIN_SHARD_ROWS * shards:
        return None
    return (f"shard.count: {shards:,} shards for {rows_out:,} rows, about {rows_out / shards:,.1f} rows a shard "
            f"(fewer than {MIN_SHARD_ROWS} rows a shard: each is a file, a footer and a task of its own); "
            f"a smaller shard.count, or shard.target_bytes, gives fewer, fuller shards")


def _balance_warnings(layout: Layout, shards: list[dict], rows_out: int, keyed: bool = False) -> list[str]:
    """Keys place rows, so a key with few distinct values cannot fill shards or splits evenly:
    say so rather than leave a user to find empty shards. `keyed`: the pipeline file set
    shard.key (else the key is the source's default, or the whole row, and is not blamed)."""
    if not rows_out:
        return []
    out = []
    empty = [s["path"] for s in shards if s["rows"] == 0]
    if empty and len(empty) < len(shards):
        out.append(f"{len(empty)} of {len(shards)} shards are empty ({', '.join(empty[:3])}"
                   f"{'…' if len(empty) > 3 else ''})" + (f": shard.key {list(layout.key)} has too few distinct "
                                                          "values, or one value holds most rows" if keyed else ""))
    for name, share in layout.splits:
        got = sum(s["rows"] for s in shards if s["split"] == name) / rows_out
        if abs(got - share) > max(0.05, share / 2):
            chance = abs(got - share) * rows_out <= 3 * math.sqrt(rows_out * share * (1 - share)) + 1
            why = (f" (shard.key {list(layout.key)} has few distinct values)" if keyed else
                   f" (each row's split is drawn from its hash, and {rows_out:,} row{'s are' if rows_out != 1 else ' is'} "
                   "too few for the shares to even out)" if chance else
                   f" (rows are placed by a hash of {', '.join(layout.key) if layout.key else 'the whole row'}, "
                   "and equal values land in the same split)")
            out.append(f"split {name!r} holds {got:.1%} of the rows, not {share:.0%}{why}")
    return out


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


def _write_and_record(sink, task: ShardTask, pieces: list[str], state_dir: str | RunStore, **kwargs) -> ShardResult:
    """Write one shard, then record it, so a resumed run skips it (state_dir: a folder, or the
    run's folder in the store)."""
    result = sink.write_shard(task, pieces, **kwargs)
    if isinstance(state_dir, RunStore):
        state_dir.put_bytes(f"shards/{task.split}-{task.index}.json", json.dumps(vars(result)).encode())
        return result
    path = Path(state_dir) / f"{task.split}-{task.index}.json"
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(vars(result)))
    tmp.replace(path)
    return result


def _sink_of(plan: Plan):
    """The sink that writes the run's files: in append mode, one naming them by the new version."""
    sink = get_sink(plan.spec.sink.type)
    return sink if plan.held is None else VersionedSink(sink, plan.held.version + 1)


def _map_partitions(plan, maps: dict, finished: dict, executor, run_tmp: Path, options, watch: RunProgress, *,
                    backend, stream: bool):
    """Run the map tasks, taking their results in partition order (at most a few ahead of the
    one taken). With `stream`, each one's pieces go to its split's writer as it arrives:
    (results, the shards written); else (results, None)."""
    sink = _sink_of(plan)
    tasks = _shard_tasks(plan.layout, [], plan.output_schema, options, sink) if stream else []
    writers = {t.split: sink.shard_writer(backend, str(run_tmp / "data" / t.relpath), plan.output_schema, options, t)
               for t in tasks}
    computed = executor.ordered(list(maps.values()), independent=len(plan.segments) == 1,
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
            return results, None
        shards = [writers[t.split].close() for t in tasks]
        for shard in shards:            # the bytes of a streamed shard are known once it closes
            watch.written(0, shard.bytes)
        return results, shards
    finally:
        for w in writers.values():
            w.abort()
        computed.close()


def _write_shards(plan, results: list[MapResult], sink, options, run_tmp: Path, executor, watch: RunProgress, log, *,
                  backend, store: RunStore | None = None) -> list[ShardResult]:
    """Write each shard from the spilled pieces, one task a shard; a shard a resumed run
    already wrote is kept."""
    layout, schema = plan.layout, plan.output_schema
    shard_state = run_tmp / "shards"
    shard_state.mkdir(exist_ok=True)
    tasks = _shard_tasks(layout, results, schema, options, sink)
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
        log(f"resuming: {len(tasks) - len(todo)} of {len(tasks)} shards already written, skipped")
    write = dask.delayed(_write_and_record, pure=False)
    writes = [write(sink, task, [r.pieces[task.split] for r in results if task.split in r.pieces],
                    store or str(shard_state),
                    schema=schema, tmp_dir=str(run_tmp), options=options, layout=layout, backend=backend,
                    dask_key_name=f"write-shard-{task.split_name or 'all'}-{task.index}") for task in todo]
    watch.writing(sum(sum(r.rows.values()) for r in results))
    for done in shards:
        watch.written(done.rows, done.bytes)
    shards += executor.compute(writes, on_result=lambda shard: watch.written(shard.rows, shard.bytes))
    order = {t.relpath: k for k, t in enumerate(tasks)}
    return sorted(shards, key=lambda r: order[r.path])


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


BAD_SHARE_WARNING = 0.1        # a run that quarantines more than this share of its records warns
TOP_KINDS = 3                  # bad-record kinds named in that warning and in a run that kept nothing


def _top_kinds(kinds: dict) -> str:
    return "; ".join(f"{entry['count']:,} × {kind}" for kind, entry in list(kinds.items())[:TOP_KINDS])


def _bad_share_warnings(counts: dict, kinds: dict) -> list[str]:
    """A run that quarantined (or dropped as bad) more than BAD_SHARE_WARNING of its records
    says so, with the most common kinds: a parse rule that fits only part of the input is
    likelier than that much bad data."""
    bad, total = counts["quarantined"], counts["rows_in"]
    if not total or bad <= BAD_SHARE_WARNING * total:
        return []
    return [f"{bad:,} of {total:,} records ({bad / total:.1%}) are bad; most common: {_top_kinds(kinds)}"]


def _check_errors(plan: Plan, counts: dict, bad: dict, kinds: dict) -> None:
    if counts["rows_out"] == 0 and counts["quarantined"] and not plan.spec.allow_empty_output:
        bad_n, rest = counts["quarantined"], counts["rows_in"] - counts["quarantined"]
        what = (f"all {bad_n:,} records are bad" if not rest else
                f"{bad_n:,} records are bad and the other {rest:,} were filtered or deduplicated")
        raise DataError(
            f"no record was kept: {what}; nothing was committed to {plan.out_dir}\n"
            f"  most common: {_top_kinds(kinds)}",
            hint="fix the input, the parse rule or `columns`; `allow_empty_output: true` commits the empty "
                 "dataset all the same")
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


def _shard_tasks(layout: Layout, results: list[MapResult], schema, options, sink) -> list[ShardTask]:
    import numpy as np

    from ..placement import BUCKETS
    from ..sinks.layout import cut_points_by_size

    names = layout.split_names
    hist = {i: sum((r.histograms[i] for r in results if i in r.histograms), np.zeros(BUCKETS)) for i in range(len(names))}
    if layout.target_bytes:
        pieces = [p for r in results for p in r.pieces.values()]
        ratio = sink.size_ratio(pieces, sum(hist.values()), schema, options)
        cuts_by_split = {i: cut_points_by_size(hist[i], layout.target_bytes / ratio) for i in hist}
    else:
        counts = layout.shard_counts()
        cuts_by_split = {i: cut_points(hist[i], counts[i]) if layout.ranged else [0, BUCKETS] for i in hist}
    tasks = []
    for i, name in enumerate(names):
        cuts = cuts_by_split[i]
        for k in range(len(cuts) - 1):
            rel = sink.shard_path(name, k)
            tasks.append(ShardTask(i, name, k, cuts[k], cuts[k + 1], rel, float(hist[i][cuts[k]:cuts[k + 1]].sum())))
    return tasks


def input_pins(files, results: list[MapResult]) -> dict[int, FilePin]:
    """Each local input's pin (sources/pins.py): its identity when listed, and the hash of every
    range the partitions read."""
    read: dict[int, list] = {}
    for result in results:
        for pin in result.read_pins:
            read.setdefault(pin.file_index, []).append(pin)
    return {f.index: FilePin.of_reads(f.identity, read.get(f.index, ()), f.compression)
            for f in files if f.url is None}


def check_files_unchanged(files, pins: dict[int, FilePin]) -> None:
    """Before a commit: every local input still is the file that was listed (its identity), or,
    where its identity changed during the run, still holds the bytes the run read (its ranges
    hashed again); else an error naming it: a dataset never mixes two versions of a file."""
    for f in files:
        pin = pins.get(f.index)
        if pin is None or f.identity is None or Identity.at(f.path) == f.identity:
            continue
        check = pin.check(f.path)
        if not check.same:
            raise SourceError(f"source.path: {f.display} changed during the run ({check.compared()}; "
                              + "; ".join(map(str, check.mismatches[:3])) + "); nothing was committed",
                              hint="run again once the data stops changing")


def _manifest(plan, backend, counts, stages, shards, quarantine, bad, layout, run_id, pins: dict) -> dict:
    spec = plan.spec
    return {
        "format": MANIFEST_FORMAT,
        "name": spec.name,
        "pipeline_sha256": plan.loaded.sha256,
        "fingerprint": {k: v for k, v in _fingerprint(plan, backend).items() if k != "inputs"},
        "seed": spec.shard.seed,
        "backend": backend.name,
        "io": backend.io_path(),
        "versions": recorded_versions(backend),
        "inputs": [{**f.pin(located=True), **(pins[f.index].to_json() if f.index in pins else {})}
                   for f in plan.files],
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
