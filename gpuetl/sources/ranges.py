"""Byte-range partitions. A record belongs to the range in which its first byte lies, so no line
is split or read twice (what cudf.read_text(byte_range=...) does). A compressed file's ranges lie
in its uncompressed stream (sources/compressed.py). Small files are packed together so a million
files do not make a million tasks."""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field, fields, replace

from .. import storage
from ..errors import SourceError
from ..spec.sizes import format_size
from . import compressed
from .compressed import Limits
from .files import InputFile
from .pins import RangePin, digest_in_pieces, pin_bytes
from .long_records import (DEFAULT_MAX_RECORD, HEAD_BYTES, find_newline, head_of, long_lines, rfind_newline, stretches,
                           too_long)


@dataclass(frozen=True)
class ByteRange:
    file_index: int
    offset: int
    length: int        # -1: an empty plain file at planning (read whole), or a CompressedRange
    max_record: int | None = None   # an object read in ranges from a store: source.max_record_bytes


@dataclass(frozen=True)
class CompressedRange(ByteRange):
    """The records in [offset, stop) of a compressed file's uncompressed stream (offset and stop
    are record starts, found by the plan's scan). `final`: the stream ends at stop, or is cut off
    there. `refused`: the file is a decompression bomb; it is one quarantined record, at stop.
    `oversized`: [offset, stop) is one record over source.max_record_bytes, quarantined as its
    first bytes (`refused` its reason); the stream goes on after it. `window`: the largest zstd
    window to decode with (source.max_window_bytes)."""

    length: int = -1
    stop: int = 0
    final: bool = True
    refused: str | None = None
    oversized: bool = False
    window: int | None = None


@dataclass(frozen=True)
class OversizedRange(ByteRange):
    """One record of a plain file over source.max_record_bytes, [offset, stop): read as its
    first bytes and quarantined with `reason` (sources/long_records.py). Its length is -1 so
    every reader takes it as a range read whole, through read_range."""

    length: int = -1
    stop: int = 0
    reason: str = ""


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
        for piece in stretches(f.size, plain_long_records(f, limits)):
            if len(piece) == 3:            # a record over max_record_bytes: its own range
                ranges.append((oversized_range(f, piece[0], piece[1], limits.max_record_bytes), 1))
                continue
            a, b = piece
            bound = limits.max_record_bytes if f.in_store else None     # (local files: probed above)
            for offset in range(a, b, blocksize):
                length = min(blocksize, b - offset)
                ranges.append((ByteRange(f.index, offset, length, bound), length))
    return taper(pack(ranges, blocksize), blocksize)


def plain_long_records(f: InputFile, limits: Limits) -> list[tuple[int, int]]:
    """(start, stop) of a plain file's lines over limits.max_record_bytes (probed: long_records.py).
    An object read in ranges from a store is not probed."""
    if not limits.max_record_bytes or f.in_store or f.size <= limits.max_record_bytes:
        return []
    try:
        return long_lines(f.path, f.size, limits.max_record_bytes)
    except OSError as err:
        raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None


def oversized_range(f: InputFile, start: int, stop: int, limit: int) -> "OversizedRange":
    length = stop - start - (1 if stop < f.size or _ends_with_newline(f, stop) else 0)
    return OversizedRange(f.index, start, stop=stop, reason=too_long(f.display, length, limit))


def _ends_with_newline(f: InputFile, stop: int) -> bool:
    with open(f.path, "rb") as fh:
        fh.seek(stop - 1)
        return fh.read(1) == b"\n"


