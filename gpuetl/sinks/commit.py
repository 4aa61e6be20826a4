"""The commit protocol and the rule that guards the output folder (docs/design.md, "Output commit").

gpuetl deletes or overwrites only paths it can prove it wrote: those listed in the previous
dataset's manifest, or in a journal or temporary folder of its own run. Every such path is checked
(relative, no `..`, inside the dataset folder) and reached through folder descriptors opened with
O_NOFOLLOW, so a symbolic link anywhere on the way is a refusal that names it, never a path
followed out of the dataset. Anything else in the folder (but dotfiles) is a refusal too, before
any data is read.

A run holds a lock, `_tmp/_lock`, created exclusively; it records host, pid and the process's
start time, so a lock whose process is gone (or whose pid was reused) is taken over, and a lock
from another host is refused, naming it. Shards are written under `_tmp/<run-id>/data/`. When all
are written, a journal of the commit (`_commit.json`: the previous dataset's files, the moves,
the new manifest) is written first; then the old files are removed, the new ones renamed into
place, `_manifest.json` written, and `_SUCCESS` last, holding the manifest's sha256; then the
run's folder is removed, its journal and owner record last. A commit killed half-way is finished
from its journal by the next run or by `gpuetl verify --repair`, which also remove what killed
runs left in `_tmp/` when it is provably gpuetl's (find_leftovers).
Names starting with '_' are hidden from pyarrow's, Spark's and pyarrow.dataset's discovery, so
_tmp/ and _quarantine/ are not read as data; glob readers (DuckDB's read_parquet('out/**/*.parquet'),
polars) must use 'out/*.parquet' or 'out/[!_]*/*.parquet' instead (docs/consuming.md).
"""

from __future__ import annotations

import errno
import fnmatch
import glob
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..durable import sync_dir, sync_file
from ..errors import OutputError, OutputWriteFailed
from .delta import DELTA_ENTRY, DELTA_LOG, commit_version
from .lock import LOCK, LOCK_FORMAT, LOCK_TEMP, RunLock, describe, is_alive, left_lock, this_process

SUCCESS = "_SUCCESS"
MANIFEST = "_manifest.json"
TMP = "_tmp"
JOURNAL = "_commit.json"
OWNER = "_owner.json"
MANIFEST_FORMAT = "gpuetl-manifest/1"
RUN_FORMAT = "gpuetl-run/1"
JOURNAL_FORMAT = "gpuetl-commit/1"
MOVE_HINT = "move them or choose another sink.path"
SHOWN = 10                 # paths named in a refusal
RUN_NAME = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}(-report)?")          # new_run_id(), a failed run's report
OWNER_PARTIAL = re.compile(re.escape(OWNER) + r"\.[0-9a-f]{8}\.partial")   # _Tree.write_file's partial


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def manifest_bytes(manifest: dict) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode()


def journal_bytes(journal: dict) -> bytes:
    """The commit journal is read back by gpuetl alone: compact JSON, written by the json module's
    C encoder (any `indent` makes it use the pure-Python one, ~4x slower on a manifest that pins
    every input file)."""
    return json.dumps(journal, separators=(",", ":")).encode()


def success_bytes(manifest_raw: bytes) -> bytes:
    """_SUCCESS holds the manifest's sha256: `verify` then notices an edited manifest (an edit, not
    a forgery: whoever edits both files can make them agree)."""
    return (json.dumps({"manifest_sha256": hashlib.sha256(manifest_raw).hexdigest()}) + "\n").encode()


# -- paths gpuetl may touch ---------------------------------------------------------------------

def unsafe_reason(rel) -> str | None:
    """Why `rel` is not a plain relative path inside a folder (None when it is)."""
    if not isinstance(rel, str) or not rel:
        return "not a path"
    if "\0" in rel or "\\" in rel:
        return "holds a NUL or backslash"
    if rel.startswith("/") or os.path.isabs(rel):
        return "an absolute path"
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "holds '..', '.' or an empty part"
    return None


def _named(paths: list[str]) -> str:
    shown = ", ".join(_printable(p) for p in paths[:SHOWN])
    return shown + (f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else "")


def _printable(name: str, limit: int = 120) -> str:
    """A name as a message can show it: control characters (a newline, a terminal escape) quoted,
    a very long name cut in the middle."""
    name = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in name)
    return name if len(name) <= limit else f"{name[:limit // 2]}…{name[-limit // 2:]}"


