"""Per-stage progress (runtime/progress.py), counted from what the tasks hand back: each stage
starts and finishes once, its records add up to the run's counts, on dask's local scheduler and on
a cluster; the displays (rich on a terminal, lines elsewhere); nothing left changed in the caller's
process; no noise on a terminal."""

from __future__ import annotations

import io
import logging
import os
import pty
import select
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from gpuetl import Pipeline
from gpuetl.backends.cpu import CpuBackend
from gpuetl.runtime.executor import backend_cluster, open_executor
from gpuetl.runtime.progress import LineDisplay, RichDisplay, display_for
from gpuetl.runtime.run import run_plan
from watched_logs import watched_spec, write_watched_logs

ROOT = Path(__file__).resolve().parents[2]


def spec(mode="error", **extra) -> dict:
    return watched_spec("p", mode, **extra)


@pytest.fixture
def logs(tmp_path):
    return write_watched_logs(tmp_path)


class Recorder:
    """A listener that keeps every event, and each stage's fraction as it moved."""

    def __init__(self):
        self.events: list[tuple[str, str]] = []
        self.fractions: dict[str, list[float]] = {}

    def stage_started(self, stage):
        self.events.append(("started", stage.label))

    def stage_finished(self, stage):
        self.events.append(("finished", stage.label))

    def advanced(self, progress):
        for s in progress.stages.values():
            self.fractions.setdefault(s.label, []).append(s.fraction)

    def run_finished(self, progress):
        self.events.append(("run", "finished"))
        self.final = progress


def check(recorder: Recorder, result) -> None:
    labels = ["read/parse", "dedupe", "write shards"]
    for label in labels:      # once each: never 0 -> 100% twice
        assert recorder.events.count(("started", label)) == 1, recorder.events
        assert recorder.events.count(("finished", label)) == 1, recorder.events
    for label, seen in recorder.fractions.items():
        assert seen == sorted(seen) and seen[-1] <= 1.0, (label, seen)
    stages = recorder.final.stages
    assert stages["read"].records == result.counts["rows_in"]
    assert stages["read"].bytes == recorder.final.plan.input_bytes
    dedupe_in = next(s for s in result.stages if s["name"] == "dedupe")["rows_in"]
    assert stages["global-1"].records == dedupe_in
    assert stages["write"].records == result.counts["rows_out"]
    assert [c["rows_out"] for c in recorder.final.step_counts.values()] == [s["rows_out"] for s in result.stages]
    assert recorder.events[-1] == ("run", "finished")


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
def test_progress_on_dasks_local_scheduler_counts_each_stage_once_from_the_results(logs, scheduler):
    pipeline = Pipeline.from_dict(spec(), base_dir=logs)
    backend = CpuBackend()
    recorder = Recorder()
    with open_executor(scheduler, backend) as executor:
        result = run_plan(pipeline.plan(backend), backend, executor, log=lambda *_: None, listeners=[recorder])
    check(recorder, result)
    assert len(recorder.fractions["read/parse"]) >= 3       # moved partition by partition, not at the end


@pytest.mark.slow
def test_progress_on_a_cluster_counts_each_stage_once_from_the_results(logs):
    pipeline = Pipeline.from_dict(spec(), base_dir=logs)
    backend = CpuBackend()
    recorder = Recorder()
    with open_executor("local", backend, quiet=True) as executor:
        result = run_plan(pipeline.plan(backend), backend, executor, log=lambda *_: None, listeners=[recorder])
    check(recorder, result)
    [split] = recorder.final.time_split().values()       # the cluster's one worker, from the task stream
    assert split["read"] > 0 and split["write"] > 0 and split["idle"] >= 0


@pytest.mark.slow
def test_progress_with_an_external_scheduler_and_its_preloaded_page(logs):
    """--scheduler ADDRESS: results counted as their futures complete; the scheduler started with
    the documented preload serves the page."""
    import urllib.request

    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp", dashboard_address="127.0.0.1:0",
                      scheduler_kwargs={"preload": ["gpuetl.runtime.dashboard"]}) as cluster:
        backend = CpuBackend()
        recorder = Recorder()
        with open_executor(cluster.scheduler_address, backend) as executor:
            result = run_plan(Pipeline.from_dict(spec(), base_dir=logs).plan(backend), backend, executor,
                              log=lambda *_: None, listeners=[recorder])
            url = f"http://127.0.0.1:{cluster.scheduler.http_server.port}/gpuetl"
            with urllib.request.urlopen(url, timeout=30) as response:
                page = response.read().decode()
    check(recorder, result)
    assert "write shards" in page and "done" in page


