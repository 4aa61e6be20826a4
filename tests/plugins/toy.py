"""A source format and a step defined outside gpuetl, as a plugin package would: nothing in the
package names them. `register()` is what a `gpuetl.plugins` entry point points at."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import RootModel

import gpuetl
from gpuetl.sources.stage import declared_columns, plan_byte_ranges, source_stage
from gpuetl.steps.base import RowStep


@dataclass(frozen=True)
class ShoutParser:
    """Each line becomes `word`, upper-cased; a line starting with '#' is not a record (quarantined)."""

    @property
    def schema(self):
        return {"word": "string"}

    def parse(self, text, backend, file_index=None):
        return {"word": text.str.upper()}, ~text.str.startswith("#"), "a comment line, not a word"


class ShoutFormat:
    name = "toy_shout"
    options = ()

    def plan(self, loaded, files, notes, backend=None):
        stage = source_stage(loaded, files, ShoutParser(), casts={}, declared=declared_columns(loaded),
                             field_hint="the toy format has one field, word")
        return plan_byte_ranges(loaded, files), stage, {"toy": {"format": self.name}}


class ExclaimParams(RootModel[int]):
    """How many '!' to append."""


class Exclaim(RowStep):
    name = "toy_exclaim"
    summary = "Append this many '!' to `word`."
    example = "- toy_exclaim: 2"
    Params = ExclaimParams

    def transform(self, df, backend):
        df["word"] = df["word"] + "!" * self.params.root
        return df


def register() -> None:
    gpuetl.register_source(ShoutFormat)
    gpuetl.register_step(Exclaim)
