"""A run's progress, counted from what its tasks hand back as they finish (each partition's
MapResult, each shard's ShardResult), never from dask's task counter: records and bytes per
stage, throughput over time and where the workers' time went. Listeners show it: a rich display
on a terminal, plain lines elsewhere, JSON events (events.py), the dashboard page (dashboard.py)
and the run report (report.py) read the same numbers.

The stages shown are the ones a user can tell apart while a run goes: read/parse (the first
segment: read, parse and the row-local steps), each global step (its decision needs every
partition), and the shard write. A partition's result carries the tallies of every stage, so each
stage's records move when the partition's last task of that stage's segment is done."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field

from ..columns import STATUS_DEDUPLICATED, STATUS_FILTERED, STATUS_QUARANTINED
from ..words import count, printable

DROPS = (("filtered", STATUS_FILTERED), ("deduplicated", STATUS_DEDUPLICATED), ("quarantined", STATUS_QUARANTINED))
LINE_INTERVAL = 10.0          # seconds between plain progress lines (not a terminal)
TIMELINE_POINTS = 2000        # throughput samples kept (evenly thinned past this)


@dataclass
class StageProgress:
    """One line of progress. `fraction` of the stage's work is done; `records` and `bytes` so
    far (bytes: of input for read/parse and global steps, written for the shard write)."""

    key: str
    label: str
    records: int = 0
    bytes: int = 0
    fraction: float = 0.0
    started: float | None = None
    finished: float | None = None

    @property
    def seconds(self) -> float:
        if self.started is None:
            return 0.0
        return (self.finished or time.monotonic()) - self.started

    @property
    def mb_per_s(self) -> float:
        s = self.seconds
        return self.bytes / s / 1e6 if s > 0 else 0.0

    @property
    def eta(self) -> float | None:
        """Seconds left at the pace so far; None before there is a pace."""
        if self.finished is not None:
            return 0.0
        if not 0 < self.fraction or self.started is None:
            return None
        return self.seconds * (1 - self.fraction) / self.fraction

    def as_dict(self) -> dict:
        return {"stage": self.label, "records": self.records, "bytes": self.bytes,
                "fraction": round(self.fraction, 4), "seconds": round(self.seconds, 3),
                "mb_per_s": round(self.mb_per_s, 3), "done": self.finished is not None}


@dataclass
class TaskTime:
    """One task's run: which worker (or thread), what kind of work, from when to when."""

    worker: str
    kind: str            # read (read, parse, row-local steps) | compute | write
    start: float
    stop: float


def task_kind(key) -> str:
    """read (read, parse, row-local steps: plan/graph.py's first tasks), write (shards,
    quarantine) or compute (global steps, spill), from the task's name."""
    name = key[0] if isinstance(key, tuple) else str(key)
    if name.startswith("write-"):
        return "write"
    if name.startswith(("read-parse", "decompress-")):
        return "read"
    return "compute"


