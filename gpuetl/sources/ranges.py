"""Byte-range partitions. A record belongs to the range in which its first byte lies, so no line
is split or read twice (what cudf.read_text(byte_range=...) does). A compressed file's ranges lie
in its uncompressed stream (sources/compressed.py). Small files are packed together so a million
files do not make a million tasks."""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field, fields

from .. import storage
from ..errors import SourceError
from . import compressed
from .compressed import Limits
from .files import InputFile
from .pins import RangePin, pin_bytes


class Whole(tuple):
    """A tuple that dask hands to a task as one value. dask.delayed walks the lists, tuples and
    dataclasses in a task's arguments element by element, making each a node of the graph: a
    list of every input file in each task's arguments costs files x tasks steps (an images
    source has a file and a record per image). Other types, this subclass of tuple among them,
    are passed whole."""

    __slots__ = ()


@dataclass(frozen=True)
class ByteRange:
    file_index: int
    offset: int
    length: int        # -1: an empty plain file at planning (read whole), or a CompressedRange


@dataclass(frozen=True)
class CompressedRange(ByteRange):
    """The records in [offset, stop) of a compressed file's uncompressed stream (offset and stop
    are record starts, found by the plan's scan). `final`: the stream ends at stop, or is cut off
    there. `refused`: the file is a decompression bomb; it is one quarantined record, at stop."""

    length: int = -1
    stop: int = 0
    final: bool = True
    refused: str | None = None


@dataclass(frozen=True, eq=False)
class DecodedRange(CompressedRange):
    """A CompressedRange with its bytes, decoded by the task before (runtime/graph.py)."""

    got: "RangeData | None" = None


@dataclass(frozen=True)
class Partition:
    index: int
    ranges: tuple[ByteRange, ...]


WHOLE_FILE = 1 << 62        # a blocksize no file reaches


def plan_partitions(files: list[InputFile], blocksize: int, limits: Limits = Limits(),
                    whole_compressed: bool = False) -> list[Partition]:
    """Ranges of about `blocksize` bytes, uncompressed: a compressed file is scanned once to
    find its pieces (and stopped there if it is a bomb). `whole_compressed`: a compressed file
    is one range (its records' starts are not line starts: multi-line records)."""
    ranges: list[tuple[ByteRange, int]] = []
    for f in files:
        if f.compression:
            ranges += compressed_ranges(f, WHOLE_FILE if whole_compressed else blocksize, limits)
            continue
        if f.size == 0:
            ranges.append((ByteRange(f.index, 0, -1), 1))
            continue
        for offset in range(0, f.size, blocksize):
            length = min(blocksize, f.size - offset)
            ranges.append((ByteRange(f.index, offset, length), length))
    return taper(pack(ranges, blocksize), blocksize)


def compressed_ranges(f: InputFile, blocksize: int, limits: Limits) -> list[tuple[CompressedRange, int]]:
    """A compressed file's pieces, each with its uncompressed size (what packing counts)."""
    try:
        found = compressed.scan(f.path, f.compression, blocksize, limits, f.size, f.display)
    except OSError as err:
        raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None
    if found.refused:
        return [(CompressedRange(f.index, 0, stop=found.size, refused=found.refused), 1)]
    ends = [*found.starts[1:], found.size]
    return [(CompressedRange(f.index, start, stop=end, final=end == found.size), max(end - start, 1))
            for start, end in zip(found.starts, ends)]


TAPER = 2


def taper(partitions: list[Partition], blocksize: int) -> list[Partition]:
    """The last TAPER partitions, each one plain range of more than half a block, split in two.
    The streaming writer takes partitions in order, and the last ones finish together: it was
    left with two or three whole partitions to encode on one core while the other idled; halves
    drain sooner (docs/design.md). The rows, and the bytes written, do not depend on
    partitioning."""
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
    refused: str | None = None     # set for a decompression bomb: its one quarantine record's reason


@dataclass
class Block:
    """A partition's records in one buffer (host bytes, or a device array on the GPU), with where
    each range's piece starts in it, its first byte's offset in its file, and its file."""

    data: object
    seg_pos: list[int]
    seg_start: list[int]
    seg_file: list[int]
    extra_bad: list[tuple[int, int, bytes, str]]   # (file index, offset, raw bytes, reason) of cut-off records
    added: list[int] = field(default_factory=list)  # positions of the newlines added after a file's last line
    pins: list[RangePin] = field(default_factory=list)   # each local range's hash as read (sources/pins.py)


def range_pin(f: InputFile, got: "RangeData") -> RangePin | None:
    """The hash of a range's bytes as read (of the decompressed stream for a compressed file),
    taken from the bytes in memory; None for an object in a store (pinned by its ETag)."""
    if f.url is not None:
        return None
    return pin_bytes(f.index, got.start, got.data)


def truncated_piece(f: InputFile, got: "RangeData", extra_bad: list) -> bytes:
    """A range's bytes, less an incomplete last record of a cut-off stream (which is reported);
    a refused file (a decompression bomb) is one reported record and no bytes. A file's last
    line keeps what it ends with (no newline is added here: read_block adds one, and says so)."""
    data = got.data
    if got.refused:
        extra_bad.append((f.index, got.start, raw_record(b""), got.refused))
        return b""
    if got.truncated:          # only decompressed (bytes) data is ever cut off
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            extra_bad.append((f.index, got.start + cut, raw_record(data[cut:]),
                              f"{f.display}: {got.truncated}; the last record is incomplete"))
            data = data[:cut]
        else:
            extra_bad.append((f.index, got.start + len(data), raw_record(b""),
                              f"{f.display}: {got.truncated}; records after this point are lost"))
    return data


