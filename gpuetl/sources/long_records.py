"""Records longer than `source.max_record_bytes`, found without ever holding one.

A record over the bound is quarantined as one record (its offset, its length in the reason, its
first HEAD_BYTES in `_raw`) and never read whole: the plan finds where each one starts and ends,
and cuts the file's ranges (or a compressed file's pieces) around it, so no read of records
reaches into it. A record is a line for text and JSON lines (before `multiline` groups lines),
and an RFC 4180 record for CSV (a newline inside quotes does not end it); its length does not
count its final newline.

Plain text files are probed, not read: a line longer than `limit` holds a whole aligned block of
`limit // 2` bytes without a newline, so the plan reads a few bytes at the start of each such
block (normally a newline is found at once) and walks, in bounded chunks, only through the
blocks that hold none. Under a bound of 128 KiB a probe a block would cost more than reading
the file once: it is scanned with `LongRecords` instead. CSV files and compressed files are read whole by the plan anyway (quote
parity, piece starts): `LongRecords` follows them chunk by chunk."""

from __future__ import annotations

import os

import numpy as np

from ..spec.sizes import format_size

HEAD_BYTES = 4096                 # what `_raw` keeps of a record over the bound
DEFAULT_MAX_RECORD = 64 << 20     # source.max_record_bytes' default
PROBE = 1 << 16                   # bytes read at a time while probing or walking through a line
SCAN_BELOW = PROBE                # a bound's half-block under this: the file is scanned, not probed
SCAN_CHUNK = 4 << 20              # bytes the scan reads at a time
QUOTE, NEWLINE = 34, 10


def too_long(display: str, length: int, limit: int) -> str:
    """The quarantine reason of a record of `length` bytes over `limit`."""
    return (f"{display}: a record of {length:,} bytes, over source.max_record_bytes ({format_size(limit)}); "
            f"not read: _raw holds its first {HEAD_BYTES:,} bytes only")


class LongRecords:
    """Fed a stream's bytes in order (`feed`, then `finish`), collects (start, stop) of each
    record whose text is longer than `limit`: `stop` is past its final newline (or the stream's
    end). `csv`: a newline ends a record only after an even number of quotes. Only the record in
    progress' start is kept, so memory does not grow with the stream."""

    def __init__(self, limit: int, csv: bool = False):
        self.limit, self.csv = limit, csv
        self.start = 0               # where the record in progress starts
        self.parity = 0              # quotes before the next chunk, mod 2 (csv)
        self.found: list[tuple[int, int]] = []

    def feed(self, chunk, base: int) -> None:
        if not len(chunk):
            return
        end = base + len(chunk)
        buf = np.frombuffer(chunk, dtype=np.uint8)
        quotes = np.flatnonzero(buf == QUOTE) if self.csv else None
        if end - self.start <= self.limit:       # no record in here can be over the bound: only
            self._last_end(chunk, base, quotes)  # where the last one ends matters
        else:
            ends = np.flatnonzero(buf == NEWLINE)
            if self.csv:
                ends = ends[((np.searchsorted(quotes, ends) + self.parity) & 1) == 0]
            if len(ends):
                ends = ends.astype(np.int64) + base
                starts = np.concatenate(([self.start], ends[:-1] + 1))
                for k in np.flatnonzero(ends - starts > self.limit).tolist():
                    self.found.append((int(starts[k]), int(ends[k]) + 1))
                self.start = int(ends[-1]) + 1
        if self.csv:
            self.parity = (self.parity + len(quotes)) & 1

    def _last_end(self, chunk, base: int, quotes) -> None:
        hi = len(chunk)
        while (k := chunk.rfind(b"\n", 0, hi)) >= 0:
            if not self.csv or ((int(np.searchsorted(quotes, k)) + self.parity) & 1) == 0:
                self.start = base + k + 1
                return
            hi = k

    def finish(self, size: int) -> list[tuple[int, int]]:
        """The records over the bound, the last one (without a final newline) included."""
        if size - self.start > self.limit:
            self.found.append((self.start, size))
            self.start = size
        return self.found


def long_lines(path: str, size: int, limit: int) -> list[tuple[int, int]]:
    """(start, stop) of each line of a plain file longer than `limit` (its newline not counted),
    found by probing: a few bytes at each aligned block of limit // 2 bytes, and a walk in
    PROBE-sized reads through the blocks that hold no newline."""
    block = max(limit // 2, 1)
    out: list[tuple[int, int]] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        if block < SCAN_BELOW:        # a probe a few KiB: reading every byte once costs less
            return _scan(fd, size, limit)
        known = -1                   # a newline at or before which every line has been judged
        k = 0
        while k + block <= size:
            p = find_newline(fd, k, k + block)
            if p is not None:
                known = p
                k = (p // block + 1) * block
                continue
            back = rfind_newline(fd, known + 1, k)
            start = (known if back is None else back) + 1
            nl = find_newline(fd, k + block, size)
            stop = size if nl is None else nl + 1
            if (size if nl is None else nl) - start > limit:
                out.append((start, stop))
            if nl is None:
                break
            known = nl
            k = (nl // block + 1) * block
    finally:
        os.close(fd)
    return out


def _scan(fd, size: int, limit: int) -> list[tuple[int, int]]:
    tracker = LongRecords(limit)
    pos = 0
    while pos < size:
        chunk = os.pread(fd, min(SCAN_CHUNK, size - pos), pos)
        if not chunk:
            break
        tracker.feed(chunk, pos)
        pos += len(chunk)
    return tracker.finish(pos)


def find_newline(fd, lo: int, hi: int) -> int | None:
    """The first newline in [lo, hi), read PROBE bytes at a time."""
    pos = lo
    while pos < hi:
        chunk = os.pread(fd, min(PROBE, hi - pos), pos)
        if not chunk:
            return None
        k = chunk.find(b"\n")
        if k >= 0:
            return pos + k
        pos += len(chunk)
    return None


def rfind_newline(fd, lo: int, hi: int) -> int | None:
    """The last newline in [lo, hi), read backwards PROBE bytes at a time."""
    pos = hi
    while pos > lo:
        a = max(lo, pos - PROBE)
        k = os.pread(fd, pos - a, a).rfind(b"\n")
        if k >= 0:
            return a + k
        pos = a
    return None


def head_of(path: str, start: int, stop: int) -> bytes:
    """The first HEAD_BYTES of a record (what its quarantine row's `_raw` holds)."""
    with open(path, "rb") as fh:
        fh.seek(start)
        return fh.read(min(HEAD_BYTES, stop - start))


def stretches(size: int, holes: list[tuple[int, int]]) -> list[tuple[int, int] | tuple[int, int, bool]]:
    """[start, stop) of a file cut around its long records: (a, b) for the stretches between them
    (empty ones left out), (a, b, True) for each long record, in order."""
    out: list = []
    at = 0
    for a, b in holes:
        if a > at:
            out.append((at, a))
        out.append((a, b, True))
        at = b
    if at < size:
        out.append((at, size))
    return out
