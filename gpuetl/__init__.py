"""gpuetl: declarative ETL for AI training data, on cuDF/CuPy/KvikIO or pandas/pyarrow/numpy."""

__version__ = "0.1.0"

from .api import Pipeline, load  # noqa: E402
from .errors import DataError, GpuetlError, OutputError, SourceError, SpecError  # noqa: E402


def register_step(cls):
    """Make a Step subclass usable by its `name` in pipeline files; returns it (a decorator)."""
    from .steps.base import Step, register

    if not (isinstance(cls, type) and issubclass(cls, Step) and isinstance(getattr(cls, "name", None), str)):
        raise TypeError(f"{cls!r}: register_step takes a subclass of gpuetl.steps.Step with a `name`")
    return register(cls)


def register_source(fmt, *, replace: bool = False):
    """Make a source format usable as `source.type` (gpuetl/sources/registry.py says what it provides)."""
    from .sources.registry import register_source as register

    return register(fmt, replace=replace)


def register_sink(sink, *, replace: bool = False):
    """Make a sink usable as `sink.type` (gpuetl/sinks/base.py says what it provides)."""
    from .sinks.base import register_sink as register

    return register(sink, replace=replace)


__all__ = ["Pipeline", "load", "GpuetlError", "SpecError", "DataError", "SourceError", "OutputError",
           "register_step", "register_source", "register_sink", "__version__"]