class _Tree:
    """A folder worked in through descriptors: no link below it is ever followed. `durable`:
    each file written is flushed before its rename and its folder after (gpuetl/durable.py)."""

    def __init__(self, path: Path, fd: int, durable: bool = True):
        self.path, self.fd, self.durable = path, fd, durable

    @classmethod
    def open(cls, path: Path, durable: bool = True) -> "_Tree":
        return cls(path, os.open(path, os.O_RDONLY | os.O_DIRECTORY), durable)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def subtree(self, rel: str) -> "_Tree":
        with self.parent(rel) as (fd, name):
            return _Tree(self.path / rel, self._open_dir(fd, name, rel), self.durable)

    def _open_dir(self, fd: int, name: str, rel: str) -> int:
        try:
            return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                raise OutputError(f"sink.path: {self.path / rel} is a symbolic link or not a folder; "
                                  "gpuetl does not follow links in a dataset folder", hint=MOVE_HINT) from None
            raise

    @contextmanager
    def parent(self, rel: str, create: bool = False):
        """(descriptor of rel's folder, rel's last name); create: make missing folders on the way."""
        why = unsafe_reason(rel)
        if why:
            raise OutputError(f"{self.path}: refusing the path {rel!r} ({why})")
        parts = rel.split("/")
        fd = os.dup(self.fd)
        try:
            for i, part in enumerate(parts[:-1]):
                try:
                    sub = self._open_dir(fd, part, "/".join(parts[:i + 1]))
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(part, dir_fd=fd)
                    sub = self._open_dir(fd, part, "/".join(parts[:i + 1]))
                os.close(fd)
                fd = sub
            yield fd, parts[-1]
        finally:
            os.close(fd)

    def lstat(self, rel: str) -> os.stat_result | None:
        try:
            with self.parent(rel) as (fd, name):
                return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def _refuse_unless_file(self, rel: str, st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a file"
            raise OutputError(f"sink.path: {self.path / rel} is {what}, where gpuetl expected a file it wrote; "
                              "refusing to touch it", hint=MOVE_HINT)

    def unlink_file(self, rel: str) -> None:
        """Remove a file gpuetl wrote; a link or folder there now is a refusal."""
        try:
            with self.parent(rel) as (fd, name):
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                self._refuse_unless_file(rel, st)
                os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass

    def read_file(self, rel: str, limit: int = 1 << 30) -> bytes:
        with self.parent(rel) as (fd, name):
            f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)     # a FIFO: no wait
            try:
                if not stat.S_ISREG(os.fstat(f).st_mode):
                    raise OutputError(f"{self.path / rel} is not a file")
                with os.fdopen(os.dup(f), "rb") as fh:
                    return fh.read(limit)
            finally:
                os.close(f)

    def write_file(self, rel: str, data: bytes, *, exclusive: bool = False, staging: "_Tree | None" = None) -> None:
        """Write through a partial file and rename it into place (or, exclusive, create it). The
        partial file is made in `staging` when given (a run's own folder), so a crash never
        leaves one in the dataset."""
        with self.parent(rel, create=True) as (fd, name):
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            temp = name if exclusive else f"{name}.{uuid.uuid4().hex[:8]}.partial"
            temp_fd = staging.fd if staging is not None and not exclusive else fd
            f = os.open(temp, flags, 0o644, dir_fd=temp_fd)
            try:
                with os.fdopen(f, "wb") as fh:
                    fh.write(data)
                    if self.durable:
                        sync_file(fh)                 # the bytes on the disk before the name
                if not exclusive:
                    if _exists(fd, name):
                        self._refuse_unless_file(rel, os.stat(name, dir_fd=fd, follow_symlinks=False))
                    os.replace(temp, name, src_dir_fd=temp_fd, dst_dir_fd=fd)
                self.sync(fd)                         # the name on the disk before the next step
            except BaseException:
                try:
                    os.unlink(temp, dir_fd=temp_fd)
                except FileNotFoundError:
                    pass
                raise

    def move_in(self, source: "_Tree", rel: str, replaceable: set[str]) -> bool:
        """Rename source/rel to self/rel; False when it is no longer in source (moved already).
        What it replaces must be a file listed in `replaceable`."""
        with source.parent(rel) as (sfd, sname):
            try:
                st = os.stat(sname, dir_fd=sfd, follow_symlinks=False)
            except FileNotFoundError:
                return False
            source._refuse_unless_file(rel, st)
            with self.parent(rel, create=True) as (dfd, dname):
                if _exists(dfd, dname):
                    self._refuse_unless_file(rel, os.stat(dname, dir_fd=dfd, follow_symlinks=False))
                    if rel not in replaceable:
                        raise OutputError(f"sink.path: {self.path / rel} appeared during the commit and gpuetl "
                                          "did not write it; refusing to replace it", hint=MOVE_HINT)
                os.replace(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
        return True

    def sync(self, fd: int | None = None, rel: str | None = None) -> None:
        """Flush a folder's entries (this one, the descriptor `fd`, or the folder `rel`) when durable."""
        if not self.durable:
            return
        if rel is None:
            sync_dir(self.fd if fd is None else fd)
            return
        try:
            with self._dir(rel) as dfd:
                sync_dir(dfd)
        except FileNotFoundError:                     # removed (emptied): its parent holds that
            pass

    @contextmanager
    def _dir(self, rel: str):
        if rel in ("", "."):
            yield self.fd
            return
        with self.parent(rel) as (fd, name):
            sub = self._open_dir(fd, name, rel)
            try:
                yield sub
            finally:
                os.close(sub)

    def rmdir_if_empty(self, rel: str) -> None:
        try:
            with self.parent(rel) as (fd, name):
                os.rmdir(name, dir_fd=fd)
        except OSError:
            pass

    def remove_run(self, rel: str) -> None:
        """Remove a run's temporary folder: everything in it, then its journal, its owner record
        last. A kill part-way leaves a folder its owner record still proves gpuetl's (and, until
        the journal goes, a commit the next run or `verify --repair` finishes)."""
        with self.parent(rel) as (fd, name):
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return
            if not stat.S_ISDIR(st.st_mode):
                raise OutputError(f"sink.path: {self.path / rel} is not a folder gpuetl made; refusing to remove it")
            run = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                with os.scandir(run) as entries:
                    names = sorted(e.name for e in entries)
                last = [n for n in (JOURNAL, OWNER) if n in names]
                for entry in [n for n in names if n not in last] + last:
                    if stat.S_ISDIR(os.stat(entry, dir_fd=run, follow_symlinks=False).st_mode):
                        shutil.rmtree(entry, dir_fd=run)     # descriptor-based: never follows a link (3.11+)
                    else:
                        os.unlink(entry, dir_fd=run)
            finally:
                os.close(run)
            os.rmdir(name, dir_fd=fd)


def _exists(fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


# -- the sink and the inputs --------------------------------------------------------------------

def check_apart_from_inputs(out: Path, input_files: list[str], patterns: list[str], base_dir: Path) -> None:
    """The sink may not equal, contain or lie inside an input path: overwrite would delete the
    inputs, and a later run would read its own output."""
    _check_sink_name(out)
    sink = os.path.realpath(out)
    for path, real in zip(input_files, _real_paths(input_files)):
        if real == sink or real.startswith(sink.rstrip(os.sep) + os.sep):
            raise OutputError(f"sink.path: {out} holds the input file {path}; gpuetl refuses to write its "
                              "output over its inputs", hint="choose a sink.path outside the inputs' folders")
    for pattern in patterns:
        full = pattern if os.path.isabs(pattern) else os.path.join(str(base_dir), pattern)
        if _pattern_reaches(full, sink):
            raise OutputError(f"sink.path: {out} lies where source.path {pattern!r} reads: a later run would "
                              "read this run's output", hint="choose a sink.path outside the inputs' folders, "
                              "or narrow the pattern")


def _real_paths(paths: list[str]):
    """os.path.realpath of each path, each folder resolved once: realpath checks every part of
    a path with an lstat, and a million images sit in a few thousand folders. A path that is
    itself a link is resolved in full."""
    folders: dict[str, str] = {}
    for path in paths:
        if os.path.islink(path):
            yield os.path.realpath(path)
            continue
        folder, name = os.path.split(path)
        if folder not in folders:
            folders[folder] = os.path.realpath(folder or os.curdir)
        yield os.path.join(folders[folder], name)


def _check_sink_name(out: Path) -> None:
    """A name no file system takes (a NUL byte, a part past the length limit): a pipeline error."""
    if "\x00" in str(out):
        raise OutputError(f"sink.path: {_printable(str(out))} holds a NUL byte", hint="choose another sink.path")
    try:
        os.lstat(out)
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            raise OutputError(f"sink.path: {_printable(str(out))}: {err.strerror}",
                              hint="choose a shorter sink.path") from None
        if err.errno == errno.ENOTDIR:        # a part of the path is a file: no folder can be made under it
            part = next((p for p in reversed(out.parents) if p.is_file()), out.parent)
            raise OutputError(f"sink.path: {_printable(str(out))}: {_printable(str(part))} is a file, not a folder",
                              hint="choose a sink.path whose folders are folders") from None


def _pattern_reaches(pattern: str, sink: str) -> bool:
    """Whether a glob could match the sink folder or anything in it."""
    parts = Path(os.path.normpath(pattern)).parts
    fixed = 0
    while fixed < len(parts) and not glob.has_magic(parts[fixed]):
        fixed += 1
    if fixed == len(parts):
        return False                          # a plain name: a file, checked as one
    root = os.path.realpath(os.path.join(*parts[:fixed]))
    if sink != root and not sink.startswith(root.rstrip(os.sep) + os.sep):
        return False
    below = Path(os.path.relpath(sink, root)).parts if sink != root else ()
    return _reaches(list(parts[fixed:]), list(below))


def _reaches(pattern: list[str], sink: list[str]) -> bool:
    if not sink:
        return bool(pattern)                  # the pattern goes on below the sink
    if not pattern:
        return False
    head = pattern[0]
    hidden = sink[0].startswith(".") and not head.startswith(".")
    if head == "**":
        return _reaches(pattern[1:], sink) or (not hidden and _reaches(pattern, sink[1:]))
    return not hidden and fnmatch.fnmatchcase(sink[0], head) and _reaches(pattern[1:], sink[1:])


# -- what the folder holds ----------------------------------------------------------------------

@dataclass
class Inventory:
    """The dataset folder as gpuetl sees it: the previous dataset's files (proven by its manifest),
    and everything else (but dotfiles and _tmp/), which is not gpuetl's to touch."""

    manifest: dict | None = None
    ours: list[str] = field(default_factory=list)      # files listed in the manifest, present
    foreign: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return SUCCESS in self.ours


def listed_files(manifest: dict) -> set[str]:
    """Every path a manifest proves gpuetl wrote (raises ValueError on an entry that is no path):
    shards, quarantine and report files; an append dataset's version manifests and their reports
    (sinks/versions.py); the Delta log's files (sinks/delta.py)."""
    paths = {MANIFEST, SUCCESS}
    versions = manifest.get("versions") if isinstance(manifest.get("versions"), list) else []
    delta = manifest.get("delta_log") if isinstance(manifest.get("delta_log"), dict) else {}
    for entry in (list(manifest.get("shards") or []) + list(manifest.get("quarantine") or [])
                  + list(manifest.get("reports") or [])          # the run report's files
                  + versions + [v.get("report") for v in versions if isinstance(v, dict) and v.get("report")]
                  + list(delta.get("files") or [])):
        rel = entry.get("path") if isinstance(entry, dict) else None
        why = unsafe_reason(rel)
        if why or rel.split("/")[0] == TMP:
            raise ValueError(f"the manifest lists {rel!r}, which is not a path inside the dataset")
        paths.add(rel)
    return paths


def load_manifest(tree: _Tree) -> dict | None:
    """The folder's manifest if it is one of ours; None when there is none (ValueError: unreadable)."""
    st = tree.lstat(MANIFEST)
    if st is None:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{MANIFEST} is not a file")
    try:
        manifest = json.loads(tree.read_file(MANIFEST))
    except (OSError, ValueError, RecursionError) as err:     # RecursionError: nested past Python's limit
        raise ValueError(f"{MANIFEST} is not valid JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{MANIFEST} is not a gpuetl manifest")
    return manifest


def take_inventory(tree: _Tree) -> Inventory:
    inv = Inventory()
    try:
        inv.manifest = load_manifest(tree)
        listed = listed_files(inv.manifest) if inv.manifest is not None else set()
    except ValueError as err:
        inv.manifest, listed = None, set()
        inv.foreign.append(f"{MANIFEST} ({err})")
    needed_dirs = {"/".join(p.split("/")[:i]) for p in listed for i in range(1, p.count("/") + 1)}

    def walk(fd: int, prefix: str) -> None:
        with os.scandir(fd) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                rel = prefix + entry.name
                if entry.name.startswith(".") or rel == TMP:
                    continue
                if rel == MANIFEST and inv.foreign[:1] and inv.foreign[0].startswith(MANIFEST):
                    continue                       # named already, with why it is not ours
                if entry.is_symlink():
                    inv.foreign.append(f"{rel} (a symbolic link)")
                elif entry.is_dir(follow_symlinks=False):
                    sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                    try:
                        before = len(inv.foreign) + len(inv.ours)
                        walk(sub, rel + "/")
                        if len(inv.foreign) + len(inv.ours) == before and rel not in needed_dirs:
                            inv.foreign.append(rel + "/")
                    finally:
                        os.close(sub)
                elif entry.is_file(follow_symlinks=False) and rel in listed:
                    inv.ours.append(rel)
                else:
                    inv.foreign.append(rel)

    walk(tree.fd, "")
    return inv


# -- a folder opened for a run ------------------------------------------------------------------

def _valid_owner(run: _Tree) -> dict | None:
    try:
        record = json.loads(run.read_file(OWNER, 1 << 16))
    except (OSError, ValueError, RecursionError, OutputError):
        return None
    if not isinstance(record, dict) or record.get("format") != RUN_FORMAT or record.get("run") != run.path.name:
        return None
    return record


# -- what killed runs leave in _tmp/ --------------------------------------------------------------

@dataclass
class Leftover:
    """A file or folder in `_tmp/` that is no lock, no interrupted commit and no live run's."""

    path: str               # relative to the dataset folder
    what: str
    removable: bool         # provably gpuetl's and its process gone: the next run and --repair remove it

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


def unfinished_run_note(append: bool = False) -> str:
    """What becomes of the files of a run that did not finish: an append dataset's next append
    starts over (it never continues a killed one, and resume would find a dataset of other inputs)."""
    return ("the next run removes them (" + ("an append is not continued: run it again with sink.mode: append"
                                             if append else "sink.mode: resume continues that run") + ")")


def find_leftovers(tmp: _Tree, append: bool = False) -> list[Leftover]:
    """What killed runs left in `_tmp/` (read-only). Removable: a file beside the lock that holds a
    lock record of a process provably gone (RunLock.acquire's new lock, or a dead run's lock moved
    aside); the folder of a run that ended, holding nothing but its owner record; a folder named
    like a run's that holds nothing or only partial owner records (a run killed while it claimed
    the folder: nothing in it to lose, and no live run writes an owner record while this process
    holds the lock). Named, never removed: a run's files whose owner record is gone (nothing proves
    them gpuetl's), a lock file that holds no record, anything else that is not gpuetl's. The
    folders of runs that did not finish are named too; the next run removes them (or resumes one;
    `append`: the folder is an append dataset's, whose runs are run again, not resumed)."""
    found = []
    with os.scandir(tmp.fd) as entries:
        names = sorted(e.name for e in entries)
    for name in names:
        rel = f"{TMP}/{name}"
        st = tmp.lstat(name)
        if name == LOCK or st is None:
            continue
        if LOCK_TEMP.fullmatch(name) and stat.S_ISREG(st.st_mode):
            try:
                data = tmp.read_file(name, 1 << 16)
            except FileNotFoundError:      # a lock file another run was taking the lock with: gone
                continue
            state, record = left_lock(name, data)
            if state == "gone":
                found.append(Leftover(rel, f"a lock file left by a gpuetl run killed while it took or took over the "
                                           f"lock ({describe(record)}, a process that is gone)", True))
            elif state == "alive":
                found.append(Leftover(rel, f"a lock file of a gpuetl run taking the lock ({describe(record)}); "
                                           "left alone while that process may run", False))
            else:
                found.append(Leftover(rel, "named like a gpuetl lock file but holds no lock record (a run killed "
                                           "before writing it?): nothing proves whose it is; if no gpuetl run is "
                                           "starting here, remove it", False))
        elif stat.S_ISDIR(st.st_mode):
            found += _run_leftovers(tmp, name, rel, append)
        else:
            found.append(Leftover(rel, "not gpuetl's (a link or a file gpuetl never makes there); left alone", False))
    return found


def _run_leftovers(tmp: _Tree, name: str, rel: str, append: bool = False) -> list[Leftover]:
    with tmp.subtree(name) as run:
        with os.scandir(run.fd) as entries:
            inside = sorted(e.name for e in entries)
        owner = _valid_owner(run)
        if owner is not None:
            if JOURNAL in inside:
                return []                       # an interrupted commit, named as such
            if is_alive(owner):
                return [Leftover(rel, f"the folder of a run that may still be running ({describe(owner)})", False)]
            if all(n == OWNER or OWNER_PARTIAL.fullmatch(n) for n in inside):
                return [Leftover(rel, f"the empty folder of a run that ended ({describe(owner)})", True)]
            return [Leftover(rel, f"the temporary files of a run that did not finish ({describe(owner)}): "
                                  + unfinished_run_note(append), False)]
        partials = [n for n in inside if OWNER_PARTIAL.fullmatch(n)]
        if RUN_NAME.fullmatch(name) and len(partials) == len(inside) and all(
                stat.S_ISREG(run.lstat(n).st_mode) and _partial_owner_of(run, n) for n in partials):
            return [Leftover(rel, "the folder of a run killed while it claimed it (no owner record yet)", True)]
    return [Leftover(rel, "no owner record gpuetl wrote: nothing proves gpuetl made this folder; left alone (if no "
                          "gpuetl run writes here, remove it)", False)]


def _partial_owner_of(run: _Tree, name: str) -> bool:
    """Whether a partial owner record is empty or a whole one of this run (what a kill leaves)."""
    raw = run.read_file(name, 1 << 16)
    if not raw:
        return True
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return isinstance(record, dict) and record.get("format") == RUN_FORMAT and record.get("run") == run.path.name


def leftovers(out: Path, append: bool = False) -> list[Leftover]:
    """find_leftovers in out/_tmp, read-only ([] when there is none, or it is a link)."""
    try:
        with _Tree.open(out) as tree:
            st = tree.lstat(TMP)
            if st is None or not stat.S_ISDIR(st.st_mode):
                return []
            with tree.subtree(TMP) as tmp:
                return find_leftovers(tmp, append)
    except (OSError, OutputError):
        return []


def journal_problem(out: Path, name: str) -> str | None:
    """Why the journal in out/_tmp/name cannot be trusted (None: `verify --repair` would finish it)."""
    try:
        with _Tree.open(out) as tree, tree.subtree(f"{TMP}/{name}") as run:
            validate_journal(run, tree)
        return None
    except (ValueError, OutputError, OSError) as err:
        return str(err).split("\n")[0]


def finished_commit(journal_raw: bytes | None, manifest_raw: bytes | None, success_raw: bytes | None) -> bool:
    """Whether a journal's commit is done but for removing its run's folder: the manifest in
    place is the journal's, and `_SUCCESS` holds its sha256."""
    try:
        raw = manifest_bytes(json.loads(journal_raw)["manifest"])
    except (TypeError, ValueError, KeyError, RecursionError):
        return False
    return manifest_raw == raw and success_raw == success_bytes(raw)


def interrupted_commit(out: Path, name: str, where) -> str:
    """What verify says of the journal in out/_tmp/name (read-only)."""
    why = journal_problem(out, name)
    if why is not None:
        return (f"a commit journal gpuetl cannot trust ({why}); --repair will not use it: if gpuetl did not "
                "write it, move it away")
    try:
        with _Tree.open(out) as tree:
            done = finished_commit(tree.read_file(f"{TMP}/{name}/{JOURNAL}"), tree.read_file(MANIFEST),
                                   tree.read_file(SUCCESS, 1 << 16))
    except (OSError, OutputError):
        done = False
    return interrupted_text(done, where)


def interrupted_text(done: bool, where) -> str:
    if done:
        return (f"a commit that finished but for removing its run's folder (the dataset is complete): "
                f"`gpuetl verify --repair {where}` removes it")
    return f"an interrupted commit: `gpuetl verify --repair {where}` finishes it"


def pending_journals(out: Path) -> list[str]:
    """Names of the run folders under out/_tmp holding a commit journal (read-only)."""
    root = out / TMP
    if not root.is_dir() or root.is_symlink():
        return []
    return sorted(p.name for p in root.iterdir()
                  if not p.is_symlink() and p.is_dir() and (p / JOURNAL).is_file() and not (p / JOURNAL).is_symlink())


def check_journal(journal, run: str, present, on_disk: set[str]) -> dict:
    """The one rule for trusting a commit journal, in a folder or in a store (ValueError says why):
    well formed and of this run; every path plain, inside the dataset and never in `_tmp/`; every
    file its manifest lists among its moves; and every file it would remove that is there
    (`present(rel)`) listed by a manifest: the one in the dataset now (`on_disk`) or its own. A
    file of the previous dataset that is gone already is nothing to remove: once the new manifest
    is in place, the files the new dataset drops are gone, and the commit is still finished."""
    if not isinstance(journal, dict) or journal.get("format") != JOURNAL_FORMAT or journal.get("run") != run:
        raise ValueError("not a commit journal of this run")
    moves, previous, manifest = journal.get("moves"), journal.get("previous"), journal.get("manifest")
    keep, created = journal.get("keep", []), journal.get("created", [])
    if not all(isinstance(x, list) for x in (moves, previous, keep, created)) or not isinstance(manifest, dict):
        raise ValueError("it lacks its moves, previous files or manifest")
    for rel in moves + previous + keep + created:
        why = unsafe_reason(rel)
        if why or rel.split("/")[0] == TMP or (rel in (MANIFEST, SUCCESS) and rel in moves + keep + created):
            raise ValueError(f"it names the path {rel!r}, which gpuetl would never write ({why or 'a reserved name'})")
    if not set(keep) <= set(previous):
        raise ValueError("it keeps files the dataset before it did not hold")
    if any(not DELTA_ENTRY.fullmatch(rel) for rel in created):
        raise ValueError("it names files the commit would create that are no Delta log entries")
    listed = listed_files(manifest)
    if not listed - {MANIFEST, SUCCESS} <= set(moves) | set(keep) | set(created):
        raise ValueError("its manifest lists files the commit does not move")
    unproven = sorted(rel for rel in set(previous) - on_disk - listed if present(rel))
    if unproven:
        raise ValueError(f"it would remove {unproven[0]!r}, which no manifest lists")
    return journal


def sort_listed(manifest: dict, previous: list[str], staged) -> tuple[list[str], list[str], list[str]]:
    """The files a new manifest lists, by what the commit does with each: (moves: written by the
    run, `staged(rel)`, and moved into place; keep: files of the dataset before it that the new
    one holds as they are, an earlier version's shards; created: the Delta log entry the commit
    itself writes). A Delta log entry the previous dataset holds under the same name (one being
    overwritten) is created again, never kept: its contents differ."""
    listed = sorted(listed_files(manifest) - {MANIFEST, SUCCESS})
    before = set(previous)
    delta = manifest.get("delta_log") if isinstance(manifest.get("delta_log"), dict) else {}
    newest = f"{DELTA_LOG}/{delta.get('table_version', -1):020d}.json" if delta else None
    created = [rel for rel in listed if rel == newest and not staged(rel)]
    keep = [rel for rel in listed if rel in before and rel not in created and not staged(rel)]
    moves = [rel for rel in listed if rel not in keep and rel not in created]
    return moves, keep, created


def validate_journal(run: _Tree, tree: _Tree) -> dict:
    """The journal of an interrupted commit in run (a folder of tree's _tmp/), every path checked
    (ValueError says what is wrong): check_journal, with an owner record and a real data folder."""
    if _valid_owner(run) is None:
        raise ValueError(f"{run.path / OWNER} is not an owner record gpuetl wrote")
    try:
        journal = json.loads(run.read_file(JOURNAL))
    except (OSError, ValueError, RecursionError, OutputError) as err:
        raise ValueError(f"{run.path / JOURNAL} cannot be read ({err})") from None
    try:
        check_journal(journal, run.path.name, lambda rel: tree.lstat(rel) is not None, listed_on_disk(tree))
    except ValueError as err:
        raise ValueError(f"{run.path / JOURNAL}: {err}") from None
    data = run.lstat("data")
    if data is not None and not stat.S_ISDIR(data.st_mode):
        raise ValueError(f"{run.path / 'data'} is a symbolic link or a file, not the folder gpuetl wrote shards to")
    return journal


def listed_on_disk(tree: _Tree) -> set[str]:
    try:
        manifest = load_manifest(tree)
        return listed_files(manifest) if manifest is not None else set()
    except ValueError:
        return set()


class OutputFolder:
    """The dataset folder while a run (or `verify --repair`) holds its lock."""

    def __init__(self, out: Path, log=lambda *_: None, durable: bool = True):
        self.out, self.log = out, log
        self.durable = durable                 # files flushed before they are published (gpuetl/durable.py)
        self.created: list[Path] = []          # folders this process made, outermost first
        self.tree: _Tree | None = None
        self.tmp: _Tree | None = None
        self.lock: RunLock | None = None
        self.inventory = Inventory()
        self.committed = False
        self.journal_written = False           # a commit that fails after this is finished by --repair
        self.tmp_used = False                  # a run folder of ours was made or removed in _tmp/

    # opening and closing

    def read(self, rel: str) -> bytes | None:
        """The bytes of the file at `rel` in the dataset, never through a link (None: missing; b""
        where a link or a folder lies: no bytes of a file), as ObjectStoreFolder.read gives them."""
        try:
            return self.tree.read_file(rel)
        except FileNotFoundError:
            return None
        except OSError:                           # a link (O_NOFOLLOW) or a folder
            return b""

    def open(self) -> "OutputFolder":
        out = self.out
        if os.path.lexists(out) and not out.is_dir():
            raise OutputError(f"sink.path: {out} " + (f"is a symbolic link to {os.readlink(out)!r}, not a folder" if out.is_symlink() else "exists and is not a folder"))
        missing = []
        for folder in [out, *out.parents]:
            if os.path.lexists(folder):
                break
            missing.append(folder)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise OutputWriteFailed(f"sink.path: cannot create {out}: {err.strerror}") from None
        self.created = [f for f in reversed(missing) if f.is_dir()]
        try:
            self.tree = _Tree.open(out, self.durable)
            for _ in range(8):
                st = self.tree.lstat(TMP)
                if st is not None and not stat.S_ISDIR(st.st_mode):
                    raise OutputError(f"sink.path: {out / TMP} is a symbolic link or a file, not gpuetl's temporary "
                                      "folder; refusing to use it", hint=MOVE_HINT)
                if st is None:
                    try:
                        os.mkdir(TMP, dir_fd=self.tree.fd)
                        self.created.append(out / TMP)
                        self.tree.sync()
                    except FileExistsError:            # another run made it just now
                        pass
                self.tmp = self.tree.subtree(TMP)
                self.lock = RunLock(self.tmp, this_process(LOCK_FORMAT))
                try:
                    self.lock.acquire(self.log)
                    break
                except FileNotFoundError:
                    # a run that just ended removed its empty _tmp/ under this one: make it again
                    self.tmp.close()
                    self.tmp = self.lock = None
            else:
                raise OutputError(f"sink.path: {out / TMP} keeps disappearing while this run takes the lock",
                                  hint="is another program removing it? run again")
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Let go of the lock; remove the folders this process made if they are empty."""
        if self.lock is not None and self.lock.inode:
            self.lock.release()
        for t in (self.tmp, self.tree):
            if t is not None:
                t.close()
        self.tmp = self.tree = self.lock = None
        if self.tmp_used or self.out / TMP in self.created:
            _remove_if_empty(self.out / TMP)
        if not self.committed:
            for folder in reversed(self.created):
                _remove_if_empty(folder)

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()

    # the rule

    def survey(self, mode: str) -> Inventory:
        """Finish interrupted commits, remove what killed runs left, then refuse unless everything
        in the folder is gpuetl's."""
        self.recover()
        self.clean_leftovers()
        inv = self.inventory = take_inventory(self.tree)
        refuse(self.out, inv, mode)
        return inv

    def clean_leftovers(self) -> list[str]:
        """Remove the leftovers find_leftovers proves gpuetl's (under this process's lock)."""
        removed = []
        for left in find_leftovers(self.tmp):
            if not left.removable:
                continue
            name = left.path.split("/", 1)[1]
            self.log(f"removing what a gpuetl run left: {left}")
            st = self.tmp.lstat(name)
            if st is not None and stat.S_ISDIR(st.st_mode):
                self.tmp.remove_run(name)
            else:
                self.tmp.unlink_file(name)
            self.tmp_used = True
            removed.append(left.path)
        return removed

    # temporary folders of runs

    def runs(self, note: bool = False) -> list[Path]:
        """Temporary folders made by gpuetl runs (with a valid owner record); others are left alone."""
        found = []
        with os.scandir(self.tmp.fd) as entries:
            names = sorted(e.name for e in entries if not e.name.startswith(LOCK))
        for name in names:
            try:
                with self.tmp.subtree(name) as run:
                    ours = _valid_owner(run) is not None
            except (OutputError, OSError):
                ours = False
            if ours:
                found.append(self.out / TMP / name)
            elif note:
                self.log(f"note: leaving {self.out / TMP / name} alone: gpuetl did not make it")
        return found

    def refuse_links(self, run_tmp: Path) -> None:
        """Before a run goes on writing into an earlier run's folder: no link anywhere in it."""
        links = []
        for folder, dirs, files in os.walk(run_tmp, followlinks=False):
            links += [os.path.relpath(os.path.join(folder, n), self.out) for n in dirs + files
                      if os.path.islink(os.path.join(folder, n))]
        if links:
            raise OutputError(f"sink.path: the interrupted run's folder holds symbolic links ({_named(sorted(links))}); "
                              "gpuetl does not write through links", hint=f"move {run_tmp} away and run again")

    def owner(self, run_tmp: Path) -> dict | None:
        with self.tmp.subtree(run_tmp.name) as run:
            return _valid_owner(run)

    def new_run(self, run_id: str) -> Path:
        os.mkdir(run_id, dir_fd=self.tmp.fd)
        self.tmp.sync()                        # the journal written in it later must be found after a power cut
        self.tmp_used = True
        self.claim(self.out / TMP / run_id)
        return self.out / TMP / run_id

    def claim(self, run_tmp: Path) -> None:
        """Mark a run's folder as this process's (a new run, or resume taking over an interrupted one)."""
        record = {**this_process(RUN_FORMAT), "run": run_tmp.name}
        self.tmp.write_file(f"{run_tmp.name}/{OWNER}", json.dumps(record).encode())

    def abandon(self, run_tmp: Path) -> None:
        self.tmp.remove_run(run_tmp.name)
        self.tmp_used = True

    # the commit

    def commit(self, run_tmp: Path, manifest: dict) -> None:
        self.lock.check()
        with self.tmp.subtree(run_tmp.name) as run:
            # what the manifest lists, not whatever is in data/ (a killed writer's .partial stays behind)
            previous = sorted(set(self.inventory.ours) - {SUCCESS})
            moves, keep, created = sort_listed(manifest, previous, lambda rel: run.lstat(f"data/{rel}") is not None)
            journal = {"format": JOURNAL_FORMAT, "run": run_tmp.name, "previous": previous, "moves": moves,
                       "keep": keep, "created": created, "manifest": manifest}
            self._preflight(run_tmp.name, journal)     # a refusal now leaves the old dataset as it was
            try:
                run.write_file(JOURNAL, journal_bytes(journal))
            except OSError as err:
                raise OutputWriteFailed(
                    f"sink.path: writing the commit journal {run_tmp / JOURNAL} failed ({err.strerror or err}); "
                    f"nothing in {self.out} was changed", hint="free space or fix the cause, then run again") from None
            self.journal_written = True
            validate_journal(run, self.tree)
        try:
            self._roll_forward(run_tmp.name, journal)
        except OSError as err:      # the journal is written: `verify --repair` finishes it
            raise OutputWriteFailed(
                f"sink.path: committing to {self.out} failed part-way ({_os_message(err)}); the dataset is not "
                "complete (no _SUCCESS)", hint=f"free the space or fix the cause, then run "
                f"`gpuetl verify --repair {self.out}`: it finishes the commit from its journal") from None
        self.committed = True

    def recover(self) -> list[str]:
        """Finish the commits that were interrupted, each journal checked first."""
        return finish_commits(self)

    def journals(self):
        """(run, journal) of each run folder holding a journal, the journal trusted (validate_journal)."""
        for run_tmp in self.runs():
            with self.tmp.subtree(run_tmp.name) as run:
                if run.lstat(JOURNAL) is None:
                    continue
                try:
                    journal = validate_journal(run, self.tree)
                except ValueError as err:
                    raise OutputError(f"sink.path: {err}; not finishing that commit, nothing was changed",
                                      hint=f"if gpuetl did not write it, move {run_tmp} away") from None
            yield run_tmp.name, journal

    def run_owner(self, run: str) -> dict | None:
        return self.owner(self.out / TMP / run)

    def finish(self, run: str, journal: dict) -> None:
        self._roll_forward(run, journal)

    def _preflight(self, run_name: str, journal: dict) -> bool:
        """Check every path the roll-forward will touch before it touches any: each a file (or
        absent) with no link on the way. Whether the run's data folder is still there."""
        has_data = _isdir(self.tmp, f"{run_name}/data")
        previous = set(journal["previous"])
        for rel in journal.get("keep", []):
            if self.tree.lstat(rel) is None:
                raise OutputError(f"sink.path: {self.out / rel}, a file of the dataset this commit keeps, is gone",
                                  hint=f"run `gpuetl verify {self.out}`; rewrite the dataset with sink.mode: overwrite")
        for rel in [SUCCESS, MANIFEST, *journal["previous"], *journal["moves"], *journal.get("created", [])]:
            st = self.tree.lstat(rel)
            if st is not None:
                self.tree._refuse_unless_file(rel, st)
                if rel in journal["moves"] and rel not in previous and has_data and \
                        self.tmp.lstat(f"{run_name}/data/{rel}") is not None:
                    raise OutputError(f"sink.path: {self.out / rel} is in the way of the commit and gpuetl did "
                                      "not write it; refusing to replace it", hint=MOVE_HINT)
        return has_data

    def _roll_forward(self, run_name: str, journal: dict) -> None:
        """Run again on the same journal (a later run, `verify --repair`), it finishes the same
        commit; once `_SUCCESS` holds the sha256 of the journal's manifest, and that manifest is
        in place, only the run's folder is left to remove."""
        tree = self.tree
        has_data = self._preflight(run_name, journal)
        raw = manifest_bytes(journal["manifest"])
        if not self._committed(raw):
            self._replace_dataset(run_name, journal, has_data, raw)
        self.tmp.remove_run(run_name)
        self.tmp_used = True

    def _committed(self, raw: bytes) -> bool:
        try:
            return self.tree.read_file(SUCCESS, 1 << 16) == success_bytes(raw) and \
                self.tree.read_file(MANIFEST) == raw
        except (OSError, OutputError):
            return False

    def _replace_dataset(self, run_name: str, journal: dict, has_data: bool, raw: bytes) -> None:
        tree = self.tree
        tree.unlink_file(SUCCESS)
        tree.sync()                                   # gone for good before any file of the dataset changes
        moves, previous = journal["moves"], journal["previous"]
        new = set(moves) | set(journal.get("keep", []))
        for rel in previous:
            if rel not in new and rel != MANIFEST:
                tree.unlink_file(rel)
        gone = [rel for rel in previous if rel not in new]       # an earlier version's files (keep): untouched
        folders = {"/".join(p.split("/")[:i]) for p in gone for i in range(1, p.count("/") + 1)}
        for folder in sorted(folders, key=lambda f: -f.count("/")):
            tree.rmdir_if_empty(folder)              # emptied: the previous dataset's split folders
        if has_data:                                  # gone: every file was moved already
            with self.tmp.subtree(f"{run_name}/data") as data:
                for rel in moves:
                    tree.move_in(data, rel, set(previous))
                for folder in sorted({os.path.dirname(rel) for rel in moves}):
                    data.sync(rel=folder)             # the moves' sources on the disk
        for folder in sorted({"/".join(p.split("/")[:i]) for p in gone + moves for i in range(p.count("/") + 1)}):
            tree.sync(rel=folder)                     # removals and moves on the disk before the manifest names them
        with self.tmp.subtree(run_name) as run:
            tree.write_file(MANIFEST, raw, staging=run)
            if journal["manifest"].get("delta_log"):       # after the manifest, before _SUCCESS (sinks/delta.py)
                commit_version(self.out, journal["manifest"])
                tree.sync(rel=DELTA_LOG)
            tree.write_file(SUCCESS, success_bytes(raw), staging=run)


def finish_commits(folder) -> list[str]:
    """Finish every interrupted commit of a dataset, in a folder or a store (an OutputFolder or an
    objectstore.ObjectStoreFolder, under its lock): each journal trusted first (check_journal),
    none whose run is committing on this host right now, each finished from its journal (a commit
    already finished only has its run's folder removed). Run again after a kill, it finishes the
    same commits."""
    finished = []
    for run, journal in folder.journals():
        owner = folder.run_owner(run)
        if owner and owner.get("pid") != os.getpid() and is_alive(owner) and owner.get("host") == socket.gethostname():
            raise OutputError(f"sink.path: the run {run} ({describe(owner)}) is committing right now")
        folder.log(f"finishing the interrupted commit of run {run}")
        folder.finish(run, journal)
        finished.append(run)
    if finished:
        folder.committed = True
    return finished


def refuse(out: Path, inv: Inventory, mode: str) -> None:
    """Anything gpuetl did not write is in the way, in every mode; mode: error refuses ours too."""
    if inv.foreign:
        verb = "overwrite" if mode == "overwrite" else "write into"
        raise OutputError(f"sink.path: {out} holds {len(inv.foreign)} path{'s' if len(inv.foreign) > 1 else ''} "
                          f"gpuetl did not write ({_named(inv.foreign)}); refusing to {verb} it "
                          f"(sink.mode: {mode})", hint=MOVE_HINT)
    if mode == "error" and inv.ours:
        what = "a complete dataset" if inv.complete else "an incomplete dataset (no _SUCCESS)"
        raise OutputError(f"sink.path: {out} already holds {what}; refusing to touch it (sink.mode: error)",
                          hint="set sink.mode: overwrite to replace it, or choose another sink.path")


def _isdir(tree: _Tree, rel: str) -> bool:
    """Whether rel is a folder; False when it is absent; a refusal when it is a link or a file."""
    st = tree.lstat(rel)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise OutputError(f"sink.path: {tree.path / rel} is a symbolic link or a file, not a folder gpuetl made; "
                          "refusing to move anything from it", hint=MOVE_HINT)
    return st is not None


def _os_message(err: OSError) -> str:
    return f"{err.strerror}: {err.filename}" if err.strerror and err.filename else str(err)


def _remove_if_empty(path: Path) -> None:
    try:
        if not path.is_symlink():
            path.rmdir()
    except OSError:
        pass


def looks_like_our_manifest(head: bytes) -> bool:
    """Whether the first bytes of a `_manifest.json` are a gpuetl manifest's (`format` is written first)."""
    return f'"format": "{MANIFEST_FORMAT}"'.encode() in head[:4096]


def check_not_in_a_dataset_of_ours(out: Path) -> None:
    """A sink inside another gpuetl dataset (in its `_tmp` or `_quarantine`, among its splits, or
    anywhere under it) would be written where that dataset's runs create, move and delete files,
    and would be foreign files in it: the folders above the sink are looked at for a gpuetl
    manifest or run lock (a `_tmp`/`_quarantine` folder's parent for any of its marks)."""
    for folder in out.parents:
        marks = (MANIFEST, SUCCESS, os.path.join(TMP, LOCK)) if folder.name in (TMP, "_quarantine") else ()
        parent = folder.parent
        if marks and any(os.path.lexists(parent / name) for name in marks):
            raise OutputError(f"sink.path: {out} lies inside {folder}, a folder the gpuetl dataset {parent} "
                              "keeps for itself", hint="choose a sink.path outside that dataset")
        if _is_dataset(folder):
            raise OutputError(f"sink.path: {out} lies inside the gpuetl dataset {folder}; a dataset inside another "
                              "would be written among its files", hint="choose a sink.path outside that dataset")


def _is_dataset(folder: Path) -> bool:
    if os.path.lexists(folder / TMP / LOCK):
        return True
    try:
        fd = os.open(folder / MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and looks_like_our_manifest(os.read(fd, 4096))
    except OSError:
        return False
    finally:
        os.close(fd)


def survey_read_only(out: Path, mode: str) -> None:
    """The refusals that need no lock, made before anything is created in the folder; skipped
    while a commit waits to be finished (its files are not in the old manifest yet)."""
    check_not_in_a_dataset_of_ours(out)
    if not out.is_dir() or pending_journals(out):
        return
    if os.path.lexists(out / TMP) and (out / TMP).is_symlink():
        raise OutputError(f"sink.path: {out / TMP} is a symbolic link, not gpuetl's temporary folder", hint=MOVE_HINT)
    with _Tree.open(out) as tree:
        refuse(out, take_inventory(tree), mode)
