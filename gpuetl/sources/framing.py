"""Records that may span lines: RFC 4180 CSV (a quoted field may hold newlines) and multi-line
log records (`source.multiline`: a line matching `start` begins a record, the others continue
it, as log shippers do).

A framing replaces "a record is a line" in the source stage (sources/stage.py: FramedStage):
`read(files, ranges, backend)` gives the partition's records with their file and byte offset,
and the lines it sets aside (reported to the quarantine). It works on the host, with numpy and
pyarrow, for every backend; the GPU backend counts the partitions it frames there
(`Backend.note_host_work`).

Ranges stay byte ranges and a record still belongs to the range its first byte lies in:

- CSV: whether a newline ends a record depends on every quote before it, so the plan scans each
  plain file once (quote parity, numpy) and moves every range boundary to the first record start
  at or after it (`plan_csv_partitions`). Ranges then start and end on record starts and are
  read exactly.
- Multi-line: a line's record is decided by the nearest start line before it, never more than
  `max_bytes` back (a record is bounded), so a range is read with `max_bytes` of context on
  each side and keeps the records whose first line starts in it. Whether a file has a start
  line before a range at all (else its leading lines are `no_start`) is found by the plan.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import SourceError
from ..spec.sizes import format_size
from .compressed import Limits
from .files import InputFile
from .line_ends import record_ends, records_array
from .long_records import LongRecords, stretches
from .pins import pin_bytes
from .ranges import (WHOLE_FILE, ByteRange, CompressedRange, Partition, compressed_ranges, oversized_range, pack,
                     plain_long_records, range_pin, read_range, record_span, truncated_piece)

QUOTE, NEWLINE = 34, 10
SCAN_CHUNK = 16 << 20            # bytes the plan's CSV scan looks at at once
MAX_CSV_RECORD = 1 << 30         # a record is held in memory whole, as a partition is (blocksize <= 1GiB)


# -- planning ------------------------------------------------------------------------------------

def plan_csv_partitions(files: list[InputFile], blocksize: int, limits: Limits) -> list[Partition]:
    """Ranges of about `blocksize` bytes that start and end on CSV record starts (a newline
    inside quotes is not one). A compressed file is one range: its stream cannot be entered
    in the middle, and its record starts are not known without decoding it."""
    ranges: list[tuple[object, int]] = []
    for f in files:
        if f.compression:
            ranges += compressed_ranges(f, WHOLE_FILE, limits, csv=True)
        elif f.size == 0:
            ranges.append((ByteRange(f.index, 0, -1), 1))
        else:
            long = LongRecords(limits.max_record_bytes, csv=True) if limits.max_record_bytes else None
            starts = csv_record_starts(f, range(blocksize, f.size, blocksize), long)
            holes = long.finish(f.size) if long is not None else []
            for piece in stretches(f.size, holes):      # a record over max_record_bytes is a range of its own
                if len(piece) == 3:
                    ranges.append((oversized_range(f, piece[0], piece[1], limits.max_record_bytes), 1))
                    continue
                bounds = sorted({piece[0], *(x for x in starts if piece[0] < x < piece[1]), piece[1]})
                ranges += [(ByteRange(f.index, a, b - a), b - a) for a, b in zip(bounds, bounds[1:]) if b > a]
    return pack(ranges, blocksize)


def csv_record_starts(f: InputFile, boundaries, long: LongRecords | None = None) -> list[int]:
    """For each boundary (ascending), the first record start at or after it (the file's size if
    none): the position after the first newline, from boundary - 1 on, with an even number of
    quotes before it in the file. Doubled quotes ("") keep the parity, as RFC 4180 means. A
    record over MAX_CSV_RECORD (a quote opened early in a huge file that never closes) is an
    error, not a partition that cannot be held. `long`: fed every chunk (the whole file is then
    read), to find the records over source.max_record_bytes."""
    pending = list(boundaries)
    found: list[int] = []          # pending[len(found):] are still to be placed
    parity = 0                            # quotes seen before `base`, mod 2
    base = 0
    try:
        fd = os.open(f.path, os.O_RDONLY)
    except OSError as err:
        raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None
    try:
        while (len(found) < len(pending) or long is not None) and base < f.size:
            raw = os.pread(fd, min(SCAN_CHUNK, f.size - base), base)
            chunk = np.frombuffer(raw, dtype=np.uint8)
            if not len(chunk):
                break
            if long is not None:
                long.feed(raw, base)
            end = base + len(chunk)
            quotes = np.flatnonzero(chunk == QUOTE)
            if len(found) < len(pending) and pending[len(found)] <= end:         # a boundary's newline may lie in this chunk
                newlines = np.flatnonzero(chunk == NEWLINE)
                even = ((np.searchsorted(quotes, newlines) + parity) & 1) == 0
                starts = newlines[even] + base + 1
                while len(found) < len(pending) and len(starts):
                    k = np.searchsorted(starts, pending[len(found)])
                    if k == len(starts):
                        break
                    found.append(int(starts[k]))
            parity = (parity + len(quotes)) & 1
            base = end
            if len(found) < len(pending) and base - pending[len(found)] > MAX_CSV_RECORD:
                raise SourceError(f"{f.display}: no CSV record starts within {format_size(MAX_CSV_RECORD)} after byte "
                                  f"{pending[len(found)]}: a quoted field runs on (a stray or unterminated "
                                  "quote?); records are not read past it")
    except OSError as err:
        raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None
    finally:
        os.close(fd)
    return found + [f.size] * (len(pending) - len(found))


# -- records from bytes --------------------------------------------------------------------------

@dataclass
class Units:
    """A buffer cut into consecutive pieces (records, or lines set aside), each from its start
    to the next one's: `text` (less the line ending, sources/line_ends.py), `exact` (the bytes,
    for the pieces that are not UTF-8, else None), `bad_utf8`, `starts` (positions in the buffer)."""

    text: pa.Array
    starts: np.ndarray
    bad_utf8: np.ndarray
    exact: pa.Array | None


def cut_units(data: bytes, starts: np.ndarray, ends: np.ndarray | None = None) -> Units:
    """The pieces of `data` that begin at `starts` (ascending, the first 0), each up to the next
    less its line ending, or up to `ends` where given."""
    if ends is None:
        ends = record_ends(np, np.frombuffer(data, dtype=np.uint8), starts)
    raw = records_array(data, starts, ends)
    string_type = pa.string() if raw.type == pa.binary() else pa.large_string()
    try:
        text = raw.cast(string_type)
        bad = np.zeros(len(starts), dtype=bool)
        exact = None
    except pa.ArrowInvalid:
        values = raw.to_pylist()
        bad = np.array([not _is_utf8(v) for v in values], dtype=bool)
        text = pa.array([v.decode("utf-8", "replace") for v in values], string_type)
        exact = pa.array([v if b else None for v, b in zip(values, bad)], pa.binary())
    return Units(text.cast(pa.string()), starts, bad, exact)


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def line_starts(buf: np.ndarray) -> np.ndarray:
    starts = np.concatenate(([0], np.flatnonzero(buf == NEWLINE) + 1)).astype(np.int64)
    return starts[:-1] if starts[-1] == len(buf) else starts


@dataclass
class Records:
    """One partition's records, on the host, as the source stage takes them: per range read,
    one piece of each list."""

    text: list = field(default_factory=list)
    file_index: list = field(default_factory=list)
    offsets: list = field(default_factory=list)
    bad_utf8: list = field(default_factory=list)
    exact: list = field(default_factory=list)
    set_aside: list = field(default_factory=list)    # (file index, offset, raw bytes, reason): reported records

    def add(self, units: Units, keep: np.ndarray, file_index: int, base: int) -> None:
        take = pa.array(keep)
        self.text.append(units.text.filter(take))
        self.offsets.append(units.starts[keep] + base)
        self.file_index.append(np.full(int(keep.sum()), file_index, dtype=np.int32))
        self.bad_utf8.append(units.bad_utf8[keep])
        self.exact.append(units.exact.filter(take) if units.exact is not None
                          else pa.nulls(int(keep.sum()), pa.binary()))

    def set_aside_units(self, units: Units, which: np.ndarray, file_index: int, base: int, reasons) -> None:
        """The units at `which` go to the quarantine with their exact bytes and a reason each."""
        text = units.text.take(pa.array(which)).to_pylist()
        for i, k in enumerate(which.tolist()):
            raw = units.exact[k].as_py() if units.exact is not None and units.bad_utf8[k] else text[i].encode("utf-8")
            self.set_aside.append((file_index, int(units.starts[k]) + base, raw, reasons[i]))

    def to_backend(self, backend):
        """(text, file index, offsets, bad UTF-8, exact or None, set-aside records) in the
        backend's types: what the stage parses (sources/records.py: framed_pieces, parse_piece)."""
        xp = backend.xp
        text = pa.concat_arrays(self.text) if self.text else pa.array([], pa.string())
        exact = pa.concat_arrays(self.exact) if self.exact else pa.array([], pa.binary())
        bad = np.concatenate(self.bad_utf8) if self.bad_utf8 else np.zeros(0, dtype=bool)

        def cat(parts, dtype):
            return xp.asarray(np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype))

        return (backend.series(text, "string"), cat(self.file_index, np.int32), cat(self.offsets, np.int64),
                xp.asarray(bad), backend.series(exact, "binary") if bad.any() else None, self.set_aside)


