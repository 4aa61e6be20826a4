"""A look before a run: the pipeline on the first records of the first partition, the rows after
each stage and the records set aside, held in memory. Nothing is written: no dataset, no spill,
no temporary folder. A global step (dedupe, near_dedupe) sees these rows alone, so it can keep a
row that the full run drops as a repeat of one in another partition."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import dask
import pyarrow as pa

from ..columns import COUNT, FILE_INDEX, OFFSET, RAW, REASON, STAGE, STATUS, STATUS_DEDUPLICATED, \
    STATUS_FILTERED, STATUS_LIVE, STATUS_QUARANTINED
from .graph import TaskGraph, resolve_in_place
from .partition import Segment, frame_schema, read_partition, run_steps
from ..sources.ranges import CompressedRange, decode_range
from ..sources.counters import CountedFrame, PartitionCounters
from ..sources.stage import SourceStage
from ..steps.base import GlobalStep

PREVIEW_BYTES = 2**20       # of plain text read at most; a compressed file's first piece is read whole
RECORD_CHARS = 200          # of a quarantined record's raw form kept for showing


@dataclass
class StagePreview:
    """One stage: its counts over the previewed records and its first live rows."""

    index: int
    name: str
    rows_in: int
    rows_out: int
    filtered: int
    deduplicated: int
    quarantined: int
    rows: pa.Table                     # the first n rows after the stage
    alone: bool = False                # a global step applied to the previewed rows alone


@dataclass
class Preview:
    """What `Pipeline.preview()` returns: per-stage rows, the quarantined records with their
    reasons, and what was read."""

    stages: list[StagePreview]
    quarantined: pa.Table              # stage, file, offset, reason, record
    read: str                          # what part of the input the preview read, in words
    notes: list[str] = field(default_factory=list)

    def frames(self) -> dict[str, object]:
        """{'<index>:<name>': pandas frame} of each stage's rows, and 'quarantined'."""
        out = {f"{s.index}:{s.name}": s.rows.to_pandas() for s in self.stages}
        out["quarantined"] = self.quarantined.to_pandas()
        return out


def preview_plan(plan, backend, n: int = 20) -> Preview:
    """Each stage run on its own, in order, so the rows between stages can be shown (a run fuses
    them into one task per partition: the rows are the same)."""
    if n < 1:
        raise ValueError("n must be at least 1")
    first = plan.segments[0]
    files = plan.files
    keep = "quarantine"                # bad records are shown, not fatal (on_error: fail) or counted only (drop)
    notes = []
    if plan.spec.on_error != keep:
        notes.append(f"on_error is {plan.spec.on_error}: the preview shows bad records anyway; the run "
                     + ("stops at the first one" if plan.spec.on_error == "fail" else "only counts them"))
    if plan.partitions:
        partition, read = _bounded(plan.partitions[0], first, len(plan.partitions))
        source = Segment(source=first.source, schema=dict(first.source.schema), on_error=keep, files=files)
        frame = read_partition(partition, source, backend, _decoded(partition, files)).frame
    else:
        read, frame = "nothing: the inputs hold no records", backend.empty(frame_schema(first.source.schema))
    frames = [frame]
    stages = [stage for segment in plan.segments for stage in segment.steps]
    for stage in stages:
        one = Segment(source=None, steps=[stage], schema=dict(stage.schema), on_error=keep, files=files)
        if isinstance(stage.step, GlobalStep):
            part = CountedFrame(frame, PartitionCounters())
            frame = dask.compute(*resolve_in_place(TaskGraph(), [part], one, backend), scheduler="sync")[0].frame
        frame = run_steps(frame, one, backend)
        frames.append(frame)

    host = backend.to_pandas(frame[[STAGE, STATUS, COUNT]])
    tallies = host.groupby([STAGE, STATUS])[COUNT].sum().to_dict()
    remaining = int(host[COUNT].sum())
    out = []
    for info, after in zip(plan.stages, frames):
        dropped = {name: int(tallies.get((info.index, status), 0)) for name, status in
                   (("filtered", STATUS_FILTERED), ("deduplicated", STATUS_DEDUPLICATED),
                    ("quarantined", STATUS_QUARANTINED))}
        rows_out = remaining - sum(dropped.values())
        live = after[after[STATUS] == STATUS_LIVE].head(n)
        out.append(StagePreview(info.index, info.name, remaining, rows_out, **dropped,
                                rows=backend.to_arrow(live, info.schema),
                                alone=info.index > 0 and isinstance(stages[info.index - 1].step, GlobalStep)))
        remaining = rows_out
    return Preview(out, _quarantined(frame, plan, backend, n), read, notes)


