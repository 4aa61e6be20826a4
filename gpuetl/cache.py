"""Remote inputs on local disk: the cache tier (`cache: {path, max_bytes}`), or a temporary
folder that lives as long as the plan.

A remote input is fetched whole, many objects per request batch, into a local file that all
readers (CPU and GPU) read as they read any file, except where no cache is configured and the
source reads lines from an uncompressed object: that object is read in byte ranges from the
store by the partitions themselves (`in_place`; sources/ranges.py), never copied. With a cache, an object is fetched once
and reused by later runs while its ETag (and version id) and size are unchanged. Eviction is
least-recently-used within max_bytes and removes only files under `<cache.path>/gpuetl/objects/`
that the cache's own index lists; an entry the running plan reads is never evicted. Two
processes sharing a cache may each fetch the same object once; a file the index lost is left
alone, never deleted."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
import time
import uuid
from pathlib import Path

from . import storage
from .errors import SpecError
from .storage import RemoteObject

INDEX_FORMAT = "gpuetl-cache/1"


def _local_name(obj: RemoteObject) -> str:
    """A file name that keeps the object's suffix (readers infer compression and image type
    from it) and cannot clash: a digest of the URL and its ETag first."""
    digest = hashlib.sha256(f"{obj.url}\0{obj.etag}\0{obj.version_id}".encode()).hexdigest()[:24]
    base = re.sub(r"[^A-Za-z0-9._-]", "_", obj.url.rstrip("/").rsplit("/", 1)[-1])[-80:]
    return f"{digest}-{base}"


class InputCache:
    """`<path>/gpuetl/index.json` and `<path>/gpuetl/objects/`."""

    def __init__(self, path: str | Path, max_bytes: int | None):
        self.root = Path(path).expanduser() / "gpuetl"
        self.objects = self.root / "objects"
        self.index_path = self.root / "index.json"
        self.max_bytes = max_bytes
        for folder in (self.root, self.objects):        # checked before anything is made through them
            if not folder.is_symlink():
                try:
                    folder.mkdir(parents=True, exist_ok=True)
                except OSError as err:
                    raise SpecError(f"cache.path: cannot create {folder}: {err.strerror}") from None
            if folder.is_symlink() or not folder.is_dir():
                raise SpecError(f"cache.path: {folder} is a symbolic link or not a folder; gpuetl keeps its cache "
                                "in a folder of its own", hint="choose another cache.path")
        self.entries = self._load()

    def _load(self) -> dict:
        try:
            data = json.loads(self.index_path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, RecursionError):
            return {}                 # unreadable: start a new index; unlisted files are left alone
        if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT or not isinstance(data.get("entries"), dict):
            return {}
        return {k: v for k, v in data["entries"].items() if isinstance(v, dict) and self._file_of(v) is not None}

    def _file_of(self, entry: dict) -> Path | None:
        """The entry's file, if it is a plain name under objects/ (anything else is not ours)."""
        name = entry.get("file")
        if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", "..") \
                or "\0" in name:
            return None
        return self.objects / name

    def save(self) -> None:
        data = json.dumps({"format": INDEX_FORMAT, "entries": self.entries}, indent=1).encode()
        temp = self.root / f"index.json.{uuid.uuid4().hex[:8]}.partial"
        temp.write_bytes(data)
        os.replace(temp, self.index_path)

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
        """Index the object just written to objects/<its local name>."""
        old = self.entries.get(obj.url)
        name = _local_name(obj)
        self.entries[obj.url] = {"etag": obj.etag, "version_id": obj.version_id, "size": obj.size, "file": name,
                                 "used": time.time()}
        if old and old.get("file") != name:
            self._remove(old)
        return self.objects / name

    def _remove(self, entry: dict) -> None:
        path = self._file_of(entry)
        try:
            if path is not None and stat.S_ISREG(os.lstat(path).st_mode):
                os.unlink(path)
        except FileNotFoundError:
            pass

    def evict(self, keep: set[str]) -> list[str]:
        """Drop least-recently-used entries (not those in `keep`) until the cache fits max_bytes."""
        if self.max_bytes is None:
            return []
        total = sum(e["size"] for e in self.entries.values())
        dropped = []
        for url, entry in sorted(self.entries.items(), key=lambda kv: kv[1].get("used", 0)):
            if total <= self.max_bytes:
                break
            if url in keep:
                continue
            self._remove(entry)
            del self.entries[url]
            total -= entry["size"]
            dropped.append(url)
        return dropped


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
        """url -> local file, fetching what the cache does not hold."""
        out: dict[str, str] = {}
        missing = []
        for obj in objects:
            hit = self.cache.lookup(obj) if self.cache else None
            if hit is not None:
                out[obj.url] = str(hit)
                self.bytes_cache += obj.size
                self.objects_cache += 1
            else:
                missing.append(obj)
        try:
            for obj in storage.fetch_into(missing, self._destination, self.storage_options):
                out[obj.url] = str(self._stored(obj))
                self.bytes_remote += obj.size
                self.objects_remote += 1
        finally:
            if self.cache is not None:
                self.cache.evict(keep={o.url for o in objects})
                self.cache.save()
        return out

    def _destination(self, obj: RemoteObject) -> Path:
        if self.cache is not None:
            return self.cache.objects / _local_name(obj)
        if self._temp is None:            # removed when this object goes (or at exit)
            self._temp = tempfile.TemporaryDirectory(prefix="gpuetl-inputs-")
        return Path(self._temp.name) / _local_name(obj)

    def _stored(self, obj: RemoteObject) -> Path:
        return self.cache.add(obj) if self.cache is not None else self._destination(obj)

    def __getstate__(self):             # sent to a worker: the temporary folder stays with its owner
        return {**self.__dict__, "_temp": None}

    def summary(self) -> dict:
        return {"remote_bytes": self.bytes_remote, "cache_bytes": self.bytes_cache,
                "remote_objects": self.objects_remote, "cache_objects": self.objects_cache,
                "ranged_objects": self.objects_ranged}