def _range_bytes(f: InputFile, rng, set_aside: list, pins: list | None) -> tuple[bytes, int]:
    """(the bytes of a range read exactly as planned, their offset in the file); their hash is
    added to `pins` (sources/pins.py)."""
    if isinstance(rng, CompressedRange) or rng.length < 0:
        got = read_range(f, rng)
        _pin(pins, range_pin(f, got))
        return bytes(truncated_piece(f, got, set_aside)), got.start
    data = _pread(f, rng.offset, rng.length)
    _pin(pins, f.url is None and pin_bytes(f.index, rng.offset, data))
    return data, rng.offset


def _pin(pins: list | None, pin) -> None:
    if pins is not None and pin:
        pins.append(pin)


def _pread(f: InputFile, offset: int, length: int) -> bytes:
    try:
        with open(f.path, "rb") as fh:
            fh.seek(offset)
            data = fh.read(length)
    except OSError as err:
        raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None
    if len(data) != length:
        raise SourceError(f"{f.display}: the file changed while read (short read at byte {offset})")
    return data


# -- CSV -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CsvFraming:
    """RFC 4180 records: a newline ends a record only outside quotes. The first record of each
    file is its header and is skipped (only that one: the parser quarantines a later repeat). Ranges
    come from plan_csv_partitions, so each starts on a record start."""

    def read(self, files: list[InputFile], ranges, backend, pins: list | None = None):
        """pins: where each range's hash as read is added (sources/pins.py), if given."""
        out = Records()
        for rng in ranges:
            f = files[rng.file_index]
            data, base = _range_bytes(f, rng, out.set_aside, pins)
            if not isinstance(rng, CompressedRange) and rng.length >= 0:
                whole = len(data)
                data = _to_record_end(f, data, base)
                if len(data) > whole:           # a range cut shorter (a preview's), finished here
                    _pin(pins, f.url is None and pin_bytes(f.index, base + whole, data[whole:]))
            if not data:
                continue
            units = cut_units(data, csv_record_starts_in(np.frombuffer(data, dtype=np.uint8)))
            keep = np.asarray(pc.greater(pc.binary_length(units.text), 0).to_numpy(zero_copy_only=False), dtype=bool)
            if base == 0 and keep.any():
                keep[np.flatnonzero(keep)[0]] = False          # the header
            out.add(units, keep, f.index, base)
        return out.to_backend(backend)


