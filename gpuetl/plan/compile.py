"""Compile a validated spec into a Plan: input files, partitions, stages with the schema after
each, and the sink's layout. Everything here is checked before any data is read."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import SpecError
from ..cache import RemoteInputs
from ..sinks.dataset import read_latest
from ..sinks.versions import Held
from ..sources.files import InputFile, InputFiles, PartitionInputs, resolve_inputs
from ..storage import is_remote, local_path
from ..sources.parsers import RegexParser
from ..sources.ranges import Partition
from ..sources.registry import RecordStage, get_source
from ..sources.stage import PartitionScoped, SourceStage
from ..spec.loader import LoadedSpec
from ..spec.yamlio import dotted
from ..sinks.layout import MIN_SHARD_ROWS, Layout
from ..steps.base import GlobalStep, Step, StepError, closest
from ..types import Schema


@dataclass
class StepStage:
    index: int
    label: str
    step: Step
    schema: Schema                 # after the step


@dataclass
class Segment:
    """Stages that run back to back in one task per partition (dask fuses them anyway)."""

    source: SourceStage | RecordStage | None       # None: the segment starts at a global step
    steps: list[StepStage] = field(default_factory=list)
    schema: Schema = field(default_factory=dict)   # data columns at the end
    on_error: str = "quarantine"
    files: list = field(default_factory=list)      # the inputs, to name them in errors

    def for_partition(self, partition) -> "Segment":
        """The segment as one partition's task carries it. A source stage that reads inputs by
        the partition (sources.stage.PartitionScoped) carries only that partition's inputs, and
        so does the segment (it names them in errors); others carry them all."""
        if not isinstance(self.source, PartitionScoped):
            return self
        # one object for both: the stage's inputs are the plan's, and pickle writes it once
        inputs = PartitionInputs.of(self.files, self.source.input_indices(partition))
        return replace(self, source=self.source.with_inputs(inputs), files=inputs)

    @property
    def label(self) -> str:
        names = (["read-parse"] if self.source else []) + [s.label for s in self.steps]
        return "-".join(names) or "pass"


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
    segments: list[Segment]           # run in order; each after the first starts at a global step
    stages: list[StageInfo]
    output_schema: Schema
    out_dir: Path
    layout: Layout                    # where each output row goes; it also picks how shards are written
    notes: list[str] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)      # the source's additions to the manifest (labels)
    remote: RemoteInputs | None = field(default=None, repr=False)   # keeps remote inputs' local copies
    held: Held | None = None          # sink.mode append: the inputs earlier dataset versions hold

    @property
    def nothing_to_append(self) -> bool:
        return self.held is not None and not self.files

    @property
    def spec(self):
        return self.loaded.spec

    @functools.cached_property
    def input_bytes(self) -> int:
        """Summed once: progress asks after every partition (quadratic at a million files)."""
        return sum(f.size for f in self.files)


def compile_plan(loaded: LoadedSpec, backend=None) -> Plan:
    """With a backend, also note what it will hand to the CPU (regexes it cannot run), and size
    the partitions for it where the file sets no blocksize (the GPU's default)."""
    notes: list[str] = []
    loaded = _sized_for(loaded, backend, notes)
    spec = loaded.spec
    remote = RemoteInputs(spec.source.storage_options, spec.cache and _resolve(loaded.base_dir, spec.cache.path),
                          spec.cache and spec.cache.max_bytes)
    fmt = get_source(spec.source.type)
    ranged = getattr(fmt, "reads_ranges_in_store", None)      # a format that reads lines says so
    out_dir = spec.sink.path.rstrip("/") if is_remote(spec.sink.path) else \
        Path(os.path.normpath(_resolve(loaded.base_dir, local_path(spec.sink.path))))   # as the run writes it
    held = Held(read_latest(out_dir, spec.sink.storage_options)) if spec.sink.mode == "append" else None
    files = resolve_inputs(spec.source.paths, loaded.base_dir, spec.source.compression, notes, remote,
                           ranged=bool(ranged and ranged(spec)), keep=held and held.keep)
    if held is not None:
        notes += held.notes
        if not files:                 # every input is held by an earlier version: nothing to read
            schema = {c["name"]: c["type"] for c in held.manifest.get("schema") or []}
            return Plan(loaded, [], [], [], [], schema, out_dir, _layout(spec.shard, ()), notes, {}, remote, held)
    partitions, source, metadata = fmt.plan(loaded, files, notes, backend)
    if not isinstance(source, (SourceStage, RecordStage)):
        raise TypeError(f"source type {spec.source.type!r}: plan() returned {type(source).__name__}, neither a "
                        "SourceStage nor a RecordStage (gpuetl/sources/registry.py)")
    stages = [StageInfo(0, "read-parse", dict(source.schema), _source_detail(loaded))]
    named = InputFiles(files)           # each task's segment names the inputs: passed whole, pickled as one blob
    segments = [Segment(source=source, schema=dict(source.schema), on_error=spec.on_error, files=named)]
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
                                    files=named))
        else:
            segments[-1].steps.append(stage)
            segments[-1].schema = dict(schema)
        stages.append(StageInfo(i, step.name, dict(schema), _step_detail(step)))
    if not schema:
        raise SpecError(f"{loaded.key('steps')}: the steps leave no columns to write")
    default_key = tuple(k for k in source.default_key if k in schema)     # what places rows without shard.key
    if any(f.url for f in files):
        metadata = {**metadata, "input_tiers": remote.summary()}
    layout = _layout(spec.shard, default_key)
    if held is not None:              # an input's place among every input the dataset holds (placement)
        layout = replace(layout, file_offset=len(held.by_path))
    plan = Plan(loaded, files, partitions, segments, stages, schema, out_dir, layout, notes, metadata, remote, held)
    _check_shard(plan)
    _note_thin_shards(plan)
    if backend is not None:
        _check_regexes(plan, source.parser if isinstance(source, SourceStage) else None, backend)
    return plan


