"""Remote inputs on local disk: the cache tier (`cache: {path, max_bytes}`), or a temporary
folder that lives as long as the plan.

A remote input is fetched whole, many objects per request batch, into a local file that all
readers (CPU and GPU) read as they read any file, except where no cache is configured and the
source reads lines from an uncompressed object: that object is read in byte ranges from the
store by the partitions themselves (`in_place`; sources/ranges.py), never copied. With a cache, an object is fetched once
and reused by later runs while its ETag (and version id) and size are unchanged. Eviction is
least-recently-used within max_bytes and removes only files under `<cache.path>/gpuetl/objects/`
that the cache's own index lists; an entry the running plan reads is never evicted.

Several runs (processes) may share a cache. The index is read, changed and written under an
exclusive lock (`flock` on `<cache.path>/gpuetl/lock`), so no run loses another's entries. Each
run lists the files it reads in `<cache.path>/gpuetl/readers/`, in a file it holds locked for as
long as it may read them: no run evicts or removes a file another live run lists (a reader file
whose lock is free was left by a run that is gone, and is removed). Two runs may each fetch the
same object once (each writes it under a temporary name and renames it into place: the same
bytes); a file the index lost is left alone, never deleted."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import stat
import tempfile
import time
import uuid
import weakref
from contextlib import contextmanager
from pathlib import Path

from . import storage
from .errors import SpecError
from .storage import RemoteObject

INDEX_FORMAT = "gpuetl-cache/1"
_READER_NAME = re.compile(r"[0-9a-f]{32}\.json")


def _local_name(obj: RemoteObject) -> str:
    """A file name that keeps the object's suffix (readers infer compression and image type
    from it) and cannot clash: a digest of the URL and its ETag first."""
    digest = hashlib.sha256(f"{obj.url}\0{obj.etag}\0{obj.version_id}".encode()).hexdigest()[:24]
    base = re.sub(r"[^A-Za-z0-9._-]", "_", obj.url.rstrip("/").rsplit("/", 1)[-1])[-80:]
    return f"{digest}-{base}"


class InputCache:
    """`<path>/gpuetl/index.json`, `<path>/gpuetl/objects/`, and the lock and reader files that
    let several processes share them. Change entries only inside `locked()`."""

    def __init__(self, path: str | Path, max_bytes: int | None):
        self.root = Path(path).expanduser() / "gpuetl"
        self.objects = self.root / "objects"
        self.readers = self.root / "readers"
        self.index_path = self.root / "index.json"
        self.max_bytes = max_bytes
        self.reading: _Reader | None = None     # this process's reader file, while it reads entries
        for folder in (self.root, self.objects, self.readers):   # checked before anything is made through them
            if not folder.is_symlink():
                try:
                    folder.mkdir(parents=True, exist_ok=True)
                except OSError as err:
                    raise SpecError(f"cache.path: cannot create {folder}: {err.strerror}") from None
            if folder.is_symlink() or not folder.is_dir():
                raise SpecError(f"cache.path: {folder} is a symbolic link or not a folder; gpuetl keeps its cache "
                                "in a folder of its own", hint="choose another cache.path")
        self.entries, self.retired = self._load()

    def _load(self) -> tuple[dict, list[str]]:
        try:
            data = json.loads(self.index_path.read_bytes())
        except FileNotFoundError:
            return {}, []
        except (OSError, ValueError, RecursionError):
            return {}, []             # unreadable: start a new index; unlisted files are left alone
        if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT or not isinstance(data.get("entries"), dict):
            return {}, []
        entries = {k: v for k, v in data["entries"].items() if isinstance(v, dict) and self._file_of(v) is not None}
        retired = data.get("retired")
        retired = [n for n in retired if self._file_of({"file": n}) is not None] if isinstance(retired, list) else []
        return entries, retired

    def _file_of(self, entry: dict) -> Path | None:
        """The entry's file, if it is a plain name under objects/ (anything else is not ours)."""
        name = entry.get("file")
        if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", "..") \
                or "\0" in name:
            return None
        return self.objects / name

    @contextmanager
    def locked(self):
        """Hold the cache's lock (another process's `locked()` waits), the index read afresh, so
        what the block changes and saves keeps what other processes saved before it."""
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.entries, self.retired = self._load()
            yield self
        finally:
            os.close(fd)                      # closing it lets go of the lock

    def save(self) -> None:
        data = json.dumps({"format": INDEX_FORMAT, "entries": self.entries, "retired": self.retired},
                          indent=1).encode()
        temp = self.root / f"index.json.{uuid.uuid4().hex[:8]}.partial"
        temp.write_bytes(data)
        os.replace(temp, self.index_path)

    # which files runs are reading

    def read(self, names: set[str]) -> None:
        """List these files as read by this process, for as long as this cache object lives (call
        under the lock)."""
        if self.reading is None:
            self.reading = _Reader(self.readers)
        self.reading.add(names)

    def _read_by_others(self) -> set[str]:
        """The files other live processes read (call under the lock). The reader file of a
        process that is gone (its lock free) is removed."""
        names: set[str] = set()
        own = self.reading.path.name if self.reading is not None else None
        for path in self.readers.iterdir():
            if path.name == own or not _READER_NAME.fullmatch(path.name):
                continue                      # this process's, or not a name gpuetl gives a reader file
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue                  # not a reader file gpuetl wrote: left alone
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:       # held: its process reads what it lists
                    listed = _json_list(_read_all(fd))
                    names.update(listed if listed is not None else  # half-written: protect everything
                                 [e["file"] for e in self.entries.values()] + self.retired)
                    continue
                path.unlink(missing_ok=True)
            finally:
                os.close(fd)
        return names

    # entries

    def lookup(self, obj: RemoteObject) -> Path | None:
        """The cached copy of exactly this object (same ETag, version id and size), or None."""
        entry = self.entries.get(obj.url)
        if not entry or entry.get("etag") != obj.etag or entry.get("size") != obj.size \
                or entry.get("version_id") != obj.version_id:
            return None
        path = self._file_of(entry)
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size != obj.size:
            return None
        entry["used"] = time.time()
        return path

    def add(self, obj: RemoteObject) -> Path:
        """Index the object just written to objects/<its local name>; the file of the version it
        replaces is retired (removed once no run reads it)."""
        old = self.entries.get(obj.url)
        name = _local_name(obj)
        self.entries[obj.url] = {"etag": obj.etag, "version_id": obj.version_id, "size": obj.size, "file": name,
                                 "used": time.time()}
        if old and old.get("file") != name and old["file"] not in self.retired:
            self.retired.append(old["file"])
        return self.objects / name

    def _remove(self, name: str) -> None:
        path = self._file_of({"file": name})
        try:
            if path is not None and stat.S_ISREG(os.lstat(path).st_mode):
                os.unlink(path)
        except FileNotFoundError:
            pass

    def evict(self, keep: set[str]) -> list[str]:
        """Remove retired files no run reads, then drop least-recently-used entries (not those
        in `keep`, nor files another live run reads) until the cache fits max_bytes."""
        busy = self._read_by_others()
        listed = {e["file"] for e in self.entries.values()}
        for name in list(self.retired):
            if name not in busy:
                if name not in listed:
                    self._remove(name)
                self.retired.remove(name)
        if self.max_bytes is None:
            return []
        total = sum(e["size"] for e in self.entries.values())
        dropped = []
        for url, entry in sorted(self.entries.items(), key=lambda kv: kv[1].get("used", 0)):
            if total <= self.max_bytes:
                break
            if url in keep or entry["file"] in busy:
                continue
            self._remove(entry["file"])
            del self.entries[url]
            total -= entry["size"]
            dropped.append(url)
        return dropped


