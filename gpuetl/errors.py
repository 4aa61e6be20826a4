"""Errors a user can act on. Each carries the exit code the CLI uses (see PIPELINE_FILE.md)."""

from __future__ import annotations


class GpuetlError(Exception):
    """Base class: a message for a person, never a bare traceback."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message + (f"\n  hint: {self.hint}" if self.hint else "")

    def __reduce__(self):  # survive pickling across dask workers
        return (_rebuild, (type(self), self.message, self.hint))


def _rebuild(cls, message, hint):
    err = cls.__new__(cls)
    GpuetlError.__init__(err, message, hint=hint)
    return err


class SpecError(GpuetlError):
    """The pipeline file or the command line is wrong (exit 2)."""

    exit_code = 2


class InputsNotFound(SpecError):
    """source.path matches no file: the file is wrong, or the data is not here (yet)."""


class SourceError(GpuetlError):
    """An input file cannot be found, read or decoded as a whole (exit 1)."""


class DataError(GpuetlError):
    """The data failed the run: bad records over the limit, on_error: fail, a failed verify (exit 1)."""


class OutputError(GpuetlError):
    """The output location refuses the run (mode: error on an existing dataset) (exit 2)."""

    exit_code = 2


class OutputWriteFailed(OutputError):
    """Writing or committing the output failed (disk full, read-only disk): the path and what to
    do, with exit 1, as for any run that could not finish."""

    exit_code = 1
