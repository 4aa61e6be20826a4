"""JSON lines: one object per line; the fields are declared under `columns` or learnt from the
first records."""

from __future__ import annotations

import json

import pyarrow as pa

from ...errors import SpecError
from ...types import ColumnSpec, Schema, type_name_of
from ..files import InputFile
from ..parsers import JsonParser
from ..ranges import read_head
from ..stage import declared_columns, plan_byte_ranges, source_stage

JSON_SAMPLE_LINES = 1000
FIELD_HINT = "list the fields to read under `columns`; the others are left out"


class JsonlFormat:
    name = "jsonl"
    options = ()

    def plan(self, loaded, files, notes, backend=None):
        partitions = plan_byte_ranges(loaded, files)
        return partitions, self.stage(loaded, files, notes), {}

    def stage(self, loaded, files, notes):
        return json_stage(loaded, files)


def json_stage(loaded, files):
    declared = declared_columns(loaded)
    fields = {n: c.type for n, c in declared.items()} if declared else _sample_json(loaded, files)
    parser = JsonParser(tuple(fields.items()))
    return source_stage(loaded, files, parser,
                        casts={n: ColumnSpec(type="timestamp") for n, t in fields.items() if t == "timestamp"},
                        declared={n: c for n, c in declared.items() if c.type == "timestamp"},
                        field_hint=FIELD_HINT)


def _first_lines(files: list[InputFile], limit: int) -> list[str]:
    lines: list[str] = []
    for f in files:
        for raw in read_head(f, 1 << 20).splitlines():
            raw = raw.strip()
            if raw:
                lines.append(raw.decode("utf-8", "replace"))
            if len(lines) >= limit:
                return lines
    return lines


def _sample_json(loaded, files: list[InputFile]) -> Schema:
    """No `columns`: take the fields and types from the first records, like Spark's inference."""
    fields: dict[str, set] = {}
    for line in _first_lines(files, JSON_SAMPLE_LINES):
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):       # bad, too deep, too many digits: the run quarantines it
            continue
        if isinstance(obj, dict):
            for k, v in obj.items():
                fields.setdefault(k, set())
                if v is not None:
                    fields[k].add(type_name_of(pa.array([v]).type) if not isinstance(v, (dict, list)) else "string")
    if not fields:
        raise SpecError(f"{loaded.key('source', 'path')}: found no JSON objects to learn the fields from",
                        hint="declare the fields and their types under `columns`")
    out = {}
    for name, kinds in fields.items():
        if kinds <= {"int64"}:
            out[name] = "int64"
        elif kinds <= {"int64", "float64"}:
            out[name] = "float64"
        elif kinds == {"bool"}:
            out[name] = "bool"
        else:
            out[name] = "string"
    return out
