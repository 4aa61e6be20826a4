"""The versions a run records (in its manifest and its report): gpuetl's, Python's and those of
the libraries that did the work, the backend's own included."""

from __future__ import annotations

import platform

from .. import __version__

__all__ = ["__version__", "recorded_versions"]


def recorded_versions(backend) -> dict:
    import dask
    import numpy
    import pandas
    import pyarrow

    found = {"gpuetl": __version__, "python": platform.python_version(), "dask": dask.__version__,
             "pandas": pandas.__version__, "pyarrow": pyarrow.__version__, "numpy": numpy.__version__}
    found.update(backend.versions())
    return found
