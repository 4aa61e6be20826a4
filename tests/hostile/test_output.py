"""The output folder, tried as a hostile user would (issue 12): gpuetl deletes or overwrites only
what it can prove it wrote, refuses anything else in the way by name, and never follows a link.
Every case checks the clear error or exit code, that nothing outside the dataset changed (the
whole tree, dataset included, when the run is refused), and the accounting identity where a run
completes."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

import gpuetl
from gpuetl import OutputError, samples
from gpuetl.cli import SIGPIPE_EXIT, main
from gpuetl.sinks import commit

from .gallery import Gallery

LINES = 300
GALLERY = Gallery("hostile-output", lines=LINES, bad_every=30)
spec, run, write_pipe, assert_identity = GALLERY.spec, GALLERY.run, GALLERY.write_pipe, GALLERY.assert_identity


@pytest.fixture
def base(tmp_path) -> Path:
    return GALLERY.inputs(tmp_path)


def cli_run(base: Path, *sets: str, **kw) -> int:
    path = write_pipe(base, **kw)
    return main(["run", str(path), "--scheduler", "sync", *[a for s in sets for a in ("--set", s)]])


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# --------------------------------------------------------------------------- folders gpuetl did not write


def _spark_folder(out: Path) -> None:
    out.mkdir()
    (out / "_SUCCESS").write_text("")
    (out / "part-00000-1234.csv").write_text("a,b\n1,2\n")
    (out / "README").write_text("made by spark")


def _precious(out: Path) -> None:
    out.mkdir()
    (out / "precious.parquet").write_bytes(b"PAR1 not really")


def _photos(out: Path) -> None:
    (out / "photos" / "2023").mkdir(parents=True)
    (out / "photos" / "2023" / "cat.jpg").write_bytes(b"\xff\xd8 a cat")
    (out / "photos" / "2024").mkdir()                      # an empty folder is someone's too


@pytest.mark.parametrize("mode", ["overwrite", "error", "resume"])
@pytest.mark.parametrize("make, named", [
    (_spark_folder, ["README", "_SUCCESS", "part-00000-1234.csv"]),
    (_precious, ["precious.parquet"]),
    (_photos, ["photos/2023/cat.jpg", "photos/2024/"]),
])
def test_folder_gpuetl_did_not_write_is_refused_by_name(base, surroundings, capsys, make, named, mode):
    make(base / "out")
    write_pipe(base, mode=mode)
    with surroundings(base):                      # the whole tree: the dataset folder too
        assert cli_run(base, mode=mode) == 2
    err = capsys.readouterr().err
    assert "gpuetl did not write" in err and "move them or choose another sink.path" in err
    for name in named:
        assert name in err
    assert "internal error" not in err


def test_foreign_file_next_to_a_gpuetl_dataset_is_refused(base, surroundings, capsys):
    first = run(base)
    (first.out_dir / "precious.parquet").write_bytes(b"mine")
    (first.out_dir / ".DS_Store").write_bytes(b"dotfiles are let be")
    write_pipe(base, mode="overwrite")
    with surroundings(base):
        assert cli_run(base, mode="overwrite") == 2
    err = capsys.readouterr().err
    assert "(precious.parquet)" in err and ".DS_Store" not in err


def test_refusal_names_ten_paths_and_counts_the_rest(base, capsys):
    (base / "out").mkdir()
    for i in range(25):
        (base / "out" / f"f{i:02d}.txt").write_text("x")
    assert cli_run(base, mode="overwrite") == 2
    err = capsys.readouterr().err
    assert "holds 25 paths" in err and "f09.txt and 15 more" in err and "f10.txt" not in err


def test_the_overwrite_hint_works(base, surroundings, capsys):
    first = run(base)
    assert cli_run(base) == 2
    err = capsys.readouterr().err
    assert "already holds a complete dataset" in err and "--set sink.mode=overwrite" in err
    (base / "out" / ".keep").write_text("a dotfile survives overwrite")
    write_pipe(base)
    with surroundings(base, dataset=base / "out"):
        assert cli_run(base, "sink.mode=overwrite") == 0
    assert (base / "out" / ".keep").read_text() == "a dotfile survives overwrite"
    second = json.loads((base / "out" / "_manifest.json").read_text())
    assert [s["sha256"] for s in second["shards"]] == [s["sha256"] for s in first.shards]
    assert main(["verify", str(base / "out")]) == 0


def test_overwrite_with_other_splits_removes_only_the_listed_files(base, surroundings):
    first = run(base, shard={"count": 4, "splits": {"train": 0.5, "val": 0.5}})
    with surroundings(base, dataset=first.out_dir):
        second = run(base, mode="overwrite")
    assert_identity(second)
    assert files_under(second.out_dir) == sorted(["_SUCCESS", "_manifest.json", "_quarantine",
                                                  "_quarantine/part-00000.parquet", "_report.html", "_report.json",
                                                  "part-00000.parquet", "part-00001.parquet"])


# --------------------------------------------------------------------------- sink and inputs


@pytest.mark.parametrize("sink, source, why", [
    ("in", "in/*.log", "holds the input file"),                  # sink == the input folder
    (".", "in/*.log", "holds the input file"),                   # sink = a parent of the inputs
    ("in/out", "in/**/*.log", "a later run would read"),         # sink inside what the glob reads
    ("in/out", "in/*/*.log", "a later run would read"),
    ("in/a.log", "in/a.log", "holds the input file"),            # sink == an input file
])
def test_sink_may_not_overlap_the_inputs(base, surroundings, capsys, sink, source, why):
    (base / "in" / "x").mkdir()
    samples.write_access_logs(base / "in" / "x" / "b.log", lines=10)
    path = write_pipe(base, sink_path=sink, source=source, mode="overwrite")
    with surroundings(base):
        assert cli_run(base, sink_path=sink, source=source, mode="overwrite") == 2
        err = capsys.readouterr().err
        assert why in err and "internal error" not in err
        assert main(["validate", str(path)]) == 2        # validate checks what run checks before reading
    err = capsys.readouterr().err
    assert why in err and "internal error" not in err


@pytest.mark.parametrize("sink", ["notes.txt/out", "notes.txt/deeper/out"])
def test_a_sink_under_a_file_is_a_pipeline_error(base, surroundings, capsys, sink):
    """A file where a folder of sink.path should be: exit 2 naming it (it was exit 1, 'Not a
    directory', while a sink that is itself a file was exit 2), nothing touched."""
    (base / "notes.txt").write_text("mine\n")
    path = write_pipe(base, sink_path=sink)
    with surroundings(base):
        assert cli_run(base, sink_path=sink) == 2
        assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "notes.txt is a file, not a folder" in err and "internal error" not in err
    assert (base / "notes.txt").read_text() == "mine\n"

def test_sink_next_to_the_inputs_is_fine(base, surroundings):
    """in/*.log cannot read in/out/: a folder beside the inputs is allowed."""
    with surroundings(base, dataset=base / "in" / "out"):
        assert_identity(run(base, sink_path="in/out"))


def test_sink_path_with_dotdot_is_normalized(base, surroundings):
    with surroundings(base, dataset=base / "out"):
        result = run(base, sink_path="out/newdir/..")
    assert result.out_dir == base / "out"
    assert not (base / "out" / "newdir").exists()
    assert_identity(result)


# --------------------------------------------------------------------------- symbolic links


def test_symlink_inside_the_output_is_refused_and_never_followed(base, surroundings, capsys):
    first = run(base)
    elsewhere = base / "elsewhere"
    (elsewhere / "deep").mkdir(parents=True)
    (elsewhere / "deep" / "important.txt").write_text("keep me")
    os.symlink(elsewhere, first.out_dir / "link")
    write_pipe(base, mode="overwrite")
    with surroundings(base):
        assert cli_run(base, mode="overwrite") == 2
        assert "link (a symbolic link)" in capsys.readouterr().err
        assert main(["verify", str(first.out_dir)]) == 1          # a stray entry, reported, not followed
        assert "link: not in the manifest" in capsys.readouterr().out
        assert main(["inspect", str(first.out_dir)]) == 0


def test_split_folder_replaced_by_a_symlink_is_refused(base, surroundings, capsys):
    first = run(base, shard={"count": 2, "splits": {"train": 0.5, "val": 0.5}})
    elsewhere = base / "elsewhere"
    os.rename(first.out_dir / "train", elsewhere)
    os.symlink(elsewhere, first.out_dir / "train")
    write_pipe(base, mode="overwrite", shard={"count": 2})
    with surroundings(base):
        assert cli_run(base, mode="overwrite", shard={"count": 2}) == 2
        assert "train (a symbolic link)" in capsys.readouterr().err
        assert main(["verify", str(first.out_dir)]) == 1
        assert "symbolic link" in capsys.readouterr().out


def test_tmp_folder_that_is_a_symlink_is_refused(base, surroundings, capsys):
    (base / "elsewhere").mkdir()
    (base / "elsewhere" / "x.txt").write_text("x")
    (base / "out").mkdir()
    os.symlink(base / "elsewhere", base / "out" / "_tmp")
    write_pipe(base, mode="overwrite")
    with surroundings(base):
        assert cli_run(base, mode="overwrite") == 2
    assert "_tmp is a symbolic link" in capsys.readouterr().err


# --------------------------------------------------------------------------- crafted journals


def _crafted(base: Path, journal: dict, *, owner: bool = True, data_link: Path | None = None) -> Path:
    """A complete dataset with a forged `_tmp/x/_commit.json` (and an owner record claiming gpuetl)."""
    result = run(base)
    run_tmp = result.out_dir / "_tmp" / "x"
    run_tmp.mkdir(parents=True)
    if owner:
        (run_tmp / "_owner.json").write_text(json.dumps({"format": commit.RUN_FORMAT, "run": "x",
                                                         "host": "elsewhere", "pid": 1}))
    if data_link is not None:
        os.symlink(data_link, run_tmp / "data")
    manifest = json.loads((result.out_dir / "_manifest.json").read_text())
    (run_tmp / "_commit.json").write_text(json.dumps({"format": commit.JOURNAL_FORMAT, "run": "x",
                                                      "manifest": manifest, **journal}))
    return result.out_dir


def _victims(base: Path) -> Path:
    victim = base / "victim"
    victim.mkdir()
    (victim / "part-00000.parquet").write_bytes(b"someone else's")
    (victim / "secret.txt").write_text("do not delete")
    return victim


@pytest.mark.parametrize("case", ["dotdot", "absolute", "data-link", "unlisted-previous", "no-owner"])
def test_crafted_journal_changes_nothing(base, surroundings, capsys, case):
    victim = _victims(base)
    shards = ["part-00000.parquet", "part-00001.parquet", "_quarantine/part-00000.parquet"]
    journals = {
        "dotdot": ({"previous": ["../victim/secret.txt"], "moves": shards}, {}),
        "absolute": ({"previous": [str(victim / "secret.txt")], "moves": shards}, {}),
        "data-link": ({"previous": [], "moves": shards}, {"data_link": victim}),
        "unlisted-previous": ({"previous": ["mine.txt"], "moves": shards}, {}),
        "no-owner": ({"previous": ["../victim/secret.txt"], "moves": shards}, {"owner": False}),
    }
    journal, kw = journals[case]
    out = _crafted(base, journal, **kw)
    (out / "mine.txt").write_text("a user's file in the dataset folder")
    write_pipe(base, mode="overwrite")
    with surroundings(base):                               # the dataset folder included
        assert main(["verify", str(out)]) == 1
        assert "cannot trust" in capsys.readouterr().out
        assert main(["inspect", str(out)]) == 0
        if case == "no-owner":          # not gpuetl's folder: --repair leaves it, verify still names it
            assert main(["verify", "--repair", str(out)]) == 1
            assert "cannot trust" in capsys.readouterr().out
        else:
            assert main(["verify", "--repair", str(out)]) == 2
            assert "not finishing that commit, nothing was changed" in capsys.readouterr().err
        assert cli_run(base, mode="overwrite") == 2           # a run refuses it too


def test_journal_folder_that_is_a_symlink_is_not_ours(base, surroundings, capsys):
    victim = _victims(base)
    out = run(base).out_dir
    (victim / "_owner.json").write_text(json.dumps({"format": commit.RUN_FORMAT, "run": "x", "host": "h", "pid": 1}))
    (victim / "_commit.json").write_text(json.dumps({"format": commit.JOURNAL_FORMAT, "run": "x", "previous": [],
                                                     "moves": ["secret.txt"], "manifest": {}}))
    (out / "_tmp").mkdir()
    os.symlink(victim, out / "_tmp" / "x")
    write_pipe(base, mode="overwrite")
    with surroundings(base):
        assert main(["verify", "--repair", str(out)]) == 0         # nothing of ours to repair; the link is let be
        assert main(["inspect", str(out)]) == 0
        assert "internal error" not in capsys.readouterr().err


def test_link_in_the_way_of_a_commit_changes_nothing(base, surroundings, capsys):
    """A valid journal, but a shard it would replace is now a link to a file outside."""
    victim = _victims(base)
    out = run(base).out_dir
    manifest = json.loads((out / "_manifest.json").read_text())
    shards = [e["path"] for e in manifest["shards"] + manifest["quarantine"] + manifest["reports"]]
    run_tmp = out / "_tmp" / "x"
    for rel in shards:
        (run_tmp / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
        (run_tmp / "data" / rel).write_bytes((out / rel).read_bytes())
    (run_tmp / "_owner.json").write_text(json.dumps({"format": commit.RUN_FORMAT, "run": "x", "host": "h",
                                                     "pid": 1}))
    (run_tmp / "_commit.json").write_text(json.dumps({
        "format": commit.JOURNAL_FORMAT, "run": "x", "previous": ["_manifest.json", *shards], "moves": shards,
        "manifest": manifest}))
    (out / "part-00000.parquet").unlink()
    os.symlink(victim / "part-00000.parquet", out / "part-00000.parquet")
    with surroundings(base):
        assert main(["verify", "--repair", str(out)]) == 2
        assert "part-00000.parquet is a symbolic link" in capsys.readouterr().err


def test_manifest_listing_paths_outside_is_not_trusted(base, surroundings, capsys):
    victim = _victims(base)
    out = run(base).out_dir
    _edit_manifest(out, lambda m: m["shards"].append({"path": "../victim/secret.txt", "split": "", "rows": 0,
                                                      "bytes": 13, "sha256": "0" * 64}))
    write_pipe(base, mode="overwrite")
    with surroundings(base):
        assert main(["verify", str(out)]) == 1
        assert "../victim/secret.txt: not a path inside the dataset" in capsys.readouterr().out
        assert main(["inspect", str(out)]) == 0
        assert cli_run(base, mode="overwrite") == 2
        assert "_manifest.json (the manifest lists '../victim/secret.txt'" in capsys.readouterr().err
    assert (victim / "secret.txt").read_text() == "do not delete"


def test_foreign_tmp_subfolder_is_kept_under_mode_error(base, surroundings, capsys):
    keep = base / "out" / "_tmp" / "mystuff" / "keep.txt"
    keep.parent.mkdir(parents=True)
    keep.write_text("mine")
    write_pipe(base)
    with surroundings(base, dataset=base / "out"):
        assert cli_run(base) == 0
        assert "leaving" in capsys.readouterr().err
        assert cli_run(base, "sink.mode=overwrite") == 0
    assert keep.read_text() == "mine"
    assert sorted(p.name for p in (base / "out" / "_tmp").iterdir()) == ["mystuff"]
    assert main(["verify", str(base / "out")]) == 0


# --------------------------------------------------------------------------- the run lock


def _lock(out: Path, **record) -> Path:
    (out / "_tmp").mkdir(parents=True)
    lock = out / "_tmp" / "_lock"
    lock.write_text(json.dumps({"format": commit.LOCK_FORMAT, "host": socket.gethostname(), "pid": 1,
                                "start": 0, "boot": None, "since": "2026-01-01T00:00:00Z", **record}))
    return lock


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_lock_of_another_host_is_refused_by_name(base, surroundings, capsys):
    _lock(base / "out", host="gpu-node-7", pid=4242)
    write_pipe(base)
    with surroundings(base):
        assert cli_run(base) == 2
    err = capsys.readouterr().err
    assert "in use by another gpuetl run (host gpu-node-7, pid 4242, started 2026-01-01T00:00:00Z" in err


@pytest.mark.parametrize("who", ["dead", "reused-pid"])
def test_lock_of_a_process_that_is_gone_is_taken_over(base, surroundings, who):
    # reused-pid: our own pid, but another start time: the process that took the lock is gone
    _lock(base / "out", pid=_dead_pid() if who == "dead" else os.getpid(), start=1)
    logs = []
    with surroundings(base, dataset=base / "out"):
        result = gpuetl.Pipeline.from_dict(spec(), base_dir=base).run(backend="cpu", scheduler="sync",
                                                                      log=logs.append)
    assert any("taking over the lock" in line for line in logs), logs
    assert_identity(result)
    assert not (base / "out" / "_tmp").exists()


def test_lock_is_checked_again_at_commit(base, monkeypatch):
    real = commit.RunLock.check

    def stolen(self):
        os.unlink(self.tmp.path / commit.LOCK)
        _write_foreign_lock(self.tmp.path / commit.LOCK)
        return real(self)

    monkeypatch.setattr(commit.RunLock, "check", stolen)
    with pytest.raises(OutputError, match="taken by another process during this run; nothing was committed"):
        run(base)
    assert not (base / "out" / "_SUCCESS").exists()


def _write_foreign_lock(path: Path) -> None:
    path.write_text(json.dumps({"format": commit.LOCK_FORMAT, "host": "other", "pid": 9}))


RACER = textwrap.dedent("""
    import contextlib, sys, time
    from pathlib import Path
    from gpuetl.cli import main
    from gpuetl.sinks import commit

    me, other, pipe, signals, rounds = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]), int(sys.argv[5])
    real_acquire, real_survey = commit.RunLock.acquire, commit.OutputFolder.survey
    turn = 0

    def acquire(self, log):
        try:
            return real_acquire(self, log)
        finally:
            (signals / f"tried-{me}-{turn}").touch()

    def survey(self, mode):
        # the winner holds the lock until the other one has tried: the lock decides, not timing
        deadline = time.monotonic() + 120
        while not (signals / f"tried-{other}-{turn}").exists() and time.monotonic() < deadline:
            time.sleep(0.001)
        return real_survey(self, mode)

    commit.RunLock.acquire, commit.OutputFolder.survey = acquire, survey
    for turn in range(rounds):
        deadline = time.monotonic() + 300
        while not (signals / f"go-{turn}").exists():       # start together
            assert time.monotonic() < deadline, "no go"
            time.sleep(0.001)
        with open(signals / f"err-{me}-{turn}", "w") as err, contextlib.redirect_stderr(err):
            code = main(["run", pipe, "--scheduler", "sync", "--set", "sink.mode=overwrite"])
        (signals / f"code-{me}-{turn}").write_text(str(code))
""")


@pytest.mark.slow
def test_two_runs_started_together_one_proceeds(base, surroundings, tmp_path_factory):
    """Three rounds, the first into no dataset, the others over the last one's. The two racing
    processes stay up for all three (one `gpuetl run` each per round: Python and gpuetl start
    once, not three times); the rounds' signal files lie outside `base`."""
    (base / "pipe.yaml").write_text(yaml.safe_dump(spec()))
    signals = tmp_path_factory.mktemp("race")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    rounds = 3
    procs = [subprocess.Popen([sys.executable, "-c", RACER, me, other, str(base / "pipe.yaml"), str(signals),
                               str(rounds)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for me, other in (("a", "b"), ("b", "a"))]
    try:
        for turn in range(rounds):
            with surroundings(base, dataset=base / "out"):
                (signals / f"go-{turn}").touch()
                codes = [signals / f"code-{me}-{turn}" for me in ("a", "b")]
                deadline = time.monotonic() + 300
                while not all(c.exists() and c.read_text() for c in codes):
                    gone = [p for p, c in zip(procs, codes) if p.poll() is not None and not c.exists()]
                    assert time.monotonic() < deadline and not gone, [p.communicate(timeout=60) for p in gone]
                    time.sleep(0.01)
            results = [(int(c.read_text()), (signals / f"err-{me}-{turn}").read_text())
                       for me, c in zip(("a", "b"), codes)]
            assert sorted(r[0] for r in results) == [0, 2], results
            loser = next(r for r in results if r[0] == 2)
            assert "in use by another gpuetl run (host" in loser[1], loser
            assert main(["verify", str(base / "out")]) == 0
            assert not (base / "out" / "_tmp").exists()
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err[-2000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# --------------------------------------------------------------------------- verify: the manifest against itself


def _edit_manifest(out: Path, edit) -> None:
    path = out / "_manifest.json"
    manifest = json.loads(path.read_text())
    if edit != "indent":
        edit(manifest)
    path.write_text(json.dumps(manifest, indent=1 if edit == "indent" else 2) + "\n")


@pytest.mark.parametrize("edit, expected", [
    (lambda m: m["counts"].update(filtered=m["counts"]["filtered"] + 5), "counts do not add up"),
    (lambda m: m["counts"].update(rows_in=m["counts"]["rows_in"] + 5, filtered=m["counts"]["filtered"] + 5),
     "the stages' filtered add up to"),
    (lambda m: m["shards"][0].update(rows=m["shards"][0]["rows"] + 1), "the shards hold"),
    (lambda m: m["quarantine"][0].update(rows=0), "the quarantine files hold"),
    (lambda m: m["stages"][1].update(rows_out=7), "does not add up"),
    ("indent", "does not hold the manifest's sha256"),         # a whitespace-only edit
])
def test_verify_catches_an_edited_manifest(base, surroundings, capsys, edit, expected):
    out = run(base, steps=[{"filter": "status < 500"}]).out_dir
    _edit_manifest(out, edit)
    with surroundings(base):
        assert main(["verify", str(out)]) == 1
    printed = capsys.readouterr().out
    assert expected in printed and "_SUCCESS: does not hold the manifest's sha256" in printed


def test_verify_catches_a_shard_removed_with_its_entry(base, surroundings, capsys):
    out = run(base).out_dir
    removed = json.loads((out / "_manifest.json").read_text())["shards"][1]["path"]
    (out / removed).unlink()
    _edit_manifest(out, lambda m: m["shards"].pop(1))
    commit_sha = commit.success_bytes((out / "_manifest.json").read_bytes())
    (out / "_SUCCESS").write_bytes(commit_sha)                 # even with _SUCCESS forged to match
    with surroundings(base):
        assert main(["verify", str(out)]) == 1
    assert "the shards hold" in capsys.readouterr().out


def test_verify_catches_a_stray_data_file(base, capsys):
    out = run(base).out_dir
    (out / "part-00009.parquet").write_bytes((out / "part-00000.parquet").read_bytes())
    assert main(["verify", str(out)]) == 1
    assert "part-00009.parquet: not in the manifest" in capsys.readouterr().out


def test_success_holds_the_manifest_sha256(base):
    out = run(base).out_dir
    import hashlib
    expected = hashlib.sha256((out / "_manifest.json").read_bytes()).hexdigest()
    assert json.loads((out / "_SUCCESS").read_text()) == {"manifest_sha256": expected}


# --------------------------------------------------------------------------- disk full, failed runs


@pytest.mark.parametrize("style", ["errno", "pyarrow"])
def test_disk_full_is_a_clear_error_naming_the_path(base, surroundings, monkeypatch, capsys, style):
    from gpuetl.sinks import parquet

    def full(self, *a, **k):
        if style == "errno":
            raise OSError(errno.ENOSPC, "No space left on device", self.path + ".partial")
        raise OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(parquet.ShardWriter, "_flush", full)
    write_pipe(base)
    with surroundings(base):
        assert cli_run(base) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "nothing was committed" in err and "internal error" not in err
    assert ("/out/_tmp/" + ("" if style == "pyarrow" else "")) in err
    if style == "errno":
        assert ".parquet.partial failed: No space left on device" in err
    assert not (base / "out").exists()                  # the folder it made is gone again (item 21)


def test_failed_run_removes_only_the_folders_it_made(base, surroundings):
    """Without its report (which a run whose data failed leaves under _tmp/, docs/observing.md)."""
    bad = {"max_error_ratio": 0.0}
    quiet = gpuetl.Pipeline.from_dict(GALLERY.spec(sink_path="a/b/out", **bad), base_dir=base)
    with surroundings(base):
        with pytest.raises(gpuetl.DataError, match="nothing was written"):
            quiet.run(backend="cpu", scheduler="sync", report=False)
    assert not (base / "a").exists()
    (base / "out").mkdir()
    (base / "out" / ".hidden").write_text("x")
    with pytest.raises(gpuetl.DataError):
        run(base, **bad)
    left = files_under(base / "out")
    assert left[0] == ".hidden" and left[1] == "_tmp" and all(p.startswith("_tmp/") for p in left[2:])
    assert {p.rsplit("/", 1)[-1] for p in left[3:]} == {"_owner.json", "_report.json", "_report.html"}


# --------------------------------------------------------------------------- a closed pipe


@pytest.mark.parametrize("command", ["inspect", "schema"])
def test_closed_stdout_ends_quietly(base, command):
    """`gpuetl inspect OUT | head -2`: the reader goes away before gpuetl writes (its end of the
    pipe is closed at once), so the write fails every time."""
    out = run(base).out_dir
    argv = [sys.executable, "-m", "gpuetl", command] + ([str(out)] if command == "inspect" else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == SIGPIPE_EXIT
    assert stderr == b""


def test_resume_does_not_write_through_a_link_in_the_interrupted_run(base, surroundings, monkeypatch, capsys):
    """An interrupted run's folder whose data/ was replaced by a link to elsewhere: resume refuses."""
    from gpuetl.runtime.phases import accounting

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(accounting, "check_errors", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(base, mode="resume")                       # resume keeps its folder for the next try
    monkeypatch.undo()
    [run_tmp] = [p for p in (base / "out" / "_tmp").iterdir() if p.is_dir()]
    (base / "elsewhere").mkdir()
    os.symlink(base / "elsewhere", run_tmp / "data")
    write_pipe(base, mode="resume")
    with surroundings(base):
        assert cli_run(base, mode="resume") == 2
    assert "holds symbolic links" in capsys.readouterr().err
