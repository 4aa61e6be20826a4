"""What runs inside one partition: the source stage (read, split, parse, type) and runs of steps.

Every partition frame holds live rows and the rows that left the pipeline (quarantined records,
and tally rows that stand for filtered or deduplicated records, see backends/base.py), so the
counts travel with the data through dask's shuffles and nothing is counted twice or lost.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ..columns import (COUNT, DROPPED_FIELDS, FILE_INDEX, OFFSET, RAW, READ_PINS, REASON, STAGE,
                             STATUS, STATUS_LIVE, STATUS_QUARANTINED)
from ..sources.frames import frame_schema, refuse_first_bad
from ..sources.pins import RangePin, ReadPins
from ..sources.ranges import Partition, with_decoded
from ..sources.registry import PiecewiseRecordStage
from ..sources.stage import SourceStage
from ..plan.compile import Segment
from ..steps.base import RowStep
from ..steps.cast import cast_columns
from ..types import Schema


# -- the source stage ---------------------------------------------------------------------------

def read_partition(partition: Partition, segment: Segment, backend, decoded=()):
    """Read one partition's byte ranges and run the segment's stages on it, piece by piece: the
    records are cut into pieces of about the backend's `piece_bytes` (whole records; one record
    longer than that is a piece of its own), and each piece is split, parsed, typed and run
    through the segment's row steps before the next is parsed (`_in_pieces`), so what parsing
    holds at once is bounded by the piece, not the partition. `decoded`: the bytes of the
    partition's compressed ranges, in order, decoded by the tasks before (runtime/graph.py)."""
    source = segment.source
    if not isinstance(source, SourceStage):     # a RecordStage: it makes its frames (sources/registry.py)
        if not isinstance(source, PiecewiseRecordStage):
            df = source.read(partition, segment, backend)
            return _with_pins(run_steps(df, segment, backend), df.attrs.get(READ_PINS, ()))
        pins: list = []
        frames = source.read_pieces(partition, segment, backend, pins)
        return _with_pins(_frames_in_pieces(frames, segment, backend), pins)
    if source.parquet:
        return _read_parquet_partition(partition, segment, backend)
    ranges = with_decoded(partition.ranges, decoded) if decoded else partition.ranges
    if source.framing is not None:       # records that span lines, framed on the host
        backend.note_host_work("records framed on the host (csv, multiline)", 1)
        pins: list = []
        records = source.framing.read(source.files, ranges, backend, pins=pins)
        return _with_pins(_in_pieces(_framed_pieces(*records, backend), segment, backend), pins)
    block = backend.read_block(source.files, ranges)
    batches = backend.batches(block.data)
    last = len(batches) - 1
    df = _in_pieces(((*_split_batch(block, position, data, backend), block.extra_bad if i == last else [])
                     for i, (position, data) in enumerate(batches)), segment, backend)
    return _with_pins(df, getattr(block, "pins", ()))


def _with_pins(df, pins):
    """df, carrying the hashes of the input ranges read for it (sources/pins.py)."""
    df.attrs[READ_PINS] = ReadPins(pins)
    return df


def _framed_pieces(text, file_index, offsets, bad_utf8, exact, extra_bad, backend):
    """Framed records (a partition's, whole) as pieces of at most `backend.piece_bytes` bytes of
    text, or one record where a record alone is longer; slices, not copies. The set-aside
    records go with the last piece."""
    n = len(text)
    ends = [n]
    if backend.piece_bytes is not None and n > 1:
        starts = np.asarray(backend.to_host(backend.string_buffers(text)[0]), dtype=np.int64)
        ends, a = [], 0
        while a < n:
            b = int(np.searchsorted(starts, starts[a] + backend.piece_bytes, side="right")) - 1
            a = max(min(b, n), a + 1)
            ends.append(a)
    a = 0
    for i, b in enumerate(ends):
        yield (text.iloc[a:b], file_index[a:b], offsets[a:b], bad_utf8[a:b],
               exact.iloc[a:b] if exact is not None else None, extra_bad if i == len(ends) - 1 else [])
        a = b


def _in_pieces(pieces, segment: Segment, backend):
    """Parse each piece (text, file index, offset, bad UTF-8, exact, set-aside records) and run
    the segment's row steps on it, holding only its result (live rows, the quarantined rows,
    the counts of the dropped) before the next piece is parsed; then the partition's frame:
    the live rows of every piece in input order, the quarantined rows, a tally row per stage and
    status. Row steps see one row at a time, so the pieces change nothing but what is held."""
    dropped = []                         # what each piece's JSON source dropped (columns.DROPPED_FIELDS)
    if not segment.steps:
        frames = []
        for piece in pieces:
            frames.append(_parse_lines(*piece, segment, backend))
            dropped.append(frames[-1].attrs.get(DROPPED_FIELDS, NOT_SAID))
        df = _finish(frames[0] if len(frames) == 1 else backend.concat(frames), segment, backend)
        return with_dropped_fields(df, dropped)
    live, quarantined, tallies = [], [], {}
    for piece in pieces:
        frame = _parse_lines(*piece, segment, backend)
        dropped.append(frame.attrs.get(DROPPED_FIELDS, NOT_SAID))
        rows, bad, counts = _row_steps(frame, segment, backend)
        live.append(rows)
        quarantined += bad
        for key, n in counts.items():
            tallies[key] = tallies.get(key, 0) + n
    return with_dropped_fields(_segment_frame(live, quarantined, tallies, segment, backend), dropped)


