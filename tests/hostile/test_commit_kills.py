"""The commit protocol proved by enumeration: every step that changes the dataset folder (or the
store) is counted through an instrumented layer, and the commit is killed after each one in turn.
After every kill, `verify` tells the truth, a reader that follows docs/consuming.md (`_SUCCESS`,
the manifest's sha256 in it) sees the old dataset, the new one, or is told the dataset is
incomplete, and `verify --repair` or the next run finishes, also when it is killed itself.

A kill is simulated in this process: the layer raises `Killed` (a BaseException, which no
`except Exception` catches) at the chosen step, and from then on every change is dropped, as a
dead process makes none. The dying process's lock and owner records name a process that has
ended, as a killed run's would."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

import gpuetl
from gpuetl import samples
from gpuetl.cli import main
from gpuetl import storage
from gpuetl.sinks import commit, lock, objectstore

from .conftest import snapshot


class Killed(BaseException):
    """The process died here."""


WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Steps:
    """Counts every os call that changes a file system; `kill_after=k`: k calls are made, the next
    raises Killed, and every later change is dropped (a file opened for writing: Killed again)."""

    CHANGES = ("unlink", "remove", "rmdir", "mkdir", "rename", "replace", "link", "symlink", "truncate", "chmod")

    def __init__(self, monkeypatch):
        self.count, self.kill_after, self.dead, self.log = 0, None, False, []
        for name in self.CHANGES:
            monkeypatch.setattr(os, name, self._wrap(getattr(os, name), name))
        real_open = os.open

        def os_open(path, flags, *args, **kw):
            if not flags & WRITE_FLAGS:
                return real_open(path, flags, *args, **kw)
            self._step("open", path)
            return real_open(path, flags, *args, **kw)

        monkeypatch.setattr(os, "open", os_open)

    def _wrap(self, real, name):
        def call(*args, **kw):
            if self._step(name, args[0] if args else None):
                return real(*args, **kw)
            return None
        return call

    def _step(self, name, path) -> bool:
        """Whether the change is made."""
        if self.kill_after is None:
            return True
        if self.dead:
            if name == "open":
                raise Killed()
            return False
        if self.count == self.kill_after:
            self.dead = True
            raise Killed(f"killed before step {self.count + 1} ({name} {path})")
        self.count += 1
        self.log.append(f"{name} {path}")
        return True

    @contextmanager
    def armed(self, kill_after: int | None):
        """Count (and kill after `kill_after` steps; None: never) inside the block."""
        self.count, self.dead, self.log = 0, False, []
        self.kill_after = 1 << 60 if kill_after is None else kill_after
        try:
            yield self
        finally:
            self.kill_after = None


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    assert proc.wait() == 0
    return proc.pid


@contextmanager
def as_dead_process(monkeypatch):
    """Records written inside the block (the lock, owner records) name a process that has ended."""
    pid = dead_pid()
    real = lock.this_process

    def this_process(kind):
        return {**real(kind), "pid": pid, "start": None}

    with monkeypatch.context() as m:
        m.setattr(commit, "this_process", this_process)
        m.setattr(objectstore, "this_process", this_process)
        yield


# -- what a reader following docs/consuming.md sees ------------------------------------------------

def files_of(manifest: dict) -> list[str]:
    return [e["path"] for e in manifest["shards"] + manifest["quarantine"] + manifest.get("reports", [])]


def read_as_documented(out: Path):
    """A reader per docs/consuming.md: `_SUCCESS` must be there and hold the manifest's sha256;
    then the files the manifest lists. → {path: bytes}, or "incomplete"."""
    try:
        success = json.loads((out / "_SUCCESS").read_bytes())
        raw = (out / "_manifest.json").read_bytes()
    except (OSError, ValueError):
        return "incomplete"
    if success.get("manifest_sha256") != hashlib.sha256(raw).hexdigest():
        return "incomplete"
    manifest = json.loads(raw)
    return {rel: (out / rel).read_bytes() for rel in files_of(manifest)}


def dataset_files(out: Path, reports: bool = True) -> dict[str, bytes]:
    """The files out's manifest lists (reports: with the run report's, which differ from run to
    run), the accounting identity checked."""
    manifest = json.loads((out / "_manifest.json").read_bytes())
    c = manifest["counts"]
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    listed = files_of(manifest) if reports else [e["path"] for e in manifest["shards"] + manifest["quarantine"]]
    return {rel: (out / rel).read_bytes() for rel in listed}


def pending(out: Path) -> list[str]:
    return sorted(p.parent.name for p in (out / commit.TMP).glob(f"*/{commit.JOURNAL}"))


def tree_state(root: Path) -> dict[str, str]:
    return snapshot(root)


# -- the datasets -----------------------------------------------------------------------------------

SCENARIOS = {
    # old dataset → new dataset; each new one drops files the old manifest lists
    "fewer shards": ({"count": 3}, {"count": 2}, 50, 50),
    "a split gone": ({"count": 2, "splits": {"train": 0.6, "val": 0.2, "test": 0.2}},
                     {"count": 2, "splits": {"train": 0.8, "val": 0.2}}, 50, 50),
    "no quarantine this time": ({"count": 2}, {"count": 2}, 50, 0),
    "all three": ({"count": 3, "splits": {"train": 0.6, "val": 0.2, "test": 0.2}},
                  {"count": 2, "splits": {"train": 0.8, "val": 0.2}}, 50, 0),
}


def spec(source: str, shard: dict, path: str) -> dict:
    return {"version": 1, "name": "kills", "source": {"type": "text", "path": source},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"}, "shard": shard,
            "sink": {"path": path, "mode": "overwrite"}}


def build(base: Path, scenario: str):
    """The old dataset in base/old and the new one in base/new (the files the commit moves in)."""
    old_shard, new_shard, old_bad, new_bad = SCENARIOS[scenario]
    samples.write_access_logs(base / "old.log", lines=400, bad_every=old_bad, seed=1)
    samples.write_access_logs(base / "new.log", lines=300, bad_every=new_bad, seed=2)
    run = lambda src, shard, path: gpuetl.Pipeline.from_dict(spec(src, shard, path), base_dir=base).run(  # noqa: E731
        backend="cpu", scheduler="sync")
    old = run("old.log", old_shard, "old")
    new = run("new.log", new_shard, "new")
    dropped = set(files_of(old.manifest)) - set(files_of(new.manifest))
    assert dropped, "the new dataset must drop a file the old one lists"
    (base / "next.yaml").write_text(json.dumps(spec(str(base / "new.log"), new_shard, "out")))
    return old, new


def start_commit(case: Path, old_out: Path, new, steps: Steps, monkeypatch, kill_after: int | None) -> int:
    """Copy the old dataset to case/out, then (as a process that dies) open it, stage the new
    dataset's files in a run folder and commit them, killed after `kill_after` steps. → steps made."""
    shutil.copytree(old_out, case / "out")
    out = case / "out"
    with as_dead_process(monkeypatch):
        folder = commit.OutputFolder(out).open()
        try:
            folder.survey("overwrite")
            run_tmp = folder.new_run(commit.new_run_id())
            for rel in files_of(new.manifest):
                (run_tmp / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(new.out_dir / rel, run_tmp / "data" / rel)
            with steps.armed(kill_after):
                try:
                    folder.commit(run_tmp, new.manifest)
                finally:
                    folder.close()
        except Killed:
            pass
        finally:
            folder.close() if folder.tree is not None else None
    return steps.count


def check_verify_tells_the_truth(out: Path, capsys, old_files, new_files) -> str:
    """verify only reads; exit 0 exactly when a reader sees a whole dataset and no commit waits;
    a waiting commit is named with `verify --repair`, never as a journal gpuetl cannot trust."""
    seen = read_as_documented(out)
    if seen != "incomplete":
        assert seen in (old_files, new_files), "a reader saw files of neither dataset"
    before = tree_state(out)
    capsys.readouterr()
    code = main(["verify", str(out)])
    said = capsys.readouterr()
    assert tree_state(out) == before, "verify changed the folder"
    assert "cannot trust" not in said.out + said.err
    if pending(out):
        assert code == 1 and "verify --repair" in said.out + said.err
        assert ("the dataset is complete" in said.out) == (seen == new_files), said.out
    else:
        assert seen != "incomplete", "an incomplete dataset without a journal to finish it"
        assert code == 0, said.out + said.err
    runs = [p.name for p in (out / commit.TMP).glob("*") if p.is_dir() and not pending(out)]
    for name in runs:                   # a run's folder left without a journal: named, never silently
        assert f"LEFTOVER {commit.TMP}/{name}:" in said.out, said.out
    return "old" if seen == old_files else "new" if seen == new_files else "incomplete"


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_commit_killed_after_any_step_is_finished_by_repair_or_the_next_run(tmp_path, monkeypatch, capsys,
                                                                              surroundings, scenario):
    base = tmp_path / "base"
    base.mkdir()
    old, new = build(base, scenario)
    old_files, new_files = dataset_files(old.out_dir), dataset_files(new.out_dir)
    steps = Steps(monkeypatch)
    work = tmp_path / "work"
    work.mkdir()
    total = start_commit(work / "clean", old.out_dir, new, steps, monkeypatch, None)
    assert dataset_files(work / "clean" / "out") == new_files
    assert total > 10, steps.log
    outcomes = []
    with surroundings(tmp_path, dataset=work):
        for k in range(total):
            case = work / f"k{k:03d}"
            case.mkdir()
            (case / "beside.txt").write_text("not the dataset's")
            assert start_commit(case, old.out_dir, new, steps, monkeypatch, k) == k
            out = case / "out"
            seen = check_verify_tells_the_truth(out, capsys, old_files, new_files)
            journal = bool(pending(out))
            outcomes.append((k, seen, journal))
            if k % 2:              # the next run: it finishes the commit first, then writes its own
                assert main(["run", str(base / "next.yaml"), "--backend", "cpu", "--scheduler", "sync",
                             "--set", f"sink.path={out}"]) == 0, capsys.readouterr().err
                assert dataset_files(out, reports=False) == dataset_files(new.out_dir, reports=False)
            else:
                assert main(["verify", "--repair", str(out)]) == 0, capsys.readouterr()
                assert dataset_files(out) == (new_files if journal or seen == "new" else old_files)
            assert read_as_documented(out) == dataset_files(out)
            assert main(["verify", str(out)]) == 0
            assert not pending(out)
            assert not any(left.removable for left in commit.leftovers(out))
            if k % 2:
                assert not (out / commit.TMP).exists()
            assert sorted(p.name for p in case.iterdir()) == ["beside.txt", "out"]
            assert (case / "beside.txt").read_text() == "not the dataset's"
            shutil.rmtree(case)
    kinds = {seen for _, seen, _ in outcomes}
    assert kinds == {"old", "new", "incomplete"}, outcomes
    # the window the issue found: the new manifest and _SUCCESS in place, the journal still there
    assert any(seen == "new" and journal for _, seen, journal in outcomes), outcomes


@pytest.mark.slow
def test_a_repair_killed_after_any_step_is_finished_by_the_next_repair(tmp_path, monkeypatch, capsys, surroundings):
    """A commit killed just after its journal is written, when the new manifest and `_SUCCESS` are
    in place, and at its last step before the journal goes; then `verify --repair` killed after
    each of its own steps: what a reader sees and what verify says stay true, and the next repair
    finishes the commit."""
    from gpuetl.sinks.dataset import repair

    base = tmp_path / "base"
    base.mkdir()
    old, new = build(base, "a split gone")
    old_files, new_files = dataset_files(old.out_dir), dataset_files(new.out_dir)
    steps = Steps(monkeypatch)
    work = tmp_path / "work"
    work.mkdir()
    total = start_commit(work / "clean", old.out_dir, new, steps, monkeypatch, None)
    windows = {}                     # the first and last kill that leave a journal; and the bug's window
    for k in range(total):
        start_commit(work / f"probe{k}", old.out_dir, new, steps, monkeypatch, k)
        out = work / f"probe{k}" / "out"
        if pending(out):
            windows.setdefault("journal written", k)
            windows["journal still there"] = k
            if read_as_documented(out) == new_files:
                windows.setdefault("new manifest and _SUCCESS in place", k)
        shutil.rmtree(work / f"probe{k}")
    assert len(windows) == 3, windows
    tried = []
    with surroundings(tmp_path, dataset=work):
        for k in sorted(set(windows.values())):
            j = 0
            while True:
                case = work / f"k{k:03d}-j{j:03d}"
                case.mkdir()
                start_commit(case, old.out_dir, new, steps, monkeypatch, k)
                out = case / "out"
                if not pending(out):
                    shutil.rmtree(case)
                    break                       # no commit to finish after this kill
                with as_dead_process(monkeypatch), steps.armed(j):
                    try:
                        repair(out)
                        finished = True
                    except Killed:
                        finished = False
                check_verify_tells_the_truth(out, capsys, old_files, new_files)
                assert main(["verify", "--repair", str(out)]) == 0, capsys.readouterr()
                assert dataset_files(out) == new_files
                assert main(["verify", str(out)]) == 0 and not pending(out)
                assert sorted(p.name for p in case.iterdir()) == ["out"]
                shutil.rmtree(case)
                tried.append((k, j))
                if finished:
                    break
                j += 1
    assert len({k for k, _ in tried}) == len(set(windows.values())) and len(tried) > 10, tried


# -- the same on an object store ----------------------------------------------------------------------

class CountedStore:
    """An fsspec file system whose every change (a PUT, a DELETE, a server-side copy) is a step of
    `steps`; reads pass through."""

    CHANGES = ("pipe_file", "rm_file", "copy", "put_file", "rm", "pipe", "put", "mv", "touch", "cp_file")
    CALLS = ("put_object", "delete_object", "delete_objects", "copy_object")

    def __init__(self, fs, steps: Steps):
        self._fs, self._steps = fs, steps

    def __getattr__(self, name):
        attr = getattr(self._fs, name)
        if name in self.CHANGES:
            def change(*args, **kw):
                if self._steps._step(name, args[0] if args else None):
                    return attr(*args, **kw)
            return change
        if name == "call_s3":
            def call(method, *args, **kw):
                if method not in self.CALLS or self._steps._step(method, kw.get("Key")):
                    return attr(method, *args, **kw)
            return call
        return attr


def read_store_as_documented(s3, prefix: str):
    try:
        success = json.loads(s3.get(f"{prefix}/_SUCCESS"))
        raw = s3.get(f"{prefix}/_manifest.json")
    except (OSError, ValueError):
        return "incomplete"
    if success.get("manifest_sha256") != hashlib.sha256(raw).hexdigest():
        return "incomplete"
    return {rel: s3.get(f"{prefix}/{rel}") for rel in files_of(json.loads(raw))}


def store_files(s3, prefix: str, reports: bool = True) -> dict[str, bytes]:
    manifest = json.loads(s3.get(f"{prefix}/_manifest.json"))
    c = manifest["counts"]
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    listed = files_of(manifest) if reports else [e["path"] for e in manifest["shards"] + manifest["quarantine"]]
    return {rel: s3.get(f"{prefix}/{rel}") for rel in listed}


def etags(s3, prefix: str) -> dict[str, str]:
    s3.fs.invalidate_cache()
    return {k: v.get("ETag") for k, v in s3.fs.find(f"{s3.bucket}/{prefix}/", detail=True).items()}


def store_pending(s3, prefix: str) -> list[str]:
    return [k for k in s3.keys(f"{prefix}/_tmp/") if k.endswith("/" + commit.JOURNAL)]


def start_store_commit(s3, prefix: str, new, steps: Steps, monkeypatch, kill_after: int | None) -> int:
    """The old dataset (s3 `old/`) copied to `prefix/`, then a process that dies commits the new
    dataset's files there, killed after `kill_after` steps (on the store or the local staging)."""
    for key in s3.keys("old/"):
        s3.fs.copy(f"{s3.bucket}/{key}", f"{s3.bucket}/{prefix}/{key[len('old/'):]}")
    with as_dead_process(monkeypatch):
        folder = objectstore.ObjectStoreFolder(s3.url(prefix)).open()
        try:
            folder.survey("overwrite")
            run_tmp = folder.new_run(commit.new_run_id())
            for rel in files_of(new.manifest):
                (run_tmp / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(new.out_dir / rel, run_tmp / "data" / rel)
            with steps.armed(kill_after):
                try:
                    folder.commit(run_tmp, new.manifest)
                finally:
                    folder.close()
        except Killed:
            pass
    return steps.count


# The kill points are shared among parts (k mod STORE_PARTS), so the suite's workers can run them
# side by side; each part meets every outcome (old, incomplete, new with a journal: runs of at
# least 5 consecutive kill points) and both follow-ups (the next run, repair).
STORE_PARTS = 4


@pytest.mark.slow
@pytest.mark.parametrize("part", range(STORE_PARTS))
def test_a_commit_to_a_store_killed_after_any_step_is_finished_by_repair_or_the_next_run(
        part, s3, tmp_path, monkeypatch, capsys, surroundings):
    base = tmp_path / "base"
    base.mkdir()
    old, new = build(base, "all three")
    for rel in ["_manifest.json", "_SUCCESS", *files_of(old.manifest)]:
        s3.put(f"old/{rel}", (old.out_dir / rel).read_bytes())
    old_files, new_files = dataset_files(old.out_dir), dataset_files(new.out_dir)
    spec_next = json.loads((base / "next.yaml").read_text())
    steps = Steps(monkeypatch)
    real_filesystem = storage.filesystem
    monkeypatch.setattr(storage, "filesystem", lambda *a, **kw: CountedStore(real_filesystem(*a, **kw), steps))
    total = start_store_commit(s3, "clean", new, steps, monkeypatch, None)
    assert store_files(s3, "clean") == new_files
    assert total > 10, steps.log
    outcomes = []
    with surroundings(tmp_path / "base"):
        for k in range(part, total, STORE_PARTS):
            prefix = f"k{k:03d}"
            s3.put(f"{prefix}-beside.txt", b"not the dataset's")
            assert start_store_commit(s3, prefix, new, steps, monkeypatch, k) == k
            seen = read_store_as_documented(s3, prefix)
            if seen != "incomplete":
                assert seen in (old_files, new_files), "a reader saw files of neither dataset"
            journal = bool(store_pending(s3, prefix))
            outcomes.append((k, "old" if seen == old_files else "new" if seen == new_files else seen, journal))
            capsys.readouterr()
            keys = etags(s3, prefix)
            code = main(["verify", s3.url(prefix)])
            said = capsys.readouterr()
            assert etags(s3, prefix) == keys, "verify changed the store"
            assert "cannot trust" not in said.out + said.err
            if journal:
                assert code == 1 and "verify --repair" in said.out + said.err
                assert ("the dataset is complete" in said.out) == (seen == new_files), said.out
            else:
                assert seen != "incomplete" and code == 0, said.out + said.err
                for run in {key.split("/")[2] for key in s3.keys(f"{prefix}/_tmp/") if key.count("/") >= 3}:
                    assert f"LEFTOVER _tmp/{run}/:" in said.out, said.out      # uploads without a journal
            if k % 3 == 1:         # the next run: it finishes the commit first, then writes its own
                spec_next["sink"]["path"] = s3.url(prefix)
                (base / "next-s3.yaml").write_text(json.dumps(spec_next))
                assert main(["run", str(base / "next-s3.yaml"), "--backend", "cpu", "--scheduler", "sync"]) == 0, \
                    capsys.readouterr().err
                (base / "next-s3.yaml").unlink()
                assert store_files(s3, prefix, reports=False) == dataset_files(new.out_dir, reports=False)
            else:
                assert main(["verify", "--repair", s3.url(prefix)]) == 0, capsys.readouterr()
                assert read_store_as_documented(s3, prefix) == (new_files if journal or seen == new_files else old_files)
            store_files(s3, prefix, reports=False)          # the accounting identity
            assert main(["verify", s3.url(prefix)]) == 0, capsys.readouterr()
            assert not store_pending(s3, prefix)
            assert s3.get(f"{prefix}-beside.txt") == b"not the dataset's"
    kinds = {seen for _, seen, _ in outcomes}
    assert kinds == {"old", "new", "incomplete"}, outcomes
    assert any(seen == "new" and journal for _, seen, journal in outcomes), outcomes
