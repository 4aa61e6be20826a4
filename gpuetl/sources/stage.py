"""The source stage of the byte formats (text, jsonl, csv, parquet): the parser that turns a
partition's records into columns, the declared casts, the schema after them, and `read`, which
turns a partition's bytes into typed frames. The format modules (sources/formats/) build it at
planning; the runtime calls its `read` (runtime/partition.py: read_partition) and nothing else.

`SourceStage` reads lines (text, jsonl, the json preset, a plugin's line format: the backend
reads the block and splits it); `FramedStage` reads records that span lines, framed on the host
(csv, multiline text: sources/framing.py); the Parquet stage reads row groups
(sources/formats/parquet.py). Each hands the runtime its records a piece at a time."""

from __future__ import annotations

from typing import Any, ClassVar

import difflib
from dataclasses import dataclass

from ..errors import SpecError
from ..spec.names import field_name_problem
from ..types import ColumnSpec, Schema, column_spec, is_nested
from .compressed import Limits
from .counters import PartitionCounters, SourceSummary
from .files import InputFile
from .ranges import Partition, plan_partitions, with_decoded
from .records import framed_pieces, parse_piece, split_batch

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
    """Records are lines of byte ranges, parsed by `parser` (sources/parsers.py)."""

    files: list[InputFile]
    parser: object
    casts: dict[str, ColumnSpec]
    schema: Schema                 # data columns after parsing and typing (provenance included)
    provenance: bool = False
    index: int = 0
    default_key: tuple[str, ...] = ()   # what splits and placement hash without shard.key; () = every column
    byte_ranges: ClassVar[bool] = True  # partitions are byte ranges of whole records (a preview may shorten them)

    def read(self, partition: Partition, segment, backend, counters: PartitionCounters, decoded=()):
        """The partition's records as typed frames (bookkeeping columns included), a piece at a
        time: the backend reads the ranges as one block and cuts it into batches of whole lines
        (`backend.batches`, about `piece_bytes` each); each is split, parsed and typed only when
        the runtime asks for it, after it ran the previous one through the segment's row steps.
        `decoded`: the bytes of the partition's compressed ranges, in order (runtime/graph.py).
        The hashes of what was read and the fields a JSON parser dropped go to `counters`."""
        ranges = with_decoded(partition.ranges, decoded) if decoded else partition.ranges
        block = backend.read_block(self.files, ranges)
        batches = backend.batches(block.data)
        last = len(batches) - 1
        for i, (position, data) in enumerate(batches):
            block.pin_piece(position, len(data))        # hashed before its records are copied out
            records = split_batch(block, position, data, backend)
            block.release(position, len(data))          # copied out: its pages can go
            yield parse_piece(*records, block.extra_bad if i == last else [], self, segment, backend, counters)
        counters.read_pins.extend(block.read_pins())

    def summarize(self, spec, counters: list[PartitionCounters], metadata: dict) -> SourceSummary:
        """What the run's reading adds to the manifest (sources/counters.py): nothing, unless
        the format says more (the JSON stage: the fields it dropped)."""
        return SourceSummary()


@dataclass
class FramedStage(SourceStage):
    """Records that span lines (csv, multiline text), framed on the host by `framing`
    (sources/framing.py), then cut into pieces of about `piece_bytes` by their lengths."""

    framing: object = None

    def read(self, partition: Partition, segment, backend, counters: PartitionCounters, decoded=()):
        ranges = with_decoded(partition.ranges, decoded) if decoded else partition.ranges
        backend.note_host_work("records framed on the host (csv, multiline)", 1)
        records = self.framing.read(self.files, ranges, backend, pins=counters.read_pins)
        for piece in framed_pieces(*records, backend):
            yield parse_piece(*piece, self, segment, backend, counters)


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
                 field_hint: str, framing=None, kind: type[SourceStage] | None = None,
                 added: tuple[str, ...] = ()) -> SourceStage:
    """Check the declared columns against what the parser yields and build the stage: a
    `SourceStage` (lines), a `FramedStage` where a `framing` is given, or `kind`.
    `added`: columns the parser adds itself (a JSON source's `_extra`)."""
    src = loaded.spec.source
    casts = dict(casts)
    for name, col in declared.items():
        if name not in parser.schema:
            hint = difflib.get_close_matches(name, list(parser.schema), n=1, cutoff=0.6)
            raise SpecError(f"{loaded.key('columns', name)}: the source has no field {name!r}"
                            + (f"; did you mean {hint[0]!r}?" if hint else "")
                            + f" (fields: {', '.join(parser.schema)})")
        if is_nested(col.type) and not is_nested(parser.schema[name]):    # a csv field, a regex capture
            raise SpecError(f"{loaded.key('columns', name)}: {col.type} is a type for nested values (JSON's, "
                            f"Parquet's); a {src.type} source's field {name!r} is {parser.schema[name]}, read as a "
                            "scalar type", hint="declare one of the scalar types (int64, float64, string, timestamp, …)")
        casts[name] = col
    for name in parser.schema:
        if (problem := field_name_problem(name)) and name not in declared and name not in added:
            raise SpecError(f"{loaded.key('source', 'path')}: the input field {problem}", hint=field_hint)
    schema = {name: (casts[name].type if name in casts else t) for name, t in parser.schema.items()}
    if src.provenance:        # no input field is named so (field_name_problem)
        schema.update({"_file": "string", "_offset": "int64"})
    if framing is not None:
        return FramedStage(files, parser, casts, schema, src.provenance, framing=framing)
    return (kind or SourceStage)(files, parser, casts, schema, src.provenance)
