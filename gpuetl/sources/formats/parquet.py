"""Parquet: partitions are runs of row groups; the flat columns are read as they are typed, and
a record's offset is its row number in its file."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ..compressed import Limits
from ..parquet import parquet_columns, plan_row_groups, read_row_groups
from ..pins import RangePin
from ..records import source_frame
from ..stage import SourceStage, declared_columns, source_stage
from ...types import ARROW_TYPES


class ParquetFormat:
    name = "parquet"
    options = ()

    def plan(self, loaded, files, notes, backend=None):
        stage = self.stage(loaded, files, notes)
        partitions = plan_row_groups(files, loaded.spec.source.blocksize, Limits.of(loaded.spec.source),
                                     list(stage.parser.schema))
        return partitions, stage, {}

    def stage(self, loaded, files, notes):
        parser, skipped = parquet_columns(files, f"{loaded.path}: source.path")
        if skipped:
            notes.append(f"source: nested Parquet columns are not read yet: {', '.join(skipped)}")
        declared = declared_columns(loaded)
        stage = source_stage(loaded, files, parser, casts={}, declared=declared,
                             field_hint="rename that column in the Parquet files", kind=ParquetStage)
        notes.extend(_struct_fields_changed(declared, parser.schema))
        return stage


@dataclass
class ParquetStage(SourceStage):
    """Row groups are the ranges; values arrive typed; declared `columns` cast them like any
    other source's. A row group over its decoding bound is one quarantined record."""

    byte_ranges = False

    def read(self, partition, segment, backend, counters, decoded=()):
        xp = backend.xp
        refused: list = []
        table, file_index, offsets = read_row_groups(self.files, partition.ranges, self.parser.schema, refused)
        # pyarrow reads the columns it needs from the file: the bytes are not at hand to hash
        pins = {RangePin(r.file_index, 0, f.size, None) for r in partition.ranges
                if (f := self.files[r.file_index]).url is None}
        counters.read_pins.extend(sorted(pins))
        df = backend.from_arrow(table)
        n = len(df)
        bad = backend.series(xp.zeros(n, dtype=bool), "bool", index=df.index)
        reasons = backend.nulls(n, "string", index=df.index)
        yield source_frame(df, bad, reasons, None, xp.asarray(file_index), xp.asarray(offsets), refused,
                           self, segment, backend)


def _struct_fields_changed(declared: dict, schema: dict) -> list[str]:
    """Plan notes for a declared struct that names other fields than the file's: a field it
    leaves out is not read, one it adds is null (Arrow's cast does both without a word)."""
    notes = []
    for name, col in declared.items():
        have, want = ARROW_TYPES.get(schema.get(name)), ARROW_TYPES.get(col.type)
        if have is None or want is None or not (pa.types.is_struct(have) and pa.types.is_struct(want)):
            continue
        dropped = [f.name for f in have if want.get_field_index(f.name) < 0]
        added = [f.name for f in want if have.get_field_index(f.name) < 0]
        if dropped:
            notes.append(f"columns.{name}: the declared struct leaves out {', '.join(dropped)} of the file's: not read")
        if added:
            notes.append(f"columns.{name}: the declared struct adds {', '.join(added)}, which the file lacks: null")
    return notes
