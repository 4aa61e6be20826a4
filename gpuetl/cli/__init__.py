"""gpuetl run | validate | plan | preview | inspect | verify | report | schema  (exit 0 done, 1 data failed, 2 usage)."""

from __future__ import annotations

import _thread
import argparse
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import sys
import threading
import time
import warnings

from .. import __version__
from . import tuning
from ..errors import GpuetlError
from ..spec.sizes import format_size
from ..words import count, printable


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits 2 too; keep its message short and ours
        self.print_usage(sys.stderr)
        _show(f"gpuetl: error: {message}", file=sys.stderr)
        sys.exit(2)


def _show(*parts, file=None, **kwargs) -> None:
    """print() for everything the command prints for a person: each part through printable().
    JSON outputs go to print() directly (JSON escapes control characters itself)."""
    print(*(printable(str(p)) for p in parts), file=file, **kwargs)


PIPELINE_FILE = "the pipeline file (YAML)"
SET_HELP = "override one key of the pipeline file, e.g. --set sink.path=/tmp/out (repeatable)"
DATASET_FOLDER = "the dataset folder a run wrote (the sink's path), or its s3:// URL"


def _count(n: int, word: str) -> str:
    """'1 file', '3 files'."""
    return count(n, word)


def build_parser() -> argparse.ArgumentParser:
    from ..backends import backend_choices

    parser = _Parser(prog="gpuetl", description="Raw logs to training-ready Parquet, on the GPU or the CPU.")
    parser.add_argument("--version", action="version", version=f"gpuetl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run a pipeline file and commit the dataset")
    run.add_argument("file", help=PIPELINE_FILE)
    run.add_argument("--backend", default="auto", choices=backend_choices(),
                     help="auto (default): the GPU where one is usable, else the CPU")
    run.add_argument("--scheduler", default=None,
                     help="a dask scheduler address; 'local' starts a cluster on this machine; 'processes' "
                          "one with a worker process per core (CPU); 'sync' or 'threads' run without a cluster "
                          "(default on the CPU: 'threads', or 'local' with its dashboard when --dashboard-address is "
                          "given or, at a terminal, for inputs of 32 MiB or more; on the GPU: 'local')")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help=SET_HELP)
    run.add_argument("--json", action="store_true", help="print the run summary as JSON")
    run.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                     help="show each stage's progress on stderr: bars on a terminal, a line every few seconds "
                          "elsewhere (default: on)")
    run.add_argument("-q", "--quiet", action="store_true", help="print no progress and no summary; errors still print")
    run.add_argument("--log-format", choices=("text", "json"), default="text",
                     help="json: one JSON event per line on stderr (stage transitions, failures, messages)")
    run.add_argument("--no-report", dest="report", action="store_false",
                     help="write no run report (_report.json, _report.html) next to the dataset")
    run.add_argument("--dashboard-address", type=_dashboard_address, default=None, metavar="HOST:PORT",
                     help="serve the local cluster's dashboard here (default: 127.0.0.1:8787, at a terminal only); "
                          "another host, such as 0.0.0.0, opens it to other machines: its pages show quarantine "
                          "reasons, which quote record values")

    for name, text in (("validate", "check a pipeline file, its inputs and its columns and steps against them "
                                    "as run will; exit 2 with located errors"),
                       ("plan", "print stages, schemas, partitions and tasks")):
        p = sub.add_parser(name, help=text)
        p.add_argument("file", help=PIPELINE_FILE)
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
        if name == "validate":
            p.add_argument("--offline", action="store_true",
                           help="check the file alone: no input is listed or read (no credentials needed), so "
                                "the columns and steps are not checked against the inputs")
        if name == "plan":
            p.add_argument("--backend", default="cpu", choices=backend_choices(),
                           help="also check what this backend runs natively (default cpu)")

    preview = sub.add_parser("preview", help="run on the first records in memory and print the rows after each "
                                             "stage and the bad records; writes nothing")
    preview.add_argument("file", help=PIPELINE_FILE)
    preview.add_argument("-n", type=_positive, default=20, help="rows to show per stage (default 20)")
    preview.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
    preview.add_argument("--backend", default="cpu", choices=backend_choices(), help="default cpu")

    inspect = sub.add_parser("inspect", help="what a dataset holds")
    inspect.add_argument("out", help=DATASET_FOLDER)
    inspect.add_argument("--json", action="store_true", help="print it as JSON")
    inspect.add_argument("--dataset-version", type=_version, metavar="N", help=VERSION_HELP)
    verify = sub.add_parser("verify", help="re-check shards against the manifest; exit 1 on mismatch")
    verify.add_argument("out", help=DATASET_FOLDER)
    verify.add_argument("--repair", action="store_true",
                        help="first finish a commit that was interrupted (from its checked journal); "
                             "without it verify only reads")
    verify.add_argument("--inputs", action="store_true",
                        help="also check that the inputs the manifest pins are unchanged (objects: ETag, version "
                             "id and size; local files: every range re-hashed, xxh3-128): whether the dataset can "
                             "be rebuilt from them")
    verify.add_argument("--dataset-version", type=_version, metavar="N", help=VERSION_HELP)
    report = sub.add_parser("report", help="print a dataset's run report (_report.json) as text")
    report.add_argument("out", help="the dataset folder, or a failed run's report folder under _tmp/")
    report.add_argument("--open", action="store_true", help="open _report.html in the web browser")
    report.add_argument("--json", action="store_true", help="print the report's JSON")
    report.add_argument("--dataset-version", type=_version, metavar="N", help=VERSION_HELP)
    sub.add_parser("schema", help="print the JSON Schema of pipeline files")
    return parser