def _sized_for(loaded: LoadedSpec, backend, notes: list[str]) -> LoadedSpec:
    """The backend's own default source.blocksize (the CPU's 32 MiB; the GPU's from its memory: docs/gpu.md) where
    the pipeline file and --set give none. An images source keeps the file's default (a
    partition of compressed images decodes to many times its bytes), and so does a parquet source:
    its blocksize is also the size under which a row group is never refused for its compression
    ratio (sources/parquet.py: decode_cap), which must not depend on the backend."""
    source = loaded.spec.source
    if backend is None or "blocksize" in source.model_fields_set or source.type in ("images", "parquet"):
        return loaded
    size = backend.default_blocksize()
    if size is None or size == source.blocksize:
        return loaded
    from ..spec.sizes import format_size

    if backend.name != "cpu":        # the CPU's is one documented size; another's depends on the machine
        notes.append(f"source.blocksize: {format_size(size)}, the {backend.name} backend's default for this machine's "
                     "device memory (set source.blocksize to choose another)")
    return replace(loaded, spec=loaded.spec.model_copy(update={"source": source.model_copy(update={"blocksize": size})}))


def _layout(shard, default_key: tuple[str, ...]) -> Layout:
    return Layout(splits=tuple((shard.splits or {}).items()), key=tuple(shard.key or default_key),
                  shuffle=shard.shuffle, seed=shard.seed, count=shard.count, target_bytes=shard.target_bytes)


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


def _note_thin_shards(plan: Plan) -> None:
    """shard.count past what the inputs can hold: uncompressed lines take a byte a record at
    least, so fewer bytes than MIN_SHARD_ROWS a shard means thinner shards, whatever the data.
    (The run warns again from the rows it counted, for every source, before writing them.)"""
    shards = sum(plan.layout.shard_counts())
    if not plan.spec.shard.count or shards <= len(plan.layout.split_names) or \
            plan.spec.source.type not in ("text", "jsonl", "csv") or any(f.compression for f in plan.files):
        return
    if plan.input_bytes < MIN_SHARD_ROWS * shards:
        plan.notes.append(f"shard.count: {shards:,} shards, but the inputs hold {plan.input_bytes:,} bytes: fewer "
                          f"than {MIN_SHARD_ROWS} records a shard (each shard is a file, a footer and a task of its "
                          "own); a smaller shard.count, or shard.target_bytes, gives fewer, fuller shards")


# -- the source stage --------------------------------------------------------------------------

def _source_stage(loaded: LoadedSpec, files: list[InputFile], notes: list[str]):
    """A byte format's source stage alone, without planning partitions (for tests of parsing)."""
    return get_source(loaded.spec.source.type).stage(loaded, files, notes)


def _source_detail(loaded: LoadedSpec) -> str:
    spec = loaded.spec
    if spec.parse is None:
        return spec.source.type
    kind = next(k for k in ("preset", "template", "regex") if getattr(spec.parse, k))
    return f"{spec.source.type}, {kind} {getattr(spec.parse, kind)!r}"


def _step_detail(step) -> str:
    return str(step.params.model_dump())      # a root model dumps its value itself
