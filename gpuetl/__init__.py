"""gpuetl: declarative ETL for AI training data, on cuDF/CuPy/KvikIO or pandas/pyarrow/numpy."""

__version__ = "0.1.0"

from .errors import DataError, GpuetlError, OutputError, SourceError, SpecError  # noqa: E402


def __getattr__(name: str):
    """`Pipeline` and `load` are imported when first used: `import gpuetl` (and so the command's
    start, which imports it first) stays light until a pipeline is loaded, so a Ctrl-C then
    reaches the command's own handler, not the middle of the pandas import."""
    if name in ("Pipeline", "load"):
        from . import api

        return getattr(api, name)
    if name == "Loader":
        from .loader import Loader

        return Loader
    raise AttributeError(f"module 'gpuetl' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"Pipeline", "load", "Loader"})


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


__all__ = ["Pipeline", "load", "Loader", "GpuetlError", "SpecError", "DataError", "SourceError", "OutputError",
           "register_step", "register_source", "register_sink", "__version__"]
