"""What a new user tries by hand, from the command line: a sink that is a link, a folder named like
an input file, an empty input file, Ctrl-C during a run and then `resume`. Each checks the exit
code and message (no traceback), and that nothing outside the dataset changed."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuetl.cli import main

from .gallery import Gallery
from .interrupt import interrupted_run

GALLERY = Gallery("user-mistakes", lines=200, bad_every=20)
assert_identity = GALLERY.assert_identity


@pytest.fixture
def base(tmp_path) -> Path:
    return GALLERY.inputs(tmp_path)


def cli_run(base: Path, *argv: str, **kw) -> int:
    path = GALLERY.write_pipe(base, **kw)
    return main(["run", str(path), "--scheduler", "sync", "--no-progress", *argv])


def no_traceback(text: str) -> None:
    assert "Traceback" not in text and "internal error" not in text, text


# --------------------------------------------------------------------------- the sink is a link


def test_sink_that_is_a_link_to_a_folder_writes_the_dataset_there(base, surroundings, capsys):
    """sink.path may be a link to a folder (docs/design.md, "Output commit"): that folder is the
    dataset; the link stays a link, and overwrite replaces only the files the manifest lists."""
    target = base / "disk" / "web"
    target.mkdir(parents=True)
    os.symlink(target, base / "out")
    GALLERY.write_pipe(base)
    with surroundings(base, dataset=target):
        assert cli_run(base) == 0
        assert cli_run(base, "--set", "sink.mode=overwrite") == 0
    assert (base / "out").is_symlink() and (target / "_SUCCESS").is_file()
    assert main(["verify", str(base / "out")]) == 0
    (target / "notes.txt").write_text("mine")                   # someone else's file in the target
    with surroundings(base):
        assert cli_run(base, "--set", "sink.mode=overwrite") == 2
    err = capsys.readouterr().err
    assert "notes.txt" in err
    no_traceback(err)


@pytest.mark.parametrize("points_to", ["nowhere", "a-file.txt"])
def test_sink_that_is_a_link_to_no_folder_is_refused_by_name(base, surroundings, capsys, points_to):
    (base / "a-file.txt").write_text("keep me")
    os.symlink(points_to, base / "out")
    GALLERY.write_pipe(base)
    with surroundings(base):
        assert cli_run(base) == 2
    err = capsys.readouterr().err
    assert f"{base / 'out'} is a symbolic link to '{points_to}', not a folder" in err, err
    no_traceback(err)
    assert not (base / "nowhere").exists()


# --------------------------------------------------------------------------- inputs that are not what they seem


def test_folder_named_like_an_input_is_noted_not_read(base, surroundings, capsys):
    """`in/*.log` also matches a folder `in/b.log/` (Spark writes such folders): said, not read."""
    (base / "in" / "b.log").mkdir()
    (base / "in" / "b.log" / "part-0").write_text("not read\n")
    GALLERY.write_pipe(base)
    with surroundings(base, dataset=base / "out"):
        assert cli_run(base) == 0
    err = capsys.readouterr().err
    assert "skipped 1 path(s) that are a folder, not regular files: in/b.log (to read the files in a folder" in err
    assert main(["verify", str(base / "out")]) == 0


def test_pattern_that_matches_only_folders_says_so(base, surroundings, capsys):
    (base / "only" / "x.log").mkdir(parents=True)
    GALLERY.write_pipe(base, source="only/*.log")
    with surroundings(base):
        assert cli_run(base, source="only/*.log") == 2
    err = capsys.readouterr().err
    assert "the pattern 'only/*.log' matches no regular file (a folder: only/x.log)" in err, err
    assert "hint: to read the files in a folder, name them" in err
    no_traceback(err)


def test_empty_input_file_next_to_others_counts_nothing(base, surroundings):
    (base / "in" / "empty.log").write_bytes(b"")
    with surroundings(base, dataset=base / "out"):
        result = GALLERY.run(base)
    assert_identity(result)
    assert {f["path"].rsplit("/", 1)[-1] for f in result.manifest["inputs"]} >= {"empty.log", "a.log"}


# --------------------------------------------------------------------------- Ctrl-C


def _interrupt_when_a_partition_is_done(base: Path, *argv: str) -> subprocess.CompletedProcess:
    """`gpuetl run`, SIGINT once the first partition's result is on disk."""
    return interrupted_run(base / "pipe.yaml", lambda: any((base / "out").glob("_tmp/*/maps/p*.json")), *argv)


@pytest.fixture
def big(tmp_path) -> Path:
    """Enough partitions that the run is still going when the first one is done, on a quiet
    machine too (~400 of 16 KiB: many small ones, so that the resumed run, which reads them all
    again, stays short)."""
    from gpuetl import samples

    (tmp_path / "in").mkdir()
    for i in range(4):
        samples.write_access_logs(tmp_path / "in" / f"{i}.log", lines=8_000, seed=i, bad_every=500)
    return tmp_path


def _small_blocks(base: Path, **kw) -> Path:
    spec = GALLERY.spec(**kw)
    spec["source"]["blocksize"] = "16KiB"
    path = base / "pipe.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.slow
def test_ctrl_c_prints_one_line_and_resume_continues(big, surroundings, capsys):
    path = _small_blocks(big, mode="resume")
    with surroundings(big, dataset=big / "out"):
        stopped = _interrupt_when_a_partition_is_done(big)
        assert stopped.returncode == 130, stopped.stderr
        assert stopped.stderr.strip().splitlines()[-1] == (
            "gpuetl: interrupted; nothing was committed; the finished work is kept: run it again with "
            "sink.mode: resume to continue")
        no_traceback(stopped.stderr)               # the local cluster, stopped mid-task, logs nothing
        assert not (big / "out" / "_SUCCESS").exists()
        again = main(["run", str(path), "--no-progress", "--scheduler", "sync"])       # the resume: in this process
    said = capsys.readouterr()
    assert again == 0, said.err
    assert "partitions already done, skipped" in said.err
    assert main(["verify", str(big / "out")]) == 0


@pytest.mark.slow
def test_ctrl_c_under_mode_error_leaves_nothing(big, surroundings):
    _small_blocks(big)
    # out/ is the run's own (so a run that ends before the interrupt is a skip, not a failure
    # of this check); that the interrupted run left no trace of it is asserted below
    with surroundings(big, dataset=big / "out"):
        stopped = _interrupt_when_a_partition_is_done(big)
    assert stopped.returncode == 130
    assert stopped.stderr.strip().splitlines()[-1] == "gpuetl: interrupted; nothing was committed"
    no_traceback(stopped.stderr)
    assert not (big / "out").exists()


def test_the_command_gives_the_callers_ctrl_c_handler_back(base, capsys):
    """main() quiets the cluster's logs on Ctrl-C through its own handler while a command runs;
    called from Python (tests, notebooks) it leaves the caller's handler as it found it."""
    mine = signal.getsignal(signal.SIGINT)
    assert main(["validate", str(GALLERY.write_pipe(base))]) == 0
    assert signal.getsignal(signal.SIGINT) is mine