def test_streamed_run_counts_writes_per_partition(logs):
    """No global step, one shard: partitions stream into the shard as they finish."""
    data = spec()
    data["steps"], data["shard"] = [{"filter": "status >= 200 and status < 500"}], {"count": 1}
    backend = CpuBackend()
    recorder = Recorder()
    with open_executor("sync", backend) as executor:
        result = run_plan(Pipeline.from_dict(data, base_dir=logs).plan(backend), backend, executor,
                          log=lambda *_: None, listeners=[recorder])
    assert recorder.final.stages["write"].records == result.counts["rows_out"]
    assert recorder.events.count(("finished", "write shards")) == 1
    assert recorder.final.stages["write"].fraction == 1.0
    written = sum(shard["bytes"] for shard in result.shards)      # known once the shard closes
    assert written > 0 and recorder.final.stages["write"].bytes == written


def test_api_progress_without_a_terminal_prints_plain_lines(logs, capsys):
    Pipeline.from_dict(spec(), base_dir=logs).run(backend="cpu", scheduler="sync", progress=True)
    err = capsys.readouterr().err
    for label in ("read/parse", "dedupe", "write shards"):
        assert f"progress: {label}: done" in err, err
    assert "\x1b[" not in err                       # no terminal codes in a log


def test_api_without_progress_prints_nothing(logs, capsys):
    Pipeline.from_dict(spec(), base_dir=logs).run(backend="cpu", scheduler="sync")
    assert capsys.readouterr().err == ""


def test_line_display_prints_a_stage_at_most_every_interval():
    from gpuetl.runtime.progress import StageProgress

    class Fake:
        stages = {"read": StageProgress("read", "read/parse", records=10, bytes=2_000_000, fraction=0.5,
                                        started=0.0)}

    out = io.StringIO()
    display = LineDisplay(out, interval=1e9)
    display.advanced(Fake())
    assert out.getvalue() == ""
    display = LineDisplay(out, interval=0)
    display.advanced(Fake())
    assert "progress: read/parse: 50%, 10 records, 2.0 MB" in out.getvalue()


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_gets_rich_bars_with_records_rate_and_eta(logs):
    stream = Terminal()
    display = display_for(True, stream)
    assert isinstance(display, RichDisplay)
    display.console.width = 160
    backend = CpuBackend()
    with open_executor("sync", backend) as executor:
        run_plan(Pipeline.from_dict(spec(), base_dir=logs).plan(backend), backend, executor, listeners=[display])
    text = stream.getvalue()
    for label in ("read/parse", "dedupe", "write shards"):
        assert label in text
    assert "records" in text and "MB/s" in text
    assert not display.running                      # its refresh thread stopped with the run
    assert display_for(False, stream) is None
    assert isinstance(display_for(True, io.StringIO()), LineDisplay)


def _process_state():
    loggers = {name: logger.level for name, logger in logging.Logger.manager.loggerDict.items()
               if isinstance(logger, logging.Logger)}
    return loggers, list(warnings.filters)


@pytest.mark.slow
def test_logger_levels_and_warning_filters_are_given_back_when_run_returns(logs):
    logging.getLogger("distributed").setLevel(logging.DEBUG)
    logging.getLogger("distributed.worker").setLevel(logging.INFO)
    try:
        before = _process_state()
        Pipeline.from_dict(spec(), base_dir=logs).run(backend="cpu", scheduler="local", progress=True)
        after = _process_state()
        assert after[1] == before[1]
        assert {k: v for k, v in after[0].items() if k in before[0]} == before[0]
        assert logging.getLogger("distributed").level == logging.DEBUG
    finally:
        logging.getLogger("distributed").setLevel(logging.NOTSET)
        logging.getLogger("distributed.worker").setLevel(logging.NOTSET)


@pytest.mark.slow
def test_a_taken_dashboard_port_raises_no_warning_and_another_is_used():
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with backend_cluster(CpuBackend(), True, f"127.0.0.1:{port}") as cluster:
                got = cluster.scheduler.http_server.port
        assert got != port
        assert not [w for w in caught if "already in use" in str(w.message)], [str(w.message) for w in caught]
    finally:
        busy.close()


def _under_a_terminal(args: list[str], cwd: Path) -> tuple[int, str, str]:
    """Run `gpuetl ARGS` with stderr on a pseudo-terminal (stdout a pipe): exit code, stderr, stdout."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "gpuetl", *args], cwd=cwd, stdin=slave, stderr=slave,
                            stdout=subprocess.PIPE, env=env)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 1 << 16)
            except OSError:          # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    out = proc.stdout.read().decode()
    proc.wait(timeout=60)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode(errors="replace"), out


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["local", "sync"])
def test_a_run_in_a_terminal_shows_bars_and_no_tracebacks_errors_or_warnings(logs, scheduler):
    (logs / "pipe.yaml").write_text(yaml.safe_dump(spec()))
    code, err, out = _under_a_terminal(["run", "pipe.yaml", "--scheduler", scheduler], logs)
    assert code == 0, err
    for noise in ("Traceback", "ERROR", "Warning", "CancelledError"):
        assert noise not in err, err
    assert "read/parse" in err and "write shards" in err and "records" in err
    assert "rows in" in out and "report:" in out
    if scheduler == "local":
        assert "dashboard: http://" in err and "/gpuetl" in err