def compressed_ranges(f: InputFile, blocksize: int, limits: Limits,
                      csv: bool = False) -> list[tuple[CompressedRange, int]]:
    """A compressed file's pieces, each with its uncompressed size (what packing counts). A
    record over limits.max_record_bytes is a piece of its own (`oversized`)."""
    try:
        found = compressed.scan(f.path, f.compression, blocksize, limits, f.size, f.display, csv)
    except OSError as err:
        raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None
    window = limits.max_window_bytes
    if found.refused:
        return [(CompressedRange(f.index, 0, stop=found.size, refused=found.refused, window=window), 1)]
    bounds = set(found.starts)
    for a, b in found.long:
        bounds = {x for x in bounds if not a < x < b} | {a, b}
    bounds = sorted(x for x in bounds if x < found.size) or [0]      # (an empty or cut-off stream: one piece)
    long = dict(found.long)
    out = []
    for start, end in zip(bounds, [*bounds[1:], found.size]):
        final = end == found.size
        if long.get(start) == end:
            length = end - start - 1      # (a cut-off stream's last record may lack its newline: one byte off)
            out.append((CompressedRange(f.index, start, stop=end, final=final, oversized=True, window=window,
                                        refused=too_long(f.display, length, limits.max_record_bytes)), 1))
        else:
            out.append((CompressedRange(f.index, start, stop=end, final=final, window=window), max(end - start, 1)))
    return out


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
        if len(part.ranges) == 1 and type(rng) is ByteRange and rng.length > max(blocksize // 2, 1):
            half = rng.length // 2
            out += [Partition(0, (replace(rng, length=half),)),
                    Partition(0, (replace(rng, offset=rng.offset + half, length=rng.length - half),))]
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
    head: bytes = b""              # that record's raw bytes (a record over max_record_bytes: its first ones)
    long: tuple | None = None      # (offset, first bytes, reason) of a record over the bound after `data`


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
    hashing: object = None         # a mapped range's (the block's one range) pin, taken piece by piece
    hashed: int = 0                # the bytes of `data` taken into it so far

    def pin_piece(self, position: int, length: int) -> None:
        """Take `data[position:position + length]` (the pieces, in order) into a mapped range's
        pin before its records are copied out: the pin is then of bytes no newer than those
        parsed, so a write into the file after it is caught before the commit (pins.py). The
        pin is complete with the last piece. Blocks pinned as they were read: nothing to do."""
        if self.hashing is None:
            return
        if position != self.hashed:
            raise RuntimeError(f"internal error: a mapped block's pieces hashed out of order "
                               f"({position} after {self.hashed} bytes)")
        self.hashing.update(self.data[position:position + length])
        self.hashed += length
        if self.hashed == len(self.data):
            start = self.seg_start[0]
            self.pins.append(RangePin(self.seg_file[0], start, start + self.hashed, self.hashing.hexdigest()))
            self.hashing = None

    def release(self, position: int, length: int) -> None:
        """Let go of the pages of `data[position:position + length]` once its records are copied
        out, where `data` views a mapped file: the kernel drops them from this process (they
        stay in the page cache), so a partition does not hold its whole input in memory while
        its later pieces parse. Anything else (bytes, a device buffer) is left as it is."""
        mapped = _map_of(self.data)
        if mapped is None:
            return
        offset = len(mapped) - len(self.data) + position       # data views the map's tail
        first = -(-offset // mmap.PAGESIZE) * mmap.PAGESIZE     # whole pages inside the piece only
        last = (offset + length) // mmap.PAGESIZE * mmap.PAGESIZE
        if last > first:
            mapped.madvise(mmap.MADV_DONTNEED, first, last - first)

    def read_pins(self) -> list[RangePin]:
        """The ranges' pins, once every piece has been pinned (pin_piece)."""
        if self.hashing is not None:
            raise RuntimeError(f"internal error: a mapped block's pin taken over {self.hashed} of its "
                               f"{len(self.data)} bytes")
        return self.pins


def _map_of(data) -> mmap.mmap | None:
    """The open map `data` views, if it is a view of a mapped file where pages can be let go."""
    mapped = getattr(data, "obj", None)
    if isinstance(mapped, mmap.mmap) and not mapped.closed and hasattr(mmap, "MADV_DONTNEED"):
        return mapped
    return None


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
        extra_bad.append((f.index, got.start, raw_record(got.head), got.refused))
        return b""
    if got.long:
        extra_bad.append((f.index, got.long[0], raw_record(got.long[1]), got.long[2]))
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
    hashing = None
    for rng in ranges:
        f = files[rng.file_index]
        got = read_range(f, rng)
        data = truncated_piece(f, got, extra_bad)
        if len(data) and data[-1] != 10:
            data = bytes(data) + b"\n"
            added.append(position + len(data) - 1)
        if len(ranges) == 1 and f.url is None and data is got.data and _map_of(data) is not None:
            hashing = digest_in_pieces()                 # as the pieces are read (Block.pin_piece)
        elif (pin := range_pin(f, got)) is not None:
            pins.append(pin)
        buffers.append(data)
        seg_pos.append(position)
        seg_start.append(got.start)
        seg_file.append(f.index)
        position += len(data)
    data = buffers[0] if len(buffers) == 1 else b"".join(buffers)
    return Block(data, seg_pos, seg_start, seg_file, extra_bad, added, pins, hashing)


def read_range(f: InputFile, rng: ByteRange, reach: int | None = None) -> RangeData:
    """The whole records of a range. `reach`: a sample's read (a plain range), which leaves out
    its last record when that record ends more than `reach` bytes past the range."""
    if isinstance(rng, DecodedRange):
        return rng.got
    try:
        if isinstance(rng, OversizedRange):
            return RangeData(b"", rng.offset, refused=rng.reason, head=head_of(f.path, rng.offset, rng.stop))
        if isinstance(rng, CompressedRange):
            return decode_range(None, f, rng)[0]
        if f.in_store:
            return _read_in_store(f, max(rng.offset, 0), f.size if rng.length < 0 else rng.length,
                                  reach if reach is not None else rng.max_record)
        if rng.length < 0:
            with open(f.path, "rb") as fh:
                return RangeData(fh.read(), 0)
        return _read_plain(f.path, rng.offset, rng.length, reach)
    except OSError as err:
        raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None


def decode_range(stream, f: InputFile, rng: CompressedRange):
    """(the range's RangeData, the open stream for the file's next range): one task of the
    chain that decodes a compressed file once, front to back (runtime/graph.py)."""
    try:
        if rng.oversized:
            head, truncated, stream = compressed.skim(stream, f.path, f.compression, rng.offset, rng.stop, rng.final,
                                                      HEAD_BYTES, rng.window)
            return RangeData(b"", rng.offset, truncated, refused=rng.refused, head=head), stream
        if rng.refused:
            return RangeData(b"", rng.stop, refused=rng.refused), None
        data, truncated, stream = compressed.take(stream, f.path, f.compression, rng.offset, rng.stop, rng.final,
                                                  rng.window)
    except OSError as err:
        raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None
    return RangeData(data, rng.offset, truncated), stream


def with_decoded(ranges, decoded) -> tuple:
    """The ranges, each CompressedRange (in order) carrying its decoded bytes."""
    got = iter(decoded)
    return tuple(DecodedRange(**{k.name: getattr(r, k.name) for k in fields(r)}, got=next(got))
                 if isinstance(r, CompressedRange) else r for r in ranges)


def read_head(f: InputFile, limit: int, window: int | None = None,
              reach: int = DEFAULT_MAX_RECORD) -> tuple[int, bytes]:
    """(offset, bytes) of the whole records in about the first `limit` bytes of a file,
    decompressed: a sample of its first records that never decodes a whole file (or a bomb), nor
    reads a record that ends more than `reach` (source.max_record_bytes) past `limit`. A plain
    file's first records over that are stepped over (in bounded peeks) to the records after
    them. `window`: source.max_window_bytes."""
    if not f.compression:
        at = 0
        while at < f.size:
            got = read_range(f, ByteRange(f.index, at, min(f.size - at, limit)), reach=reach)
            if len(got.data):
                return got.start, bytes(got.data)
            fd = os.open(f.path, os.O_RDONLY)
            try:
                nl = find_newline(fd, at, f.size)
            finally:
                os.close(fd)
            if nl is None:
                break
            at = nl + 1
        return at, b""
    try:
        stream = compressed.Stream(f.path, f.compression, window)
        try:
            data = stream.read(limit)
        finally:
            stream.close()
    except OSError as err:
        raise SourceError(f"{f.display}: cannot read: {err.strerror or err}") from None
    return 0, data if len(data) < limit else data[:data.rfind(b"\n") + 1]


MAP_MIN_BYTES = 4 << 20


def _read_plain(path: str, offset: int, length: int, reach: int | None = None) -> RangeData:
    """The records that start in the range, exactly their bytes (the boundaries come from small
    peeks). A large range is memory-mapped, not read: reading 64 MiB into a fresh buffer costs a
    copy and a page fault per page, more than mapping the page cache costs (docs/design.md)."""
    start, end, needs_newline = record_span(path, offset, length, reach)
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


def record_span(path: str, offset: int, length: int, reach: int | None = None) -> tuple[int, int, int]:
    """(start, end, needs newline) of the records that start in [offset, offset+length): a record
    belongs to the range its first byte is in. Found with small peeks around the range's ends.
    `reach` (a sample's read): the last record is left out when it ends more than `reach` bytes
    past the range."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if offset > 0:
            p = find_newline(fd, offset - 1, min(size, offset + length))
            if p is None or p + 1 >= offset + length:
                return offset, offset, 0
            start = p + 1
        else:
            start = 0
        if start >= size:
            return start, start, 0
        stop = size if reach is None else min(size, offset + length + reach)
        q = find_newline(fd, max(start, offset + length - 1), stop)
        if q is None and stop < size:          # the last record runs on past `reach`: leave it out
            q = rfind_newline(fd, start, max(start, offset + length - 1))
            end = start if q is None else q + 1
            return start, end, 0
        end = size if q is None else q + 1
        return start, end, int(q is None and end > start)
    finally:
        os.close(fd)


def _read_in_store(f: InputFile, offset: int, length: int, reach: int | None = None) -> RangeData:
    """record_span's rule on an object in the store, in ranged GETs pinned to its ETag: bytes
    from offset - 1 (does a record start at offset?) to a little past the range's end, then
    more, doubling, until the newline that ends its last record. The context read past the end
    grows with the range (a tiny blocksize does not read each object many times over). `reach`
    (source.max_record_bytes): a last record that runs on more than that past the range is not
    read on; it is reported (`long`: its offset and first bytes) and left out."""
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
        if reach is not None and stop - (offset + length) > reach:
            return _long_in_store(f, buf, first, start, offset + length, reach)
        search = len(buf)
        context *= 2
        more = min(size, stop + context)
        if reach is not None:
            more = min(more, offset + length + reach + 1)
        buf += get(stop, more)
        stop = more
    end = first + k + 1 if k >= 0 else size       # the last record without a newline: read_block adds one
    return RangeData(buf[start - first:end - first], start)


def _long_in_store(f: InputFile, buf: bytes, first: int, start: int, end: int, reach: int) -> RangeData:
    """The records of buf[start - first:] before its last one, which starts before `end` and
    runs on more than `reach` bytes past it: that one is reported with its first bytes."""
    k = buf.rfind(b"\n", start - first, end - 1 - first)
    at = first + k + 1 if k >= 0 else start
    head = buf[at - first:at - first + HEAD_BYTES]
    why = (f"{f.display}: a record longer than source.max_record_bytes ({format_size(reach)}; it runs on more "
           f"than that past its range); not read: _raw holds its first {HEAD_BYTES:,} bytes only")
    return RangeData(buf[start - first:at - first], start, long=(at, head, why))