def _bounded(partition, first: Segment, partitions: int):
    """(the partition cut to about PREVIEW_BYTES of plain text, what that reads in words). A
    record belongs to the range its first byte lies in, so a shortened range still ends on a
    whole record. Row groups, images and compressed pieces are taken whole: the first one only."""
    of = f"partition 1 of {partitions}"
    if not _byte_ranges(first.source):
        return partition, f"{of} (read whole: at most the source's blocksize)"
    ranges, budget = [], PREVIEW_BYTES
    for rng in partition.ranges:
        if budget <= 0:
            break
        if isinstance(rng, CompressedRange):
            ranges.append(rng)
            budget = 0
        elif rng.length > budget:
            ranges.append(dataclasses.replace(rng, length=budget))
            budget = 0
        else:
            ranges.append(rng)
            budget -= max(rng.length, 0)
    cut = len(ranges) < len(partition.ranges) or ranges != list(partition.ranges)
    what = f"the first {PREVIEW_BYTES // 2**20} MiB of {of}" if cut else f"{of}, whole"
    return dataclasses.replace(partition, ranges=tuple(ranges)), what


def _byte_ranges(source) -> bool:
    """A text, jsonl or csv source: its partitions are byte ranges of whole records."""
    return isinstance(source, SourceStage) and source.byte_ranges


def _decoded(partition, files) -> list:
    """The bytes of the partition's compressed ranges, decoded in order (as runtime/graph.py's tasks)."""
    decoded, streams = [], {}
    for rng in partition.ranges:
        if isinstance(rng, CompressedRange):
            got, streams[rng.file_index] = decode_range(streams.get(rng.file_index), files[rng.file_index], rng)
            decoded.append(got)
    for stream in streams.values():
        if stream is not None:                  # (the partition ended before its file did)
            stream.close()
    return decoded


def _quarantined(frame, plan, backend, n: int) -> pa.Table:
    """The first n quarantined records in input order: the stage that set each aside, where it
    was, why, and the record as it reached that stage (text cut to RECORD_CHARS; an image's
    bytes as their length)."""
    names = {info.index: f"{info.index}:{info.name}" for info in plan.stages}
    binary = not isinstance(plan.segments[0].source, SourceStage)     # an image's record is its file's bytes
    bad = backend.to_pandas(frame[(frame[STATUS] == STATUS_QUARANTINED)][[STAGE, FILE_INDEX, OFFSET, RAW, REASON]])
    bad = bad[bad[FILE_INDEX] >= 0].sort_values([FILE_INDEX, OFFSET]).head(n)       # (tally rows have no place)

    def text(raw) -> str:
        if binary and isinstance(raw, bytes):
            return f"<{len(raw):,} bytes>"
        value = raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else ("" if raw is None else str(raw))
        return value if len(value) <= RECORD_CHARS else value[:RECORD_CHARS] + "…"

    return pa.table({
        "stage": pa.array([names.get(int(s), str(s)) for s in bad[STAGE]], pa.string()),
        "file": pa.array([plan.files[int(i)].display for i in bad[FILE_INDEX]], pa.string()),
        "offset": pa.array([int(o) for o in bad[OFFSET]], pa.int64()),
        "reason": pa.array([str(r) for r in bad[REASON]], pa.string()),
        "record": pa.array([text(r) for r in bad[RAW]], pa.string()),
    })
