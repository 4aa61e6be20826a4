"""Sinks by name. A sink turns the spilled, placed rows into files in the dataset folder: it
writes a shard (from spilled pieces, or streamed table by table), writes the quarantine files,
commits the run (the commit protocol in sinks/commit.py is the same for every sink: files are
written under the run's folder, then listed in the manifest and moved in), lists its files and
reads a few rows back for `gpuetl inspect`. `sink.type` in the pipeline file picks one; Parquet is
built in, others come from `gpuetl.register_sink` or a `gpuetl.plugins` entry point."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..plugins import Registry
from . import commit as commit_protocol


@runtime_checkable
class Sink(Protocol):
    name: ClassVar[str]
    suffix: ClassVar[str]          # of the shard files, e.g. ".parquet"

    def write_options(self, sink_spec: Any) -> Any:
        """The pipeline file's `sink:` block as the options write_shard and shard_writer take."""

    def shard_path(self, split_name: str, index: int) -> str:
        """Where shard `index` of a split goes, relative to the dataset folder."""

    def write_shard(self, task: Any, pieces: list[str], **kwargs) -> Any:
        """Gather the shard's rows from the spilled pieces, order them, write the file (a ShardResult)."""

    def shard_writer(self, backend: Any, path: str, schema: dict, options: Any, task: Any) -> Any:
        """A writer with write(table) and close() -> ShardResult, for rows streamed in input order."""

    def write_quarantine(self, pieces: list[str], tmp_dir: str, options: Any) -> list:
        """The quarantined records' files."""

    def size_ratio(self, pieces: list[str], histogram: Any, schema: dict, options: Any) -> float:
        """Bytes written per spilled byte, to cut shards of shard.target_bytes."""

    def output_folder(self, out: Path, log) -> Any:
        """The commit: a context manager that stages a run's files and moves them in whole (for an
        s3:// sink.path, `out` is the URL and storage_options are passed as a keyword)."""

    def list_files(self, out: Path, manifest: dict) -> list[str]:
        """The data files the manifest lists, relative to the dataset folder."""

    def sample(self, path: Path, rows: int) -> list[dict]:
        """The first rows of one shard, as dicts (raises OSError or the format's error)."""


BUILTIN_SINKS = {"parquet": "gpuetl.sinks.parquet:ParquetSink"}
SINKS = Registry("sink type", BUILTIN_SINKS)
_REGISTERED = SINKS.registered


def register_sink(sink, *, replace: bool = False):
    """Register a sink (a class or an instance); returns it, so it works as a decorator."""
    instance = sink() if isinstance(sink, type) else sink
    name = getattr(instance, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{sink!r}: a sink needs a `name`")
    missing = [m for m in ("write_options", "shard_path", "write_shard", "shard_writer", "write_quarantine",
                           "size_ratio", "output_folder", "list_files", "sample")
               if not callable(getattr(instance, m, None))]
    if missing:
        raise TypeError(f"sink {name!r}: missing {', '.join(missing)}")
    SINKS.add(name, instance, replace=replace)
    return sink


def is_sink(name: str) -> bool:
    """Known, built in or registered; plugins are loaded only for a name gpuetl does not know."""
    return SINKS.known(name)


def sink_names() -> list[str]:
    return SINKS.names()


def get_sink(name: str):
    """The sink called `name`; an unknown name is a SpecError with the closest known name."""
    return SINKS.get(name)


def unknown_sink(name: str) -> str:
    return SINKS.unknown(name)


def sink_of_manifest(manifest: dict):
    """The sink that wrote a dataset (manifests name it under sink.type; Parquet when they do not)."""
    sink = manifest.get("sink")
    return get_sink(sink.get("type", "parquet") if isinstance(sink, dict) else "parquet")


class CommittedFolder:
    """Mixin for sinks that use the shared commit protocol (sinks/commit.py) as it is."""

    def output_folder(self, out, log, storage_options: dict | None = None):
        if isinstance(out, str):             # an object-store URL: the commit without rename
            from .objectstore import ObjectStoreFolder

            return ObjectStoreFolder(out, log, storage_options)
        return commit_protocol.OutputFolder(out, log)

    def list_files(self, out: Path, manifest: dict) -> list[str]:
        return [e["path"] for e in manifest.get("shards", [])]
