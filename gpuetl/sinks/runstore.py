"""A run's temporary files in the object store, for a cluster whose workers share no disk with
this process (or with each other): nothing shared but the bucket.

With an s3:// sink, gpuetl's own cluster (in this process, or worker processes on this machine)
keeps the run's spills, shard records and shards in the local staging folder
(sinks/objectstore.py), which every task and the commit see. A cluster reached by its address may
run its workers on other machines, so there every file that another task or the client reads
goes through the store, under the sink's `_tmp/<run-id>/`:

- a map task writes its pieces into a temporary folder of its own on its worker, uploads them to
  `_tmp/<run-id>/spill/…` and removes the folder;
- a shard task fetches the pieces of its split into a temporary folder of its own (each piece
  once, when it first reads it), writes the shard there, uploads it to
  `_tmp/<run-id>/data/<path>` and its record to `_tmp/<run-id>/shards/`, and removes the folder;
  the quarantine task likewise;
- the client reads the shards' Parquet footers from the store, and the commit copies the uploaded
  shards into place (sinks/objectstore.py).

What a worker keeps on its own disk only that task reads, and only while it runs."""

from __future__ import annotations

import contextvars
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field

from .. import storage
from ..backends.host_spill import PIECE_FETCH

SPILL, DATA, SHARDS = "spill", "data", "shards"

# The running task's store, folder and the pieces it fetched (RunStore.task_folder sets it).
_TASK: contextvars.ContextVar = contextvars.ContextVar("gpuetl_run_store_task", default=None)


def workers_share_disk(executor) -> bool:
    """Whether the tasks see this process's files: dask's local schedulers, a cluster in this
    process, or a LocalCluster's worker processes on this machine (gpuetl's own cluster). A
    cluster reached by its address may have its workers anywhere, so it is not assumed to (a
    loopback address proves nothing: containers on one host have disks of their own)."""
    client = executor.client
    if client is None or executor.in_process:
        return True
    from distributed import LocalCluster

    return isinstance(getattr(client, "cluster", None), LocalCluster)


@dataclass(frozen=True)
class RunStore:
    """`<out>/_tmp/<run-id>` in the store: where the run's tasks put what others read. Passed to
    the tasks (the storage options with it, as an input object carries its own; never printed)."""

    url: str
    storage_options: dict | None = field(default=None, repr=False, compare=False)

    @property
    def fs(self):
        return storage.filesystem(self.url, self.storage_options)

    def join(self, rel: str) -> str:
        return storage.join(self.url, rel)

    def _key(self, rel: str) -> str:
        return storage.bare(self.join(rel))

    def _errors(self, rel: str, action: str):
        return storage.translated(self.join(rel), self.storage_options, action, output=True)

    def relative(self, url: str) -> str:
        if not storage.inside(url, self.url) or url.rstrip("/") == self.url.rstrip("/"):
            raise ValueError(f"internal error: {url} is not a file of the run's folder {self.url}")
        return url[len(self.url.rstrip("/")) + 1:]

    # whole objects

    def upload(self, local: str, rel: str) -> str:
        with self._errors(rel, "upload"):
            self.fs.put_file(local, self._key(rel))
        return self.join(rel)

    def put_bytes(self, rel: str, data: bytes) -> None:
        with self._errors(rel, "write"):
            self.fs.pipe_file(self._key(rel), data)

    def get_bytes(self, rel: str) -> bytes | None:
        with self._errors(rel, "read"):
            try:
                return self.fs.cat_file(self._key(rel))
            except FileNotFoundError:
                return None

    def size(self, rel: str) -> int | None:
        with self._errors(rel, "read"):
            try:
                return int(self.fs.info(self._key(rel), refresh=True)["size"])
            except FileNotFoundError:
                return None

    # a task's own folder on its worker

    @contextmanager
    def task_folder(self):
        """A temporary folder on this worker for one task, removed when the task ends. Pieces in
        the store that the task reads meanwhile (host_spill.read_ipc, through PIECE_FETCH) are
        fetched into it, each once."""
        folder = tempfile.mkdtemp(prefix="gpuetl-task-")
        token, fetch_token = _TASK.set((self, folder, {})), PIECE_FETCH.set(local_copy)
        try:
            yield folder
        finally:
            PIECE_FETCH.reset(fetch_token)
            _TASK.reset(token)
            shutil.rmtree(folder, ignore_errors=True)

    def upload_from(self, folder: str, local: str) -> str:
        """Upload a file the task wrote in its folder to the same place under the run's prefix."""
        rel = os.path.relpath(local, folder).replace(os.sep, "/")
        if rel.startswith("../"):
            raise ValueError(f"internal error: {local} is not in the task's folder {folder}")
        return self.upload(local, rel)


def local_copy(url: str) -> str:
    """The local path of a file of the run's in the store, fetched into the running task's folder
    when first read (host_spill.read_ipc memory-maps it from there)."""
    current = _TASK.get()
    if current is None:
        raise RuntimeError(f"internal error: {url} read outside a task that fetches the run's files")
    store, folder, fetched = current
    if url not in fetched:
        rel = store.relative(url)
        local = os.path.join(folder, "fetched", *rel.split("/"))
        os.makedirs(os.path.dirname(local), exist_ok=True)
        with store._errors(rel, "read"):
            store.fs.get_file(store._key(rel), local + ".partial")
        os.replace(local + ".partial", local)
        fetched[url] = local
    return fetched[url]


# -- the tasks that write, working in their own folder ---------------------------------------------

def spill_through_store(store: RunStore, part, partition: int, **kwargs):
    """spill.spill_partition into the task's folder, the pieces then uploaded: the result names
    them by URL."""
    from .spill import spill_partition

    with store.task_folder() as folder:
        result = spill_partition(part, partition, **{**kwargs, "tmp_dir": folder, "in_memory": False})
        result.pieces = {split: store.upload_from(folder, path) for split, path in result.pieces.items()}
        if result.quarantine is not None:
            result.quarantine = store.upload_from(folder, result.quarantine)
    return result


class SinkThroughStore:
    """The run's sink, its shard and quarantine tasks writing in a folder of their own on their
    worker and uploading what they wrote to `_tmp/<run-id>/data/`; the shard sizing reads its
    sample of the pieces in a task of its own (the runtime runs every reading method as a task)."""

    def __init__(self, sink, store: RunStore):
        self.sink, self.store = sink, store

    def shard_path(self, split_name: str, index: int) -> str:
        return self.sink.shard_path(split_name, index)

    def write_shard(self, task, pieces: list[str], **kwargs):
        with self.store.task_folder() as folder:
            result = self.sink.write_shard(task, pieces, **{**kwargs, "tmp_dir": folder})
            self.store.upload_from(folder, os.path.join(folder, DATA, result.path))
        return result

    def write_quarantine(self, pieces: list[str], tmp_dir, options) -> list:
        with self.store.task_folder() as folder:
            results = self.sink.write_quarantine(pieces, folder, options)
            for result in results:
                self.store.upload_from(folder, os.path.join(folder, DATA, result.path))
        return results

    def size_ratio(self, pieces: list[str], histogram, schema, options) -> float:
        with self.store.task_folder():
            return self.sink.size_ratio(pieces, histogram, schema, options)
