"""Durable on power loss (docs/reliability.md, "Power loss"): every file a run publishes is
flushed (fsync) before the rename that names it, and its folder after, before the next step that
relies on it. Checked on a trace of the real calls: os.fsync, os.replace, os.rename, os.link,
os.unlink and os.mkdir are wrapped for the length of a run to record what they were given (by inode, since a
shard is renamed twice), then called as they are."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import gpuetl
from gpuetl import durable, samples
from gpuetl.sinks.commit import JOURNAL, MANIFEST, OWNER, SUCCESS, TMP
from gpuetl.sinks.lock import LOCK


class Trace:
    def __init__(self):
        self.events: list[tuple] = []

    @staticmethod
    def _where(path, dir_fd) -> str:
        path = os.fsdecode(path)
        base = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None else os.getcwd()
        return os.path.normpath(os.path.join(base, path))

    def install(self, monkeypatch) -> "Trace":
        real = {n: getattr(os, n) for n in ("fsync", "replace", "rename", "link", "unlink", "mkdir")}

        def fsync(fd):
            st = os.fstat(fd)
            self.events.append(("fsync", st.st_ino, stat.S_ISDIR(st.st_mode), os.readlink(f"/proc/self/fd/{fd}")))
            return real["fsync"](fd)

        def renaming(name):
            def call(src, dst, *, src_dir_fd=None, dst_dir_fd=None, **kw):
                ino = os.stat(src, dir_fd=src_dir_fd, follow_symlinks=False).st_ino
                out = real[name](src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, **kw)
                where = self._where(dst, dst_dir_fd)
                self.events.append((name, ino, where, os.stat(os.path.dirname(where)).st_ino))
                return out
            return call

        def unlink(path, *, dir_fd=None):
            where = self._where(path, dir_fd)
            out = real["unlink"](path, dir_fd=dir_fd)
            self.events.append(("unlink", None, where, os.stat(os.path.dirname(where)).st_ino))
            return out

        def mkdir(path, mode=0o777, *, dir_fd=None):
            out = real["mkdir"](path, mode, dir_fd=dir_fd)
            where = self._where(path, dir_fd)
            self.events.append(("mkdir", None, where, os.stat(os.path.dirname(where)).st_ino))
            return out

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "mkdir", mkdir)
        for name in ("replace", "rename", "link"):
            monkeypatch.setattr(os, name, renaming(name))
        monkeypatch.setattr(os, "unlink", unlink)
        return self

    # questions asked of the trace

    def named(self, path: Path) -> list[int]:
        """Indexes of the renames and links that gave `path` its name."""
        return [i for i, e in enumerate(self.events) if e[0] in ("replace", "rename", "link") and e[2] == str(path)]

    def file_synced_before(self, inode: int, i: int) -> bool:
        return any(e[0] == "fsync" and not e[2] and e[1] == inode for e in self.events[:i])

    def dir_synced_between(self, folder_inode: int, i: int, j: int | None = None) -> bool:
        return any(e[0] == "fsync" and e[2] and e[1] == folder_inode for e in self.events[i + 1:j])

    def fsyncs(self) -> int:
        return sum(e[0] == "fsync" for e in self.events)


def _spec(count: int, splits: dict | None) -> dict:
    return {"version": 1, "name": "durable", "source": {"type": "text", "path": "access.log"},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
            "shard": {"count": count, **({"splits": splits} if splits else {})},
            "sink": {"path": "out", "mode": "overwrite"}}


@pytest.fixture
def base(tmp_path):
    samples.write_access_logs(tmp_path / "access.log", lines=600, bad_every=50)
    return tmp_path


def _run(base: Path, spec: dict):
    return gpuetl.Pipeline.from_dict(spec, base_dir=base).run(backend="cpu", scheduler="sync", progress=False)


def test_every_published_file_is_flushed_before_its_rename_and_its_folder_after(base, monkeypatch, surroundings):
    """An overwrite of a dataset with splits and a quarantine by one without: each file kind the
    run publishes (shards, quarantine, run report, manifest, _SUCCESS, the journal, _owner.json,
    the lock) had its bytes flushed before the rename or link that named it, and the folder
    holding the name flushed after it, before the step that relies on it; the old _SUCCESS is
    gone for good (its folder flushed) before any file of the dataset changes."""
    first = _run(base, _spec(2, {"train": 0.7, "val": 0.3}))
    assert first.counts["quarantined"] == 12
    trace = Trace().install(monkeypatch)
    with surroundings(base, dataset=base / "out"):
        result = _run(base, _spec(3, None))
    monkeypatch.undo()
    out = result.out_dir
    ev = trace.events
    counts = result.counts
    assert counts["rows_in"] == 600 == counts["rows_out"] + counts["filtered"] + counts["deduplicated"] + counts["quarantined"]

    kinds = {"shard": [out / s["path"] for s in result.manifest["shards"]],
             "quarantine": [out / q["path"] for q in result.manifest["quarantine"]],
             "report": [out / r["path"] for r in result.manifest["reports"]],
             "manifest": [out / MANIFEST], "success": [out / SUCCESS]}
    assert [len(kinds[k]) for k in ("shard", "quarantine", "report")] == [3, 1, 2]
    success_at = trace.named(out / SUCCESS)[-1]
    manifest_at = trace.named(out / MANIFEST)[-1]
    assert manifest_at < success_at
    for kind, paths in kinds.items():
        for path in paths:
            inode = path.stat().st_ino
            first_name = min(i for i, e in enumerate(ev) if e[0] in ("replace", "rename", "link") and e[1] == inode)
            assert trace.file_synced_before(inode, first_name), f"{kind} {path} renamed before it was flushed"
            last = trace.named(path)[-1]
            folder = path.parent.stat().st_ino
            before = {"success": None, "manifest": success_at}.get(kind, manifest_at)
            assert trace.dir_synced_between(folder, last, before), f"{kind} {path}: its folder was not flushed " \
                                                                   "after the rename, before the next step"

    # the journal: flushed, named, its folder flushed, all before the old _SUCCESS goes
    journals = [i for i, e in enumerate(ev) if e[0] == "replace" and e[2].endswith("/" + JOURNAL)]
    assert len(journals) == 1
    j = journals[0]
    success_gone = next(i for i, e in enumerate(ev) if e[0] == "unlink" and e[2] == str(out / SUCCESS))
    assert j < success_gone
    assert trace.file_synced_before(ev[j][1], j)
    assert trace.dir_synced_between(ev[j][3], j, success_gone)
    made = next(i for i, e in enumerate(ev) if e[0] == "mkdir" and e[2] == os.path.dirname(ev[j][2]))
    assert trace.dir_synced_between(ev[made][3], made, j), "the run's folder was not flushed into _tmp/ before its journal"
    first_change = min(i for i, e in enumerate(ev) if i > success_gone and e[0] in ("replace", "unlink")
                       and e[2].startswith(str(out) + "/") and not e[2].startswith(str(out / TMP) + "/"))
    assert trace.dir_synced_between(ev[success_gone][3], success_gone, first_change), \
        "the old _SUCCESS's removal was not flushed before the dataset's files changed"

    # the owner record (before the run writes in its folder), the lock (before the run makes its folder)
    owners = [i for i, e in enumerate(ev) if e[0] == "replace" and e[2].endswith("/" + OWNER)]
    locks = [i for i, e in enumerate(ev) if e[0] == "link" and e[2] == str(out / TMP / LOCK)]
    assert owners and locks
    for i in owners + locks:
        folder = os.path.dirname(ev[i][2])
        following = next(k for k in range(i + 1, len(ev)) if ev[k][0] in ("mkdir", "replace", "rename", "link")
                         and ev[k][2].startswith(folder + "/"))
        assert trace.file_synced_before(ev[i][1], i) and trace.dir_synced_between(ev[i][3], i, following), ev[i]


def test_durable_false_skips_every_flush_and_writes_the_same_dataset(base, monkeypatch, surroundings):
    """sink.durable: false (scratch output) calls fsync nowhere; the dataset's bytes are the same."""
    durable_run = _run(base, _spec(2, {"train": 0.7, "val": 0.3}))
    shas = {s["path"]: s["sha256"] for s in durable_run.shards}
    trace = Trace().install(monkeypatch)
    spec = _spec(2, {"train": 0.7, "val": 0.3})
    spec["sink"]["durable"] = False
    with surroundings(base, dataset=base / "out"):
        scratch = _run(base, spec)
    monkeypatch.undo()
    assert trace.fsyncs() == 0
    c = scratch.counts
    assert c["rows_in"] == 600 == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    assert trace.named(scratch.out_dir / SUCCESS)                    # the run did publish, unflushed
    assert {s["path"]: s["sha256"] for s in scratch.shards} == shas


