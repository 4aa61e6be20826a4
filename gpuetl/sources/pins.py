"""Pins: what ties a dataset to the exact bytes of its local inputs.

Each local input is pinned twice. Its *identity* (device, inode, size, mtime and ctime, taken
when it is listed) says cheaply whether it may have changed: an edit changes ctime, and ctime
cannot be set back (utime sets it to the moment of the call). Its *content* is a hash of each
range as the reader read it (xxh3-128 of the very bytes the parser got, taken while they are in
memory: no second read), with where the range lies: in the file, or in its decompressed stream
for a compressed file. A resumed run trusts the ranges it skips while the identity holds and
re-hashes them once it does not; `gpuetl verify --inputs` always re-hashes. Objects in a store
are pinned by their ETag and version id instead (sources/files.py).

The API, for whatever must decide whether bytes read earlier are still the bytes there:
`Identity.of` / `Identity.at`; `pin_bytes` (a reader's range); `FilePin` (one input's identity
and ranges, to and from the manifest's JSON) and `FilePin.check` (re-hash what is pinned)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import NamedTuple

import xxhash

HASH = "xxh3_128"
CHUNK = 8 << 20            # bytes hashed at a time when a range is read again


def digest(data) -> str:
    """The content hash of bytes (a bytes object or a buffer, such as a memoryview of a map)."""
    return xxhash.xxh3_128_hexdigest(data)


def digest_in_pieces():
    """The same hash taken a piece at a time: `update(piece)` in order, then `hexdigest()`."""
    return xxhash.xxh3_128()


@dataclass(frozen=True)
class Identity:
    """A local file's identity: which file (device, inode) and its last change (size, mtime and
    ctime, in ns). Equal identities mean the file was not written in between: restoring mtime
    with utime still moves ctime. Meaningful on the machine that took it only."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> "Identity":
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    @classmethod
    def at(cls, path: str) -> "Identity | None":
        """The file's identity now (links followed, as inputs are listed), or None if it is gone."""
        try:
            return cls.of(os.stat(path))
        except OSError:
            return None

    def to_json(self) -> dict:
        return {"device": self.device, "inode": self.inode, "bytes": self.size, "mtime_ns": self.mtime_ns,
                "ctime_ns": self.ctime_ns}

    @classmethod
    def from_json(cls, value) -> "Identity | None":
        try:
            fields = [value[k] for k in ("device", "inode", "bytes", "mtime_ns", "ctime_ns")]
        except (KeyError, TypeError):
            return None
        if not all(type(v) is int for v in fields):
            return None
        return cls(*fields)

    def changes(self, now: "Identity") -> list[str]:
        """What differs from `now`, by name ([] when the file was not written since)."""
        names = ("device", "inode", "size", "mtime", "ctime")
        return [n for n, a, b in zip(names, self.key(), now.key()) if a != b]

    def key(self) -> tuple:
        return (self.device, self.inode, self.size, self.mtime_ns, self.ctime_ns)


class RangePin(NamedTuple):
    """The hash of bytes [start, end) of an input as a task read them (of its decompressed stream
    for a compressed input). digest None: read where no hash was taken (a Parquet input, whose
    reader picks columns out of the file; bytes read straight into device memory), so only the
    identity vouches for it."""

    file_index: int
    start: int
    end: int
    digest: str | None


def pin_bytes(file_index: int, start: int, data) -> RangePin:
    return RangePin(file_index, start, start + len(data), digest(data))


@dataclass(frozen=True)
class Mismatch:
    """A pinned range whose bytes are not what was read (found: the hash now; None where the
    range cannot be read any more, or was never hashed: `why`)."""

    start: int
    end: int
    expected: str | None
    found: str | None
    why: str = ""

    def __str__(self) -> str:
        where = f"bytes {self.start}-{self.end}"
        if self.why:
            return f"{where}: {self.why}"
        return f"{where}: {HASH} {self.expected} when read, {self.found} now"


@dataclass(frozen=True)
class Check:
    """What FilePin.check compared, and what did not match (`mismatches`, `gone`)."""

    identity_changes: list[str]     # what of the identity changed ([]: nothing; re-hashed only if asked)
    rehashed: int                   # ranges hashed again
    rehashed_bytes: int
    mismatches: list[Mismatch]
    gone: bool = False
    unhashed: int = 0               # ranges read without a hash: the identity alone vouches for them

    @property
    def same(self) -> bool:
        return not self.gone and not self.mismatches

    def compared(self) -> str:
        """What was compared, in words, for messages."""
        if self.gone:
            return "the file is gone"
        said = ("identity (device, inode, size, mtime, ctime) unchanged" if not self.identity_changes else
                f"identity changed ({', '.join(self.identity_changes)})")
        if self.rehashed:
            said += (f"; {self.rehashed} range{'s' if self.rehashed != 1 else ''} ({self.rehashed_bytes:,} bytes) "
                     f"re-hashed ({HASH})")
        if self.unhashed:
            said += (f"; {self.unhashed} range{'s' if self.unhashed != 1 else ''} not hashed when read (only the "
                     "identity vouches for them)")
        return said


