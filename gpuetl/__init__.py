"""gpuetl: declarative ETL for AI training data, on cuDF/CuPy/KvikIO or pandas/pyarrow/numpy."""

__version__ = "0.1.0"

from .api import Pipeline, load  # noqa: E402
from .errors import DataError, GpuetlError, OutputError, SourceError, SpecError  # noqa: E402

__all__ = ["Pipeline", "load", "GpuetlError", "SpecError", "DataError", "SourceError", "OutputError",
           "__version__"]
