"""`gpuetl run`'s progress, quiet and structured-log switches, seen from the command line."""

from __future__ import annotations

import json

import pytest
import yaml

from gpuetl import samples
from gpuetl.cli import main

LINES, BAD_EVERY = 500, 50
KEYS = {"ts", "level", "event", "stage", "run_id", "counts"}


@pytest.fixture
def pipe(tmp_path):
    samples.write_access_logs(tmp_path / "in" / "a.log", lines=LINES, bad_every=BAD_EVERY)
    path = tmp_path / "pipe.yaml"
    path.write_text(yaml.safe_dump({
        "version": 1, "name": "cli", "source": {"type": "text", "path": "in/*.log", "blocksize": "16KiB"},
        "parse": {"preset": "apache_combined"}, "steps": [{"dedupe": {"on": ["ip", "request"]}}],
        "shard": {"count": 2}, "sink": {"path": "out", "mode": "overwrite"}}))
    return path


def run(pipe, *extra) -> int:
    return main(["run", str(pipe), "--scheduler", "sync", *extra])


def test_json_log_format_writes_one_event_per_line_and_stdout_stays_the_summary(pipe, capsys):
    assert run(pipe, "--log-format", "json", "--json") == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    events = [json.loads(line) for line in captured.err.splitlines()]
    assert all(KEYS <= set(e) for e in events), events
    run_ids = {e["run_id"] for e in events if e["event"] != "message"}
    assert len(run_ids) == 1 and None not in run_ids
    for stage in ("read/parse", "dedupe", "write shards"):
        assert [e["event"] for e in events if e["stage"] == stage] == ["stage_started", "stage_finished"]
    finished = [e for e in events if e["event"] == "run_finished"]
    assert len(finished) == 1 and finished[0]["counts"] == summary["counts"]
    assert summary["report"].endswith("_report.html")


def test_json_log_format_tells_a_failure_once_with_its_exit_code(pipe, capsys):
    assert run(pipe, "--log-format", "json", "--set", "max_error_ratio=0.001") == 1
    events = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    failures = [e for e in events if e["event"] == "run_failed"]
    assert len(failures) == 1
    assert failures[0]["level"] == "error" and failures[0]["exit_code"] == 1
    assert "max_error_ratio" in failures[0]["error"] and failures[0]["run_id"]
    assert any(e["event"] == "message" and "report of the failed run" in e["message"] for e in events)


def test_json_log_format_tells_a_bad_pipeline_file_as_an_event(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: x\nsource: {type: text, path: nothing/*.log}\nsink: {path: out}\n")
    assert main(["run", str(bad), "--log-format", "json"]) == 2
    [event] = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert event["event"] == "run_failed" and event["exit_code"] == 2


def test_quiet_prints_nothing_on_success_and_the_error_on_failure(pipe, capsys):
    assert run(pipe, "--quiet") == 0
    assert capsys.readouterr() == ("", "")
    assert run(pipe, "-q", "--set", "max_error_ratio=0.001") == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "error:" in captured.err and "max_error_ratio" in captured.err


def test_progress_lines_by_default_without_a_terminal_and_none_with_no_progress(pipe, capsys):
    assert run(pipe) == 0
    captured = capsys.readouterr()
    assert "progress: read/parse: done" in captured.err and "progress: write shards: done" in captured.err
    assert "rows in 500" in captured.out and "report:" in captured.out
    assert run(pipe, "--no-progress") == 0
    captured = capsys.readouterr()
    assert "progress:" not in captured.err and "rows in 500" in captured.out


def test_no_report_writes_none(pipe, capsys):
    assert run(pipe, "--no-report") == 0
    out = pipe.parent / "out"
    assert not (out / "_report.html").exists() and "reports" not in json.loads((out / "_manifest.json").read_text())
    assert main(["verify", str(out)]) == 0
