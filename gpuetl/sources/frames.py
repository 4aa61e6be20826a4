"""What the frames of every source share (the byte formats' stages, sources/records.py, the
sources that build their frames themselves, as images do, and the runtime's steps): the schema
with the bookkeeping columns, and `on_error: fail`'s refusal at the first bad record."""

from __future__ import annotations

from ..columns import FILE_INDEX, INTERNAL_TYPES, OFFSET, RAW, REASON, STATUS, STATUS_QUARANTINED
from ..errors import DataError
from ..types import Schema
from .files import InputFile


def frame_schema(schema: Schema) -> Schema:
    """The columns of a source's frames: its own and the bookkeeping columns (columns.py)."""
    return {**schema, **INTERNAL_TYPES}


def refuse_first_bad(df, files: list[InputFile], backend):
    """on_error: fail: a DataError naming the frame's first quarantined record (by file and
    offset), its reason and its first 200 characters."""
    bad = df[df[STATUS] == STATUS_QUARANTINED].sort_values([FILE_INDEX, OFFSET]).head(1)
    first = backend.to_pandas(bad)
    row = first.iloc[0]
    raw = row[RAW]
    raw = raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else str(raw)
    raw = raw if len(raw) <= 200 else raw[:200] + "…"
    raise DataError(
        f"{files[int(row[FILE_INDEX])].display}, byte offset {int(row[OFFSET])}: {row[REASON]}\n  record: {raw}",
        hint="on_error: fail stops at the first bad record; use on_error: quarantine to set bad records "
             "aside in <out>/_quarantine/ and go on",
    )
