"""Source formats by name. A format is one object with a `name`, the `options` it reads from the
pipeline file's `source:` block beyond the common ones, and `plan(loaded, files, notes, backend)`
returning (partitions, the source stage, manifest metadata). The stage owns the reading: its
`read(partition, segment, backend, counters, decoded)` turns a partition's bytes into typed
frames, piece by piece, and the runtime calls nothing else of it. A byte format builds a
`SourceStage` (sources/stage.py: lines, framed records, row groups) around its parser; any other
format gives a `RecordStage`, which makes its frames itself (sources/images.py).

The built-in formats are imported only when looked up; formats from other packages come from
`gpuetl.register_source` or the `gpuetl.plugins` entry-point group (gpuetl/plugins.py)."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

from ..plugins import Registry


@runtime_checkable
class SourceFormat(Protocol):
    name: ClassVar[str]
    options: ClassVar[tuple[str, ...]]      # `source:` fields it reads beyond type, path, blocksize, compression, provenance

    def plan(self, loaded: Any, files: list, notes: list[str], backend: Any = None) -> tuple[list, Any, dict]:
        """(partitions, the source stage, metadata for the manifest); errors in the file are SpecErrors."""
        ...


@runtime_checkable
class RecordStage(Protocol):
    """A source stage: how a partition becomes frames (bookkeeping columns included). It may
    also sum its run up for the manifest: `summarize(spec, counters, metadata)`
    (sources/counters.py: `Summarizing`; the built-in stages have it, the JSON stage's says
    which fields it dropped); the runtime calls it without knowing the format."""

    schema: dict                      # data columns of the frames it makes
    default_key: tuple[str, ...]      # what splits and placement hash without shard.key; () = every column

    def read(self, partition: Any, segment: Any, backend: Any, counters: Any, decoded: Any = ()) -> Any:
        """An iterator of the partition's frames, in input order, before the segment's steps run
        on them: the runtime runs each through the segment's row steps before asking for the
        next (runtime/partition.py), so what a task holds is bounded by a piece, not by the
        partition. `counters` (sources/counters.py: PartitionCounters) takes what the reading
        counted: the hash of each span of input read (sources/pins.py), the fields a parser
        dropped. `decoded`: the bytes of the partition's compressed ranges, in order."""
        ...


# name -> "module:attribute", imported on first use
BUILTIN_SOURCES = {
    "text": "gpuetl.sources.formats.text:TextFormat",
    "jsonl": "gpuetl.sources.formats.jsonl:JsonlFormat",
    "csv": "gpuetl.sources.formats.csv:CsvFormat",
    "parquet": "gpuetl.sources.formats.parquet:ParquetFormat",
    "images": "gpuetl.sources.formats.images:ImagesFormat",
}
SOURCES = Registry("source type", BUILTIN_SOURCES)
_REGISTERED = SOURCES.registered


def register_source(fmt, *, replace: bool = False):
    """Register a source format (a class or an instance); returns it, so it works as a decorator."""
    instance = fmt() if isinstance(fmt, type) else fmt
    name = getattr(instance, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{fmt!r}: a source format needs a `name`")
    if not callable(getattr(instance, "plan", None)):
        raise TypeError(f"source format {name!r}: needs plan(loaded, files, notes, backend)")
    if not hasattr(instance, "options"):
        instance.options = ()
    SOURCES.add(name, instance, replace=replace)
    return fmt


def is_source(name: str) -> bool:
    """Known, built in or registered; plugins are loaded only for a name gpuetl does not know."""
    return SOURCES.known(name)


def registered_names() -> list[str]:
    """The formats known now, without looking for plugins."""
    return SOURCES.names(plugins=False)


def source_names() -> list[str]:
    return SOURCES.names()


def get_source(name: str) -> SourceFormat:
    """The format called `name`; an unknown name is a SpecError with the closest known name."""
    return SOURCES.get(name)


def unknown_source(name: str) -> str:
    return SOURCES.unknown(name)
