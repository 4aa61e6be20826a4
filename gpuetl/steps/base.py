"""Steps: small classes registered under the name used in pipeline files.

A step declares its parameters as a pydantic model and is one of two kinds:
- a `RowStep` works on one partition at a time (transform, quarantine, keep);
- a `GlobalStep` decides across partitions (prepare, row_keys, repeated_keys, candidates,
  decide, mark; an `InOrderGlobalStep` may also be settled partition by partition with start
  and advance). plan/compile.py starts a new segment at each global step; runtime/graph.py and
  runtime/partition.py dispatch on these classes.
Binding a step to its input schema (`step.bind(schema)`) checks its parameters against that
schema and returns a bound copy whose `binding` (a frozen dataclass) holds the output schema
and whatever the step derived from its input. The stage runner (runtime/partition.py) owns the loop
and the counters: a step never counts.

Step modules register themselves with `@register`; the registry imports every module of this
package on first lookup, so a new step is one new module.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib
import pkgutil
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from ..columns import STATUS_DEDUPLICATED, STATUS_FILTERED
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


@dataclasses.dataclass(frozen=True)
class Binding:
    """What binding a step to its input schema gave: the schema it produces. A step that needs
    more from its input at run time (the columns it works on, their types) subclasses this."""

    output_schema: Schema


class Step(ABC):
    """What every step has: its parameters, its docs, its binding and the frame hooks the stage
    runner calls on the segment's steps (transform, then keep)."""

    name: ClassVar[str]
    summary: ClassVar[str]                    # one line for docs/steps.md
    example: ClassVar[str]                    # YAML for docs/steps.md
    Params: ClassVar[type[BaseModel]]
    drops_as: ClassVar[int] = STATUS_FILTERED  # what a row keep() drops counts as

    binding: Binding | None = None            # set on the copy bind() returns

    def __init__(self, params: BaseModel):
        self.params = params

    @classmethod
    def from_raw(cls, raw: Any) -> "Step":
        """Build from the YAML value; pydantic.ValidationError on bad parameters."""
        return cls(cls.Params.model_validate(raw))

    def derive(self, schema: Schema) -> Binding:
        """Check the parameters against the input schema (StepError where they do not fit) and
        return what the step needs from it; by default the schema passes through unchanged."""
        return Binding(dict(schema))

    def bind(self, schema: Schema) -> "Step":
        """A copy of this step bound to its input schema (`binding` set); this step is unchanged."""
        bound = copy.copy(self)
        bound.binding = self.derive(schema)
        return bound

    @property
    def output_schema(self) -> Schema:
        if self.binding is None:
            raise RuntimeError(f"the {self.name} step is not bound to a schema yet: call bind(schema)")
        return self.binding.output_schema

    def look_ahead(self, later: list["Step"]) -> "Step":
        """This step as it runs before `later` (the steps after it in the pipeline); a step that
        can do less work for what follows returns a copy that knows it. By default: itself."""
        return self

    def transform(self, df, backend):
        """Return the transformed rows of one partition."""
        return df

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

    def __dask_tokenize__(self):
        """A step is its class, parameters and binding. (dask names tasks by tokenizing their
        arguments; left to pickle, a pydantic model of a generic type is pickled by value, which
        dask cannot always tell to be deterministic, and the run fails.)"""
        return type(self).__module__, type(self).__qualname__, self.params.model_dump_json(), repr(self.binding)


class RowStep(Step):
    """A step on one partition at a time: rows it cannot process are set aside (quarantine),
    the rest are transformed, then kept or dropped (keep)."""

    def quarantine(self, df, backend):
        """(df, bad mask or None, reason Series or None): rows this step cannot process."""
        return df, None, None

    def raw_record(self, rows, backend):
        """The raw form of rows this step quarantines; None: their values as JSON."""
        return None


class GlobalStep(Step):
    """A step decided across partitions without moving rows. runtime/graph.py's resolve_in_place
    runs, per partition i: prepare -> row_keys; once: repeated_keys(all keys); per partition:
    candidates(df, keys, repeated, i); once: decide(all candidates) -> {partition: positions};
    per partition: mark, then the segment's steps, this one first, whose keep() drops what mark
    marked. Only keys and candidates leave a partition. It never quarantines and sees the rows
    that already left."""

    drops_as: ClassVar[int] = STATUS_DEDUPLICATED

    def prepare(self, df, backend):
        """Map side, in the partition (the default: nothing to prepare, and no task for it)."""
        return df

    @abstractmethod
    def row_keys(self, df, backend): ...

    @abstractmethod
    def repeated_keys(self, keys: list, backend): ...

    @abstractmethod
    def candidates(self, df, keys, repeated, partition: int, backend): ...

    @abstractmethod
    def decide(self, candidates: list, backend) -> dict: ...

    @abstractmethod
    def mark(self, df, partition: int, decided: dict, backend): ...


class InOrderGlobalStep(GlobalStep):
    """A global step that may also be decided in input order (runtime/graph.py: resolve_in_order),
    when its state can stay in the process: start(backend, scratch) once (scratch: a folder of
    the run's where the state may set data aside, or None), then advance(state, df, keys, i) for
    partition 0, 1, ... in turn, which returns (the next state, {i: positions} for mark).
    Partition i is then settled as soon as it and the partitions before it are parsed, so it is
    written while later ones are still being read."""

    @abstractmethod
    def start(self, backend, scratch: str | None = None): ...

    @abstractmethod
    def advance(self, state, df, keys, partition: int, backend): ...


def register(cls: type[Step]) -> type[Step]:
    """Register a step class under its `name` (the key in pipeline files)."""
    if not (isinstance(cls, type) and issubclass(cls, (RowStep, GlobalStep))):
        raise TypeError(f"register: {cls!r} is not a RowStep or GlobalStep subclass")
    STEPS[cls.name] = cls
    return cls


_discovered = False


def discover() -> dict[str, type[Step]]:
    """Import every module of gpuetl.steps once (each registers its steps); the registry."""
    global _discovered
    if not _discovered:
        from .. import steps as package

        _discovered = True
        for module in pkgutil.iter_modules(package.__path__):
            if not module.name.startswith("_"):
                importlib.import_module(f"{package.__name__}.{module.name}")
    return STEPS


def closest(name: str, known) -> str | None:
    match = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.6)
    return match[0] if match else None


def step_class(name: str) -> type[Step]:
    discover()
    if name not in STEPS:                    # not built in: perhaps a plugin's (gpuetl/plugins.py)
        from ..plugins import load_plugins

        load_plugins()
    try:
        return STEPS[name]
    except KeyError:
        hint = closest(name, STEPS)
        raise KeyError(f"unknown step {name!r}" + (f"; did you mean {hint!r}?" if hint else "")
                       + f". Known steps: {', '.join(sorted(STEPS))}") from None


__all__ = ["STEPS", "Step", "RowStep", "GlobalStep", "InOrderGlobalStep", "Binding", "StepError", "Params",
           "register", "discover", "step_class", "closest"]
