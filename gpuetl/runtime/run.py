"""Run a Plan: its phases in order (runtime/phases/), under the output folder's lock, then the
commit and the run report.

    folder.open_output        plan → the sink's folder, checked before any data is read
    resume.earlier_runs       the folder → an interrupted run's folder to continue, or a new one
    resume.finished_maps      the run folder → the partitions an interrupted run finished
    mapping.run_map           → every partition read, run through its steps, spilled (Mapped)
    accounting.account        → the counts and the error checks (Accounts)
    sharding.write_shards     → the shards and the quarantine, written by the workers (Written)
    manifest.build_result     → the manifest and the RunResult
    folder.commit             the run's files moved into place, _manifest.json, _SUCCESS last
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from ..errors import DataError, OutputError, OutputWriteFailed
from ..plan.compile import Plan
from ..sinks import commit as commit_protocol
from ..sinks.runstore import workers_share_disk
from ..sources.files import check_objects_unchanged
from ..storage import is_remote
from . import append
from .phases import accounting, manifest, mapping, resume, sharding
from .phases.context import RunContext, RunResult
from .phases.folder import open_output
from .progress import RunProgress, display_for
from .report import REPORT_HTML, build_report, first_records_in_task, write_report

__all__ = ["RunResult", "run_plan"]


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
    output_folder = open_output(plan, log)
    out = plan.out_dir
    if spec.sink.delta_log:
        from ..sinks.delta import check_schema

        check_schema(plan.output_schema)
    with output_folder as folder:
        folder.survey(mode)
        if mode == "append":                  # runtime/append.py: what this version reads
            plan = append.settle(plan, backend, folder, resume.append_digests)
            if plan.nothing_to_append:
                log(f"nothing to append: every input of source.path is held by dataset version "
                    f"{plan.held.version} of {out} already")
                manifest = plan.held.manifest
                return RunResult(out, manifest["counts"], manifest["stages"], manifest["shards"],
                                 manifest["quarantine"], manifest.get("bad_records", {}), manifest["backend"], 0.0, 0,
                                 manifest, nothing_to_append=True)
        if mode == "resume":
            done = resume.already_complete(plan, folder.inventory)
            if done is not None:
                log(f"{out} already holds the complete output of this pipeline and these inputs: nothing to do")
                return done
        resumed = resume.earlier_runs(plan, backend, folder, log)
        run_tmp = resumed or folder.new_run(commit_protocol.new_run_id())
        watch.run_id = run_tmp.name
        try:
            watch.started()                       # may print: a closed pipe there is an early end too
            if resumed is None:
                resume.write_state(plan, backend, run_tmp)
            # Workers that may not share this machine's disk put what others read in the store
            store = folder.through_store(run_tmp) if is_remote(out) and not workers_share_disk(executor) else None
            _warn_local_inputs(plan, store, log)
            ctx = RunContext(plan, backend, executor, run_tmp, watch, log, store)
            with executor.timed(watch):
                result = _run(ctx)
            check_objects_unchanged(plan.files, spec.source.paths, spec.source.storage_options)
            result.seconds = time.perf_counter() - started
            result.manifest["run"]["seconds"] = round(result.seconds, 3)
            if report:
                watch.shards_done()
                built = build_report(plan, backend, watch, result=result,
                                     find_first=first_records_in_task(ctx.executor, quarantine=result.quarantine,
                                                                      **ctx.shards_at()))
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


def _run(ctx: RunContext) -> RunResult:
    """The run's phases, each taking the one before's output (runtime/phases/)."""
    ctx.backend.start_reports(ctx.executor.client)
    finished = resume.finished_maps(ctx)
    mapped = mapping.run_map(ctx, finished)
    accounts = accounting.account(ctx, mapped)
    written = sharding.write_shards(ctx, mapped)
    return manifest.build_result(ctx, mapped, accounts, written)


def _warn_local_inputs(plan: Plan, store, log) -> None:
    """Through the store, inputs on this machine's disk must be seen by the workers too."""
    copies = [f.display for f in plan.files if store is not None and (f.url is None or not f.in_store)]
    if copies:
        log(f"warning: {len(copies)} input(s) are read from this machine's disk ({copies[0]}"
            f"{', …' if len(copies) > 1 else ''}): local files, or objects fetched whole (compressed, "
            "csv, multi-line); workers on other machines must see the same path (a shared folder, "
            "or a cache.path they share)")


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


_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def _is_write_failure(err: OSError, out: Path) -> bool:
    """A full or read-only disk (pyarrow's own OSErrors carry the errno only in their text)."""
    if err.errno in _WRITE_ERRNOS or "No space left on device" in str(err):
        return True
    return bool(err.filename) and str(err.filename).startswith(str(out) + os.sep)
