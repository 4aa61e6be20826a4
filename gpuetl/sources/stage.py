"""The source stage of the byte formats (text, jsonl, csv, parquet): the parser that turns a
partition's records into columns, the declared casts, and the schema after them. The runtime
(runtime/partition.py) reads partitions with it; the format modules (sources/formats/) build it."""

from __future__ import annotations

from typing import Any

import difflib
from dataclasses import dataclass

from ..errors import SpecError
from ..spec.names import field_name_problem
from ..types import ColumnSpec, Schema, column_spec
from .compressed import Limits
from .files import InputFile
from .ranges import Partition, plan_partitions

MAX_PARTITIONS = 100_000


class PartitionScoped:
    """A source stage whose task reads only the inputs its partition names: each task then
    carries those inputs alone (plan.compile.Segment.for_partition), not every input of the
    plan. `files` is indexed by an input's index, never listed."""

    files: Any

    def input_indices(self, partition) -> set[int]:
        """The indices of the inputs this partition's task reads."""
        raise NotImplementedError

    def with_inputs(self, files) -> "PartitionScoped":
        """A copy that carries `files` (a sources.files.PartitionInputs) instead."""
        raise NotImplementedError


@dataclass
class SourceStage:
    files: list[InputFile]
    parser: object
    casts: dict[str, ColumnSpec]
    schema: Schema                 # data columns after parsing and typing (provenance included)
    provenance: bool = False
    index: int = 0
    parquet: bool = False          # ranges are row groups, records are rows
    framing: object = None         # records that span lines (csv, multiline: sources/framing.py); None: lines
    default_key: tuple[str, ...] = ()   # what splits and placement hash without shard.key; () = every column


def declared_columns(loaded) -> dict[str, ColumnSpec]:
    return {name: column_spec(v) for name, v in loaded.spec.columns.items()}


def plan_byte_ranges(loaded, files: list[InputFile], whole_compressed: bool = False) -> list[Partition]:
    """Cut line-oriented inputs into byte ranges of about `source.blocksize`, a record never split."""
    src = loaded.spec.source
    check_partition_count(loaded, files)
    return plan_partitions(files, src.blocksize, Limits.of(src),
                           whole_compressed)


def check_partition_count(loaded, files: list[InputFile]) -> None:
    """A tiny blocksize on large inputs would plan millions of tasks: refuse before planning them."""
    blocksize = loaded.spec.source.blocksize
    estimate = sum(1 if f.compression else -(-f.size // blocksize) for f in files)
    if estimate > MAX_PARTITIONS:
        total = sum(f.size for f in files)
        need = -(-total // MAX_PARTITIONS)
        raise SpecError(f"{loaded.key('source', 'blocksize')}: {blocksize} bytes cuts the inputs into about "
                        f"{estimate} partitions; the limit is {MAX_PARTITIONS}",
                        hint=f"raise source.blocksize to at least {need} bytes (the default, 64MiB, suits most inputs)")


def source_stage(loaded, files: list[InputFile], parser, *, casts: dict[str, ColumnSpec], declared: dict[str, ColumnSpec],
                 field_hint: str, parquet: bool = False, framing=None,
                 added: tuple[str, ...] = ()) -> SourceStage:
    """Check the declared columns against what the parser yields and build the stage.
    `added`: columns the parser adds itself (a JSON source's `_extra`)."""
    src = loaded.spec.source
    casts = dict(casts)
    for name, col in declared.items():
        if name not in parser.schema:
            hint = difflib.get_close_matches(name, list(parser.schema), n=1, cutoff=0.6)
            raise SpecError(f"{loaded.key('columns', name)}: the source has no field {name!r}"
                            + (f"; did you mean {hint[0]!r}?" if hint else "")
                            + f" (fields: {', '.join(parser.schema)})")
        casts[name] = col
    for name in parser.schema:
        if (problem := field_name_problem(name)) and name not in declared and name not in added:
            raise SpecError(f"{loaded.key('source', 'path')}: the input field {problem}", hint=field_hint)
    schema = {name: (casts[name].type if name in casts else t) for name, t in parser.schema.items()}
    if src.provenance:        # no input field is named so (field_name_problem)
        schema.update({"_file": "string", "_offset": "int64"})
    return SourceStage(files, parser, casts, schema, src.provenance, parquet=parquet, framing=framing)
