"""Where a record's bytes end: the one line-ending rule, for both backends and the framings.

A record ends at a newline (`\\n`), and ONE carriage return (`\\r`) right before that newline
belongs to the line ending (CRLF files). Every other byte belongs to the record: a lone `\\r`
anywhere, a second `\\r` (`a\\r\\r\\n` is the record `a\\r`), and all of a file's last line that
has no newline, which ends at the end of the file with nothing removed. A record's text is
therefore its input bytes less the line ending, exactly what the quarantine's `_raw` keeps.

`record_ends` is written against `xp` (numpy or CuPy), so the CPU backend, the GPU backend (on
device arrays) and the host framings (sources/framing.py) compute the same ends."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NEWLINE, CARRIAGE_RETURN = 10, 13


def record_ends(xp, buf, starts, added=None):
    """For records that begin at `starts` in the uint8 array `buf`, each running to the next
    start and the last to the end of `buf`: where each one's bytes end (exclusive), its line
    ending left out. `starts` ascend from 0, each after the first right after a `\\n` (as line
    and CSV record starts are), so every record but the last ends with one and only the last is
    looked at. `added`: positions in `buf` of newlines that are not in the input (a reader adds
    one after a file's last line that lacks it, to keep the files of one buffer apart): such a
    newline is left out, and a `\\r` before it is the record's."""
    n = len(buf)
    if not len(starts) or not n:
        return starts.copy()
    nxt = xp.concatenate([starts[1:], xp.full(1, n, dtype=xp.int64)])
    ended = xp.ones(len(starts), dtype=bool)                # by a newline
    ended[-1:] = (buf[n - 1:] == NEWLINE) & (nxt[-1:] > starts[-1:])
    ends = nxt - ended.astype(xp.int64)
    carriage = ended & (ends > starts) & (buf[xp.maximum(ends - 1, 0)] == CARRIAGE_RETURN)
    if added is not None and len(added):
        carriage &= ~xp.isin(ends, added)                  # ends: where the newline is
    return ends - carriage.astype(xp.int64)


def records_array(data, starts: np.ndarray, ends: np.ndarray, memory_pool=None) -> pa.Array:
    """The records data[starts[i]:ends[i]] as one binary array (large_binary for a buffer of
    2 GiB or more), their bytes side by side in a new buffer: one copy, what trimming the line
    endings off a column of whole lines also costs. Built as a column of 2n pieces over `data`
    (record, line ending, record, ...) of which the records are taken."""
    n = len(starts)
    large = len(data) >= 2**31 - 1
    binary = pa.large_binary() if large else pa.binary()
    if not n:
        return pa.array([], binary)
    bounds = np.empty(2 * n + 1, dtype=np.int64 if large else np.int32)
    bounds[0:2 * n:2] = starts
    bounds[1:2 * n:2] = ends
    bounds[2 * n] = len(data)
    pieces = pa.Array.from_buffers(binary, 2 * n, [None, pa.py_buffer(bounds), pa.py_buffer(data)])
    every_other = np.arange(0, 2 * n, 2, dtype=np.int32 if 2 * n < 2**31 else np.int64)
    return pc.take(pieces, pa.array(every_other), memory_pool=memory_pool)