class _Reader:
    """`readers/<random>.json`: the files this process reads, locked (flock) while it may read
    them; the lock goes with the process, however it ends."""

    def __init__(self, folder: Path):
        self.path = folder / f"{uuid.uuid4().hex}.json"
        self.names: set[str] = set()
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        weakref.finalize(self, _close_reader, self.fd, str(self.path))     # when the cache object goes, or at exit

    def add(self, names: set[str]) -> None:
        self.names |= names
        data = json.dumps(sorted(self.names)).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)


def _close_reader(fd: int, path: str) -> None:
    try:
        os.unlink(path)
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _json_list(raw: bytes) -> list[str] | None:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return [n for n in data if isinstance(n, str)] if isinstance(data, list) else None


class RemoteInputs:
    """Local copies of a plan's remote inputs, and where their bytes came from."""

    def __init__(self, storage_options: dict | None = None, cache_path=None, max_bytes: int | None = None):
        self.storage_options = storage_options
        self._cache_at = (cache_path, max_bytes)
        self._cache: InputCache | None = None
        self._temp: tempfile.TemporaryDirectory | None = None
        self.bytes_remote = 0
        self.bytes_cache = 0
        self.objects_remote = 0
        self.objects_cache = 0
        self.objects_ranged = 0

    def in_place(self, objects: list[RemoteObject]) -> set[str]:
        """The URLs of those (uncompressed, line-format) objects that partitions will read in
        byte ranges from the store: all that can be, when there is no cache to fill. Their bytes
        are counted as read from the store now (each range reads its own bytes, and a little
        context past its end to find where its last record ends)."""
        if self._cache_at[0]:
            return set()
        chosen = [o for o in objects if storage.reads_ranges(o)]
        self.bytes_remote += sum(o.size for o in chosen)
        self.objects_remote += len(chosen)
        self.objects_ranged += len(chosen)
        return {o.url for o in chosen}

    @property
    def cache(self) -> InputCache | None:
        """The cache tier, opened (and made) when a remote input first needs it."""
        if self._cache is None and self._cache_at[0]:
            self._cache = InputCache(*self._cache_at)
        return self._cache

    def local_copies(self, objects: list[RemoteObject]) -> dict[str, str]:
        """url -> local file, fetching what the cache does not hold. With a cache, the files are
        listed as this process's to read (no other run evicts them) before the lock is let go,
        and the objects fetched meanwhile are indexed under the lock again."""
        cache = self.cache
        if cache is None:
            return self._fetch(objects, {})
        with cache.locked():
            hits = {o.url: hit for o in objects if (hit := cache.lookup(o)) is not None}
            cache.read({_local_name(o) for o in objects} | {p.name for p in hits.values()})
            cache.save()
        fetched: list[RemoteObject] = []
        try:
            return self._fetch(objects, hits, fetched)
        finally:
            with cache.locked():
                for obj in fetched:
                    cache.add(obj)
                cache.evict(keep={o.url for o in objects})
                cache.save()

    def _fetch(self, objects: list[RemoteObject], hits: dict, fetched: list | None = None) -> dict[str, str]:
        out = {}
        for obj in objects:
            if obj.url in hits:
                out[obj.url] = str(hits[obj.url])
                self.bytes_cache += obj.size
                self.objects_cache += 1
        for obj in storage.fetch_into([o for o in objects if o.url not in hits], self._destination,
                                      self.storage_options):
            out[obj.url] = str(self._destination(obj))
            if fetched is not None:
                fetched.append(obj)
            self.bytes_remote += obj.size
            self.objects_remote += 1
        return out

    def _destination(self, obj: RemoteObject) -> Path:
        if self.cache is not None:
            return self.cache.objects / _local_name(obj)
        if self._temp is None:            # removed when this object goes (or at exit)
            self._temp = tempfile.TemporaryDirectory(prefix="gpuetl-inputs-")
        return Path(self._temp.name) / _local_name(obj)

    def __getstate__(self):             # sent to a worker: the temporary folder and the cache's reader
        return {**self.__dict__, "_temp": None, "_cache": None}       # file stay with their owner

    def summary(self) -> dict:
        return {"remote_bytes": self.bytes_remote, "cache_bytes": self.bytes_cache,
                "remote_objects": self.objects_remote, "cache_objects": self.objects_cache,
                "ranged_objects": self.objects_ranged}