def _dashboard_address(text: str) -> str:
    from ..runtime.executor import dashboard_address

    try:
        return dashboard_address(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _positive(text: str, what: str = "a whole number of rows") -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected {what}, 1 or more, got {text!r}")
    return value


def _version(text: str) -> int:
    """--dataset-version N: a dataset version's number."""
    return _positive(text, "a dataset version's number")


INTERRUPTED = "gpuetl: interrupted; nothing was committed"


def main(argv: list[str] | None = None) -> int:
    """The `gpuetl` command. A Ctrl-C at any point, start-up (the libraries' imports) included,
    ends it with one line and exit 130."""
    try:
        return _main(argv)
    except KeyboardInterrupt:          # before a command runs: the imports, the argument parser
        print(INTERRUPTED, file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    tuning.apply()                     # the command's own process-wide settings (GPUETL_NO_TUNING=1: none)
    args = build_parser().parse_args(argv)
    try:
        with _quiet_interrupt():
            code = COMMANDS[args.command](args) or 0
        sys.stdout.flush()               # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        return _stdout_closed()
    except GpuetlError as err:
        return _error(args, f"gpuetl {args.command}: error: {_with_set(str(err))}", err.exit_code)
    except KeyboardInterrupt:
        kept = ("; the finished work is kept: run it again with sink.mode: resume to continue"
                if getattr(args, "sink_mode", None) == "resume" else "")
        return _error(args, f"{INTERRUPTED}{kept}", 130)
    except Exception as err:  # a bug in gpuetl, not the user's mistake: say so, briefly
        if os.environ.get("GPUETL_DEBUG"):
            raise
        return _error(args, f"gpuetl {args.command}: internal error: {type(err).__name__}: {err}\n"
                            "  this is a bug in gpuetl; rerun with GPUETL_DEBUG=1 for the traceback and report it", 1)


@contextlib.contextmanager
def _quiet_interrupt():
    """Ctrl-C stops the command with one line of ours. The local cluster, stopped mid-task, would
    also log cancelled tasks with their tracebacks: from the interrupt on, logging is off (the
    process is ending). A KeyboardInterrupt raised while a finalizer runs (a distributed
    Future's __del__) is dropped by Python, which hands it to sys.unraisablehook: there it is
    delivered again, so the command still stops (and what else finalizers raise once it is
    stopping is not shown). The caller's handler and hook come back after (main() may run
    inside tests)."""
    stopping, active = threading.Event(), threading.Event()

    def again():
        if active.is_set():             # the command has not ended meanwhile
            _thread.interrupt_main(signal.SIGINT)

    def interrupted(signum, frame):
        stopping.set()
        logging.disable(logging.CRITICAL)
        raise KeyboardInterrupt

    def dropped(unraisable):
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            # from another thread, a moment later: here it would land in the finalizer again
            threading.Timer(0.05, again).start()
        elif not stopping.is_set():     # once interrupted, as with logging: the process is ending
            hook(unraisable)

    ours = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler     # not where Ctrl-C is ignored
    before = signal.signal(signal.SIGINT, interrupted) if ours else None
    hook = sys.unraisablehook
    if ours:
        sys.unraisablehook = dropped
        active.set()
    try:
        yield
    finally:
        if ours:
            active.clear()
            signal.signal(signal.SIGINT, before)
            sys.unraisablehook = hook


def _error(args, message: str, code: int) -> int:
    """An error on stderr: as text, or as one JSON event (--log-format json)."""
    events = getattr(args, "events", None)
    if events is not None:
        events.error(message, code)
    else:
        _show(message, file=sys.stderr)
    return code


# The library's hints name a setting as the pipeline file writes it ("set sink.mode: overwrite"),
# which a caller of the Python API can follow too; on the command line the --set form is added.
_SETTING = re.compile(r"\bset ((?:[a-z_]+\.)+[a-z_]+): ([\w.-]+)")


def _with_set(message: str) -> str:
    return _SETTING.sub(lambda m: f"set {m[1]}: {m[2]} (--set {m[1]}={m[2]})", message)


SIGPIPE_EXIT = 141


def _stdout_closed() -> int:
    """The reader of our output went away (`gpuetl inspect OUT | head -2`): stop quietly, with the
    exit status of a process ended by SIGPIPE (128 + 13), as `cat` and `yes` end there. Standard
    output is pointed at /dev/null so the interpreter's final flush cannot complain."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return SIGPIPE_EXIT


def cmd_validate(args) -> int:
    """By default what `run` checks before reading a record: the file, that its inputs exist, the
    columns, steps and shard keys against the schema the inputs give (as `plan`), and that the
    sink lies apart from the inputs; an input
    that is missing is an error (exit 2), as it is for run. --offline: the file alone."""
    from ..api import load

    pipeline = load(args.file, args.overrides)
    if args.offline:
        _show(f"{args.file}: valid as a file (pipeline {pipeline.name!r}, {_count(len(pipeline.loaded.steps), 'step')}); "
              "inputs, columns and steps not checked (--offline)")
        return 0
    plan = pipeline.plan()
    if not plan.nothing_to_append:
        from ..runtime.phases.folder import check_apart_from_inputs

        check_apart_from_inputs(plan)
    _show(f"{args.file}: valid (pipeline {pipeline.name!r}, {_count(len(pipeline.loaded.steps), 'step')}, "
          f"{_count(len(plan.files), 'input file')}, {_count(len(plan.output_schema), 'output column')})")
    return 0


def cmd_plan(args) -> int:
    from ..api import load

    plan = load(args.file, args.overrides).plan(args.backend)
    spec = plan.spec
    if plan.nothing_to_append:
        _show(f"pipeline {spec.name}: nothing to append: every input of source.path is held by dataset version "
              f"{plan.held.version} of {plan.out_dir}")
        return 0
    _show(f"pipeline {spec.name}: {_count(len(plan.files), 'input file')}, {format_size(plan.input_bytes)}")
    _show(f"partitions: {len(plan.partitions)} (blocksize {format_size(spec.source.blocksize)})")
    if (multiline := spec.source.multiline) is not None:
        _show(f"records: multi-line, each starting at a line matching {multiline.start!r} (at most "
              f"{multiline.max_lines:,} lines and {format_size(multiline.max_bytes)} a record)")
    previous: dict = {}
    for info in plan.stages:
        _show(f"\nstage {info.index}: {info.name}" + (f"  [{info.detail}]" if info.detail else ""))
        for line in _schema_change(previous, info.schema):
            _show(f"    {line}")
        previous = info.schema
    _show("\noutput schema: " + ", ".join(f"{n}: {t}" for n, t in plan.output_schema.items()))
    layout = plan.layout
    shards = layout.shard_counts() if not layout.target_bytes else ["by size"]
    splits = ", ".join(f"{n}={c}" for n, c in zip(layout.split_names, shards)) if layout.splits else str(shards[0])
    n = len(plan.partitions)
    streams = layout.in_input_order
    tasks = _graph_tasks(plan, in_order=streams) + n + sum(s if isinstance(s, int) else 1 for s in shards)
    _show(f"\nsink: {plan.out_dir} (mode {spec.sink.mode}, {spec.sink.compression}); shards: {splits}"
          f"{'; shuffled with seed ' + str(layout.seed) if layout.shuffle else ''}")
    for note in plan.notes:
        _show(f"note: {note}")
    from ..steps.base import InOrderGlobalStep

    steps = [seg.steps[0].step for seg in plan.segments[1:]]
    global_steps = [f"{s.name} ({'in input order, partition by partition' if streams and isinstance(s, InOrderGlobalStep) else 'all at once'})"
                    for s in steps]
    moves = f"global steps decided without moving rows: {', '.join(global_steps)}" if global_steps else \
        "no global step"
    _show(f"tasks: about {tasks} (the graph's {len(plan.segments)} stage group{'s' if len(plan.segments) != 1 else ''}"
          f" over {_count(n, 'partition')}, {moves}, then spill and shard writes)")
    return 0


def _graph_tasks(plan, in_order: bool = False) -> int:
    """Tasks in the graph run would build (its shape does not depend on the backend, so this
    works for a GPU plan on any machine)."""
    from ..backends import get_backend
    from ..runtime.graph import build_partitions, count_tasks

    return count_tasks(build_partitions(plan, get_backend("cpu"), in_order=in_order))


def _schema_change(before: dict, after: dict) -> list[str]:
    """The whole schema for the first stage; afterwards only what a stage changed."""
    if not before:
        return [f"{n}: {t}" for n, t in after.items()]
    lines = [f"- {n}" for n in before if n not in after]
    lines += [f"+ {n}: {t}" for n, t in after.items() if n not in before]
    lines += [f"~ {n}: {before[n]} -> {t}" for n, t in after.items() if n in before and before[n] != t]
    return lines or ["(schema unchanged)"]


def cmd_run(args) -> int:
    """Under --quiet the run prints errors only: the warnings libraries raise while it goes (Pillow
    on odd EXIF data, dask) are silenced here, for this command, never by the library."""
    if not args.quiet:
        return _run_command(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _run_command(args)


def _run_command(args) -> int:
    from ..api import load
    from ..backends import get_backend
    from ..runtime.executor import DASHBOARD_ADDRESS, chosen_scheduler, dashboard_is_local, open_executor
    from ..runtime.progress import display_for
    from ..runtime.run import run_plan

    listeners: list = []
    if args.log_format == "json":
        from ..runtime.events import JsonEvents

        args.events = JsonEvents()
        listeners.append(args.events)
        log = args.events.message
    elif args.quiet:
        log = (lambda *a: None)
    else:
        display = display_for(args.progress)
        listeners += [display] if display else []
        log = (lambda *a: _show(*a, file=sys.stderr))
    pipeline = load(args.file, args.overrides)
    backend = get_backend(args.backend)
    plan = pipeline.plan(backend)
    args.sink_mode = plan.spec.sink.mode           # what an interrupt leaves behind depends on it
    tuning.arrow_pool(streamed=plan.layout.in_input_order)
    for note in plan.notes:
        log(f"note: {note}")
    picked = f"{backend.name}" + (" (auto)" if args.backend == "auto" else "")
    log(f"gpuetl {__version__}: pipeline {pipeline.name!r}, backend {picked}, {_count(len(plan.files), 'file')} "
        f"({format_size(plan.input_bytes)}), {_count(len(plan.partitions), 'partition')}")
    started = time.perf_counter()
    watched = sys.stderr.isatty() and not args.quiet    # a dashboard only where someone can open its link
    # no cluster (and so no dashboard) unless one is asked for, or offered to a person at a terminal
    scheduler = chosen_scheduler(args.scheduler, backend, plan.input_bytes, args.dashboard_address, watched=watched)
    address = args.dashboard_address or (DASHBOARD_ADDRESS if watched else None)     # asked for: served
    with open_executor(scheduler, backend, quiet=True, dashboard_address=address) as executor:
        tuning.freeze_heap()
        if executor.dashboard_link:
            link = executor.dashboard_link
            log(f"dashboard: {link}")
            if executor.dashboard_host is not None and not dashboard_is_local(address):      # our cluster's
                log(f"warning: the dashboard listens on {address}, reachable from other machines; its pages show "
                    "quarantine reasons, which quote record values")
            if link.endswith("/status"):
                own = getattr(executor.client, "cluster", None) is not None
                log(f"gpuetl page: {link.removesuffix('/status')}/gpuetl"
                    + ("" if own else " (where the scheduler runs with --preload gpuetl.runtime.dashboard)"))
        result = run_plan(plan, backend, executor, log=log, listeners=listeners, report=args.report)
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps({"out": str(result.out_dir), "counts": result.counts, "stages": result.stages,
                          "shards": result.shards, "quarantine": result.quarantine,
                          "bad_records": result.bad_records,
                          "bad_record_kinds": result.manifest.get("bad_record_kinds", {}), "backend": result.backend,
                          "warnings": result.manifest.get("warnings", []),
                          "fallbacks": result.manifest.get("fallbacks", {}),
                          "host_transfer": result.manifest.get("host_transfer", {}),
                          "report": str(result.report) if result.report else None,
                          "seconds": round(seconds, 3)}, indent=2))
    elif not args.quiet:
        print_summary(result, seconds)
    tuning.freeze_heap()               # the process ends next: no last walk over the heap at exit
    return 0


def print_summary(result, seconds: float) -> None:
    c = result.counts
    rate = result.input_bytes / seconds / 1e6 if seconds > 0 else 0.0
    _show(f"dataset: {result.out_dir}")
    if version := result.manifest.get("dataset_version"):      # sink.mode append: this version's counts below
        total = result.manifest["counts"]["rows_out"]
        _show(f"  dataset version {version}" + (" (nothing appended)" if getattr(result, "nothing_to_append", False)
                                                else "") + f": {total:,} rows in all its versions")
    _show(f"  rows in {c['rows_in']:,} = out {c['rows_out']:,} + filtered {c['filtered']:,} "
          f"+ deduplicated {c['deduplicated']:,} + quarantined {c['quarantined']:,}")
    for s in result.stages:
        dropped = ", ".join(f"{k} {s[k]:,}" for k in ("filtered", "deduplicated", "quarantined") if s[k])
        _show(f"  stage {s['stage']} {s['name']:<16} {s['rows_in']:>12,} → {s['rows_out']:<12,} {dropped}")
    splits: dict[str, list] = {}
    for shard in result.shards:
        splits.setdefault(shard["split"] or "-", []).append(shard)
    for name, shards in splits.items():
        label = "shards" if name == "-" else f"split {name}"
        _show(f"  {label}: {_count(len(shards), 'file')}, {_count(sum(s['rows'] for s in shards), 'row')}, "
              f"{format_size(sum(s['bytes'] for s in shards))}")
    if result.quarantine:
        _show(f"  quarantine: {_count(sum(q['rows'] for q in result.quarantine), 'row')} in {result.out_dir}/_quarantine/")
        _print_reason_kinds(result)
    elif c["quarantined"]:
        _show(f"  {_count(c['quarantined'], 'bad record')} dropped (on_error: drop)")
        _print_reason_kinds(result)
    if warning := result.manifest.get("bad_records_warning"):
        print(f"  warning: {warning}")
    for reason, n in result.manifest.get("fallbacks", {}).items():
        _show(f"  fell back to the CPU: {n:,} × {reason}")
    if result.manifest.get("host_transfer"):
        moved = result.manifest["host_transfer"]
        _show(f"  device → host: {format_size(moved['host_bytes'])} "
              f"({moved['host_bytes_per_input_byte']:.2%} of the input bytes)")
    if tiers := result.manifest.get("input_tiers"):
        _show(f"  inputs from the object store: {format_size(tiers['remote_bytes'])} ({tiers['remote_objects']:,} "
              f"objects), from the cache: {format_size(tiers['cache_bytes'])} ({tiers['cache_objects']:,} objects)")
    _show(f"  {seconds:.1f} s, {rate:.1f} MB/s of input, backend {result.backend}")
    if getattr(result, "report", None):
        _show(f"  report: {result.report}  (gpuetl report {result.out_dir})")


SUMMARY_KINDS = 5
EXAMPLE_CHARS = 120


def _print_reason_kinds(result) -> None:
    """The most common kinds of bad record (runtime/reasons.py), one example each: distinct
    values in reasons would otherwise push most rows out of the top lines."""
    kinds = result.manifest.get("bad_record_kinds") or \
        {reason: {"count": n, "example": reason} for reason, n in result.bad_records.items()}
    for kind, entry in list(kinds.items())[:SUMMARY_KINDS]:
        example = entry["example"]
        example = example if len(example) <= EXAMPLE_CHARS else example[:EXAMPLE_CHARS] + "…"
        _show(f"    {entry['count']:>8,} × {kind}" + (f"  (e.g. {example})" if example != kind else ""))
    rest = list(kinds.values())[SUMMARY_KINDS:]
    if rest:
        _show(f"    and {len(rest)} more kind{'s' if len(rest) > 1 else ''} "
              f"({_count(sum(e['count'] for e in rest), 'row')})")


CELL_CHARS = 40


def cmd_preview(args) -> int:
    from ..api import load

    pipeline = load(args.file, args.overrides)
    shown = pipeline.preview(n=args.n, backend=args.backend)
    _show(f"preview of pipeline {pipeline.name!r}: read {shown.read}; nothing written")
    for note in shown.notes:
        _show(f"note: {note}")
    for s in shown.stages:
        dropped = ", ".join(f"{k} {getattr(s, k):,}" for k in ("filtered", "deduplicated", "quarantined")
                            if getattr(s, k))
        alone = "  (applied to these rows alone, not across the whole input)" if s.alone else ""
        _show(f"\nstage {s.index} {s.name}: {_count(s.rows_in, 'row')} in → {s.rows_out:,} out"
              + (f" ({dropped})" if dropped else "") + alone)
        _show(_table(s.rows, args.n))
    bad = shown.quarantined
    count = sum(s.quarantined for s in shown.stages)
    _show(f"\nquarantined: {count:,} record{'s' if count != 1 else ''}"
          + (f", the first {bad.num_rows}:" if bad.num_rows else ""))
    if bad.num_rows:
        _show(_table(bad, args.n))
    return 0


def _table(table, n: int) -> str:
    """A compact text table: long values cut, binary values as their byte length."""
    import pyarrow as pa

    if table.num_rows == 0:
        return "  (no rows)"
    columns = {}
    for name, column in zip(table.column_names, table.columns):
        name = printable(name, keep_newlines=False)
        values = column.to_pylist()
        if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            columns[name] = ["null" if v is None else f"<{len(v):,} bytes>" for v in values]
        else:
            columns[name] = ["null" if v is None else _cell(str(v)) for v in values]
    import pandas as pd

    # as wide as the terminal (COLUMNS where set, as `ls` reads it; 80 where neither says): wider
    # tables continue below in blocks of columns, as pandas wraps them
    width = shutil.get_terminal_size().columns
    text = pd.DataFrame(columns).to_string(index=False, max_rows=n, line_width=max(width - 2, 20))
    return "\n".join("  " + line for line in text.splitlines())


def _cell(text: str) -> str:
    text = printable(text, keep_newlines=False)
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS - 1] + "…"


VERSION_HELP = ("that dataset version of a dataset sink.mode: append wrote (1, 2, …; default: the latest); "
                "each version's manifest is kept under _versions/")


def cmd_inspect(args) -> int:
    from ..sinks.dataset import inspect_dataset

    info = inspect_dataset(args.out, dataset_version=args.dataset_version)
    for name in info["interrupted_commits"]:
        _show(f"note: the commit of run {name} was interrupted; `gpuetl verify --repair {info['path']}` "
              "finishes it", file=sys.stderr)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    m = info["manifest"]
    state = "complete" if info["complete"] else ("INCOMPLETE" if info["interrupted_commits"] or
                                                 info["success"].startswith("no ") else "NOT VOUCHED FOR")
    _show(f"dataset {info['path']}: pipeline {m.get('name')}, {state}, backend {m.get('backend')}, seed {m.get('seed')}")
    if not info["complete"] and not info["interrupted_commits"]:
        _show(f"  {info['success']}")
    if m.get("dataset_version"):
        v = m["dataset_version"]
        created = m["run"].get("created_at") if isinstance(m.get("run"), dict) else None
        _show(f"  dataset version {v}" + (f" (created {created})" if created else ""))
        vc = m.get("version_counts") or {}
        if vc:
            _show(f"  this version: rows in {vc.get('rows_in', 0):,} = out {vc.get('rows_out', 0):,} + filtered "
                  f"{vc.get('filtered', 0):,} + deduplicated {vc.get('deduplicated', 0):,} + quarantined "
                  f"{vc.get('quarantined', 0):,}")
    c = m["counts"]
    _show(f"  rows in {c['rows_in']:,} = out {c['rows_out']:,} + filtered {c['filtered']:,} "
          f"+ deduplicated {c['deduplicated']:,} + quarantined {c['quarantined']:,}")
    for name, s in info["splits"].items():
        _show(f"  {name}: {_count(s['shards'], 'shard')}, {_count(s['rows'], 'row')}, {format_size(s['bytes'])}")
    _show("  schema: " + ", ".join(f"{f['name']}: {f['type']}" for f in m["schema"]))
    for row in info["sample"]:
        # an image's bytes as their size: escaped, they filled the line and hid the columns after them
        shown = {k: f"<{len(v):,} bytes>" if isinstance(v, bytes) else v for k, v in row.items()}
        _show("  " + json.dumps(shown, default=str, ensure_ascii=False)[:300])
    return 0


def cmd_verify(args) -> int:
    from ..sinks.dataset import leftovers, repair, verify_dataset

    if args.repair:
        for name in repair(args.out, log=lambda *a: _show(*a, file=sys.stderr)):
            _show(f"{args.out}: finished the interrupted commit of run {name}")
    manifest, problems = verify_dataset(args.out, dataset_version=args.dataset_version)
    append = isinstance(manifest.get("dataset_version"), int)      # an append dataset's runs are run again
    for left in leftovers(args.out, append):  # under _tmp/: no reader sees them; the dataset is not wrong
        print(f"LEFTOVER {left}" + ("; the next run or `gpuetl verify --repair` removes it" if left.removable else ""))
    if args.inputs:
        from ..sinks.dataset import verify_inputs

        compared: list[str] = []
        input_problems = verify_inputs(manifest, log=lambda name, what: compared.append(f"  {name}: {what}"))
        for p in input_problems:
            _show(f"INPUT {p}")
        if not input_problems:
            inputs = manifest.get("inputs") or []
            objects = sum(1 for i in inputs if isinstance(i, dict) and "etag" in i)
            said = [f"{len(inputs) - objects} local file(s): ranges re-hashed and compared with the hashes taken "
                    "as they were read" if len(inputs) > objects else "",
                    f"{objects} object(s): ETag, version id and size compared" if objects else ""]
            _show(f"{args.out}: the {len(inputs)} inputs are the bytes the dataset was built from ("
                  + "; ".join(x for x in said if x) + ")")
            for line in compared[:20]:
                _show(line)
            if len(compared) > 20:
                _show(f"  … and {len(compared) - 20} more")
        problems += input_problems
    if problems:
        for p in problems:
            if not args.inputs or p not in input_problems:
                _show(f"BAD {p}")
        _show(f"{args.out}: {len(problems)} problem{'s' if len(problems) > 1 else ''}", file=sys.stderr)
        return 1
    n = len(manifest.get("shards", [])) + len(manifest.get("quarantine", [])) + len(manifest.get("reports", []))
    which = f" of dataset version {args.dataset_version}" if args.dataset_version else ""
    _show(f"{args.out}: ok, {_count(n, 'file')} match{'es' if n == 1 else ''} the manifest{which}")
    return 0


def cmd_report(args) -> int:
    from ..runtime.report import read_report, render_text

    report, page = read_report(args.out, dataset_version=args.dataset_version)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        _show(render_text(report))
    if args.open:
        import webbrowser

        if page is None:
            _show(f"gpuetl report: dataset version {args.dataset_version} keeps its report's JSON only (the HTML "
                  "page is the latest version's)", file=sys.stderr)
        elif isinstance(page, str):          # on an object store: a browser cannot open it there
            _show(f"gpuetl report: {page} is on an object store; copy it here to open it", file=sys.stderr)
        elif not webbrowser.open(page.resolve().as_uri()):
            _show(f"gpuetl report: no web browser to open; the report is {page}", file=sys.stderr)
    return 0


def cmd_schema(args) -> int:
    from ..spec.schema import pipeline_json_schema

    print(json.dumps(pipeline_json_schema(), indent=2))
    return 0


COMMANDS = {"run": cmd_run, "validate": cmd_validate, "plan": cmd_plan, "preview": cmd_preview, "inspect": cmd_inspect,
            "verify": cmd_verify, "report": cmd_report, "schema": cmd_schema}

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
