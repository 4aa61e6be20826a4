"""The small access-log run that the progress and the report tests watch: one file of 600 lines
with a bad one every 50, a filter and a dedupe (a global step), two shards."""

from __future__ import annotations

from pathlib import Path

from gpuetl import samples

LINES, BAD_EVERY = 600, 50


def watched_spec(name: str, mode: str = "error", **extra) -> dict:
    return {"version": 1, "name": name, "source": {"type": "text", "path": "in/*.log", "blocksize": "16KiB"},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
            "steps": [{"filter": "status >= 200 and status < 500"}, {"dedupe": {"on": ["ip", "request"]}}],
            "shard": {"count": 2}, "sink": {"path": "out", "mode": mode}, **extra}


def write_watched_logs(folder: Path) -> Path:
    samples.write_access_logs(folder / "in" / "a.log", lines=LINES, bad_every=BAD_EVERY)
    return folder
