"""The bookkeeping columns every partition frame carries beside the data, and the row statuses.

They are how each record is accounted for (rows_in = rows_out + filtered + deduplicated +
quarantined): which file and byte offset it came from, whether it is still live, which stage
dropped it and why, and for quarantined rows its exact input bytes (docs/design.md).
"""

from __future__ import annotations

from .types import Schema

FILE_INDEX = "__fi"      # int32: index of the input file in the plan's sorted input list
OFFSET = "__off"         # int64: byte offset of the record's first byte (uncompressed), or row index
STATUS = "__st"          # int8: one of the STATUS_* values
COUNT = "__n"            # int64: records this row stands for (1, or a tally of dropped records)
STAGE = "__stage"        # int16: index of the stage that dropped the row, -1 for live rows
RAW = "__raw"            # binary: the record's exact input bytes, kept for quarantined rows only
REASON = "__reason"      # string: why a row was quarantined or dropped
INTERNAL = (FILE_INDEX, OFFSET, STATUS, COUNT, STAGE, RAW, REASON)
INTERNAL_TYPES: Schema = {
    FILE_INDEX: "int32", OFFSET: "int64", STATUS: "int8", COUNT: "int64",
    STAGE: "int16", RAW: "binary", REASON: "string",
}

STATUS_LIVE, STATUS_QUARANTINED, STATUS_FILTERED, STATUS_DEDUPLICATED, STATUS_DROPPED = 0, 1, 2, 3, 4
STATUS_NAMES = {
    STATUS_LIVE: "rows_out", STATUS_QUARANTINED: "quarantined", STATUS_FILTERED: "filtered",
    STATUS_DEDUPLICATED: "deduplicated", STATUS_DROPPED: "dropped_errors",
}
