"""Structured logs (`gpuetl run --log-format json`): one JSON object per line on stderr for each
stage transition, each failure and each message, so a log collector reads a run without parsing
prose. Every event has ts, level, event, stage, run_id and counts; stdout stays free for the
`--json` summary."""

from __future__ import annotations

import json
import sys
import time


def event(name: str, *, level: str = "info", stage: str | None = None, run_id: str | None = None,
          counts: dict | None = None, **extra) -> dict:
    now = time.time()
    return {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z",
            "level": level, "event": name, "stage": stage, "run_id": run_id, "counts": counts or {}, **extra}


class JsonEvents:
    """A progress listener (runtime/progress.py) that writes events as JSON lines."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.progress = None
        self.failed_stage = None

    def emit(self, record: dict) -> None:
        print(json.dumps(record, default=str), file=self.stream, flush=True)

    def _run_id(self):
        return self.progress.run_id if self.progress is not None else None

    def run_started(self, progress) -> None:
        self.progress = progress
        self.emit(event("run_started", run_id=progress.run_id,
                        counts={"partitions": len(progress.plan.partitions), "input_bytes": progress.plan.input_bytes}))

    def stage_started(self, stage) -> None:
        self.emit(event("stage_started", stage=stage.label, run_id=self._run_id()))

    def stage_finished(self, stage) -> None:
        self.emit(event("stage_finished", stage=stage.label, run_id=self._run_id(),
                        counts={"records": stage.records, "bytes": stage.bytes},
                        seconds=round(stage.seconds, 3)))

    def run_finished(self, progress) -> None:
        counts = {}
        if progress.step_counts:
            stages = list(progress.step_counts.values())
            counts = {"rows_in": stages[0]["rows_in"], "rows_out": stages[-1]["rows_out"],
                      **{k: sum(s[k] for s in stages) for k in ("filtered", "deduplicated", "quarantined")}}
        self.emit(event("run_finished", run_id=progress.run_id, counts=counts, seconds=round(progress.seconds, 3)))

    def run_failed(self, progress) -> None:
        """Noted; told by error() with the command's whole message and exit code."""
        running = [s.label for s in progress.stages.values() if s.started is not None and s.finished is None]
        self.failed_stage = running[0] if running else None

    def error(self, message: str, exit_code: int) -> None:
        """A failure: the message the text log would print, the exit code, the stage it stopped in."""
        self.emit(event("run_failed", level="error", stage=self.failed_stage, run_id=self._run_id(),
                        error=message, exit_code=exit_code))

    def message(self, text: str) -> None:
        level = "warning" if text.startswith("warning:") else "info"
        self.emit(event("message", level=level, run_id=self._run_id(), message=text))