def _to_record_end(f: InputFile, data: bytes, base: int, chunk: int = 1 << 16) -> bytes:
    """`data` (from a record start) through the end of the record its last byte lies in. A
    planned range already ends there; a range cut shorter (a preview's) is finished here."""
    parity = data.count(b'"') & 1
    end = base + len(data)
    while end < f.size and not (data.endswith(b"\n") and parity == 0):
        more = _pread(f, end, min(chunk, f.size - end))
        quotes_before = np.cumsum(np.frombuffer(more, dtype=np.uint8) == QUOTE) + parity
        newlines = np.flatnonzero((np.frombuffer(more, dtype=np.uint8) == NEWLINE) & ((quotes_before & 1) == 0))
        if len(newlines):
            return data + more[:newlines[0] + 1]
        data += more
        parity = int(quotes_before[-1]) & 1
        end += len(more)
    return data


def csv_record_starts_in(buf: np.ndarray) -> np.ndarray:
    """Record starts in a buffer that begins on one: after each newline with an even number of
    quotes before it."""
    newlines = np.flatnonzero(buf == NEWLINE)
    quotes = np.flatnonzero(buf == QUOTE)
    ends = newlines[(np.searchsorted(quotes, newlines) & 1) == 0]
    starts = np.concatenate(([0], ends + 1)).astype(np.int64)
    return starts[:-1] if starts[-1] == len(buf) else starts