class RunProgress:
    """What the run has done so far. Safe to call from the thread that collects results; listeners
    are called under a lock, in the order things happened."""

    def __init__(self, plan, listeners=(), run_id: str = "", backend=None):
        self.plan = plan
        self.run_id = run_id
        self.backend = backend.name if backend is not None else None
        self.io = backend.io_path() if backend is not None else None      # how the backend reads files
        self.listeners = list(listeners)
        self.lock = threading.RLock()
        self.t0 = time.monotonic()
        self.wall_started = time.time()
        self.finished_at: float | None = None
        weights = {p.index: _uncompressed(p) for p in plan.partitions}
        total = sum(weights.values()) or 1
        self.share = {i: w / total for i, w in weights.items()}       # of the input, per partition
        self.stages: dict[str, StageProgress] = {"read": StageProgress("read", "read/parse")}
        self.segment_of: dict[int, str] = {}      # plan stage index -> progress stage key
        for k, segment in enumerate(plan.segments):
            key = "read" if k == 0 else f"global-{k}"
            if k:
                self.stages[key] = StageProgress(key, segment.steps[0].step.name)
            for step in segment.steps:
                self.segment_of[step.index] = key
        self.segment_of[0] = "read"
        self.stages["write"] = StageProgress("write", "write shards")
        self.step_counts = {s.index: {"stage": s.index, "name": s.name, "rows_in": 0, "rows_out": 0,
                                      **{name: 0 for name, _ in DROPS}} for s in plan.stages}
        self.reasons: dict[str, int] = {}
        self.done_partitions: set[int] = set()
        self.rows_to_write: int | None = None
        self.rows_written = 0
        self.timeline: list[list[float]] = []      # [seconds since start, records read, input bytes read]
        self.task_times: list[TaskTime] = []
        self.worker_threads: dict[str, int] = {}
        self.failure: str | None = None

    # -- fed by the run ----------------------------------------------------------------------

    def started(self) -> None:
        self._tell("run_started", self)
        self._start("read")

    def partition_done(self, result) -> None:
        """A partition's MapResult: every stage's records for it (counted once, however often told)."""
        with self.lock:
            if result.partition in self.done_partitions:
                return
            self.done_partitions.add(result.partition)
            tallies = result.tallies
            rows_in = sum(result.rows.values()) + sum(tallies.values())
            remaining = rows_in
            moved: dict[str, int] = {}
            for index, counts in sorted(self.step_counts.items()):
                counts["rows_in"] += remaining
                moved.setdefault(self.segment_of.get(index, "read"), remaining)
                for name, status in DROPS:
                    n = tallies.get((index, status), 0)
                    counts[name] += n
                    remaining -= n
                counts["rows_out"] += remaining
            for reason, n in result.reasons.items():
                self.reasons[reason] = self.reasons.get(reason, 0) + n
            share = self.share.get(result.partition, 0.0)
            input_bytes = self.plan.input_bytes
            for key, records in moved.items():
                stage = self.stages[key]
                if stage.started is None:
                    self._start(key)
                stage.records += records
                stage.fraction = min(1.0, stage.fraction + share)
                stage.bytes = round(input_bytes * stage.fraction)
            read = self.stages["read"]
            self._sample(read.records, read.bytes)
            self._tell("advanced", self)
            if len(self.done_partitions) == len(self.plan.partitions):
                for key in self.stages:
                    if key != "write":
                        self._finish(key)

    def writing(self, rows: int | None) -> None:
        """The shard write begins; `rows`: how many it will write, where known."""
        with self.lock:
            self.rows_to_write = rows
            self._start("write")

    def written(self, rows: int, nbytes: int = 0, partition: int | None = None) -> None:
        """Rows written: a shard (with its bytes), or a partition's rows (streamed into the
        shards, whose bytes are known when they close)."""
        with self.lock:
            stage = self.stages["write"]
            if stage.started is None:
                self._start("write")
            self.rows_written += rows
            stage.records += rows
            stage.bytes += nbytes
            if partition is not None:
                stage.fraction = min(1.0, stage.fraction + self.share.get(partition, 0.0))
            elif self.rows_to_write:
                stage.fraction = min(1.0, self.rows_written / self.rows_to_write)
            self._tell("advanced", self)

    def shards_done(self) -> None:
        with self.lock:
            for key in self.stages:
                self._finish(key)

    def finished(self, result=None) -> None:
        with self.lock:
            self.shards_done()
            self.finished_at = time.monotonic()
            self._tell("run_finished", self)

    def failed(self, error: BaseException) -> None:
        with self.lock:
            self.failure = _one_line(error)
            self.finished_at = time.monotonic()
            self._tell("run_failed", self)

    def say(self, message: str) -> None:
        """A log line, shown where the display can put it without tearing its bars."""
        self._tell("message", message)

    def close(self) -> None:
        for listener in self.listeners:
            close = getattr(listener, "close", None)
            if close is not None:
                close()

    # -- read by listeners -------------------------------------------------------------------

    @property
    def seconds(self) -> float:
        return (self.finished_at or time.monotonic()) - self.t0

    def snapshot(self) -> dict:
        """Everything a page or a report shows, as plain JSON values."""
        with self.lock:
            return {"run_id": self.run_id, "pipeline": self.plan.spec.name, "seconds": round(self.seconds, 3),
                    "backend": self.backend, "io": self.io,
                    "failed": self.failure, "done": self.finished_at is not None,
                    "partitions": {"done": len(self.done_partitions), "total": len(self.plan.partitions)},
                    "progress": [s.as_dict() for s in self.stages.values()],
                    "stages": [dict(c) for c in self.step_counts.values()],
                    "reasons": dict(self.reasons), "timeline": [list(p) for p in self.timeline],
                    "workers": self.time_split()}

    def time_split(self) -> dict:
        """Seconds per worker spent reading (read, parse, row-local steps), computing (global
        steps, spill), writing, and idle: the worker's wall time (its threads × the run's wall
        time) minus the rest."""
        wall = self.seconds
        split: dict[str, dict] = {}
        for t in self.task_times:
            entry = split.setdefault(t.worker, {"read": 0.0, "compute": 0.0, "write": 0.0})
            entry[t.kind] += max(0.0, t.stop - t.start)
        for worker, entry in split.items():
            capacity = wall * self.worker_threads.get(worker, 1)
            entry["idle"] = max(0.0, capacity - entry["read"] - entry["compute"] - entry["write"])
            for k in entry:
                entry[k] = round(entry[k], 3)
        return split

    # -- inside ------------------------------------------------------------------------------

    def _start(self, key: str) -> None:
        stage = self.stages[key]
        if stage.started is None:
            stage.started = time.monotonic()
            self._tell("stage_started", stage)

    def _finish(self, key: str) -> None:
        stage = self.stages[key]
        if stage.finished is None and stage.started is not None:
            stage.fraction = 1.0
            stage.finished = time.monotonic()
            self._tell("stage_finished", stage)

    def _sample(self, records: int, nbytes: int) -> None:
        self.timeline.append([round(time.monotonic() - self.t0, 3), records, nbytes])
        if len(self.timeline) > TIMELINE_POINTS:
            self.timeline = self.timeline[::2]

    def _tell(self, event: str, payload) -> None:
        with self.lock:
            for listener in self.listeners:
                method = getattr(listener, event, None)
                if method is not None:
                    method(payload)


