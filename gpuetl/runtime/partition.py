"""What runs inside one partition: the source stage's frames (the stage reads, splits, parses
and types them: sources/stage.py) run through the segment's steps, piece by piece.

Every partition frame holds live rows and the rows that left the pipeline (quarantined records,
and tally rows that stand for filtered or deduplicated records, see backends/base.py), so the
counts travel with the data through dask's shuffles and nothing is counted twice or lost. What
the reading counted beside the rows travels next to the frame (sources/counters.py).
"""

from __future__ import annotations

from ..columns import COUNT, FILE_INDEX, OFFSET, RAW, REASON, STAGE, STATUS, STATUS_LIVE, STATUS_QUARANTINED
from ..sources.counters import CountedFrame, PartitionCounters
from ..sources.frames import frame_schema, refuse_first_bad
from ..sources.ranges import Partition
from ..sources.records import row_json
from ..plan.compile import Segment
from ..steps.base import RowStep


# -- the source stage ---------------------------------------------------------------------------

def read_partition(partition: Partition, segment: Segment, backend, decoded=()) -> CountedFrame:
    """Read one partition and run the segment's stages on it, piece by piece: the source stage
    hands its records as frames of about the backend's `piece_bytes` (whole records; one record
    longer than that is a piece of its own; images: by decoded pixels), and each is run through
    the segment's row steps before the next is parsed (`_frames_in_pieces`), so what parsing
    holds at once is bounded by the piece, not the partition. `decoded`: the bytes of the
    partition's compressed ranges, in order, decoded by the tasks before (runtime/graph.py).
    The frame comes with what the reading counted (sources/counters.py)."""
    counters = PartitionCounters()
    frames = segment.source.read(partition, segment, backend, counters, decoded)
    return CountedFrame(_frames_in_pieces(frames, segment, backend), counters)


def _frames_in_pieces(frames, segment: Segment, backend):
    """Run each of the source's frames through the segment's row steps, holding only its result
    (live rows, the quarantined rows, the counts of the dropped) before the next is made; then
    the partition's frame: the live rows of every piece in input order, the quarantined rows, a
    tally row per stage and status. Row steps see one row at a time, so the pieces change
    nothing but what is held."""
    if not segment.steps:
        frames = list(frames)
        if not frames:
            return backend.empty(frame_schema(segment.schema))
        return _finish(frames[0] if len(frames) == 1 else backend.concat(frames), segment, backend)
    live, quarantined, tallies = [], [], {}
    try:
        for frame in frames:
            rows, bad, counts = _row_steps(frame, segment, backend)
            del frame                    # (an image piece's pixels go as the next piece is asked for)
            live.append(rows)
            quarantined += bad
            for key, n in counts.items():
                tallies[key] = tallies.get(key, 0) + n
    finally:
        close = getattr(frames, "close", None)   # a generator: what it holds is let go at once
        if close is not None:
            close()
    return _segment_frame(live, quarantined, tallies, segment, backend)


# -- steps ---------------------------------------------------------------------------------------

def run_steps(df, segment: Segment, backend):
    """Run the segment's steps on the live rows of a frame (see _row_steps): the segment's frame."""
    if not segment.steps:
        return _finish(df, segment, backend)
    live, quarantined, tallies = _row_steps(df, segment, backend)
    return _segment_frame([live], quarantined, tallies, segment, backend)