def _frames_in_pieces(frames, segment: Segment, backend):
    """_in_pieces for a RecordStage's frames (read_pieces): each run through the segment's row
    steps, only its result held, before the next is made."""
    if not segment.steps:
        frames = list(frames)
        if not frames:
            return backend.empty(frame_schema(segment.schema))
        return _finish(frames[0] if len(frames) == 1 else backend.concat(frames), segment, backend)
    live, quarantined, tallies = [], [], {}
    try:
        for frame in frames:
            rows, bad, counts = _row_steps(frame, segment, backend)
            del frame                    # (its pixels go as the next piece is asked for)
            live.append(rows)
            quarantined += bad
            for key, n in counts.items():
                tallies[key] = tallies.get(key, 0) + n
    finally:
        close = getattr(frames, "close", None)   # a generator: what it holds is let go at once
        if close is not None:
            close()
    return _segment_frame(live, quarantined, tallies, segment, backend)


NOT_SAID = object()                      # a piece whose parser counts no dropped fields


def with_dropped_fields(df, said: list):
    """df, with the extra fields its pieces' parsers dropped added up (columns.DROPPED_FIELDS):
    None when one piece was not counted; nothing when no parser says."""
    said = [counts for counts in said if counts is not NOT_SAID]
    if not said:
        return df
    total: dict[str, int] | None = {}
    for counts in said:
        if counts is None:
            total = None
            break
        for name, n in counts.items():
            total[name] = total.get(name, 0) + n
    df.attrs[DROPPED_FIELDS] = total
    return df


def _split_batch(block, position: int, data, backend):
    """(text, file index, offset, bad UTF-8, exact bytes of the records that are not UTF-8 or
    None) of the records in one batch of whole lines that starts at `position` in the block."""
    xp = backend.xp
    added = [p - position for p in block.added if position <= p < position + len(data)]
    lines = backend.split_lines(data, position, added)
    pos = xp.asarray(block.seg_pos, dtype=xp.int64)
    which = xp.searchsorted(pos, lines.offsets, side="right") - 1
    file_index = xp.asarray(block.seg_file, dtype=xp.int32)[which]
    offsets = lines.offsets - pos[which] + xp.asarray(block.seg_start, dtype=xp.int64)[which]
    text, bad_utf8, exact = lines.text, lines.bad_utf8, lines.raw
    return text, file_index, offsets, bad_utf8, exact


def _parse_lines(text, file_index, offsets, bad_utf8, exact, extra_bad, segment: Segment, backend):
    """Parse and type one piece's records, with their bookkeeping. `exact`:
    the exact bytes of records that are not UTF-8 (their text holds U+FFFD), or None."""
    source = segment.source
    cols, ok, reason, *dropped = source.parser.parse(text, backend, file_index)
    df = backend.xd.DataFrame(cols, index=text.index)
    bad = backend.series(bad_utf8, "bool", index=text.index)
    reasons = backend.nulls(len(text), "string", index=text.index)
    if bool(bad_utf8.any()):         # (masks only where there is something to mark: the common
        reasons = reasons.mask(bad, "invalid UTF-8")      # batch has no bad record)
    if ok is not None:
        not_ok = ~ok.astype(bool) & ~bad
        if bool(not_ok.any()):
            if isinstance(reason, str):
                reasons = reasons.mask(not_ok, reason)
            else:
                reasons = reasons.fillna(reason.where(not_ok))
            bad = bad | not_ok
    df = _finish_source(df, bad, reasons, text, file_index, offsets, extra_bad, segment, backend, exact)
    if dropped:
        df.attrs[DROPPED_FIELDS] = dropped[0]
    return df


def _read_parquet_partition(partition: Partition, segment: Segment, backend):
    """A Parquet source: row groups are the ranges; a record's offset is its row number in its
    file. Values arrive typed; `columns` casts them like any other source."""
    from ..sources.parquet import read_row_groups

    source = segment.source
    xp = backend.xp
    refused: list = []                   # row groups over their decoding bound: one quarantined record each
    table, file_index, offsets = read_row_groups(source.files, partition.ranges, source.parser.schema, refused)
    # pyarrow reads the columns it needs from the file: the bytes are not at hand to hash
    pins = {RangePin(r.file_index, 0, f.size, None) for r in partition.ranges
            if (f := source.files[r.file_index]).url is None}
    df = backend.from_arrow(table)
    n = len(df)
    bad = backend.series(xp.zeros(n, dtype=bool), "bool", index=df.index)
    reasons = backend.nulls(n, "string", index=df.index)
    return _with_pins(run_steps(_finish_source(df, bad, reasons, None, xp.asarray(file_index), xp.asarray(offsets),
                                               refused, segment, backend), segment, backend), sorted(pins))