def test_publish_flushes_the_file_then_renames_then_flushes_the_folder(tmp_path, monkeypatch):
    (tmp_path / "x.partial").write_bytes(b"abc")
    trace = Trace().install(monkeypatch)
    durable.publish(str(tmp_path / "x.partial"), str(tmp_path / "x"))
    monkeypatch.undo()
    inode = (tmp_path / "x").stat().st_ino
    assert [(e[0], e[1]) for e in trace.events] == [("fsync", inode), ("replace", inode),
                                                    ("fsync", tmp_path.stat().st_ino)]
    assert (tmp_path / "x").read_bytes() == b"abc"


def test_a_folder_that_cannot_be_flushed_is_let_be_but_a_failed_file_flush_is_an_error(tmp_path, monkeypatch):
    """fsync on a folder is refused by some file systems (EINVAL): nothing more to flush there.
    An I/O error flushing a file is a write that failed, and is raised."""
    import errno

    def refuse(code):
        def fsync(fd):
            raise OSError(code, os.strerror(code))
        return fsync

    monkeypatch.setattr(os, "fsync", refuse(errno.EINVAL))
    durable.sync_dir(str(tmp_path))
    monkeypatch.setattr(os, "fsync", refuse(errno.EIO))
    with pytest.raises(OSError):
        durable.sync_dir(str(tmp_path))
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(OSError):
        durable.sync_path(str(tmp_path / "f"))


def test_resume_writes_again_a_shard_a_power_cut_emptied(base, monkeypatch, surroundings):
    """With sink.durable: false a power cut can keep a shard's name and record and lose its bytes.
    A resumed run keeps a written shard only when its size is the one recorded: the emptied
    shard is written again, and every committed file is the bytes its manifest entry names."""
    import hashlib

    from gpuetl.errors import OutputError
    from gpuetl.sinks import commit

    spec = _spec(3, None)
    spec["sink"].update(mode="resume", durable=False)

    def cut(self, run_tmp, manifest):
        raise OutputError("the power went before the commit")

    monkeypatch.setattr(commit.OutputFolder, "commit", cut)
    with pytest.raises(OutputError, match="the power went"):
        _run(base, spec)
    monkeypatch.undo()
    shards = sorted((base / "out" / TMP).glob("*/data/part-*.parquet"))
    assert len(shards) == 3
    shards[1].write_bytes(b"")                                  # what the cut left of one of them
    with surroundings(base, dataset=base / "out"):
        result = _run(base, spec)
    c = result.counts
    assert c["rows_in"] == 600 == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    for entry in result.manifest["shards"] + result.manifest["quarantine"]:
        data = (result.out_dir / entry["path"]).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["bytes"], entry["sha256"]), entry["path"]
