"""CSV per RFC 4180: the first record of each file names the columns; `source.delimiter`
separates the fields; a quoted field may hold the delimiter, newlines and doubled quotes (`""`);
an unquoted field listed in `source.null_values` (default: the empty field) is null, a quoted
one is always its text. Records may span lines, so the plan finds where ranges may start
(sources/framing.py)."""

from __future__ import annotations

from ..framing import CsvFraming, plan_csv_partitions
from ..parsers import csv_parser
from ..compressed import Limits
from ..stage import check_partition_count, declared_columns, source_stage


class CsvFormat:
    name = "csv"
    options = ("delimiter", "null_values", "max_record_bytes")

    def plan(self, loaded, files, notes, backend=None):
        src = loaded.spec.source
        check_partition_count(loaded, files)
        partitions = plan_csv_partitions(files, src.blocksize, Limits.of(src))
        return partitions, self.stage(loaded, files, notes), {}

    def stage(self, loaded, files, notes):
        src = loaded.spec.source
        declared = declared_columns(loaded)
        parser, header_notes = csv_parser(files, src.delimiter, f"{loaded.path}: source.path", tuple(src.null_values),
                                          declared=tuple(declared),
                                          locate=lambda name: loaded.key("columns", name))
        notes.extend(header_notes)
        return source_stage(loaded, files, parser, casts={}, declared=declared,
                            field_hint="rename that column in the CSV header", framing=CsvFraming())