@dataclass(frozen=True)
class FilePin:
    """What a dataset (or an interrupted run) pins of one local input: its identity when listed,
    and the hash of each range read. `stream`: where the ranges lie, "file" or "decompressed"
    (`compression`: gzip, zstd or bz2)."""

    identity: Identity | None
    ranges: tuple[tuple[int, int, str | None], ...]
    compression: str | None = None

    @property
    def stream(self) -> str:
        return "decompressed" if self.compression else "file"

    def to_json(self) -> dict:
        """The manifest's `identity` and `content` of an input."""
        return {"identity": self.identity.to_json() if self.identity else None,
                "content": {"hash": HASH, "stream": self.stream, "compression": self.compression,
                            "ranges": [list(r) for r in self.ranges]}}

    @classmethod
    def from_json(cls, entry) -> "FilePin | None":
        """The pins of a manifest's input entry; None where it holds none (or not in this form)."""
        if not isinstance(entry, dict):
            return None
        content = entry.get("content")
        if not isinstance(content, dict) or content.get("hash") != HASH or not isinstance(content.get("ranges"), list):
            return None
        ranges = []
        for r in content["ranges"]:
            if not (isinstance(r, list) and len(r) == 3 and type(r[0]) is int and type(r[1]) is int
                    and 0 <= r[0] <= r[1] and (r[2] is None or isinstance(r[2], str))):
                return None
            ranges.append((r[0], r[1], r[2]))
        compression = content.get("compression")
        if compression not in (None, "gzip", "zstd", "bz2"):
            return None
        return cls(Identity.from_json(entry.get("identity")), tuple(ranges), compression)

    @classmethod
    def of_reads(cls, identity: Identity | None, pins, compression: str | None) -> "FilePin":
        """One input's pin from the RangePins its partitions read (in any order; each once)."""
        ranges = sorted({(p.start, p.end, p.digest) for p in pins if p.end > p.start})
        return cls(identity, tuple(ranges), compression)

    def check(self, path: str, *, always: bool = False, only=None) -> Check:
        """Whether the file at `path` still holds the pinned bytes. Its identity is compared
        first; the ranges are re-hashed when it changed (or `always`). `only`: the (start, end)
        ranges to consider (those a resumed run skips), else every pinned range."""
        now = Identity.at(path)
        if now is None:
            return Check([], 0, 0, [], gone=True)
        changes = self.identity.changes(now) if self.identity else ["not pinned"]
        chosen = [r for r in self.ranges if only is None or (r[0], r[1]) in only]
        unhashed = [r for r in chosen if r[2] is None]
        if not changes and not always:
            return Check([], 0, 0, [], unhashed=len(unhashed))
        mismatches = []
        if changes:                 # only the identity vouched for these: it no longer does
            mismatches += [Mismatch(s, e, None, None, UNHASHED) for s, e, _ in unhashed]
        ranges = [r for r in chosen if r[2] is not None]
        for (start, end, expected), found in zip(ranges, _hash_ranges(path, self.compression, ranges)):
            if isinstance(found, str) and found != expected:
                mismatches.append(Mismatch(start, end, expected, found))
            elif not isinstance(found, str):
                mismatches.append(Mismatch(start, end, expected, None, found[0]))
        return Check(changes, len(ranges), sum(e - s for s, e, _ in ranges), mismatches, unhashed=len(unhashed))


UNHASHED = ("not hashed when read (a Parquet input, or bytes read straight into device memory): only the "
            "file's identity vouched for them, and it changed")


def _hash_ranges(path: str, compression: str | None, ranges):
    """The hash of each range's bytes now, in order, or (why,) where they cannot be read."""
    if compression:
        return _hash_decompressed(path, compression, ranges)
    out = []
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as err:
        return [(f"cannot be read: {err.strerror or err}",)] * len(ranges)
    try:
        for start, end, _ in ranges:
            h = xxhash.xxh3_128()
            pos = start
            while pos < end:
                chunk = os.pread(fd, min(CHUNK, end - pos), pos)
                if not chunk:
                    break
                h.update(chunk)
                pos += len(chunk)
            out.append(h.hexdigest() if pos == end else
                       (f"the file ends at byte {min(pos, os.fstat(fd).st_size)} now",))   # maybe before the range
    finally:
        os.close(fd)
    return out


def _hash_decompressed(path: str, compression: str, ranges):
    """Ranges of a compressed file's decompressed stream, hashed in one pass front to back."""
    from .compressed import Stream

    order = sorted(range(len(ranges)), key=lambda k: ranges[k][0])
    out: list = [None] * len(ranges)
    try:
        stream = Stream(path, compression)
    except OSError as err:
        return [(f"cannot be read: {err.strerror or err}",)] * len(ranges)
    try:
        for k in order:
            start, end, _ = ranges[k]
            if stream.position > start:           # overlapping ranges: start the stream again
                stream.close()
                stream = Stream(path, compression)
            stream.skip(start - stream.position)
            h = xxhash.xxh3_128()
            pos = stream.position
            while pos < end:
                chunk = stream.read(min(CHUNK, end - pos))
                if not chunk:
                    break
                h.update(chunk)
                pos += len(chunk)
            out[k] = h.hexdigest() if pos == end else (f"the decompressed stream ends at byte {pos} now",)
    except OSError as err:
        return [(f"cannot be read: {err.strerror or err}",)] * len(ranges)
    finally:
        stream.close()
    return out
