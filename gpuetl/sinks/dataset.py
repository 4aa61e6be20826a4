"""Reading a dataset back: what it holds (inspect) and whether it is intact (verify). Both only
read, whatever the folder holds; `repair` (verify --repair) finishes an interrupted commit."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pyarrow as pa

from ..errors import DataError, GpuetlError, SpecError
from ..sources.pins import FilePin
from ..storage import is_remote
from . import commit as commit_protocol
from .base import sink_of_manifest
from .commit import MANIFEST, SUCCESS, TMP, success_bytes, unsafe_reason
from .manifest_check import Problem, check_listed_files, shown_problem, success_state
from .versions import restore_latest_copy, select_version, version_of


def dataset_folder(out: str | Path) -> Path:
    out = Path(os.path.normpath(os.path.abspath(out)))
    if not out.is_dir():
        raise SpecError(f"{out}: " + ("a file, not a dataset folder" if out.exists() else "no such dataset folder"))
    return out


def read_manifest(out: str | Path) -> tuple[Path, dict]:
    """The manifest, read without changing anything (a pending commit is left for --repair)."""
    out = dataset_folder(out)
    path = out / MANIFEST
    if not path.exists():
        if commit_protocol.pending_journals(out):
            why = f"a commit was interrupted: `gpuetl verify --repair {out}` finishes it"
        elif (out / TMP).exists():
            why = "a run may have been interrupted"
        else:
            why = "nothing was committed here"
        raise DataError(f"{out}: no {MANIFEST}; this is not a complete gpuetl dataset ({why})")
    if path.is_symlink() or not path.is_file():
        raise DataError(f"{path}: not a regular file (a symbolic link, a folder or a special file); gpuetl reads only plain files here")
    try:
        manifest = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as err:             # RecursionError: nested past Python's limit
        raise DataError(f"{path}: the manifest is not valid JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != commit_protocol.MANIFEST_FORMAT:
        raise DataError(f"{path}: not a gpuetl manifest (no format {commit_protocol.MANIFEST_FORMAT!r})")
    return out, manifest


def repair(out: str | Path, log=lambda *_: None) -> list[str]:
    """Finish interrupted commits from their journals (each path checked first), then remove what
    killed runs left that gpuetl can prove its own (commit.find_leftovers), under the lock; an
    append dataset's latest version copy (_versions/) is written again from _manifest.json when
    it does not hold its bytes and _SUCCESS vouches for them (versions.restore_latest_copy)."""
    if is_remote(out):
        from .objectstore import repair_remote

        return repair_remote(str(out), log)
    out = dataset_folder(out)
    with commit_protocol.OutputFolder(out, log) as folder:
        finished = folder.recover()
        folder.clean_leftovers()

        def read(rel: str) -> bytes | None:       # a link or a folder raises: left alone (verify names it)
            try:
                return folder.tree.read_file(rel)
            except FileNotFoundError:
                return None

        def write(rel: str, data: bytes) -> None:
            folder.tree.write_file(rel, data, staging=folder.tmp)

        restore_latest_copy(read, write, log)
        return finished


def leftovers(out: str | Path, append: bool = False) -> list:
    """What killed runs left under the dataset's `_tmp/` (read-only): commit.Leftover entries
    (`append`: the dataset is an append dataset, whose killed runs are run again, not resumed)."""
    if is_remote(out):
        from .objectstore import remote_leftovers

        return remote_leftovers(str(out), append=append)
    return commit_protocol.leftovers(dataset_folder(out), append)


def regular_file(out: Path, rel: str) -> os.stat_result | None | str:
    """lstat of out/rel, or why it cannot be read safely (a link on the way, not a file)."""
    why = commit_protocol.unsafe_reason(rel)
    if why:
        return f"not a path inside the dataset ({why})"
    path = out
    for part in rel.split("/"):
        path = path / part
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return f"{path.relative_to(out)} is a symbolic link; gpuetl does not follow links in a dataset"
    return st if stat.S_ISREG(st.st_mode) else "not a file"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def verify_dataset(out: str | Path, dataset_version: int | None = None) -> tuple[dict, list[Problem]]:
    """Re-hash every shard and quarantine file against the manifest, check the manifest against
    itself and _SUCCESS against the manifest; list what is wrong. Changes nothing.
    dataset_version: check that version of an append dataset (sinks/versions.py): its manifest
    against the sha256 the latest lists, and the files it lists."""
    if is_remote(out):
        from .objectstore import verify_remote

        return verify_remote(str(out), dataset_version=dataset_version)
    out, manifest = read_manifest(out)
    manifest, version_raw = select_version(manifest, dataset_version, lambda rel: read_listed(out, rel), str(out))
    problems: list[Problem] = []
    for name in commit_protocol.pending_journals(out):
        problems.append(Problem(f"{TMP}/{name}", commit_protocol.interrupted_commit(out, name, out)))
    success = regular_file(out, SUCCESS)
    if success is None:
        problems.append(Problem(SUCCESS, "missing: the dataset was not committed completely"))
    elif isinstance(success, str):
        problems.append(Problem(SUCCESS, success))
    else:
        expected = commit_protocol.success_bytes((out / MANIFEST).read_bytes())
        if (out / SUCCESS).read_bytes() != expected:
            problems.append(Problem(SUCCESS, "does not hold the manifest's sha256: the manifest was edited "
                                             "after the commit (or written by an older gpuetl)"))
    def size_of(rel: str):
        st = regular_file(out, rel)
        return st.st_size if isinstance(st, os.stat_result) else st

    own = hashlib.sha256(version_raw if version_raw is not None else (out / MANIFEST).read_bytes()).hexdigest()
    listed, found = check_listed_files(manifest, size_of, lambda rel: _sha256(out / rel), own_sha256=own,
                                       reports=version_raw is None)
    problems += found
    if listed is None or version_raw is not None:      # an earlier version: later ones' files are no strays
        return manifest, problems
    for folder, dirs, files in os.walk(out):
        rel_folder = os.path.relpath(folder, out)
        if rel_folder == ".":
            dirs[:] = [d for d in dirs if d != TMP]
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in [*files, *(d for d in dirs if os.path.islink(os.path.join(folder, d)))]:
            rel = name if rel_folder == "." else f"{rel_folder}/{name}"
            if name.startswith(".") or rel in listed:
                continue
            problems.append(Problem(rel, "not in the manifest (a stray file readers may pick up)"))
    return manifest, problems


def inspect_dataset(out: str | Path, sample_rows: int = 3, dataset_version: int | None = None) -> dict:
    """What the dataset holds (dataset_version: that version of an append dataset)."""
    if is_remote(out):
        from .objectstore import inspect_remote, read_remote_manifest

        manifest = read_remote_manifest(str(out))[1]
        info = inspect_remote(str(out), sample_rows, sink_of_manifest(manifest), dataset_version=dataset_version)
        malformed = shown_problem(info["manifest"])
        if malformed:
            raise DataError(f"{info['path']}/{MANIFEST}: {malformed}")
        info["splits"] = _splits(info["manifest"])
        return info
    out, manifest = read_manifest(out)
    manifest = select_version(manifest, dataset_version, lambda rel: read_listed(out, rel), str(out))[0]
    malformed = shown_problem(manifest)
    if malformed:
        raise DataError(f"{out / MANIFEST}: {malformed}")
    splits = _splits(manifest)
    sample = []
    for shard in manifest["shards"]:
        if shard["rows"] and not isinstance(regular_file(out, shard["path"]), (str, type(None))):
            try:
                sample = sink_of_manifest(manifest).sample(out / shard["path"], sample_rows)
            except (OSError, pa.ArrowException, ValueError) as err:
                sample = [{"(unreadable shard)": f"{shard['path']}: {err}"}]
            break
    pending = commit_protocol.pending_journals(out)
    success = read_listed(out, SUCCESS)
    vouched = success is not None and success == success_bytes(read_listed(out, MANIFEST) or b"")
    return {"path": str(out), "complete": not pending and vouched, "manifest": manifest, "splits": splits,
            "sample": sample, "interrupted_commits": pending, "success": success_state(success, vouched)}


def read_listed(out: Path, rel: str) -> bytes | None:
    """A file the manifest lists, read without following a link (None: missing or not a file)."""
    st = regular_file(out, rel)
    if not isinstance(st, os.stat_result):
        return None
    fd = os.open(out / rel, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def _splits(manifest: dict) -> dict[str, dict]:
    splits: dict[str, dict] = {}
    for shard in manifest["shards"]:
        s = splits.setdefault(str(shard.get("split") or "(no split)"), {"shards": 0, "rows": 0, "bytes": 0})
        s["shards"] += 1
        s["rows"] += shard["rows"]
        s["bytes"] += shard["bytes"]
    return splits


def verify_inputs(manifest: dict, log=None) -> list[Problem]:
    """Whether the inputs the manifest pins are still the same bytes: an object's ETag, version id
    and size; a local file's ranges, hashed again and compared with the hashes taken as they were
    read (sources/pins.py), and its size. `log(path, what was compared)` hears of each local
    input that matched. Credentials come from the environment."""
    problems = []
    for pin in manifest.get("inputs") or []:
        if not isinstance(pin, dict) or not isinstance(pin.get("path"), str):
            problems.append(Problem(MANIFEST, "an input entry lacks its path"))
            continue
        name = pin["path"]
        if is_remote(name):
            from ..storage import head

            try:
                now = head(name)
            except GpuetlError as err:
                problems.append(Problem(name, f"cannot be checked: {err.message}"))
                continue
            if now is None:
                problems.append(Problem(name, "gone from the store"))
            elif (now.etag, now.size) != (pin.get("etag"), pin.get("bytes")):
                problems.append(Problem(name, f"changed: ETag {pin.get('etag')} -> {now.etag}, "
                                              f"{pin.get('bytes')} -> {now.size} bytes"))
            elif pin.get("version_id") and now.version_id != pin["version_id"]:
                problems.append(Problem(name, f"a newer version ({now.version_id}) replaced {pin['version_id']}; "
                                              "that version may still be read by its id"))
            continue
        location = pin.get("location")
        if not isinstance(location, str):
            problems.append(Problem(name, "pinned without its location (written by an older gpuetl)"))
            continue
        try:
            st = os.stat(location)
        except OSError:
            problems.append(Problem(name, f"gone ({location})"))
            continue
        if st.st_size != pin.get("bytes"):
            problems.append(Problem(name, f"size {st.st_size} bytes, the manifest says {pin.get('bytes')}"))
            continue
        content = FilePin.from_json(pin)
        if content is None:                 # pinned by an older gpuetl: size and mtime only
            if st.st_mtime_ns != pin.get("mtime_ns"):
                problems.append(Problem(name, "modified since the run (same size, another mtime)"))
            elif log:
                log(name, "size and mtime compared (no content hashes in this manifest)")
            continue
        check = content.check(location, always=True)
        if check.same:
            if log:
                log(name, check.compared())
        else:
            problems.append(Problem(name, f"other bytes than the run read: {check.compared()}; "
                                          + "; ".join(map(str, check.mismatches[:3]))
                                          + (f"; and {len(check.mismatches) - 3} more ranges"
                                             if len(check.mismatches) > 3 else "")))
    return problems


# -- dataset versions (sinks/versions.py) ------------------------------------------------------

def read_latest(out, storage_options: dict | None = None) -> dict | None:
    """The committed manifest of the dataset at out, or None when there is no dataset there yet
    (read before the run's lock is taken: the run checks it again under the lock)."""
    if is_remote(out):
        from .objectstore import ObjectStoreReader

        reader = ObjectStoreReader(str(out), storage_options)
        raw, success = reader.read(MANIFEST), reader.read(SUCCESS, 1 << 16)
    else:
        raw, success = _read_plain(Path(out) / MANIFEST), _read_plain(Path(out) / SUCCESS, 1 << 16)
    if raw is None or success != success_bytes(raw):
        return None
    try:
        manifest = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _read_plain(path: Path, limit: int = 1 << 30) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(limit) if os.fstat(fd).st_mode & 0o170000 == 0o100000 else None

def _reader(out):
    """(read(rel) -> bytes | None, where, the latest manifest) of the dataset at out."""
    if is_remote(out):
        from .objectstore import read_remote_manifest

        reader, manifest = read_remote_manifest(str(out))
        return reader.read, reader.url, manifest
    folder, manifest = read_manifest(out)
    return (lambda rel: read_listed(folder, rel)), str(folder), manifest


def read_version_report(out, version: int) -> dict | None:
    """The run report of dataset version `version` (kept as _versions/NNNNN.report.json, its
    sha256 in the latest manifest); None when it is the latest version (its _report.json)."""
    read, where, latest = _reader(out)
    manifest, raw = select_version(latest, version, read, where)
    if raw is None:
        return None
    entry = next(e for e in latest["versions"] if e.get("version") == version)
    kept = entry.get("report")
    if not isinstance(kept, dict) or unsafe_reason(kept.get("path")):
        raise DataError(f"{where}: dataset version {version} kept no run report")
    data = read(kept["path"])
    if data is None or hashlib.sha256(data).hexdigest() != kept.get("sha256"):
        raise DataError(f"{where}/{kept['path']}: missing, or not the report the manifest lists (sha256)")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as err:
        raise DataError(f"{where}/{kept['path']}: not valid JSON ({err})") from None
