"""Byte-range partitions: every record read exactly once, in order, at its byte offset.

The property tests drive the low-level pieces the source stage uses (resolve_inputs,
plan_partitions, read_range, CpuBackend.split_lines); a few pipeline runs check the same through
Pipeline.from_dict with provenance columns."""

from __future__ import annotations

import bz2
import gzip
import math
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuetl
from gpuetl.backends.cpu import CpuBackend
from gpuetl.sources.files import resolve_inputs
from gpuetl.sources import ranges as ranges_module
from gpuetl.sources.pins import pin_bytes
from gpuetl.sources.ranges import TAPER, ByteRange, CompressedRange, decode_range, plan_partitions, read_range

COMPRESS = {"": lambda b: b, ".gz": gzip.compress, ".bz2": bz2.compress,
            ".zst": lambda b: zstandard.ZstdCompressor().compress(b)}
DECOMPRESS = {"gzip": gzip.decompress, "bz2": bz2.decompress,
              "zstd": lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b)}

BACKEND = CpuBackend()


def expected_records(data: bytes) -> list[tuple[int, str]]:
    """The reference model: lines split at '\\n', one '\\r' before a '\\n' trimmed (a last
    line without '\\n' keeps all its bytes), empty lines skipped; invalid UTF-8 replaced like
    Python's errors='replace'; offset = the line's first byte."""
    out, pos = [], 0
    pieces = data.split(b"\n")
    for k, piece in enumerate(pieces):
        ended = k < len(pieces) - 1
        text = (piece[:-1] if ended and piece.endswith(b"\r") else piece).decode("utf-8", "replace")
        if text:
            out.append((pos, text))
        pos += len(piece) + 1
    return out


def read_all(files, blocksize: int, chained: bool = True) -> list[tuple[int, int, str]]:
    """What the source stage sees: (file index, offset, text) for every partition's ranges.
    chained: a compressed file's pieces are decoded by one stream handed from piece to piece, as
    the graph does (else each piece decodes from the file's start, as a task in another process)."""
    got, streams = [], {}
    for part in plan_partitions(files, blocksize):
        for rng in part.ranges:
            if chained and isinstance(rng, CompressedRange):
                data, streams[rng.file_index] = decode_range(streams.get(rng.file_index), files[rng.file_index], rng)
            else:
                data = read_range(files[rng.file_index], rng)
            assert data.truncated is None
            lines = BACKEND.split_lines(data.data, data.start)
            texts = lines.text.tolist()
            got.extend((rng.file_index, int(o), t) for o, t in zip(lines.offsets, texts))
    return got


