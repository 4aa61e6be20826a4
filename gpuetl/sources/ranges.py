"""Byte-range partitions. A record belongs to the range in which its first byte lies, so no line
is split or read twice (what cudf.read_text(byte_range=...) does). Compressed files are one
range each. Small files are packed together so a million files do not make a million tasks."""

from __future__ import annotations

import bz2
import mmap
import os
import zlib
from dataclasses import dataclass

from ..errors import SourceError
from .files import InputFile


@dataclass(frozen=True)
class ByteRange:
    file_index: int
    offset: int
    length: int        # -1: the whole (compressed) file


@dataclass(frozen=True)
class Partition:
    index: int
    ranges: tuple[ByteRange, ...]


def plan_partitions(files: list[InputFile], blocksize: int) -> list[Partition]:
    ranges: list[tuple[ByteRange, int]] = []
    for f in files:
        if f.compression or f.size == 0:
            ranges.append((ByteRange(f.index, 0, -1), max(f.size, 1)))
            continue
        for offset in range(0, f.size, blocksize):
            length = min(blocksize, f.size - offset)
            ranges.append((ByteRange(f.index, offset, length), length))
    return taper(pack(ranges, blocksize), blocksize)


TAPER = 2


def taper(partitions: list[Partition], blocksize: int) -> list[Partition]:
    """The last TAPER partitions, each one plain range of more than half a block, split in two.
    The streaming writer takes partitions in order, and the last ones finish together: it was
    left with two or three whole partitions to encode on one core while the other idled (0.6-0.8 s
    on 1 GB). Halves drain faster (tail ~0.3 s; 1 GB filter + dedupe ~3 % faster over four
    pairs). The rows, and the bytes written, do not depend on partitioning."""
    if len(partitions) < 2 * TAPER:
        return partitions
    out = list(partitions[:-TAPER])
    for part in partitions[-TAPER:]:
        rng = part.ranges[0]
        if len(part.ranges) == 1 and rng.length > max(blocksize // 2, 1):
            half = rng.length // 2
            out += [Partition(0, (ByteRange(rng.file_index, rng.offset, half),)),
                    Partition(0, (ByteRange(rng.file_index, rng.offset + half, rng.length - half),))]
        else:
            out.append(part)
    return [Partition(i, p.ranges) for i, p in enumerate(out)]


def pack(ranges: list[tuple[object, int]], blocksize: int) -> list[Partition]:
    """Consecutive ranges, packed into partitions of up to `blocksize` bytes (a range bigger
    than that is a partition of its own): a million small files do not make a million tasks."""
    partitions: list[Partition] = []
    group: list = []
    group_bytes = 0
    for rng, size in ranges:
        if group and group_bytes + size > blocksize:
            partitions.append(Partition(len(partitions), tuple(group)))
            group, group_bytes = [], 0
        group.append(rng)
        group_bytes += size
    if group:
        partitions.append(Partition(len(partitions), tuple(group)))
    return partitions


@dataclass
class RangeData:
    """The whole records of one range: bytes starting at a record's first byte."""

    data: bytes | memoryview   # a memoryview of a mapped file for large plain ranges
    start: int                 # offset in the (uncompressed) file of data[0]
    truncated: str | None = None   # set when a compressed stream ended early


@dataclass
class Block:
    """A partition's records in one buffer (host bytes, or a device array on the GPU), with where
    each range's piece starts in it, its first byte's offset in its file, and its file."""

    data: object
    seg_pos: list[int]
    seg_start: list[int]
    seg_file: list[int]
    extra_bad: list[tuple[int, int, bytes, str]]   # (file index, offset, raw bytes, reason) of cut-off records


def truncated_piece(f: InputFile, got: "RangeData", extra_bad: list) -> bytes:
    """A range's bytes, less an incomplete last record of a cut-off stream (which is reported)."""
    data = got.data
    if got.truncated:          # only decompressed (bytes) data is ever cut off
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            extra_bad.append((f.index, got.start + cut, bytes(data[cut:]),
                              f"{f.display}: {got.truncated}; the last record is incomplete"))
            data = data[:cut]
        else:
            extra_bad.append((f.index, got.start + len(data), b"",
                              f"{f.display}: {got.truncated}; records after this point are lost"))
    if len(data) and data[-1] != 10:
        data = bytes(data) + b"\n"
    return data


def read_block(files: list[InputFile], ranges) -> Block:
    """The host reader: every range's whole records, each piece ending with a newline."""
    buffers, seg_pos, seg_start, seg_file, extra_bad = [], [], [], [], []
    position = 0
    for rng in ranges:
        f = files[rng.file_index]
        got = read_range(f, rng)
        data = truncated_piece(f, got, extra_bad)
        buffers.append(data)
        seg_pos.append(position)
        seg_start.append(got.start)
        seg_file.append(f.index)
        position += len(data)
    data = buffers[0] if len(buffers) == 1 else b"".join(buffers)
    return Block(data, seg_pos, seg_start, seg_file, extra_bad)


def read_range(f: InputFile, rng: ByteRange) -> RangeData:
    try:
        if rng.length < 0:
            return _read_whole(f)
        return _read_plain(f.path, rng.offset, rng.length)
    except OSError as err:
        raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None


MAP_MIN_BYTES = 4 << 20


def _read_plain(path: str, offset: int, length: int) -> RangeData:
    """The records that start in the range, exactly their bytes (the boundaries come from small
    peeks). A large range is memory-mapped, not read: reading 64 MiB into a fresh buffer costs a
    copy and a page fault per page, ~3x what mapping the page cache costs (docs/design.md)."""
    start, end, needs_newline = record_span(path, offset, length)
    if end - start >= MAP_MIN_BYTES and not needs_newline:
        return RangeData(_mapped(path, start, end), start)
    with open(path, "rb") as fh:
        fh.seek(start)
        buf = fh.read(end - start)
    if len(buf) != end - start:
        raise OSError(f"short read ({len(buf)} of {end - start} bytes at {start}): the file changed while read")
    return RangeData(buf, start)


def _mapped(path: str, start: int, end: int) -> memoryview:
    """A read-only view of bytes [start, end) of the file, mapped from the page cache. The map
    is released when the last array that uses it is."""
    base = start - start % mmap.ALLOCATIONGRANULARITY
    with open(path, "rb") as fh:
        try:
            mapped = mmap.mmap(fh.fileno(), end - base, offset=base, access=mmap.ACCESS_READ)
        except ValueError:       # shorter than when the range was planned
            raise OSError(f"the file changed while read (it no longer holds bytes {start}-{end})") from None
    return memoryview(mapped)[start - base:]


_PEEK = 1 << 16


def record_span(path: str, offset: int, length: int) -> tuple[int, int, int]:
    """(start, end, needs newline) of the records that start in [offset, offset+length): a record
    belongs to the range its first byte is in. Found with small peeks around the range's ends."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if offset > 0:
            p = _find_newline(fd, offset - 1, size)
            if p is None or p + 1 >= offset + length:
                return offset, offset, 0
            start = p + 1
        else:
            start = 0
        if start >= size:
            return start, start, 0
        q = _find_newline(fd, max(start, offset + length - 1), size)
        end = size if q is None else q + 1
        return start, end, int(q is None and end > start)
    finally:
        os.close(fd)


def _find_newline(fd, pos: int, size: int):
    while pos < size:
        chunk = os.pread(fd, min(_PEEK, size - pos), pos)
        if not chunk:
            return None
        k = chunk.find(b"\n")
        if k >= 0:
            return pos + k
        pos += len(chunk)
    return None


_COMPRESSED_CHUNK = 1 << 20


def _decompressor(compression: str):
    """A fresh one-stream decompressor (eof, unused_data, decompress) and the errors it raises."""
    if compression == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS), (zlib.error,)
    if compression == "bz2":
        return bz2.BZ2Decompressor(), (OSError, ValueError, EOFError)
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj(), (zstandard.ZstdError,)
    raise SourceError(f"unknown compression {compression!r}")


def _read_whole(f: InputFile) -> RangeData:
    """The whole file, decompressed. Streams are decoded incrementally (gzip members, bz2 streams
    and zstd frames one after another), so a cut-off or corrupt file keeps every byte before the
    damage and says what happened, instead of losing the last block or ending silently."""
    if not f.compression:
        with open(f.path, "rb") as fh:
            return RangeData(fh.read(), 0)
    chunks: list[bytes] = []
    truncated = None
    obj, errors = None, ()
    members = 0
    with open(f.path, "rb") as fh:
        pending = b""
        try:
            while True:
                comp = pending or fh.read(_COMPRESSED_CHUNK)
                pending = b""
                if not comp:
                    break
                if obj is None:
                    if members and f.compression == "gzip":
                        comp = comp.lstrip(b"\x00")     # zero padding after a member, as gzip allows
                        if not comp:
                            continue
                    obj, errors = _decompressor(f.compression)
                chunks.append(obj.decompress(comp))
                if obj.eof:                           # one stream ended; what follows is the next
                    pending, obj = obj.unused_data, None
                    members += 1
            if obj is not None:
                if f.compression == "gzip":
                    chunks.append(obj.flush())
                truncated = f"{f.compression} stream is truncated (the file ends inside a compressed block)"
        except errors as err:
            truncated = f"{f.compression} stream is truncated or corrupt ({err or type(err).__name__})"
    return RangeData(b"".join(chunks), 0, truncated)
