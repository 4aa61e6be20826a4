"""Source formats by name. A format is one object with a `name`, the `options` it reads from the
pipeline file's `source:` block beyond the common ones, and `plan(loaded, files, notes, backend)`
returning (partitions, the source stage, manifest metadata). The stage is how a partition becomes
a frame: either a `SourceStage` (byte ranges parsed by a parser, sources/stage.py) or any object
with `schema` and `read(partition, segment, backend) -> frame` (sources/images.py).

The built-in formats are imported only when looked up; formats from other packages come from
`gpuetl.register_source` or the `gpuetl.plugins` entry-point group (gpuetl/plugins.py)."""

from __future__ import annotations

import difflib
import importlib
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..errors import SpecError


@runtime_checkable
class SourceFormat(Protocol):
    name: ClassVar[str]
    options: ClassVar[tuple[str, ...]]      # `source:` fields it reads beyond type, path, blocksize, compression, provenance

    def plan(self, loaded: Any, files: list, notes: list[str], backend: Any = None) -> tuple[list, Any, dict]:
        """(partitions, the source stage, metadata for the manifest); errors in the file are SpecErrors."""
        ...


# name -> "module:attribute", imported on first use
BUILTIN_SOURCES = {
    "text": "gpuetl.sources.formats.text:TextFormat",
    "jsonl": "gpuetl.sources.formats.jsonl:JsonlFormat",
    "csv": "gpuetl.sources.formats.csv:CsvFormat",
    "parquet": "gpuetl.sources.formats.parquet:ParquetFormat",
    "images": "gpuetl.sources.formats.images:ImagesFormat",
}
_REGISTERED: dict[str, SourceFormat] = {}


def register_source(fmt, *, replace: bool = False):
    """Register a source format (a class or an instance); returns it, so it works as a decorator."""
    instance = fmt() if isinstance(fmt, type) else fmt
    name = getattr(instance, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{fmt!r}: a source format needs a `name`")
    if not callable(getattr(instance, "plan", None)):
        raise TypeError(f"source format {name!r}: needs plan(loaded, files, notes, backend)")
    if not replace and (name in BUILTIN_SOURCES or name in _REGISTERED):
        raise ValueError(f"source format {name!r} is already registered")
    if not hasattr(instance, "options"):
        instance.options = ()
    _REGISTERED[name] = instance
    return fmt


def is_source(name: str) -> bool:
    """Known, built in or registered; plugins are loaded only for a name gpuetl does not know."""
    if name in BUILTIN_SOURCES or name in _REGISTERED:
        return True
    from ..plugins import load_plugins

    load_plugins()
    return name in _REGISTERED


def registered_names() -> list[str]:
    """The formats known now, without looking for plugins."""
    return sorted({*BUILTIN_SOURCES, *_REGISTERED})


def source_names() -> list[str]:
    from ..plugins import load_plugins

    load_plugins()
    return sorted({*BUILTIN_SOURCES, *_REGISTERED})


def get_source(name: str) -> SourceFormat:
    """The format called `name`; an unknown name is a SpecError with the closest known name."""
    if name not in _REGISTERED and name in BUILTIN_SOURCES:
        module, attr = BUILTIN_SOURCES[name].split(":")
        _REGISTERED[name] = getattr(importlib.import_module(module), attr)()
    if name not in _REGISTERED:
        from ..plugins import load_plugins

        load_plugins()
    if name not in _REGISTERED:
        raise SpecError(unknown_source(name))
    return _REGISTERED[name]


def unknown_source(name: str) -> str:
    known = source_names()
    hint = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
    return (f"unknown source type {name!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
            + f" (known: {', '.join(known)})")
