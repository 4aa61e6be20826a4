"""Parquet: partitions are runs of row groups; the flat columns are read as they are typed."""

from __future__ import annotations

from ..compressed import Limits
from ..parquet import parquet_columns, plan_row_groups
from ..stage import declared_columns, source_stage


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
        stage = source_stage(loaded, files, parser, casts={}, declared=declared_columns(loaded),
                             field_hint="rename that column in the Parquet files", parquet=True)
        return stage
