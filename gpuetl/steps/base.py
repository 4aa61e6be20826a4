"""Steps: small classes registered under the name used in pipeline files.

A step declares its parameters as a pydantic model, the schema it produces, and one partition
function. The stage runner (plan/stages.py) owns the loop and the counters: a step never counts.
"""

from __future__ import annotations

import difflib
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from ..backends.base import STATUS_FILTERED
from ..types import Schema

STEPS: dict[str, type["Step"]] = {}


class StepError(ValueError):
    """A step's parameters do not fit the schema it receives (raised at plan time). `key` is
    the path of the parameter at fault within the step's (e.g. ('hour',) of a derive), so the
    message can name its line."""

    def __init__(self, message: str, key: tuple = ()):
        super().__init__(message)
        self.key = key


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)   # `true` is not the number 1


class Step:
    name: ClassVar[str]
    summary: ClassVar[str]                    # one line for docs/steps.md
    example: ClassVar[str]                    # YAML for docs/steps.md
    Params: ClassVar[type[BaseModel]]
    drops_as: ClassVar[int] = STATUS_FILTERED  # what a dropped row counts as
    is_global: ClassVar[bool] = False          # needs rows from every partition (a shuffle)
    # May run on a frame that still holds rows that already left (dropped by an earlier step,
    # quarantined at the source), so the stage runner need not copy the live rows out first:
    # transform and keep must leave such rows be (run_steps ignores keep's verdict on them) and
    # the step must not quarantine. Filters, the global steps and the column-only steps (select,
    # drop, rename) qualify.
    sees_dropped: ClassVar[bool] = False

    def __init__(self, params: BaseModel):
        self.params = params

    @classmethod
    def from_raw(cls, raw: Any) -> "Step":
        """Build from the YAML value; pydantic.ValidationError on bad parameters."""
        return cls(cls.Params.model_validate(raw))

    def output_schema(self, schema: Schema) -> Schema:
        return dict(schema)

    def transform(self, df, backend):
        """Return the transformed live rows of one partition."""
        return df

    def quarantine(self, df, backend):
        """(df, bad mask or None, reason Series or None): rows this step cannot process."""
        return df, None, None

    def raw_record(self, rows, backend):
        """The raw form of rows this step quarantines; None: their values as JSON."""
        return None

    def keep(self, df, backend):
        """A bool mask of the live rows to keep, or None to keep every row."""
        return None

    def describe(self) -> str:
        return f"{self.name}"

    def new_names(self) -> list[tuple[tuple, str]]:
        """(key path within the step's parameters, name) of each column name the step makes up;
        the loader refuses reserved ones (spec/names.py)."""
        return []

    def regexes(self) -> list[tuple[tuple, str]]:
        """(key path within the step's parameters, pattern) of each regular expression the step
        runs; checked at load time with RE2 and offered to the backend's check_regex at plan time."""
        return []

    # -- global steps (is_global): decided across partitions without moving rows ------------
    # plan/graph.py's resolve_in_place runs, per partition i: prepare -> row_keys; once:
    # repeated_keys(all keys); per partition: candidates(df, keys, repeated, i); once:
    # decide(all candidates) -> {partition: positions}; per partition: mark, then the segment's
    # steps, where keep() drops what mark marked. Only keys and candidates leave a partition.
    def prepare(self, df, backend):
        return df

    def row_keys(self, df, backend):
        raise NotImplementedError

    def repeated_keys(self, keys: list, backend):
        raise NotImplementedError

    def candidates(self, df, keys, repeated, partition: int, backend):
        raise NotImplementedError

    def decide(self, candidates: list, backend) -> dict:
        raise NotImplementedError

    def mark(self, df, partition: int, decided: dict, backend):
        raise NotImplementedError

    # A global step may also be decided in input order (plan/graph.py: resolve_in_order), when
    # its state can stay in the process: start() once, then advance(state, df, keys, i) for
    # partition 0, 1, ... in turn, which returns (the next state, {i: positions} for mark).
    # Partition i is then settled as soon as it and the partitions before it are parsed, so it
    # is written while later ones are still being read.
    in_order: ClassVar[bool] = False

    def start(self, backend):
        raise NotImplementedError

    def advance(self, state, df, keys, partition: int, backend):
        raise NotImplementedError

    def __dask_tokenize__(self):
        """A step is its class and parameters. (dask names tasks by tokenizing their arguments;
        left to pickle, a pydantic model of a generic type is pickled by value, which dask
        cannot always tell to be deterministic, and the run fails.)"""
        return type(self).__module__, type(self).__qualname__, self.params.model_dump_json()


def register(cls: type[Step]) -> type[Step]:
    STEPS[cls.name] = cls
    return cls


def closest(name: str, known) -> str | None:
    match = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.6)
    return match[0] if match else None


def step_class(name: str) -> type[Step]:
    from . import _load_all  # noqa: F401  (registers every step)

    if name not in STEPS:                    # not built in: perhaps a plugin's (gpuetl/plugins.py)
        from ..plugins import load_plugins

        load_plugins()
    try:
        return STEPS[name]
    except KeyError:
        hint = closest(name, STEPS)
        raise KeyError(f"unknown step {name!r}" + (f"; did you mean {hint!r}?" if hint else "")
                       + f". Known steps: {', '.join(sorted(STEPS))}") from None


__all__ = ["STEPS", "Step", "StepError", "Params", "register", "step_class", "closest"]