# -- multi-line records --------------------------------------------------------------------------

NO_START = "no_start"
OVERFLOW = "multiline_overflow"


@dataclass(frozen=True)
class MultilineFraming:
    """`source.multiline`: a record is a line matching `start` (searched, RE2) and the lines up
    to the next such line, at most `max_lines` lines and `max_bytes` bytes; a line past a bound
    is quarantined (multiline_overflow), and so is a line before its file's first start line
    (no_start). Blank lines are never records: inside a record they are kept, elsewhere skipped.
    `first_start`: per input file, where its first start line begins (the plan's scan).
    `holes`: per plain input file, the (start, stop) of its lines over source.max_record_bytes
    (ranges of their own): a range's context never reaches into one."""

    start: str
    max_lines: int
    max_bytes: int
    first_start: tuple[int, ...]
    holes: tuple = ()

    def read(self, files: list[InputFile], ranges, backend, pins: list | None = None):
        """pins: where each range's hash as read is added (sources/pins.py), if given."""
        out = Records()
        for rng in ranges:
            f = files[rng.file_index]
            cut = None          # where a line over source.max_record_bytes before this stretch ends
            if isinstance(rng, CompressedRange) or rng.length < 0:       # the whole file, from its start
                data, base = _range_bytes(f, rng, out.set_aside, pins)   # (or from after such a line)
                lo, hi, first = base, base + len(data) + 1, None if base == 0 else base
                cut = base or None
            else:
                lo, hi = rng.offset, rng.offset + rng.length
                data, base = self._window(f, lo, hi, pins)
                first = self.first_start[f.index]
                cut = max((stop for _, stop in (self.holes[f.index] if self.holes else ())
                           if lo - self.max_bytes - 1 < stop <= lo), default=None)      # (what _window stopped at)
            if data:
                self._frame(data, base, lo, hi, f.index, first, out, cut)
        return out.to_backend(backend)

    def _window(self, f: InputFile, lo: int, hi: int, pins: list | None = None) -> tuple[bytes, int]:
        """The whole lines that start from max_bytes before the range to max_bytes after it:
        every line whose record can start in the range, and the start lines it can belong to."""
        a = max(0, lo - self.max_bytes - 1)
        b = min(f.size, hi + self.max_bytes + 1)
        for start, stop in (self.holes[f.index] if self.holes else ()):
            if stop <= lo:
                a = max(a, stop)
            elif start >= hi:
                b = min(b, start)
        try:
            start, end, _ = record_span(f.path, a, b - a)
        except OSError as err:
            raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None
        data = _pread(f, start, end - start)
        _pin(pins, f.url is None and pin_bytes(f.index, start, data))
        return data, start

    def _frame(self, data: bytes, base: int, lo: int, hi: int, file_index: int, first: int | None,
               out: Records, cut: int | None = None) -> None:
        """Records and set-aside lines of the whole lines `data` (at `base` in the file) that
        start in [lo, hi). `first`: the file's first start line, None: data is the file from its
        start."""
        buf = np.frombuffer(data, dtype=np.uint8)
        line_at = line_starts(buf)
        line_end = record_ends(np, buf, line_at)                  # each line's bytes, less its line ending
        lines = cut_units(data, line_at, line_end)
        starts = lines.starts + base                              # in the file
        n = len(starts)
        ends = np.append(starts[1:], base + len(data))            # each line's end, its newline included
        blank = np.asarray(pc.equal(pc.binary_length(lines.text), 0).to_numpy(zero_copy_only=False), dtype=bool)
        is_start = np.asarray(pc.fill_null(pc.match_substring_regex(lines.text, self.start), False)
                              .to_numpy(zero_copy_only=False), dtype=bool) & ~blank
        idx = np.arange(n)
        head = np.maximum.accumulate(np.where(is_start, idx, -1))     # each line's start line, -1: none here
        has_head = head >= 0
        head_at = np.where(has_head, starts[np.maximum(head, 0)], -1)
        inside = has_head & (idx - head + 1 <= self.max_lines) & (ends - head_at <= self.max_bytes)
        inside |= is_start
        if first is None:
            first = int(starts[is_start][0]) if is_start.any() else base + len(data)
        # a unit is a record (from its start line) or a line set aside; it starts where it is owned
        unit = is_start | ~inside
        owned = unit & (starts >= lo) & (starts < hi)
        unit_rows = np.flatnonzero(unit)
        if not len(unit_rows):
            return
        # a record ends where its last line that is not blank does: inner line endings stay as
        # in the file, the trailing ones (and the blank lines at its end) are left out
        last_line = np.append(unit_rows[1:], n) - 1
        not_blank = np.maximum.accumulate(np.where(blank, -1, idx))
        records = cut_units(data, lines.starts[unit_rows], line_end[np.maximum(not_blank[last_line], unit_rows)])
        records_owned = owned[unit_rows]
        aside = records_owned & ~is_start[unit_rows] & ~blank[unit_rows]
        keep = records_owned & is_start[unit_rows]
        out.add(records, keep, file_index, base)
        which = np.flatnonzero(aside)
        if len(which):
            rows = unit_rows[which]
            reasons = [self._why(int(starts[r]), first, bool(has_head[r]), int(head_at[r]), int(idx[r] - head[r] + 1),
                                 cut) for r in rows]
            out.set_aside_units(records, which, file_index, base, reasons)
        # blank units that are not inside a record are not records: dropped like blank lines

    def _why(self, at: int, first: int, has_head: bool, head_at: int, nth: int, cut: int | None = None) -> str:
        if not has_head and cut is not None and at >= cut:
            return (f"{OVERFLOW}: a continuation line after a line over source.max_record_bytes (quarantined "
                    "by itself), which cuts it off from its record's start line")
        if at < first:
            return f"{NO_START}: a continuation line before the file's first line matching multiline.start"
        if has_head:
            bound = "max_lines" if nth > self.max_lines else "max_bytes"
            return (f"{OVERFLOW}: a line past multiline.{bound} of the record that starts at byte {head_at} "
                    f"(max_lines {self.max_lines}, max_bytes {self.max_bytes})")
        return (f"{OVERFLOW}: a line more than multiline.max_bytes ({self.max_bytes}) after its record's "
                "start line")


