"""CSV: the first line of each file names the columns; `source.delimiter` separates the fields."""

from __future__ import annotations

from ..parsers import csv_parser
from ..stage import declared_columns, plan_byte_ranges, source_stage


class CsvFormat:
    name = "csv"
    options = ("delimiter",)

    def plan(self, loaded, files, notes, backend=None):
        partitions = plan_byte_ranges(loaded, files)
        return partitions, self.stage(loaded, files, notes), {}

    def stage(self, loaded, files, notes):
        parser, header_notes = csv_parser(files, loaded.spec.source.delimiter, f"{loaded.path}: source.path")
        notes.extend(header_notes)
        stage = source_stage(loaded, files, parser, casts={}, declared=declared_columns(loaded),
                             field_hint="rename that column in the CSV header", skip_header=True)
        return stage
