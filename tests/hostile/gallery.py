"""The small access-log pipeline that the output galleries run, and the checks they share."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

import gpuetl
from gpuetl import samples
from gpuetl.cli import main


# (lines, bad_every) -> the bytes samples.write_access_logs wrote for them
_LOG_BYTES: dict[tuple[int, int], bytes] = {}


@dataclass(frozen=True)
class Gallery:
    name: str
    lines: int
    bad_every: int

    def spec(self, sink_path="out", mode="error", source="in/*.log", **extra) -> dict:
        return {"version": 1, "name": self.name, "source": {"type": "text", "path": source},
                "parse": {"preset": "apache_combined"}, "shard": {"count": 2},
                "sink": {"path": sink_path, "mode": mode}, **extra}

    def inputs(self, tmp_path: Path) -> Path:
        """tmp_path/in/a.log: the gallery's access log, generated once per session (a gallery's
        tests each get their own copy of the same bytes)."""
        (tmp_path / "in").mkdir()
        path = tmp_path / "in" / "a.log"
        key = (self.lines, self.bad_every)
        if key in _LOG_BYTES:
            path.write_bytes(_LOG_BYTES[key])
        else:
            samples.write_access_logs(path, lines=self.lines, bad_every=self.bad_every)
            _LOG_BYTES[key] = path.read_bytes()
        return tmp_path

    def run(self, base: Path, **kw):
        return gpuetl.Pipeline.from_dict(self.spec(**kw), base_dir=base).run(backend="cpu", scheduler="sync")

    def write_pipe(self, base: Path, **kw) -> Path:
        """The pipeline file, written before a guard is set (left as it is when it already says this)."""
        path, text = base / "pipe.yaml", yaml.safe_dump(self.spec(**kw))
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        return path

    def assert_identity(self, result, rows_in: int | None = None) -> None:
        c = result.counts
        assert c["rows_in"] == (self.lines if rows_in is None else rows_in)
        assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
        assert sum(s["rows"] for s in result.shards) == c["rows_out"]
        assert main(["verify", str(result.out_dir)]) == 0
