"""Compile a validated spec into a Plan: input files, partitions, stages with the schema after
each, and the sink's layout. Everything here is checked before any data is read."""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import SpecError
from ..parsing import preset as preset_rule
from ..parsing import template_to_regex
from ..sources.files import InputFile, resolve_inputs
from ..sources.parsers import JsonParser, LineParser, RegexParser, csv_parser
from ..sources.parquet import parquet_columns, plan_row_groups
from ..sources.compressed import Limits
from ..sources.ranges import Partition, plan_partitions, read_head
from ..spec.loader import LoadedSpec
from ..spec.names import field_name_problem, new_name_problem
from ..spec.yamlio import dotted
from ..steps.base import GlobalStep, StepError, closest
from ..types import ColumnSpec, Schema, column_spec, type_name_of
from .stages import Segment, SourceStage, StepStage

JSON_SAMPLE_LINES = 1000
PRESET_KERNELS = {"apache_common": "clf", "apache_combined": "combined", "nginx_combined": "combined"}
# Source types that plan their own records: type -> "module:function" returning
# (partitions, a source stage with read(partition, segment, backend), manifest metadata); it is
# given (loaded spec, input files, notes to add to, the backend or None).
SOURCE_PLANNERS = {"images": "gpuetl.sources.images:plan_images"}


@dataclass
class StageInfo:
    index: int
    name: str
    schema: Schema
    detail: str = ""


@dataclass
class Plan:
    loaded: LoadedSpec
    files: list[InputFile]
    partitions: list[Partition]
    segments: list[Segment]           # run in order; a segment whose first step is global starts with a shuffle
    stages: list[StageInfo]
    output_schema: Schema
    out_dir: Path
    notes: list[str] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)      # the source's additions to the manifest (labels)
    default_key: tuple[str, ...] = ()                 # what splits and placement hash without shard.key

    @property
    def spec(self):
        return self.loaded.spec

    @property
    def input_bytes(self) -> int:
        return sum(f.size for f in self.files)


def compile_plan(loaded: LoadedSpec, backend=None) -> Plan:
    """With a backend, also note what it will hand to the CPU (regexes it cannot run)."""
    spec = loaded.spec
    notes: list[str] = []
    files = resolve_inputs(spec.source.paths, loaded.base_dir, spec.source.compression, notes)
    metadata: dict = {}
    if spec.source.type in SOURCE_PLANNERS:
        module, func = SOURCE_PLANNERS[spec.source.type].split(":")
        partitions, source, metadata = getattr(importlib.import_module(module), func)(loaded, files, notes, backend)
    elif spec.source.type == "parquet":
        partitions = plan_row_groups(files, spec.source.blocksize)
        source = _source_stage(loaded, files, notes)
    else:
        _check_partition_count(loaded, files)
        partitions = plan_partitions(files, spec.source.blocksize,
                                     Limits(spec.source.max_expand_ratio, spec.source.max_uncompressed_bytes))
        source = _source_stage(loaded, files, notes)
    stages = [StageInfo(0, "read-parse", dict(source.schema), _source_detail(loaded))]
    segments = [Segment(source=source, schema=dict(source.schema), on_error=spec.on_error, files=files)]
    schema = dict(source.schema)
    for i, step in enumerate(loaded.steps, start=1):
        try:
            step = step.look_ahead(loaded.steps[i:]).bind(schema)
        except (StepError, ValueError) as err:
            raise SpecError(f"{loaded.where('steps', i - 1, step.name, *getattr(err, 'key', ()))}"
                            f"{dotted(('steps', i - 1, step.name))}: {err}") from None
        schema = dict(step.output_schema)
        stage = StepStage(i, f"{step.name}", step, dict(schema))
        if isinstance(step, GlobalStep):          # decided across partitions: a segment of its own
            segments.append(Segment(source=None, steps=[stage], schema=dict(schema), on_error=spec.on_error,
                                    files=files))
        else:
            segments[-1].steps.append(stage)
            segments[-1].schema = dict(schema)
        stages.append(StageInfo(i, step.name, dict(schema), _step_detail(step)))
    if not schema:
        raise SpecError(f"{loaded.key('steps')}: the steps leave no columns to write")
    out_dir = _resolve(loaded.base_dir, spec.sink.path)
    default_key = tuple(k for k in getattr(source, "default_key", ()) if k in schema)
    plan = Plan(loaded, files, partitions, segments, stages, schema, out_dir, notes, metadata, default_key)
    _check_shard(plan)
    if backend is not None:
        _check_regexes(plan, getattr(source, "parser", None), backend)
    return plan


