"""What a run killed at any step leaves in `_tmp/` (issue 26, item 5): a lock file from a kill
while taking the lock, a partial owner record from a kill while claiming a run folder, a run's
files from a kill while removing them. Each kill point is enumerated through the instrumented
layer of test_commit_kills.py; after each, `verify` names what is left (the dataset itself still
verifies), and `verify --repair` or the next run removes what is provably gpuetl's, nothing else."""

from __future__ import annotations

import json
import os
import socket
from contextlib import contextmanager
from pathlib import Path

import pytest

import gpuetl
from gpuetl import samples
from gpuetl.cli import main
from gpuetl.sinks import commit, lock

from .test_commit_kills import Killed, Steps, dead_pid


def spec(path: str = "out") -> dict:
    return {"version": 1, "name": "leftovers", "source": {"type": "text", "path": "in.log"},
            "parse": {"preset": "apache_combined"}, "shard": {"count": 2}, "sink": {"path": path, "mode": "overwrite"}}


@pytest.fixture
def dataset(tmp_path) -> Path:
    samples.write_access_logs(tmp_path / "in.log", lines=300, bad_every=50)
    (tmp_path / "p.yaml").write_text(json.dumps(spec()))
    gpuetl.Pipeline.from_dict(spec(), base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    return tmp_path / "out"


@contextmanager
def dying(monkeypatch):
    """Inside: this process is one that has ended (its pid, in names and records, is a dead one)."""
    pid = dead_pid()
    with monkeypatch.context() as m:
        m.setattr(os, "getpid", lambda: pid)
        yield pid


def tmp_names(out: Path) -> list[str]:
    tmp = out / commit.TMP
    return sorted(p.name for p in tmp.iterdir()) if tmp.is_dir() else []


def verify_lists(out: Path, capsys) -> list[str]:
    """verify's LEFTOVER lines; the dataset itself verifies (exit 0) and nothing changes."""
    before = sorted((str(p), p.stat().st_mtime_ns) for p in out.rglob("*"))
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0
    said = capsys.readouterr().out
    assert sorted((str(p), p.stat().st_mtime_ns) for p in out.rglob("*")) == before
    return [line for line in said.splitlines() if line.startswith("LEFTOVER ")]


def killed_at(steps: Steps, k: int, action) -> None:
    with steps.armed(k):
        try:
            action()
        except Killed:
            pass


@pytest.mark.slow
def test_a_kill_while_taking_the_lock_leaves_nothing_a_run_does_not_remove(dataset, monkeypatch, capsys, surroundings):
    """Kill `OutputFolder.open` after each of its steps, on a folder whose lock a dead run holds
    (so both the new lock and the dead one moved aside are made): `verify` names a lock file left
    behind, and `verify --repair` (even steps) or the next run (odd ones) removes it."""
    out = dataset
    base = out.parent

    def take_lock():
        folder = commit.OutputFolder(out).open()
        folder.close()

    def dead_lock():
        with dying(monkeypatch):
            record = lock.this_process(lock.LOCK_FORMAT)
        (out / commit.TMP).mkdir(exist_ok=True)
        (out / commit.TMP / lock.LOCK).write_text(json.dumps(record))

    dead_lock()
    steps = Steps(monkeypatch)
    with dying(monkeypatch), steps.armed(None):
        take_lock()
    total = steps.count
    assert total >= 6, steps.log            # new lock, link, unlink; move aside, unlink; ... release
    named = set()
    with surroundings(base, dataset=out):
        for k in range(total):
            dead_lock()
            with dying(monkeypatch):
                killed_at(steps, k, take_lock)
            temps = [n for n in tmp_names(out) if lock.LOCK_TEMP.fullmatch(n)]
            listed = verify_lists(out, capsys)
            assert len(listed) == len(temps), (k, temps, listed)
            for name in temps:
                line = next(line for line in listed if f"{commit.TMP}/{name}:" in line)
                named.add("holds no lock record" if "holds no lock record" in line else
                          "stale" if ".stale." in name else "new")
                if (out / commit.TMP / name).stat().st_size:
                    assert "removes it" in line and "a process that is gone" in line
            if k % 2:
                assert main(["run", str(base / "p.yaml"), "--backend", "cpu", "--scheduler", "sync"]) == 0
            else:
                assert main(["verify", "--repair", str(out)]) == 0
            left = [n for n in tmp_names(out) if lock.LOCK_TEMP.fullmatch(n)]
            # only a lock file killed before its record was written is left: nothing proves whose it is
            assert all((out / commit.TMP / n).stat().st_size == 0 for n in left), left
            for n in left:
                (out / commit.TMP / n).unlink()
            assert lock.LOCK not in tmp_names(out)
            assert main(["verify", str(out)]) == 0
    assert named >= {"new", "stale"}, named


@pytest.mark.parametrize("case", ["live", "another host", "same pid, another start", "unreadable"])
def test_a_lock_file_is_removed_only_when_its_process_is_provably_gone(dataset, capsys, surroundings, case):
    record = lock.this_process(lock.LOCK_FORMAT)           # this process: alive
    name = f"_lock.{os.getpid()}.0123abcd"
    if case == "another host":
        record = {**record, "host": socket.gethostname() + "-other", "pid": dead_pid()}
        name = f"_lock.{record['pid']}.0123abcd"
    elif case == "same pid, another start":      # a reused pid: the record's process is gone
        record = {**record, "start": (record["start"] or 0) + 1}
    (dataset / commit.TMP).mkdir()
    path = dataset / commit.TMP / name
    path.write_bytes(b"" if case == "unreadable" else json.dumps(record).encode())
    with surroundings(dataset.parent, dataset=dataset):
        [line] = verify_lists(dataset, capsys)
        assert main(["verify", "--repair", str(dataset)]) == 0
    assert path.exists() == (case != "same pid, another start"), line
    assert ("removes it" in line) == (case == "same pid, another start"), line


def test_a_kill_while_claiming_a_run_folder_leaves_nothing_a_run_does_not_remove(dataset, monkeypatch, capsys,
                                                                                 surroundings):
    """Kill a new run's claim of its folder (mkdir, the partial owner record, its rename) after
    each step: an empty folder, an empty or whole `_owner.json.*.partial`, a bare owner record.
    `verify` names it; `verify --repair` removes it, and the next run does too."""
    out = dataset
    folder = commit.OutputFolder(out).open()
    steps = Steps(monkeypatch)
    try:
        with dying(monkeypatch), steps.armed(None):
            folder.new_run(commit.new_run_id())
        total = steps.count
        folder.abandon(next(p for p in (out / commit.TMP).iterdir() if p.is_dir()))
        seen = set()
        for k in range(total):
            with dying(monkeypatch):
                killed_at(steps, k, lambda: folder.new_run(commit.new_run_id()))
            runs = [p for p in (out / commit.TMP).iterdir() if p.is_dir()]
            assert len(runs) == (k > 0)
            if not runs:
                continue
            [line] = verify_lists(out, capsys)
            assert "killed while it claimed it" in line and "removes it" in line
            seen.add(tuple(sorted(n.split(".")[0] + (".partial" if n.endswith(".partial") else "")
                                  for n in os.listdir(runs[0]))))
            folder.clean_leftovers()
            assert [p for p in (out / commit.TMP).iterdir() if p.is_dir()] == []
    finally:
        folder.close()
    assert seen == {(), ("_owner.partial",)}, seen          # the folder made; the record written, not renamed
    # killed between creating the partial record and writing it: an empty one
    empty = out / commit.TMP / commit.new_run_id()
    empty.mkdir(parents=True)
    (empty / f"{commit.OWNER}.0123abcd.partial").write_bytes(b"")
    [line] = verify_lists(out, capsys)
    assert "killed while it claimed it" in line and "removes it" in line
    assert main(["verify", "--repair", str(out)]) == 0 and not (out / commit.TMP).exists()
    # the same through the commands, for the kill that leaves a partial record
    with surroundings(out.parent, dataset=out):
        for command in ("verify --repair", "run"):
            folder = commit.OutputFolder(out).open()
            with dying(monkeypatch):
                killed_at(steps, 2, lambda: folder.new_run(commit.new_run_id()))    # mkdir, partial, [rename]
            folder.close()
            [run] = [p for p in (out / commit.TMP).iterdir() if p.is_dir()]
            assert [n for n in os.listdir(run) if commit.OWNER_PARTIAL.fullmatch(n)], os.listdir(run)
            [line] = verify_lists(out, capsys)
            assert "killed while it claimed it" in line and "removes it" in line
            argv = ["verify", "--repair", str(out)] if command != "run" else \
                ["run", str(out.parent / "p.yaml"), "--backend", "cpu", "--scheduler", "sync"]
            assert main(argv) == 0
            assert not (out / commit.TMP).exists()
            assert main(["verify", str(out)]) == 0


@pytest.mark.slow
def test_a_kill_while_removing_a_runs_files_leaves_its_owner_record(dataset, monkeypatch, capsys, surroundings):
    """A run's folder (spill pieces, map records, shards) removed, killed after each step: the
    owner record goes last, so what is left is provably the run's; verify names it, the next run
    removes it. (A run's spill pieces without their owner record, as an older gpuetl could leave
    them, are named and left alone: nothing proves them gpuetl's.)"""
    out = dataset
    base = out.parent

    def a_dead_run() -> Path:
        folder = commit.OutputFolder(out).open()
        try:
            with dying(monkeypatch):
                run = folder.new_run(commit.new_run_id())
        finally:
            folder.close()
        for rel in ["spill/s0/p000000.arrow", "spill/s1/p000000.arrow", "spill/quarantine/p000000.arrow",
                    "maps/p000000.json", "data/part-00000.parquet", "_state.json"]:
            (run / rel).parent.mkdir(parents=True, exist_ok=True)
            (run / rel).write_bytes(b"piece")
        return run

    steps = Steps(monkeypatch)
    run = a_dead_run()
    folder = commit.OutputFolder(out).open()
    with steps.armed(None):
        folder.abandon(run)
    folder.close()
    total = steps.count
    with surroundings(base, dataset=out):
        for k in range(total - 1):              # the last step removes the folder itself
            run = a_dead_run()
            folder = commit.OutputFolder(out).open()
            killed_at(steps, k, lambda: folder.abandon(run))
            folder.close()
            assert (run / commit.OWNER).exists(), (k, steps.log)
            [line] = verify_lists(out, capsys)
            assert "the next run removes them" in line or "the empty folder of a run that ended" in line, line
            assert main(["run", str(base / "p.yaml"), "--backend", "cpu", "--scheduler", "sync"]) == 0
            assert not (out / commit.TMP).exists()

    orphan = out / commit.TMP / "20261202T000000Z-0123abcd"
    (orphan / "spill" / "s0").mkdir(parents=True)
    (orphan / "spill" / "s0" / "p000000.arrow").write_bytes(b"piece")
    [line] = verify_lists(out, capsys)
    assert "nothing proves gpuetl made this folder" in line
    with surroundings(base, dataset=out):
        assert main(["verify", "--repair", str(out)]) == 0
        assert main(["run", str(base / "p.yaml"), "--backend", "cpu", "--scheduler", "sync"]) == 0
    assert (orphan / "spill" / "s0" / "p000000.arrow").read_bytes() == b"piece"
    assert sorted(p.relative_to(orphan).as_posix() for p in orphan.rglob("*")) == [
        "spill", "spill/s0", "spill/s0/p000000.arrow"]


def test_fifos_named_like_run_records_in_tmp_are_never_opened(dataset, capsys, surroundings):
    """A FIFO where an owner record, a partial one or a lock file would be: verify, --repair and
    a run name it or pass it by, and none waits for a writer; nothing is removed."""
    tmp = dataset / commit.TMP
    (tmp / "x").mkdir(parents=True)
    os.mkfifo(tmp / "x" / commit.OWNER)
    (tmp / commit.new_run_id()).mkdir()
    os.mkfifo(next(p for p in tmp.iterdir() if p.name != "x") / f"{commit.OWNER}.0123abcd.partial")
    os.mkfifo(tmp / "_lock.1.0123abcd")
    before = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*"))
    with surroundings(dataset.parent, dataset=dataset):
        assert len(verify_lists(dataset, capsys)) == 3
        assert main(["verify", "--repair", str(dataset)]) == 0
        assert main(["run", str(dataset.parent / "p.yaml"), "--backend", "cpu", "--scheduler", "sync"]) == 0
    assert sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*")) == before