def raw_record(data: bytes):
    """A reported record's raw form, as the quarantine's `_raw` column holds it: the exact bytes."""
    return bytes(data)


def read_block(files: list[InputFile], ranges) -> Block:
    """The host reader: every range's whole records, each piece ending with a newline (one added
    after a file's last line that lacks it, its position in Block.added)."""
    buffers, seg_pos, seg_start, seg_file, extra_bad, added, pins = [], [], [], [], [], [], []
    position = 0
    for rng in ranges:
        f = files[rng.file_index]
        got = read_range(f, rng)
        if (pin := range_pin(f, got)) is not None:
            pins.append(pin)
        data = truncated_piece(f, got, extra_bad)
        if len(data) and data[-1] != 10:
            data = bytes(data) + b"\n"
            added.append(position + len(data) - 1)
        buffers.append(data)
        seg_pos.append(position)
        seg_start.append(got.start)
        seg_file.append(f.index)
        position += len(data)
    data = buffers[0] if len(buffers) == 1 else b"".join(buffers)
    return Block(data, seg_pos, seg_start, seg_file, extra_bad, added, pins)


def read_range(f: InputFile, rng: ByteRange) -> RangeData:
    if isinstance(rng, DecodedRange):
        return rng.got
    try:
        if isinstance(rng, CompressedRange):
            return decode_range(None, f, rng)[0]
        if f.in_store:
            return _read_in_store(f, max(rng.offset, 0), f.size if rng.length < 0 else rng.length)
        if rng.length < 0:
            with open(f.path, "rb") as fh:
                return RangeData(fh.read(), 0)
        return _read_plain(f.path, rng.offset, rng.length)
    except OSError as err:
        raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None


def decode_range(stream, f: InputFile, rng: CompressedRange):
    """(the range's RangeData, the open stream for the file's next range): one task of the
    chain that decodes a compressed file once, front to back (runtime/graph.py)."""
    if rng.refused:
        return RangeData(b"", rng.stop, refused=rng.refused), None
    try:
        data, truncated, stream = compressed.take(stream, f.path, f.compression, rng.offset, rng.stop, rng.final)
    except OSError as err:
        raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None
    return RangeData(data, rng.offset, truncated), stream


def with_decoded(ranges, decoded) -> tuple:
    """The ranges, each CompressedRange (in order) carrying its decoded bytes."""
    got = iter(decoded)
    return tuple(DecodedRange(**{k.name: getattr(r, k.name) for k in fields(r)}, got=next(got))
                 if isinstance(r, CompressedRange) else r for r in ranges)


def read_head(f: InputFile, limit: int) -> bytes:
    """The whole records in about the first `limit` bytes of a file, decompressed: a sample of
    its first records that never decodes a whole file (or a bomb)."""
    if not f.compression:
        return bytes(read_range(f, ByteRange(f.index, 0, min(f.size, limit))).data)
    try:
        stream = compressed.Stream(f.path, f.compression)
        try:
            data = stream.read(limit)
        finally:
            stream.close()
    except OSError as err:
        raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None
    return data if len(data) < limit else data[:data.rfind(b"\n") + 1]


MAP_MIN_BYTES = 4 << 20


def _read_plain(path: str, offset: int, length: int) -> RangeData:
    """The records that start in the range, exactly their bytes (the boundaries come from small
    peeks). A large range is memory-mapped, not read: reading 64 MiB into a fresh buffer costs a
    copy and a page fault per page, more than mapping the page cache costs (docs/design.md)."""
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


def _read_in_store(f: InputFile, offset: int, length: int) -> RangeData:
    """record_span's rule on an object in the store, in ranged GETs pinned to its ETag: bytes
    from offset - 1 (does a record start at offset?) to a little past the range's end, then
    more, doubling, until the newline that ends its last record. The context read past the end
    grows with the range (a tiny blocksize does not read each object many times over)."""
    size = f.size

    def get(a: int, b: int) -> bytes:
        return storage.read_span(f.url, f.etag, f.version_id, a, b, f.storage_options)

    first = max(offset - 1, 0)
    context = min(_PEEK, max(1024, length // 16))
    stop = min(size, offset + length + context)
    buf = get(first, stop) if stop > first else b""
    start = 0
    if offset > 0:
        k = buf.find(b"\n")
        if k < 0 or first + k + 1 >= offset + length:
            return RangeData(b"", offset)          # no record starts in the range
        start = first + k + 1
    search = max(start, offset + length - 1) - first
    while (k := buf.find(b"\n", search)) < 0 and stop < size:
        search = len(buf)
        context *= 2
        more = min(size, stop + context)
        buf += get(stop, more)
        stop = more
    end = first + k + 1 if k >= 0 else size       # the last record without a newline: read_block adds one
    return RangeData(buf[start - first:end - first], start)


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
