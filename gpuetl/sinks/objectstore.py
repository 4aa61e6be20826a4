"""The commit protocol on an object store (s3://), which has no rename.

A run writes its shards to a local staging folder (a commit.OutputFolder of its own under the
system's temporary folder, keyed by the sink's URL; it holds the run's spills, shard records and
resume state exactly as a local run does). The commit then:

1. uploads each shard to `<out>/_tmp/<run-id>/data/<path>` (s3fs uploads large files in parts),
   after `<out>/_tmp/<run-id>/_owner.json` has claimed that prefix (on a cluster whose workers
   share no disk, the tasks upload their shards themselves: sinks/runstore.py);
2. writes the journal `<out>/_tmp/<run-id>/_commit.json` (the previous dataset's files, the
   shards, the new manifest);
3. removes `_SUCCESS`, then every file of the previous dataset, its manifest last, copies each
   shard into place (server-side; s3fs copies over 5 GB in parts), writes `_manifest.json`, and
   `_SUCCESS` last;
4. removes the keys under `_tmp/<run-id>/`, the owner record last.

A reader that sees `_SUCCESS` sees a complete dataset; nothing outside `_tmp/` is touched before
the journal exists, so a run killed before step 2 leaves the previous dataset whole, and one
killed in step 3 leaves part of one dataset (never files of two) and no `_SUCCESS`, and is
finished from its journal by the next run or `gpuetl verify --repair`. As in a local folder,
gpuetl deletes only keys a manifest or journal of its own lists and those under a run prefix its
owner record claims; any other key under the sink's prefix is a refusal naming it. The run lock
is `_tmp/_lock`, created with a conditional PUT (If-None-Match: *), so two runs cannot both
create it."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import tempfile
from pathlib import Path

from .. import storage
from ..errors import OutputError, OutputWriteFailed
from .commit import (JOURNAL, JOURNAL_FORMAT, MANIFEST, MANIFEST_FORMAT, OWNER, RUN_FORMAT, SUCCESS, TMP, Inventory,
                     OutputFolder, check_journal, finish_commits, finished_commit, interrupted_text, listed_files,
                     looks_like_our_manifest, manifest_bytes, refuse, sort_listed, success_bytes,
                     unsafe_reason)
from .delta import DELTA_LOG
from .lock import LOCK, LOCK_FORMAT, describe, is_alive, this_process
from .runstore import RunStore

# Test hooks: a callable per point ('uploaded', 'removing', 'copying', 'copied'), called with the
# file's path. Tests use them to stop a run at an exact step; nothing in gpuetl sets them.
HOOKS: dict = {}


def _hook(point: str, rel: str) -> None:
    if point in HOOKS:
        HOOKS[point](rel)


def check_remote_apart_from_inputs(out: str, inputs: list[str], patterns: list[str]) -> None:
    """The sink may not hold an input or lie where a source pattern reads (prefixes compared
    with a trailing '/': s3://b/out-old/ is not inside s3://b/out)."""
    if not out.startswith("s3://") and not out.startswith("s3a://"):
        raise OutputError(f"sink.path: {out}: gpuetl writes datasets to local folders and s3:// for now",
                          hint="write to a local folder or an s3:// prefix")
    for path in inputs:
        if storage.inside(path, out):
            raise OutputError(f"sink.path: {out} holds the input {path}; gpuetl refuses to write its output over its "
                              "inputs", hint="choose a sink.path outside the inputs' prefixes")
    for pattern in patterns:
        if not storage.is_remote(pattern):
            continue
        fixed = []
        for part in pattern.split("/"):
            if any(c in part for c in "*?["):
                break
            fixed.append(part)
        root = "/".join(fixed)
        if len(fixed) < len(pattern.split("/")) and storage.inside(out, root):
            raise OutputError(f"sink.path: {out} lies where source.path {pattern!r} reads: a later run would read "
                              "this run's output", hint="choose a sink.path outside the inputs' prefixes")


def staging_folder(url: str) -> Path:
    """This user's local staging folder for a sink URL (made private; a link there is refused)."""
    root = Path(tempfile.gettempdir()) / f"gpuetl-staging-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(root)
    except OSError as err:
        raise OutputWriteFailed(f"cannot make the staging folder {root}: {err.strerror}") from None
    if not stat.S_ISDIR(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        raise OutputError(f"{root} is not a folder of this user; gpuetl stages object-store output there",
                          hint=f"remove {root}, or point TMPDIR elsewhere")
    return root / hashlib.sha256(url.encode()).hexdigest()[:16]


class ObjectStoreFolder:
    """A dataset under an s3:// prefix while a run (or `verify --repair`) holds its lock."""

    def __init__(self, url: str, log=lambda *_: None, storage_options: dict | None = None):
        self.url = self.out = url.rstrip("/")
        self.log = log
        self.options = storage_options
        self.fs = storage.filesystem(self.url, storage_options)
        self.local = OutputFolder(staging_folder(self.url), log, durable=False)    # the store's PUT is durable
        self.inventory = Inventory()
        self.committed = False
        self.journal_written = False
        self.lock_record: dict | None = None

    # naming and small operations

    def _key(self, rel: str) -> str:
        return storage.bare(storage.join(self.url, rel))

    def _url(self, rel: str) -> str:
        return storage.join(self.url, rel)

    def _errors(self, rel: str, action: str):
        return storage.translated(self._url(rel), self.options, action, output=True)

    def _exists(self, rel: str) -> int | None:
        """The object's size, or None when there is none."""
        with self._errors(rel, "read"):
            try:
                return int(self.fs.info(self._key(rel), refresh=True)["size"])
            except FileNotFoundError:
                return None

    def read(self, rel: str, limit: int = 1 << 30) -> bytes | None:
        """The bytes of the object at `rel` under the dataset (up to `limit`), or None."""
        return self._read(rel, limit)

    def _read(self, rel: str, limit: int = 1 << 30) -> bytes | None:
        with self._errors(rel, "read"):
            try:
                return self.fs.cat_file(self._key(rel))[:limit]
            except FileNotFoundError:
                return None

    def _write(self, rel: str, data: bytes) -> None:
        with self._errors(rel, "write"):
            self.fs.pipe_file(self._key(rel), data)

    def _remove(self, rels: list[str]) -> None:
        for rel in rels:
            with self._errors(rel, "remove"):
                try:
                    self.fs.rm_file(self._key(rel))
                except FileNotFoundError:
                    pass
        self.fs.invalidate_cache(storage.bare(self.url))

    def _listing(self, prefix: str = "") -> list[str]:
        """Every key under the sink (or under prefix in it), relative to the sink."""
        base = storage.bare(self.url) + "/"
        with self._errors(prefix, "list"):
            self.fs.invalidate_cache(storage.bare(self.url))
            try:
                names = self.fs.find(base + prefix, withdirs=False)
            except FileNotFoundError:
                return []
        return sorted(n[len(base):] for n in names if n.startswith(base) and not n.endswith("/"))

    # opening and closing

    def open(self) -> "ObjectStoreFolder":
        bucket = storage.bare(self.url).split("/")[0]
        with storage.translated(f"{storage.scheme(self.url)}://{bucket}", self.options, "reach", output=True):
            if not self.fs.exists(bucket):
                raise OutputError(f"sink.path: {self.url}: the bucket {bucket} does not exist",
                                        hint="create it first, or check its name (and AWS_ENDPOINT_URL)")
            self._refuse_inside_a_dataset()
        self.local.open()
        try:
            self._acquire()
        except BaseException:
            self.local.close()
            raise
        return self

    def _refuse_inside_a_dataset(self) -> None:
        """The local rule (commit.check_not_in_a_dataset_of_ours): no sink inside another gpuetl
        dataset, i.e. under a prefix with a gpuetl manifest or run lock (its `_tmp/`, its
        `_quarantine/`, its splits, any new prefix in it)."""
        bucket, _, key = storage.bare(self.url).partition("/")
        parts = [p for p in key.split("/") if p]
        self.fs.invalidate_cache()
        for n in range(len(parts)):
            above = f"{storage.scheme(self.url)}://{bucket}" + "".join("/" + p for p in parts[:n])
            with storage.translated(above, self.options, "read", output=True):
                try:
                    head = self.fs.cat_file(storage.bare(storage.join(above, MANIFEST)), start=0, end=4096)
                except FileNotFoundError:
                    head = b""
                locked = self.fs.exists(storage.bare(storage.join(above, f"{TMP}/{LOCK}")))
            if locked or looks_like_our_manifest(head):
                raise OutputError(f"sink.path: {self.url} lies inside the gpuetl dataset {above}; a dataset inside "
                                  "another would be written among its files", hint="choose a sink.path outside "
                                  "that dataset")

    def close(self) -> None:
        if self.lock_record is not None:
            raw = self._read(f"{TMP}/{LOCK}", 1 << 16)
            if raw is not None and _json(raw) == self.lock_record:
                self._remove([f"{TMP}/{LOCK}"])
            self.lock_record = None
        self.local.close()

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()

    def _acquire(self) -> None:
        record = this_process(LOCK_FORMAT)
        rel = f"{TMP}/{LOCK}"
        for _ in range(4):
            if self._put_if_absent(rel, json.dumps(record).encode()):
                self.lock_record = record
                return
            holder = _json(self._read(rel, 1 << 16) or b"")
            if holder is None or holder.get("format") != LOCK_FORMAT:
                raise OutputError(f"sink.path: {self._url(rel)} is not a lock gpuetl can read",
                                  hint="if no gpuetl run writes there, remove it")
            if is_alive(holder):
                raise OutputError(f"sink.path: {self.url} is in use by another gpuetl run ({describe(holder)}; lock "
                                  f"{self._url(rel)})", hint="wait for it to end, or choose another sink.path; if that "
                                  "run is gone (another host's lock cannot be checked), remove the lock object")
            self.log(f"taking over the lock of a gpuetl run that is gone ({describe(holder)})")
            self._remove([rel])
        raise OutputError(f"sink.path: could not take the lock {self._url(rel)}: other runs keep taking it")

    def _put_if_absent(self, rel: str, data: bytes) -> bool:
        """A conditional PUT (If-None-Match: *): False when the object exists already."""
        bucket, key = storage.bare(self._url(rel)).split("/", 1)
        with self._errors(rel, "write"):
            try:
                self.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            except Exception as err:
                if storage.error_code(err) in ("PreconditionFailed", "412"):      # it exists
                    return False
                raise
        return True

    def _check_lock(self) -> None:
        raw = self._read(f"{TMP}/{LOCK}", 1 << 16)
        if raw is None or _json(raw) != self.lock_record:
            raise OutputError(f"sink.path: the lock {self._url(TMP + '/' + LOCK)} was taken by another process during "
                              "this run; nothing was committed", hint="make sure one run at a time writes here")

    # the rule

    def survey(self, mode: str) -> Inventory:
        self.recover()
        self._clean_orphans()
        self.local.clean_leftovers()
        inv = self.inventory = self._take_inventory()
        refuse(self.url, inv, mode)
        return inv

    def _take_inventory(self) -> Inventory:
        inv = Inventory()
        raw = self._read(MANIFEST)
        listed: set[str] = set()
        if raw is not None:
            manifest = _json(raw)
            try:
                if manifest is None or manifest.get("format") != MANIFEST_FORMAT:
                    raise ValueError(f"{MANIFEST} is not a gpuetl manifest")
                listed = listed_files(manifest)
                inv.manifest = manifest
            except ValueError as err:
                inv.foreign.append(f"{MANIFEST} ({err})")
        for rel in self._listing():
            if rel.split("/")[0] == TMP or any(p.startswith(".") for p in rel.split("/")):
                continue
            if rel in listed:
                inv.ours.append(rel)
            elif not (rel == MANIFEST and inv.manifest is None and inv.foreign):
                inv.foreign.append(rel)
        return inv

    # runs: the local staging folders, and their keys under _tmp/ in the store

    def runs(self, note: bool = False) -> list[Path]:
        return self.local.runs(note)

    def owner(self, run_tmp: Path) -> dict | None:
        return self.local.owner(run_tmp)

    def refuse_links(self, run_tmp: Path) -> None:
        self.local.refuse_links(run_tmp)

    def claim(self, run_tmp: Path) -> None:
        self.local.claim(run_tmp)

    def new_run(self, run_id: str) -> Path:
        return self.local.new_run(run_id)

    def abandon(self, run_tmp: Path) -> None:
        self._abandon_remote(run_tmp.name)
        self.local.abandon(run_tmp)

    def _remote_owner(self, run: str) -> dict | None:
        raw = self._read(f"{TMP}/{run}/{OWNER}", 1 << 24)
        record = _json(raw) if raw is not None else None
        if not isinstance(record, dict) or record.get("format") != RUN_FORMAT or record.get("run") != run:
            return None
        uploads = record.get("uploads")
        if not isinstance(uploads, list) or any(unsafe_reason(r) for r in uploads):
            return None
        return record

    def through_store(self, run_tmp: Path) -> RunStore:
        """The run's `_tmp/<run-id>/` in the store, for tasks on workers that share no disk with
        this process (sinks/runstore.py), claimed by its owner record before any task writes
        there: the run-id is new (or this process's to resume), so every key under it is the run's."""
        run = run_tmp.name
        self._write(f"{TMP}/{run}/{OWNER}", json.dumps({**this_process(RUN_FORMAT), "run": run, "uploads": []}).encode())
        return RunStore(self._url(f"{TMP}/{run}"), self.options)

    def _abandon_remote(self, run: str) -> None:
        """Remove a run's keys under `_tmp/<run-id>/` (its uploads, and the pieces and records its
        tasks put there), then its journal, its owner record last; only when the record proves the
        run gpuetl's. A kill part-way leaves keys the owner record still proves the run's."""
        if self._remote_owner(run) is None:
            return
        last = [f"{TMP}/{run}/{JOURNAL}", f"{TMP}/{run}/{OWNER}"]
        self._remove([rel for rel in self._listing(f"{TMP}/{run}/") if rel not in last] + last)

    def _remote_runs(self) -> list[str]:
        return sorted({rel.split("/")[1] for rel in self._listing(TMP + "/") if rel.count("/") >= 2})

    def _clean_orphans(self) -> None:
        """Uploads of runs killed before their journal, whose staging is not on this machine: removed
        when their process is gone (this host), else left alone with a note."""
        local = {p.name for p in self.local.runs()}
        for run in self._remote_runs():
            if run in local or self._read(f"{TMP}/{run}/{JOURNAL}", 1) is not None:
                continue
            record = self._remote_owner(run)
            if record is None:
                self.log(f"note: leaving {self._url(TMP + '/' + run)} alone: gpuetl did not make it")
            elif record.get("host") == socket.gethostname() and not is_alive(record):
                self.log(f"removing the uploads of an earlier run that did not finish: {run}")
                self._abandon_remote(run)
            else:
                self.log(f"note: leaving the uploads of run {run} ({describe(record)}) alone")

    # the commit

    def commit(self, run_tmp: Path, manifest: dict) -> None:
        self._check_lock()
        run = run_tmp.name
        previous = sorted(set(self.inventory.ours) - {SUCCESS})
        uploaded = set(self._listing(f"{TMP}/{run}/data/"))      # by workers (sinks/runstore.py)
        moves, keep, created = sort_listed(manifest, previous, lambda rel: (run_tmp / "data" / rel).exists()
                                           or f"{TMP}/{run}/data/{rel}" in uploaded)
        self._write(f"{TMP}/{run}/{OWNER}", json.dumps({**this_process(RUN_FORMAT), "run": run,
                                                         "uploads": moves}).encode())
        for rel in moves:
            local = run_tmp / "data" / rel
            target = f"{TMP}/{run}/data/{rel}"
            size = self._exists(target)
            if not local.exists():             # written and uploaded by a worker (sinks/runstore.py)
                if size is None:
                    raise OutputWriteFailed(f"sink.path: {self._url(target)}, a file of this run, is missing; "
                                            "nothing was committed", hint="run again")
                continue
            if size == local.stat().st_size:
                continue                       # uploaded by the interrupted run this one resumes
            with self._errors(target, "upload"):
                self.fs.put_file(str(local), self._key(target))
            _hook("uploaded", rel)
        present = set(self._listing())
        in_way = [rel for rel in moves if rel in present and rel not in previous]
        if in_way:
            raise OutputError(f"sink.path: {self._url(in_way[0])} appeared during the run and gpuetl did not write "
                              "it; refusing to replace it", hint="move it or choose another sink.path")
        gone = [rel for rel in keep if rel not in present]
        if gone:
            raise OutputError(f"sink.path: {self._url(gone[0])}, a file of the dataset this commit keeps, is gone",
                              hint=f"run `gpuetl verify {self.url}`; rewrite the dataset with sink.mode: overwrite")
        journal = {"format": JOURNAL_FORMAT, "run": run, "previous": previous, "moves": moves, "keep": keep,
                   "created": created, "manifest": manifest}
        self._write(f"{TMP}/{run}/{JOURNAL}", json.dumps(journal, indent=1).encode())
        self.journal_written = True
        self._roll_forward(run, journal)
        self.local.abandon(run_tmp)           # committed: the staged files are no longer needed
        self.committed = True

    def recover(self) -> list[str]:
        """Finish the commits that were interrupted, each journal checked first."""
        return finish_commits(self)

    def journals(self):
        """(run, journal) of each run prefix holding a journal, the journal trusted (_valid_journal)."""
        for run in self._remote_runs():
            raw = self._read(f"{TMP}/{run}/{JOURNAL}")
            if raw is not None:
                yield run, self._valid_journal(run, raw)

    def run_owner(self, run: str) -> dict | None:
        return self._remote_owner(run)

    def finish(self, run: str, journal: dict) -> None:
        self._roll_forward(run, journal)
        staged = self.local.out / TMP / run
        if staged in self.local.runs():
            self.local.abandon(staged)

    def _valid_journal(self, run: str, raw: bytes) -> dict:
        """commit.check_journal, the rule a local folder's journal is held to, against the store."""
        where = self._url(f"{TMP}/{run}/{JOURNAL}")
        try:
            if self._remote_owner(run) is None:
                raise ValueError("its run has no owner record gpuetl wrote")
            current = _json(self._read(MANIFEST) or b"null")
            try:
                on_store = listed_files(current) if isinstance(current, dict) and \
                    current.get("format") == MANIFEST_FORMAT else set()
            except ValueError:
                on_store = set()
            listing: list[set[str]] = []          # listed once, when a file is not proven by a manifest

            def present(rel: str) -> bool:
                if not listing:
                    listing.append(set(self._listing()))
                return rel in listing[0]

            journal = check_journal(_json(raw), run, present, on_store)
        except ValueError as err:
            raise OutputError(f"sink.path: {where}: {err}; not finishing that commit, nothing was changed",
                              hint=f"if gpuetl did not write it, remove {self._url(TMP + '/' + run)}/") from None
        return journal

    def _roll_forward(self, run: str, journal: dict) -> None:
        """Replace the dataset in an order that never shows two datasets' files together:
        `_SUCCESS` goes, then every file of the previous dataset (those the new one replaces
        too), the old manifest last; then each shard is copied into place, the manifest written,
        and `_SUCCESS` last. Until then a reader that checks `_SUCCESS` (or reads the manifest)
        sees no dataset; one that lists keys sees part of one dataset, the old or the new. Run
        again on the same journal (a later run, `verify --repair`) it finishes the same commit."""
        moves, previous = journal["moves"], journal["previous"]
        raw = manifest_bytes(journal["manifest"])
        if self._read(SUCCESS, 1 << 16) != success_bytes(raw):        # else committed: only cleaning up is left
            self._remove([SUCCESS])
            kept = set(journal.get("keep", []))
            for rel in previous:
                if rel not in (MANIFEST, SUCCESS) and rel not in kept:
                    _hook("removing", rel)
                    self._remove([rel])
            self._remove([MANIFEST])
            for rel in moves:
                source = f"{TMP}/{run}/data/{rel}"
                _hook("copying", rel)
                with self._errors(rel, "copy into place"):
                    try:
                        self.fs.copy(self._key(source), self._key(rel))
                    except FileNotFoundError:
                        raise OutputWriteFailed(f"sink.path: {self._url(source)} is gone before it was copied into "
                                                "place; the commit cannot be finished",
                                                hint="run again with sink.mode: overwrite") from None
                _hook("copied", rel)
            self._write(MANIFEST, raw)
            if journal["manifest"].get("delta_log"):       # after the manifest, before _SUCCESS (sinks/delta.py)
                from .delta import commit_version

                with self._errors(DELTA_LOG, "write the Delta log in"):
                    commit_version(self.url, journal["manifest"], lambda rel: self._exists(rel) is not None,
                                   self.options)
            self._write(SUCCESS, success_bytes(raw))
        self._abandon_remote(run)     # its uploads, what its tasks left there, the journal, the owner last


def _json(raw: bytes | None):
    try:
        return json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError):
        return None


# -- reading a dataset back: verify, inspect, repair ---------------------------------------------

def read_remote_manifest(url: str, storage_options: dict | None = None) -> tuple[ObjectStoreReader, dict]:
    from ..errors import DataError

    reader = ObjectStoreReader(url, storage_options)
    raw = reader.read(MANIFEST)
    if raw is None:
        pending = reader.pending_journals()
        why = (f"a commit was interrupted: `gpuetl verify --repair {reader.url}` finishes it" if pending else
               "nothing was committed here, or a run was interrupted")
        raise DataError(f"{reader.url}: no {MANIFEST}; this is not a complete gpuetl dataset ({why})")
    manifest = _json(raw)
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise DataError(f"{reader._url(MANIFEST)}: not a gpuetl manifest (no format {MANIFEST_FORMAT!r})")
    return reader, manifest


class ObjectStoreReader(ObjectStoreFolder):
    """Read-only access to a dataset in a store (no staging folder, no lock)."""

    def __init__(self, url: str, storage_options: dict | None = None):
        self.url = self.out = url.rstrip("/")
        self.options = storage_options
        self.fs = storage.filesystem(self.url, storage_options)

    def sizes(self) -> dict[str, int]:
        """Every key under the dataset with its size, from one listing."""
        base = storage.bare(self.url) + "/"
        with self._errors("", "list"):
            self.fs.invalidate_cache()
            found = self.fs.find(base, withdirs=False, detail=True)
        return {n[len(base):]: int(i.get("size") or 0) for n, i in found.items() if not n.endswith("/")}

    def pending_journals(self) -> list[str]:
        return [run for run in self._remote_runs() if self._exists(f"{TMP}/{run}/{JOURNAL}") is not None]

    def sha256(self, rel: str) -> str:
        digest = hashlib.sha256()
        with self._errors(rel, "read"), self.fs.open(self._key(rel), "rb", block_size=8 << 20) as fh:
            while block := fh.read(8 << 20):
                digest.update(block)
        return digest.hexdigest()


def verify_remote(url: str, storage_options: dict | None = None, dataset_version: int | None = None
                  ) -> tuple[dict, list]:
    """verify for a dataset in a store: every shard re-hashed from the store, the manifest against
    itself and _SUCCESS, keys the manifest does not list. Changes nothing. dataset_version: check
    that version of an append dataset (sinks/versions.py)."""
    from .manifest_check import Problem, check_listed_files
    from .versions import select_version

    reader, manifest = read_remote_manifest(url, storage_options)
    manifest, version_raw = select_version(manifest, dataset_version, reader.read, reader.url)
    problems = [Problem(f"{TMP}/{run}", interrupted_text(finished_commit(
        reader.read(f"{TMP}/{run}/{JOURNAL}"), reader.read(MANIFEST), reader.read(SUCCESS, 1 << 16)), reader.url))
        for run in reader.pending_journals()]
    success = reader.read(SUCCESS)
    if success is None:
        problems.append(Problem(SUCCESS, "missing: the dataset was not committed completely"))
    elif success != success_bytes(reader.read(MANIFEST)):
        problems.append(Problem(SUCCESS, "does not hold the manifest's sha256: the manifest was edited after the "
                                         "commit"))
    sizes = reader.sizes()                          # every key, from one listing
    own = hashlib.sha256(version_raw if version_raw is not None else reader.read(MANIFEST)).hexdigest()
    listed, found = check_listed_files(
        manifest, lambda rel: "not a path inside the dataset" if unsafe_reason(rel) else sizes.get(rel), reader.sha256,
        own_sha256=own, reports=version_raw is None)
    problems += found
    if listed is None or version_raw is not None:      # an earlier version: later ones' files are no strays
        return manifest, problems
    for rel in sizes:
        if rel.split("/")[0] != TMP and not any(p.startswith(".") for p in rel.split("/")) and rel not in listed:
            problems.append(Problem(rel, "not in the manifest (a stray object readers may pick up)"))
    return manifest, problems


def inspect_remote(url: str, sample_rows: int, sink, storage_options: dict | None = None,
                   dataset_version: int | None = None) -> dict:
    import io

    from .versions import select_version

    reader, manifest = read_remote_manifest(url, storage_options)
    manifest = select_version(manifest, dataset_version, reader.read, reader.url)[0]
    sample = []
    for shard in manifest.get("shards", []):
        if shard.get("rows"):
            try:
                sample = sink.sample(io.BytesIO(reader.read(shard["path"]) or b""), sample_rows)
            except Exception as err:          # a shard the format cannot read: said, not raised
                sample = [{"(unreadable shard)": f"{shard['path']}: {err}"}]
            break
    pending = reader.pending_journals()
    from .manifest_check import success_state

    success = reader.read(SUCCESS, 1 << 16)
    vouched = success is not None and success == success_bytes(reader.read(MANIFEST) or b"")
    return {"path": reader.url, "complete": not pending and vouched, "manifest": manifest,
            "sample": sample, "interrupted_commits": pending, "success": success_state(success, vouched)}


def repair_remote(url: str, log=lambda *_: None) -> list[str]:
    from .versions import restore_latest_copy

    with ObjectStoreFolder(url, log) as folder:
        finished = folder.recover()
        folder._clean_orphans()
        folder.local.clean_leftovers()
        restore_latest_copy(folder._read, folder._write, log)
        return finished


def remote_leftovers(url: str, storage_options: dict | None = None, append: bool = False) -> list:
    """The keys under `_tmp/` of runs with no journal (read-only): commit.Leftover entries
    (`append`: of an append dataset, commit.unfinished_run_note)."""
    from .commit import Leftover, unfinished_run_note

    reader = ObjectStoreReader(url, storage_options)
    found = []
    for run in reader._remote_runs():
        if reader._exists(f"{TMP}/{run}/{JOURNAL}") is not None:
            continue
        record = reader._remote_owner(run)
        if record is None:
            found.append(Leftover(f"{TMP}/{run}/", "no owner record gpuetl wrote: left alone", False))
        else:
            found.append(Leftover(f"{TMP}/{run}/", f"the uploads of a run that did not finish ({describe(record)}): "
                                  + unfinished_run_note(append), False))
    return found
