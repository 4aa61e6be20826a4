"""sources/line_ends.py, the one line-ending rule: a record is its bytes up to the `\\n` that ends
it, less one `\\r` right before that `\\n`; every other byte is the record's, and a last line
without `\\n` keeps all of its bytes. A newline a reader added between files is no input byte."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuetl.sources.framing import line_starts
from gpuetl.sources.line_ends import record_ends, records_array

BYTES = st.lists(st.sampled_from([b"\r", b"\n", b"a", b" ", b"\xff", b"\xc3\xa9"]), max_size=30).map(b"".join)


def by_the_rule(data: bytes, base: int = 0) -> list[tuple[int, bytes]]:
    out, pos = [], base
    parts = data.split(b"\n")
    for k, part in enumerate(parts):
        record = part[:-1] if k < len(parts) - 1 and part.endswith(b"\r") else part
        if record:
            out.append((pos, record))
        pos += len(part) + 1
    return out


def records(data: bytes, added=None) -> list[tuple[int, bytes]]:
    buf = np.frombuffer(data, dtype=np.uint8)
    starts = line_starts(buf) if len(buf) else np.zeros(0, dtype=np.int64)
    ends = record_ends(np, buf, starts, added)
    arr = records_array(data, starts, ends).to_pylist()
    assert arr == [data[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
    return [(a, r) for a, r in zip(starts.tolist(), arr) if r]


def test_only_the_line_endings_are_left_out():
    assert records(b"a\r\r\n\xff\r\r\nx\ry\r\n\r\n\r\r\nend\r") == [
        (0, b"a\r"), (4, b"\xff\r"), (8, b"x\ry"), (15, b"\r"), (18, b"end\r")]
    assert records(b"\r") == [(0, b"\r")] and records(b"\r\n") == [] and records(b"") == []


@settings(max_examples=100, deadline=None)
@given(BYTES)
def test_records_are_the_bytes_less_one_line_ending(data):
    assert records(data) == by_the_rule(data)


@settings(max_examples=100, deadline=None)
@given(st.lists(BYTES, min_size=1, max_size=4))
def test_a_newline_added_between_files_leaves_each_files_records_as_they_are(files):
    """As read_block joins files: a '\\n' added after a file whose last line lacks one."""
    joined, added, want = b"", [], []
    for data in files:
        want += by_the_rule(data, len(joined))
        joined += data
        if data and not data.endswith(b"\n"):
            added.append(len(joined))
            joined += b"\n"
    assert records(joined, np.asarray(added, dtype=np.int64)) == want
