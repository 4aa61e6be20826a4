"""How the byte formats turn a piece of their records into a typed source frame: cut a block into
records with their identity (`split_batch`, `framed_pieces`), parse them with the stage's parser
(`parse_piece`), then cast, add provenance and the bookkeeping columns, and set aside the bad
records with their exact input bytes (`source_frame`). Written once against the backend; the
stages (sources/stage.py, sources/formats/parquet.py) call it, the runtime never does."""

from __future__ import annotations

import json

import numpy as np

from ..columns import COUNT, FILE_INDEX, OFFSET, RAW, REASON, STAGE, STATUS, STATUS_QUARANTINED
from ..types import ColumnSpec, Schema
from .frames import frame_schema, refuse_first_bad


def split_batch(block, position: int, data, backend):
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


def framed_pieces(text, file_index, offsets, bad_utf8, exact, extra_bad, backend):
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


def parse_piece(text, file_index, offsets, bad_utf8, exact, extra_bad, stage, segment, backend, counters):
    """Parse and type one piece's records with the stage's parser, with their bookkeeping.
    `exact`: the exact bytes of records that are not UTF-8 (their text holds U+FFFD), or None.
    What the parser dropped is added to `counters` (sources/counters.py)."""
    cols, ok, reason, *dropped = stage.parser.parse(text, backend, file_index)
    df = backend.frame(cols, index=text.index)
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
    df = source_frame(df, bad, reasons, text, file_index, offsets, extra_bad, stage, segment, backend, exact)
    if dropped:
        counters.add_dropped_fields(dropped[0])
    return df


def source_frame(df, bad, reasons, text, file_index, offsets, extra_bad, stage, segment, backend, exact=None):
    """Casts, provenance and the bookkeeping columns (the runtime runs the segment's steps). A
    bad record's raw form is its exact input bytes: the line (`exact` where it is not UTF-8), or
    for typed sources (text None) its values as JSON."""
    xp = backend.xp
    as_read = df                 # cast_columns returns a new frame: a typed record's raw form is this
    if stage.casts:
        df, cast_bad, cast_reasons = cast_columns(df, stage.casts, backend)
        if cast_bad is not None:
            cast_bad = cast_bad & ~bad
            if bool(cast_bad.any()):
                reasons = reasons.fillna(cast_reasons.where(cast_bad))
                bad = bad | cast_bad
    index = df.index
    cols = {name: df[name] for name in df.columns}      # the frame is built once, in the schema's order
    if stage.provenance:
        names = backend.series([f.display for f in stage.files], "string")
        cols["_file"] = backend.series(names.take(file_index), "string", index=index)
        cols["_offset"] = backend.series(offsets, "int64", index=index)
    n = len(df)
    cols[FILE_INDEX] = backend.series(file_index, "int32", index=index)
    cols[OFFSET] = backend.series(offsets, "int64", index=index)
    status = backend.series(xp.zeros(n, dtype=xp.int8), "int8", index=index)
    where = backend.series(xp.full(n, -1, dtype=xp.int16), "int16", index=index)
    if bool(bad.any()):
        status, where = status.mask(bad, STATUS_QUARANTINED), where.mask(bad, stage.index)
        raw = _raw_lines(text, bad, exact, backend) if text is not None else _raw_of(as_read, bad, backend)
    else:
        raw = backend.nulls(n, "binary", index=index)
    cols[STATUS] = status
    cols[COUNT] = backend.series(xp.ones(n, dtype=xp.int64), "int64", index=index)
    cols[STAGE] = where
    cols[RAW] = raw
    cols[REASON] = reasons
    schema = frame_schema(stage.schema)
    df = backend.conform(backend.frame({name: cols[name] for name in schema if name in cols}, index=index), schema)
    if extra_bad:
        df = backend.concat([df, quarantine_rows(extra_bad, stage.schema, stage.index, backend)])
    if segment.on_error == "fail" and bool(bad.any() or extra_bad):
        refuse_first_bad(df, segment.files, backend)
    return df


def cast_columns(df, specs: dict[str, ColumnSpec], backend):
    """Cast columns in place of the old ones. Returns (df, bad mask or None, reason Series or None):
    a row is bad when a present value cannot be read as its type; the first bad column is named.
    (A source's declared `columns`, and the `cast` step.)"""
    df = df.copy(deep=False)          # the caller keeps the values as they came
    bad_any = None
    reasons = None
    for name, spec in specs.items():
        values, bad = backend.cast(df[name], spec.type, fmt=spec.format, timezone=spec.timezone)
        df[name] = values
        if bad.any():
            why = _reason_for(df, name, spec, bad, backend)
            reasons = why if reasons is None else reasons.where(reasons.notna(), why)
            bad_any = bad if bad_any is None else (bad_any | bad)
    return df, bad_any, reasons


def _reason_for(df, name, spec, bad, backend):
    what = spec.type + (f" with format {spec.format!r}" if spec.format else "")
    message = backend.series([f"column {name!r}: value is not a valid {what}"], "string")
    full = backend.nulls(len(df), "string", index=df.index)
    return full.where(~bad, message.iloc[0])


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
        raw[bad] = row_json(df[bad], backend)
    return raw


def quarantine_rows(rows, schema: Schema, stage: int, backend):
    """Records set aside before parsing ((file index, offset, raw bytes, reason) each) as
    quarantined rows of a frame of this schema."""
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


def _json_ready(value):
    """A value as the quarantine's JSON holds it: text, or a nested value (list, struct) as is."""
    import pandas as pd              # (a frame's values are at hand: pandas is loaded already)

    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, dict)):
        return value
    return None if pd.isna(value) else str(value)


def row_json(rows, backend):
    """A bad row without a raw line (a typed source's, or one a later step sets aside): its
    values as JSON (UTF-8 bytes)."""
    data = [c for c in rows.columns if not c.startswith("__")]
    host = backend.to_pandas(rows[data])
    texts = [json.dumps({k: _json_ready(v) for k, v in rec.items()}, ensure_ascii=False, default=str)
             .encode("utf-8", "surrogatepass") for rec in host.to_dict(orient="records")]
    return backend.series(texts, "binary", index=rows.index)