def _finish_source(df, bad, reasons, text, file_index, offsets, extra_bad, segment: Segment, backend,
                   exact=None):
    """Casts, provenance and the bookkeeping columns (the caller runs the segment's steps). A
    bad record's raw form is its exact input bytes: the line (`exact` where it is not UTF-8)."""
    source = segment.source
    xp = backend.xp
    as_read = df                 # cast_columns returns a new frame: a typed record's raw form is this
    if source.casts:
        df, cast_bad, cast_reasons = cast_columns(df, source.casts, backend)
        if cast_bad is not None:
            cast_bad = cast_bad & ~bad
            if bool(cast_bad.any()):
                reasons = reasons.fillna(cast_reasons.where(cast_bad))
                bad = bad | cast_bad
    if source.provenance:
        names = backend.series([f.display for f in source.files], "string")
        df["_file"] = backend.series(names.take(file_index), "string", index=df.index)
        df["_offset"] = backend.series(offsets, "int64", index=df.index)
    n = len(df)
    df[FILE_INDEX] = backend.series(file_index, "int32", index=df.index)
    df[OFFSET] = backend.series(offsets, "int64", index=df.index)
    status = backend.series(xp.zeros(n, dtype=xp.int8), "int8", index=df.index)
    stage = backend.series(xp.full(n, -1, dtype=xp.int16), "int16", index=df.index)
    if bool(bad.any()):
        status, stage = status.mask(bad, STATUS_QUARANTINED), stage.mask(bad, source.index)
        raw = _raw_lines(text, bad, exact, backend) if text is not None else _raw_of(as_read, bad, backend)
    else:
        raw = backend.nulls(n, "binary", index=df.index)
    df[STATUS] = status
    df[COUNT] = backend.series(xp.ones(n, dtype=xp.int64), "int64", index=df.index)
    df[STAGE] = stage
    df[RAW] = raw
    df[REASON] = reasons
    df = backend.conform(df, frame_schema(source.schema))
    if extra_bad:
        df = backend.concat([df, _quarantine_rows(extra_bad, source.schema, source.index, backend)])
    if segment.on_error == "fail" and bool(bad.any() or extra_bad):
        refuse_first_bad(df, segment.files, backend)
    return df


def _raw_lines(text, bad, exact, backend):
    """The bad records' lines as bytes: the text's UTF-8, or `exact` where the line was not UTF-8."""
    raw = backend.astype(text.where(bad), "binary")
    if exact is not None:
        raw = exact.where(exact.notna(), raw)
    return raw


def _raw_of(df, bad, backend):
    """Typed sources have no raw line: a bad record's values, as JSON (UTF-8 bytes)."""
    raw = backend.nulls(len(df), "binary", index=df.index)
    if bool(bad.any()):
        raw[bad] = _row_json(df[bad], backend)
    return raw


def _quarantine_rows(rows, schema: Schema, stage: int, backend):
    n = len(rows)
    out = {name: backend.nulls(n, t) for name, t in schema.items()}
    out[FILE_INDEX] = backend.series([r[0] for r in rows], "int32")
    out[OFFSET] = backend.series([r[1] for r in rows], "int64")
    out[STATUS] = backend.series([STATUS_QUARANTINED] * n, "int8")
    out[COUNT] = backend.series([1] * n, "int64")
    out[STAGE] = backend.series([stage] * n, "int16")
    out[RAW] = backend.series([r[2] for r in rows], "binary")
    out[REASON] = backend.series([r[3] for r in rows], "string")
    return backend.xd.DataFrame(out)


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
            rows[RAW] = _row_json(frame[bad], backend) if raw is None else raw   # as the record reached the step
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


def _json_ready(value):
    """A value as the quarantine's JSON holds it: text, or a nested value (list, struct) as is."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, dict)):
        return value
    return None if pd.isna(value) else str(value)


def _row_json(rows, backend):
    """A later step's bad row has no raw line any more: keep its values as JSON (UTF-8 bytes)."""
    data = [c for c in rows.columns if not c.startswith("__")]
    host = backend.to_pandas(rows[data])
    texts = [json.dumps({k: _json_ready(v) for k, v in rec.items()}, ensure_ascii=False, default=str)
             .encode("utf-8", "surrogatepass") for rec in host.to_dict(orient="records")]
    return backend.series(texts, "binary", index=rows.index)