def _row_steps(df, segment: Segment, backend):
    """(live rows, [quarantined rows], {(stage, status): records dropped}) of a frame after the
    segment's steps, run on its live rows. Rows a step quarantines leave the frame at once
    (their raw record is kept); rows a step drops are marked where they lie (status, stage) and
    cut out before the next step and at the segment's end (`cut`: the live rows copied out, the
    others counted), so every step sees live rows only and no dropped row is held beyond its
    segment."""
    frame, quarantined, tallies = df.reset_index(drop=True), [], {}

    def cut(frame):
        live, bad, counts = backend.separate(frame)
        if len(bad):
            quarantined.append(bad)
        for key, n in counts.items():
            tallies[key] = tallies.get(key, 0) + n
        return live.reset_index(drop=True)

    for stage in segment.steps:
        step = stage.step
        frame = cut(frame)
        checked, bad, reasons = step.quarantine(frame, backend) if isinstance(step, RowStep) else (frame, None, None)
        if bad is not None and bool(bad.any()):
            rows = checked[bad].copy()
            raw = step.raw_record(frame[bad], backend)
            rows[RAW] = row_json(frame[bad], backend) if raw is None else raw   # as the record reached the step
            rows[REASON] = reasons[bad]
            rows[STATUS] = backend.series(backend.xp.full(len(rows), STATUS_QUARANTINED, dtype=backend.xp.int8),
                                          "int8", index=rows.index)
            rows[STAGE] = backend.series(backend.xp.full(len(rows), stage.index, dtype=backend.xp.int16),
                                         "int16", index=rows.index)
            if segment.on_error == "fail":
                refuse_first_bad(rows, segment.files, backend)
            quarantined.append(rows)
            checked = backend.filter(checked, ~bad)
        frame = checked
        bookkeeping = frame[[c for c in frame.columns if c.startswith("__")]]
        frame = step.transform(frame, backend)
        lost = [c for c in bookkeeping.columns if c not in frame.columns]
        if lost:                       # a step that selects columns keeps the bookkeeping anyway
            frame = frame.assign(**{c: bookkeeping[c] for c in lost})
        keep = step.keep(frame, backend)
        if keep is not None:
            frame = _mark_dropped(frame, keep, step.drops_as, stage.index, backend)
    return cut(frame), quarantined, tallies


def _segment_frame(live: list, quarantined: list, tallies: dict, segment: Segment, backend):
    """The segment's frame: the live rows (in input order), then the quarantined rows, then one
    tally row per (stage, status) that stands for the dropped records."""
    rest = [tally_row(n, status, stage, backend) for (stage, status), n in sorted(tallies.items())]
    out = [backend.conform(part, frame_schema(segment.schema)) for part in [*live, *quarantined, *rest] if len(part)]
    if not out:
        return backend.empty(frame_schema(segment.schema))
    return _finish(out[0] if len(out) == 1 else backend.concat(out), segment, backend)


def _mark_dropped(frame, keep, status: int, stage: int, backend):
    """The live rows `keep` does not keep now count as dropped by this stage, in place."""
    drop = ~keep.fillna(False).astype(bool) & (frame[STATUS] == STATUS_LIVE)
    if not bool(drop.any()):
        return frame
    return frame.assign(**{STATUS: frame[STATUS].mask(drop, status), STAGE: frame[STAGE].mask(drop, stage)})


def _finish(df, segment: Segment, backend):
    """Quarantined rows are kept whole only when on_error is quarantine; else they become tallies."""
    if segment.on_error == "drop":
        df = collapse_quarantine(df, backend)
    return backend.conform(df, frame_schema(segment.schema)).reset_index(drop=True)


def collapse_quarantine(df, backend):
    bad = df[STATUS] == STATUS_QUARANTINED
    if not bool(bad.any()):
        return df
    rows = df[bad]
    tallies = rows.groupby([STAGE, REASON], sort=True)[COUNT].sum().reset_index()
    tallies[STATUS] = STATUS_QUARANTINED
    return backend.concat([df[~bad], tallies])


def tally_row(count: int, status: int, stage: int, backend, reason: str | None = None):
    return backend.xd.DataFrame({
        FILE_INDEX: backend.series([-1], "int32"), OFFSET: backend.series([-1], "int64"),
        STATUS: backend.series([status], "int8"), COUNT: backend.series([count], "int64"),
        STAGE: backend.series([stage], "int16"), RAW: backend.nulls(1, "binary"),
        REASON: backend.series([reason], "string"),
    })