def first_start_lines(files: list[InputFile], start: str) -> tuple[int, ...]:
    """Per file, the offset of its first line that matches `start` (its size if none): read from
    the head, a megabyte at a time, until found (a file with no start line is read whole)."""
    out = []
    for f in files:
        if f.compression:            # read whole from its start: the framing sees its first lines
            out.append(0)
            continue
        out.append(_first_start(f, start))
    return tuple(out)


def _first_start(f: InputFile, start: str, chunk: int = 1 << 20) -> int:
    pos = 0
    while pos < f.size:
        data = _pread(f, pos, min(chunk, f.size - pos))
        if pos + len(data) < f.size:
            cut = data.rfind(b"\n") + 1
            data = data[:cut] if cut else data        # a line longer than the chunk: taken as it is
        buf = np.frombuffer(data, dtype=np.uint8)
        lines = cut_units(data, line_starts(buf))
        hit = pc.fill_null(pc.match_substring_regex(lines.text, start), False)
        hits = np.flatnonzero(np.asarray(hit.to_numpy(zero_copy_only=False), dtype=bool)
                              & np.asarray(pc.greater(pc.binary_length(lines.text), 0).to_numpy(zero_copy_only=False)))
        if len(hits):
            return pos + int(lines.starts[hits[0]])
        pos += len(data)
    return f.size