def _uncompressed(partition) -> int:
    """A partition's bytes: its ranges' lengths (a compressed piece: its uncompressed span)."""
    total = 0
    for rng in partition.ranges:
        length = getattr(rng, "length", None)       # images' records: one each
        if length is not None and length < 0:
            length = getattr(rng, "stop", 0) - rng.offset
        total += max(length or 1, 1)
    return total


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "ETA -"
    seconds = int(round(seconds))
    return f"ETA {seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def stage_line(stage: StageProgress) -> str:
    state = "done" if stage.finished is not None else f"{stage.fraction:.0%}"
    return (f"{stage.label}: {state}, {count(stage.records, 'record')}, {stage.bytes / 1e6:,.1f} MB, "
            f"{stage.mb_per_s:,.1f} MB/s" + ("" if stage.finished is not None else f", {_eta_text(stage.eta)}"))


# -- displays -----------------------------------------------------------------------------------

class LineDisplay:
    """Where stderr is not a terminal (a log file, CI): one plain line per stage at most every
    `interval` seconds, and one when it is done."""

    def __init__(self, stream=None, interval: float = LINE_INTERVAL):
        self.stream = stream or sys.stderr
        self.interval = interval
        self.last: dict[str, float] = {}

    def advanced(self, progress: RunProgress) -> None:
        now = time.monotonic()
        for stage in progress.stages.values():
            if stage.started is None or stage.finished is not None:
                continue
            if now - self.last.get(stage.key, stage.started) >= self.interval:
                self.last[stage.key] = now
                self._print("progress: " + stage_line(stage))

    def stage_finished(self, stage: StageProgress) -> None:
        self._print("progress: " + stage_line(stage) + f" in {stage.seconds:.1f} s")

    def message(self, text: str) -> None:
        self._print(printable(text))          # notes and warnings quote file names and values

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


class RichDisplay:
    """On a terminal: one rich progress bar per stage, records, MB, MB/s and ETA. rich draws on
    stderr from its own refresh thread, which stops with the run; stdout and stderr are left as
    they are (nothing redirected)."""

    def __init__(self, stream=None):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

        self.console = Console(file=stream or sys.stderr)
        self.bars = Progress(TextColumn("{task.description:<16}"), BarColumn(), TaskProgressColumn(),
                             TextColumn("{task.fields[records]:>14} records"), TextColumn("{task.fields[mb]:>10}"),
                             TextColumn("{task.fields[rate]:>12}"), TextColumn("{task.fields[eta]}"),
                             console=self.console, redirect_stdout=False, redirect_stderr=False,
                             refresh_per_second=4)
        self.tasks: dict[str, int] = {}
        self.running = False

    def stage_started(self, stage: StageProgress) -> None:
        if not self.running:
            self.bars.start()
            self.running = True
        self.tasks[stage.key] = self.bars.add_task(stage.label, total=1.0, **self._fields(stage))

    def advanced(self, progress: RunProgress) -> None:
        for key, task in self.tasks.items():
            stage = progress.stages[key]
            self.bars.update(task, completed=stage.fraction, **self._fields(stage))

    def stage_finished(self, stage: StageProgress) -> None:
        if stage.key in self.tasks:
            self.bars.update(self.tasks[stage.key], completed=1.0, **self._fields(stage))

    def message(self, text: str) -> None:
        self.console.print(printable(text), markup=False, highlight=False, soft_wrap=True)

    def close(self) -> None:
        if self.running:
            self.bars.stop()
            self.running = False

    @staticmethod
    def _fields(stage: StageProgress) -> dict:
        done = stage.finished is not None
        return {"records": f"{stage.records:,}", "mb": f"{stage.bytes / 1e6:,.1f} MB",
                "rate": f"{stage.mb_per_s:,.1f} MB/s",
                "eta": f"{stage.seconds:.1f} s" if done else _eta_text(stage.eta)}


def display_for(progress: bool, stream=None):
    """The display a run gets: rich bars on a terminal, plain lines elsewhere, none when off."""
    if not progress:
        return None
    stream = stream or sys.stderr
    isatty = getattr(stream, "isatty", None)
    return RichDisplay(stream) if isatty is not None and isatty() else LineDisplay(stream)