def piece_starts(data: bytes, blocksize: int) -> list[int]:
    """The reference model of a compressed file's pieces: piece k starts at the first record
    that starts at or after k * blocksize (after the first newline from k * blocksize - 1)."""
    starts = {data.find(b"\n", k * blocksize - 1) + 1 for k in range(1, len(data) // blocksize + 1)}
    return [0] + sorted(s for s in starts if 0 < s < len(data))


def check_cover(files, partitions, blocksize):
    """Ranges tile each uncompressed file: contiguous, no overlap, none longer than blocksize
    (a compressed file's pieces: no longer than blocksize plus the one record that crosses it)."""
    ranges = [r for p in partitions for r in p.ranges]
    assert [p.index for p in partitions] == list(range(len(partitions)))
    for f in files:
        mine = [r for r in ranges if r.file_index == f.index]
        if f.compression:
            data = DECOMPRESS[f.compression](Path(f.path).read_bytes())
            assert all(isinstance(r, CompressedRange) and r.refused is None for r in mine)
            assert [r.offset for r in mine] == piece_starts(data, blocksize)
            assert [r.stop for r in mine] == [r.offset for r in mine[1:]] + [len(data)]
            assert [r.final for r in mine] == [False] * (len(mine) - 1) + [True]
            continue
        if f.size == 0:
            assert mine == [ByteRange(f.index, 0, -1)]
            continue
        assert mine[0].offset == 0
        for a, b in zip(mine, mine[1:]):
            assert a.offset + a.length == b.offset
        assert mine[-1].offset + mine[-1].length == f.size
        assert all(0 < r.length <= blocksize for r in mine)
        blocks = math.ceil(f.size / blocksize)           # the last TAPER blocks may be halved
        assert blocks <= len(mine) <= blocks + TAPER
    # ranges stay in file order, files in sorted order
    assert [(r.file_index, r.offset) for r in ranges] == sorted((r.file_index, r.offset) for r in ranges)


# -- strategies ------------------------------------------------------------------------------------

_line_text = st.text(
    alphabet=st.one_of(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
        st.sampled_from(["a", "b", " ", "\t", "é", "中", "😀", "\r"]),
    ),
    max_size=12,
)


@st.composite
def log_files(draw) -> bytes:
    lines = draw(st.lists(_line_text, max_size=15))
    endings = draw(st.lists(st.sampled_from(["\n", "\r\n", "\n\n", "\r\r\n"]), min_size=len(lines),
                            max_size=len(lines)))
    text = "".join(line + end for line, end in zip(lines, endings))
    if text and draw(st.booleans()):
        text = text.rstrip("\r\n")          # no final newline
    return text.encode("utf-8")


_raw_bytes = st.binary(max_size=60).map(lambda b: b.replace(b"\x00", b"\n"))


# -- property tests --------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(contents=st.lists(st.one_of(log_files(), _raw_bytes), min_size=1, max_size=4), data=st.data())
def test_every_record_once_in_order_at_its_offset(contents, data):
    """Plain and compressed files alike (a compressed file's pieces lie in its uncompressed
    stream): each record once, in order, at its offset, whether a compressed file's stream is
    handed from piece to piece or each piece decodes on its own."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for i, body in enumerate(contents):
            suffix = data.draw(st.sampled_from(sorted(COMPRESS)), label="compression")
            (base / f"f{i:02d}.log{suffix}").write_bytes(COMPRESS[suffix](body))
        files = resolve_inputs(["*.log*"], base, "infer")
        assert [f.size for f in files if not f.compression] == [len(b) for b, f in zip(contents, files)
                                                                  if not f.compression]
        total = max(len(b) for b in contents)
        blocksize = data.draw(st.integers(1, total + 10), label="blocksize")
        partitions = plan_partitions(files, blocksize)
        check_cover(files, partitions, blocksize)
        expected = [(i, off, text) for i, body in enumerate(contents) for off, text in expected_records(body)]
        assert read_all(files, blocksize) == expected
        if any(f.compression for f in files):
            assert read_all(files, blocksize, chained=False) == expected


@settings(max_examples=40, deadline=None)
@given(body=log_files(), blocksize=st.integers(1, 8))
def test_tiny_blocksizes(body, blocksize):
    """Blocksizes smaller than most lines: many ranges hold no record start and must read nothing."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "x.log").write_bytes(body)
        files = resolve_inputs(["x.log"], Path(tmp), "infer")
        assert read_all(files, blocksize) == [(0, o, t) for o, t in expected_records(body)]


@settings(max_examples=40, deadline=None)
@given(contents=st.lists(log_files(), min_size=1, max_size=3), data=st.data())
def test_mapped_ranges_give_the_same_records(contents, data):
    """Large ranges are memory-mapped instead of read: force that for every range."""
    saved = ranges_module.MAP_MIN_BYTES
    ranges_module.MAP_MIN_BYTES = 1
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i, body in enumerate(contents):
                (Path(tmp) / f"f{i:02d}.log").write_bytes(body)
            files = resolve_inputs(["*.log"], Path(tmp), "infer")
            blocksize = data.draw(st.integers(1, max(len(b) for b in contents) + 10), label="blocksize")
            expected = [(i, off, text) for i, body in enumerate(contents) for off, text in expected_records(body)]
            assert read_all(files, blocksize) == expected
    finally:
        ranges_module.MAP_MIN_BYTES = saved


def test_mapped_range_of_a_file_that_shrank_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(ranges_module, "MAP_MIN_BYTES", 1)
    path = tmp_path / "a.log"
    path.write_bytes(b"line one\n" * 1000)
    f = resolve_inputs(["a.log"], tmp_path, "infer")[0]
    got = read_range(f, ByteRange(0, 0, 9000))
    assert isinstance(got.data, memoryview) and bytes(got.data) == b"line one\n" * 1000
    monkeypatch.setattr(ranges_module, "record_span", lambda *a: (0, 20_000, 0))   # planned when longer
    with pytest.raises(gpuetl.errors.SourceError, match="a.log: cannot read: the file changed while read"):
        read_range(f, ByteRange(0, 0, 9000))


# -- concrete cases --------------------------------------------------------------------------------

def test_split_lines_offsets_and_crlf():
    lines = BACKEND.split_lines(b"ab\r\n\n\r\ncd\nef", 100)
    assert lines.text.tolist() == ["ab", "cd", "ef"]
    assert list(lines.offsets) == [100, 107, 110]
    assert not lines.bad_utf8.any()


def test_split_lines_empty_buffer():
    lines = BACKEND.split_lines(b"", 5)
    assert len(lines.text) == 0 and len(lines.offsets) == 0


def test_split_lines_flags_invalid_utf8_per_line():
    lines = BACKEND.split_lines(b"ok\nbad \xff\xfe here\n\xc3\xa9t\xc3\xa9\n", 0)
    assert lines.text.tolist() == ["ok", "bad \ufffd\ufffd here", "été"]
    assert list(lines.bad_utf8) == [False, True, False]
    assert list(lines.offsets) == [0, 3, 15]


def test_range_that_starts_mid_line_reads_from_next_line(tmp_path):
    (tmp_path / "a.log").write_bytes(b"0123456789\nabc\nxyz")
    f = resolve_inputs(["a.log"], tmp_path, "infer")[0]
    got = read_range(f, ByteRange(0, 3, 4))           # inside the first line: no record starts here
    assert (got.data, got.start) == (b"", 3)
    got = read_range(f, ByteRange(0, 5, 7))           # covers '\n' at 10 and 'a' at 11
    assert (got.data, got.start) == (b"abc\n", 11)
    got = read_range(f, ByteRange(0, 11, 1))          # starts exactly at a record
    assert (got.data, got.start) == (b"abc\n", 11)
    got = read_range(f, ByteRange(0, 15, 3))          # last record, no final newline
    assert (got.data, got.start) == (b"xyz", 15)
    got = read_range(f, ByteRange(0, 0, 1))           # a long first line is read past the range
    assert (got.data, got.start) == (b"0123456789\n", 0)


def test_line_longer_than_read_ahead(tmp_path):
    long = b"x" * 200_000
    (tmp_path / "a.log").write_bytes(b"s\n" + long + b"\nend\n")
    files = resolve_inputs(["a.log"], tmp_path, "infer")
    got = read_all(files, 1000)
    assert [(o, len(t)) for _, o, t in got] == [(0, 1), (2, 200_000), (200_003, 3)]


def test_many_small_files_are_grouped(tmp_path):
    for i in range(50):
        (tmp_path / f"s{i:03d}.log").write_bytes(f"line {i}\n".encode())   # 7-8 bytes each
    files = resolve_inputs(["*.log"], tmp_path, "infer")
    parts = plan_partitions(files, 64)
    assert len(files) == 50
    assert 1 < len(parts) < 50
    # grouped greedily up to blocksize bytes
    for p in parts:
        assert sum(r.length for r in p.ranges) <= 64
    assert [r.file_index for p in parts for r in p.ranges] == list(range(50))
    assert [t for _, _, t in read_all(files, 64)] == [f"line {i}" for i in range(50)]


def test_big_file_split_in_ceil_size_over_blocksize(tmp_path):
    """ceil(size / blocksize) blocks; from four blocks on, the last two, when more than half a
    block each, are halved (taper)."""
    body = b"".join(b"record %05d\n" % i for i in range(1000))     # 13 000 bytes
    (tmp_path / "big.log").write_bytes(body)
    files = resolve_inputs(["big.log"], tmp_path, "infer")
    # 1000: 13 blocks, the last two (1000 each) halved; 4096: 4 blocks, the last (712) is not
    # more than half a block; 12_999: 2 blocks, too few to taper
    for blocksize, count in ((1000, 15), (4096, 5), (12_999, 2), (13_000, 1), (50_000, 1)):
        parts = plan_partitions(files, blocksize)
        assert len(parts) == count
        got = read_all(files, blocksize)
        assert len(got) == 1000
        assert got[0] == (0, 0, "record 00000") and got[-1] == (0, 12_987, "record 00999")
    halves = [p.ranges[0] for p in plan_partitions(files, 1000)[-4:]]
    assert [(r.offset, r.length) for r in halves] == [(11_000, 500), (11_500, 500), (12_000, 500), (12_500, 500)]


def test_empty_file_is_one_range_with_no_records(tmp_path):
    (tmp_path / "e.log").write_bytes(b"")
    files = resolve_inputs(["e.log"], tmp_path, "infer")
    parts = plan_partitions(files, 10)
    assert [p.ranges for p in parts] == [(ByteRange(0, 0, -1),)]
    assert read_all(files, 10) == []


def test_overlapping_globs_read_each_file_once(tmp_path):
    (tmp_path / "a.log").write_text("a\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.log").write_text("b\n")
    files = resolve_inputs(["*.log", "a.log", "**/*.log"], tmp_path, "infer")
    assert [f.display for f in files] == ["a.log", "sub/b.log"]
    assert [f.index for f in files] == [0, 1]


def test_literal_path_with_glob_characters(tmp_path):
    """A file whose name holds '[...]' is still found when named exactly."""
    (tmp_path / "logs[1].log").write_text("x\n")
    files = resolve_inputs(["logs[1].log"], tmp_path, "infer")
    assert [f.display for f in files] == ["logs[1].log"]


# -- through the pipeline --------------------------------------------------------------------------

def _run_lines(tmp_path, blocksize, pattern="in/*"):
    spec = {"version": 1, "name": "t",
            "source": {"type": "text", "path": pattern, "blocksize": blocksize, "provenance": True},
            "sink": {"path": "out", "mode": "overwrite"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    table = pq.read_table(result.out_dir / "part-00000.parquet")
    return result, table.to_pylist()


@pytest.mark.parametrize("blocksize", [1, 7, 64, 10_000])
def test_pipeline_rows_match_reference(tmp_path, blocksize):
    bodies = {
        "a.log": "first\r\nsecond\n\n  \n中文 ok\r\n",
        "b.log": "no final newline\nlast",
        "c.log": "",
        "d.log": "\n\n\r\n",
        "e.log": "😀\n" * 5,
    }
    (tmp_path / "in").mkdir()
    for name, body in bodies.items():
        (tmp_path / "in" / name).write_bytes(body.encode())
    result, rows = _run_lines(tmp_path, blocksize)
    expected = [{"line": t, "_file": f"in/{name}", "_offset": o}
                for name in sorted(bodies) for o, t in expected_records(bodies[name].encode())]
    assert rows == expected
    assert result.counts == {"rows_in": len(expected), "rows_out": len(expected), "filtered": 0,
                             "deduplicated": 0, "quarantined": 0}
    assert result.shards[0]["rows"] == len(expected)


def _mapped_file_rss() -> int:
    """This process's resident pages of mapped files (bytes)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssFile:")) * 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/self/status (Linux)")
def test_a_mapped_block_is_hashed_piece_by_piece_and_lets_go_of_each_piece_read(tmp_path):
    """A mapped partition holds only the pages of the pieces not yet read: each piece is taken
    into the range's pin before it is read, and its pages are let go after (they stay in the
    page cache). The pin is the whole range's hash; the bytes are still there, mapped again."""
    body = b"".join(b"%08d some record text that fills a line\n" % i for i in range(300_000))   # ~14 MiB
    (tmp_path / "a.log").write_bytes(body)
    f = resolve_inputs(["a.log"], tmp_path, "infer")[0]
    before = _mapped_file_rss()
    block = ranges_module.read_block([f], [ByteRange(0, 0, len(body))])
    assert isinstance(block.data, memoryview) and not block.pins
    assert _mapped_file_rss() - before < 2 << 20                         # nothing read yet
    with pytest.raises(RuntimeError, match="pin taken over 0 of"):
        block.read_pins()                                                 # not before every piece is read
    block.pin_piece(0, 8 << 20)                                           # hashed, then its records
    assert bytes(block.data[: 8 << 20]) == body[: 8 << 20]                # copied out
    assert _mapped_file_rss() - before > 6 << 20
    block.release(0, 8 << 20)
    assert _mapped_file_rss() - before < 2 << 20
    with pytest.raises(RuntimeError, match="out of order"):
        block.pin_piece((8 << 20) + 1, 10)
    block.pin_piece(8 << 20, len(body) - (8 << 20))
    assert bytes(block.data[8 << 20:]) == body[8 << 20:]
    block.release(8 << 20, len(body) - (8 << 20))
    assert _mapped_file_rss() - before < 2 << 20
    assert block.read_pins() == [pin_bytes(f.index, 0, body)]
    assert bytes(block.data) == body


def test_a_block_in_memory_is_hashed_as_read_and_left_alone(tmp_path):
    (tmp_path / "a.log").write_bytes(b"one\ntwo\n")
    f = resolve_inputs(["a.log"], tmp_path, "infer")[0]
    block = ranges_module.read_block([f], [ByteRange(0, 0, 8)])
    assert block.read_pins() == [pin_bytes(f.index, 0, b"one\ntwo\n")]
    block.pin_piece(0, 4)
    block.release(0, 4)
    assert bytes(block.data) == b"one\ntwo\n" and block.read_pins() == [pin_bytes(f.index, 0, b"one\ntwo\n")]
