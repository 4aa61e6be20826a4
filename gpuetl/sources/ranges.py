"""Byte-range partitions. A record belongs to the range in which its first byte lies, so no line
is split or read twice (what cudf.read_text(byte_range=...) does). Compressed files are one
range each. Small files are packed together so a million files do not make a million tasks."""

from __future__ import annotations

import bz2
import zlib
from dataclasses import dataclass

from ..errors import SourceError
from .files import InputFile

_READ_AHEAD = 1 << 16


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
    return pack(ranges, blocksize)


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

    data: bytes
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
    extra_bad: list[tuple[int, int, str, str]]   # (file index, offset, raw, reason) of cut-off records


def truncated_piece(f: InputFile, got: "RangeData", extra_bad: list) -> bytes:
    """A range's bytes, less an incomplete last record of a cut-off stream (which is reported)."""
    data = got.data
    if got.truncated:
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            extra_bad.append((f.index, got.start + cut, data[cut:].decode("utf-8", "replace"),
                              f"{f.display}: {got.truncated}; the last record is incomplete"))
            data = data[:cut]
        else:
            extra_bad.append((f.index, got.start + len(data), "",
                              f"{f.display}: {got.truncated}; records after this point are lost"))
    if data and not data.endswith(b"\n"):
        data += b"\n"
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
    return Block(b"".join(buffers), seg_pos, seg_start, seg_file, extra_bad)


def read_range(f: InputFile, rng: ByteRange) -> RangeData:
    try:
        if rng.length < 0:
            return _read_whole(f)
        return _read_plain(f.path, rng.offset, rng.length)
    except OSError as err:
        raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None


def _read_plain(path: str, offset: int, length: int) -> RangeData:
    with open(path, "rb") as fh:
        head = 1 if offset > 0 else 0
        fh.seek(offset - head)
        buf = fh.read(length + head)
        if head:
            first = buf.find(b"\n")
            if first < 0:                       # no record starts in this range
                return RangeData(b"", offset)
            start = offset - 1 + first + 1
            buf = buf[first + 1:]
        else:
            start = 0
        if buf and not buf.endswith(b"\n"):
            tail = [buf]
            while True:                         # finish the last record, which starts in range
                more = fh.read(_READ_AHEAD)
                if not more:
                    break
                cut = more.find(b"\n")
                if cut >= 0:
                    tail.append(more[:cut + 1])
                    break
                tail.append(more)
            buf = b"".join(tail)
        return RangeData(buf, start)


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