def _check_regexes(plan: Plan, parser, backend) -> None:
    """Offer every user pattern to the backend: one it cannot run at all is a located error, one
    it runs only on the CPU a note. (RE2 syntax was checked when the file was loaded.)"""
    loaded = plan.loaded
    patterns = []
    if isinstance(parser, RegexParser) and not parser.kernel:
        patterns.append((("parse",), parser.regex))
    for i, step in enumerate(loaded.steps):
        patterns += [(("steps", i, step.name) + path, pattern) for path, pattern in step.regexes()]
    for path, pattern in patterns:
        if error := backend.regex_error(pattern):
            raise SpecError(f"{loaded.key(*path)}: the {backend.name} backend cannot run {pattern!r}: {error}")
        if why := backend.check_regex(pattern):
            plan.notes.append(f"{dotted(path)}: {why}; on the {backend.name} backend this pattern runs on the CPU "
                              "(RE2) on every worker, counted in the run's fallbacks")


MAX_PARTITIONS = 100_000


def _check_partition_count(loaded: LoadedSpec, files: list[InputFile]) -> None:
    """A tiny blocksize on large inputs would plan millions of tasks: refuse before planning them."""
    blocksize = loaded.spec.source.blocksize
    estimate = sum(1 if f.compression else -(-f.size // blocksize) for f in files)
    if estimate > MAX_PARTITIONS:
        total = sum(f.size for f in files)
        need = -(-total // MAX_PARTITIONS)
        raise SpecError(f"{loaded.key('source', 'blocksize')}: {blocksize} bytes cuts the inputs into about "
                        f"{estimate} partitions; the limit is {MAX_PARTITIONS}",
                        hint=f"raise source.blocksize to at least {need} bytes (the default, 64MiB, suits most inputs)")


def _resolve(base: Path, path: str) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else (base / p)


def _check_shard(plan: Plan) -> None:
    shard = plan.spec.shard
    for name in shard.key or []:
        if name not in plan.output_schema:
            hint = closest(name, plan.output_schema)
            raise SpecError(f"{plan.loaded.key('shard', 'key')}: no output column {name!r}"
                            + (f"; did you mean {hint!r}?" if hint else "")
                            + f" (output columns: {', '.join(plan.output_schema)})")


# -- the source stage --------------------------------------------------------------------------

def _source_stage(loaded: LoadedSpec, files: list[InputFile], notes: list[str]) -> SourceStage:
    spec = loaded.spec
    src = spec.source
    declared = {name: column_spec(v) for name, v in spec.columns.items()}
    casts: dict[str, ColumnSpec] = {}
    skip_header = False
    if src.type == "text" and spec.parse is None:
        parser = LineParser()
    elif src.type == "text" and spec.parse.preset and spec.parse.preset != "json":
        rule = preset_rule(spec.parse.preset)
        parser = RegexParser(rule.regex, tuple(rule.columns), f"preset {spec.parse.preset}",
                             dash_is_null=rule.dash_is_null, kernel=PRESET_KERNELS.get(spec.parse.preset))
        casts = {name: column_spec(ColumnSpec.model_validate(t) if isinstance(t, dict) else t)
                 for name, t in rule.types.items()}
    elif src.type == "text" and spec.parse.template:
        try:
            regex, names = template_to_regex(spec.parse.template)
        except ValueError as err:
            raise SpecError(f"{loaded.key('parse', 'template')}: {err}",
                            hint=_TEMPLATE_HINT if "character class" in str(err) else None) from None
        parser = RegexParser(regex, tuple(names), "the template", strip=True)
    elif src.type == "text" and spec.parse.regex:
        parser = RegexParser(*_user_regex(loaded, spec.parse.regex), "the regex")
    elif src.type == "jsonl" or (spec.parse and spec.parse.preset == "json"):
        fields = {n: c.type for n, c in declared.items()} if declared else _sample_json(loaded, files)
        parser = JsonParser(tuple(fields.items()))
        declared = {n: c for n, c in declared.items() if c.type == "timestamp"}
        casts = {n: ColumnSpec(type="timestamp") for n, t in fields.items() if t == "timestamp"}
    elif src.type == "csv":
        parser, header_notes = csv_parser(files, src.delimiter, f"{loaded.path}: source.path")
        notes.extend(header_notes)
        skip_header = True
    elif src.type == "parquet":
        parser, skipped = parquet_columns(files, f"{loaded.path}: source.path")
        if skipped:
            notes.append(f"source: nested Parquet columns are not read yet: {', '.join(skipped)}")
    else:  # pragma: no cover - the loader refuses other types
        raise SpecError(f"{loaded.path}: source.type {src.type!r} is not supported yet")
    for name, col in declared.items():
        if name not in parser.schema:
            hint = closest(name, parser.schema)
            raise SpecError(f"{loaded.key('columns', name)}: the source has no field {name!r}"
                            + (f"; did you mean {hint!r}?" if hint else "")
                            + f" (fields: {', '.join(parser.schema)})")
        casts[name] = col
    for name in parser.schema:
        if (problem := field_name_problem(name)) and name not in declared:
            raise SpecError(f"{loaded.key('source', 'path')}: the input field {problem}", hint=_FIELD_HINT[src.type])
    schema = {name: (casts[name].type if name in casts else t) for name, t in parser.schema.items()}
    if src.provenance:        # no input field is named so (field_name_problem)
        schema.update({"_file": "string", "_offset": "int64"})
    return SourceStage(files, parser, casts, schema, src.provenance, skip_header, parquet=src.type == "parquet")


_FIELD_HINT = {
    "jsonl": "list the fields to read under `columns`; the others are left out",
    "text": "list the fields to read under `columns`; the others are left out",
    "csv": "rename that column in the CSV header",
    "parquet": "rename that column in the Parquet files",
}
_TEMPLATE_HINT = ("in a template, '[' starts a regular-expression character class; write \\[ and \\] for "
                  "literal brackets, in single-quoted YAML: template: '\\[<Level>\\] <Content>'")


def _user_regex(loaded: LoadedSpec, regex: str) -> tuple[str, tuple[str, ...]]:
    try:
        compiled = re.compile(regex)
    except re.error as err:
        raise SpecError(f"{loaded.key('parse', 'regex')}: not a valid regular expression: {err}") from None
    names = tuple(sorted(compiled.groupindex, key=compiled.groupindex.get))
    if not names:
        raise SpecError(f"{loaded.key('parse', 'regex')}: name the fields with (?P<name>...) groups")
    if compiled.groups != len(names):
        raise SpecError(f"{loaded.key('parse', 'regex')}: every group must be named; use (?:...) for groups that only group")
    for name in names:
        if problem := new_name_problem(name):
            raise SpecError(f"{loaded.key('parse', 'regex')}: the group {problem}; name the group without a leading '_'")
    try:
        pc.extract_regex(pa.array(["x"]), pattern=regex)
    except pa.ArrowInvalid as err:
        raise SpecError(f"{loaded.key('parse', 'regex')}: RE2 cannot run this pattern ({err}); "
                        "lookarounds and backreferences are not available") from None
    return regex, names


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


def _sample_json(loaded: LoadedSpec, files: list[InputFile]) -> Schema:
    """No `columns`: take the fields and types from the first records, like Spark's inference."""
    import json

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


def _source_detail(loaded: LoadedSpec) -> str:
    spec = loaded.spec
    if spec.parse is None:
        return spec.source.type
    kind = next(k for k in ("preset", "template", "regex") if getattr(spec.parse, k))
    return f"{spec.source.type}, {kind} {getattr(spec.parse, kind)!r}"


def _step_detail(step) -> str:
    return str(step.params.model_dump())      # a root model dumps its value itself
