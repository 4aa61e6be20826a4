"""`gpuetl run … 2>&1 | head -3`: the reader goes away after a few lines, and the run ends at its
next line with 141 (as `cat` would). A run that ends early leaves what a failed run leaves: the
folders it created removed, nothing else changed; a run that got as far as its commit keeps its
complete dataset."""

from __future__ import annotations

import sys

import pytest

import gpuetl.cli as cli

from .test_spec import folder, manifest_counts

PIPELINE = """\
    version: 1
    name: piped
    source: {type: text, path: in/a.log}
    parse:
      template: "<word> <rest>"
    steps:
      - filter: "word != 'zzz'"
    sink: {path: new/out}
    """


class ClosedAfter:
    """stderr whose reader goes away after `lines` lines."""

    def __init__(self, lines: int):
        self.left = lines

    def write(self, text: str) -> int:
        if self.left <= 0:
            raise BrokenPipeError(32, "Broken pipe")
        self.left -= text.count("\n")
        return len(text)

    def flush(self) -> None:
        if self.left < 0:
            raise BrokenPipeError(32, "Broken pipe")

    def isatty(self) -> bool:
        return False


@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize("lines", [0, 1, 2, 3, 4, 5])
def test_a_run_whose_reader_goes_away_leaves_no_folder_behind(tmp_path, monkeypatch, surroundings, log_format,
                                                              lines):
    file = folder(tmp_path, PIPELINE)
    monkeypatch.setattr(cli, "_stdout_closed", lambda: cli.SIGPIPE_EXIT)   # it points fd 1 at /dev/null
    monkeypatch.setattr(sys, "stderr", ClosedAfter(lines))
    out = tmp_path / "new" / "out"
    with surroundings(tmp_path, dataset=tmp_path / "new"):
        code = cli.main(["run", str(file), "--backend", "cpu", "--scheduler", "sync", "--log-format", log_format])
    assert code in (0, 141)
    if (out / "_SUCCESS").exists():                   # it got as far as its commit
        assert manifest_counts(out)["rows_out"] == 3
        assert sorted(p.name for p in out.iterdir() if not p.name.startswith("_")) == ["part-00000.parquet"]
        assert not (out / "_tmp").exists()
    else:
        assert code == 141
        assert not (tmp_path / "new").exists(), sorted(str(p) for p in (tmp_path / "new").rglob("*"))
