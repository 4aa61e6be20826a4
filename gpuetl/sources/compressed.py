"""Compressed inputs, read as one stream front to back (gzip members, bz2 streams and zstd frames
one after another) and cut into pieces of about `blocksize` uncompressed bytes.

A compressed stream cannot be entered in the middle, so the plan scans each file once (no bytes
kept) to learn where its pieces start, and the run decodes it once more, in order, handing the
open decoder from one piece's task to the next (runtime/graph.py). Each task holds one piece, so
memory is bounded by `blocksize` whatever the file's size. A decoder that has to move to another
process, or a piece read out of order, starts again from the file's beginning: slower, never
different. The scan is also where decompression bombs are stopped: it gives up as soon as a file
decodes past `source.max_uncompressed_bytes` or `source.max_expand_ratio` times its size, and the
file becomes one quarantined record instead of pieces."""

from __future__ import annotations

import bz2
import zlib
from dataclasses import dataclass

from ..errors import SourceError
from ..spec.sizes import format_size

INPUT_CHUNK = 1 << 20        # compressed bytes read from the file at a time
OUTPUT_CHUNK = 1 << 20       # at most this many bytes decoded per gzip/bz2 call
ZSTD_FEED = 256              # zstd's decoder has no output bound: feed it 256 bytes at a time
                             # (RLE blocks decode ~32,000x: a bomb's worst case is ~8 MiB per call)
RATIO_FLOOR = 1 << 20        # files that decode to less than this are never refused for their
                             # ratio: a small file of one repeated line legitimately compresses 1000x


@dataclass(frozen=True)
class Limits:
    """The decompression bounds of the pipeline's `source` (a bomb is a file past either)."""

    max_expand_ratio: float = 200
    max_uncompressed_bytes: int | None = None
    max_record_bytes: int | None = None      # records over it are found by the scan (sources/long_records.py)
    max_window_bytes: int | None = None      # zstd: frames that need a larger window are refused

    @classmethod
    def of(cls, source) -> "Limits":
        """The bounds a pipeline's `source` sets."""
        return cls(source.max_expand_ratio, source.max_uncompressed_bytes,
                   source.max_record_bytes, source.max_window_bytes)

    def check(self, produced: int, compressed_size: int, display: str) -> str | None:
        """Why a file that has decoded `produced` bytes so far is refused, or None."""
        cap = self.max_uncompressed_bytes
        if cap is not None and produced > cap:
            return (f"{display}: decompresses past source.max_uncompressed_bytes ({format_size(cap)}); "
                    "refused as a possible decompression bomb, its records are not read")
        if produced > max(RATIO_FLOOR, self.max_expand_ratio * compressed_size):
            return (f"{display}: decompresses past source.max_expand_ratio ({self.max_expand_ratio:g} times its "
                    f"{format_size(compressed_size)}); refused as a possible decompression bomb, its records "
                    "are not read")
        return None


ZSTD_WINDOW_DEFAULT = 1 << 27   # zstd's own default bound on a frame's window (ZSTD_WINDOWLOG_LIMIT_DEFAULT)
ZSTD_WINDOW_MAX = 1 << 31       # the largest window zstd makes (--long=31)


def _decoder(compression: str, window: int | None = None):
    """A fresh one-stream decoder (eof, unused_data, decompress) and the errors it raises.
    `window`: the largest zstd window it accepts (None: zstd's default)."""
    if compression == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS), (zlib.error,)
    if compression == "bz2":
        return bz2.BZ2Decompressor(), (OSError, ValueError, EOFError)
    if compression == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor(max_window_size=window or 0).decompressobj(), (zstandard.ZstdError,)
    raise SourceError(f"unknown compression {compression!r}")


class Stream:
    """A compressed file's uncompressed bytes, decoded incrementally, so a cut-off or corrupt
    file keeps every byte before the damage and says what happened (`truncated`) instead of
    losing the last block or ending silently. `position`: bytes handed out so far. Pickled (to
    another process), it arrives closed, and the next piece starts over from the beginning."""

    def __init__(self, path: str, compression: str, window: int | None = None):
        self.path, self.compression, self.window = path, compression, window
        self._frame_at, self._frame_head = 0, b""     # where the stream being decoded began, its first bytes
        self.position = 0
        self.produced = 0            # bytes decoded (handed out or held in _carry)
        self.truncated: str | None = None
        self.ended = False
        self._fh = open(path, "rb")
        self._decoder = None
        self._errors: tuple = ()
        self._members = 0
        self._input = b""
        self._carry = b""

    def __reduce__(self):
        return (_closed_stream, (self.path, self.compression, self.window))

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self.ended = True

    def chunk(self) -> bytes:
        """The next decoded bytes (b'' once the stream has ended)."""
        if self._carry:
            out, self._carry = self._carry, b""
            self.position += len(out)
            return out
        while not self.ended:
            try:
                out = self._step()
            except self._errors as err:
                self.truncated = self._too_wide(err) or (f"{self.compression} stream is truncated or corrupt "
                                                         f"({err or type(err).__name__})")
                self.close()
                return b""
            if out:
                self.produced += len(out)
                self.position += len(out)
                return out
        return b""

    def read(self, n: int) -> bytes:
        """The next `n` bytes (fewer only where the stream ends)."""
        parts, got = [], 0
        while got < n:
            out = self.chunk()
            if not out:
                break
            parts.append(out)
            got += len(out)
        if got > n:
            keep = n - (got - len(parts[-1]))
            parts[-1], self._carry = parts[-1][:keep], parts[-1][keep:]
            self.position -= len(self._carry)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def skip(self, n: int) -> None:
        """Decode and drop the next `n` bytes."""
        while n > 0:
            out = self.chunk()
            if not out:
                return
            if len(out) > n:
                self._carry = out[n:]
                self.position -= len(self._carry)
            n -= len(out)

    def _step(self) -> bytes:
        """Decode a little more: some output (maybe none), or end the stream."""
        if self._decoder is None:                 # between streams: is there another one?
            data = self._input or self._fh.read(INPUT_CHUNK)
            self._input = b""
            if self._members and self.compression == "gzip":
                data = data.lstrip(b"\x00")       # zero padding after a member, as gzip allows
                if not data and self._more():
                    return b""
            if not data:
                self.close()
                return b""
            self._decoder, self._errors = _decoder(self.compression, self.window)
            self._input = data
            self._frame_at, self._frame_head = self.produced, data[:18]
        dec = self._decoder
        if self.compression == "gzip":
            out = dec.decompress(self._input, OUTPUT_CHUNK)
            self._input = dec.unconsumed_tail
            hungry = not self._input and len(out) < OUTPUT_CHUNK
        elif self.compression == "bz2":
            out = dec.decompress(self._input, OUTPUT_CHUNK)
            self._input = b""
            hungry = dec.needs_input
        else:
            out = dec.decompress(self._input[:ZSTD_FEED])
            self._input = self._input[ZSTD_FEED:]
            hungry = not self._input
        if dec.eof:                               # one stream ended; what follows is the next
            self._input = dec.unused_data + self._input
            self._decoder = None
            self._members += 1
        elif hungry and not self._more():
            if self.compression == "gzip":
                out += dec.flush()
            self.truncated = f"{self.compression} stream is truncated (the file ends inside a compressed block)"
            self.close()
        return out

    def _too_wide(self, err) -> str | None:
        """The reason for a zstd frame whose window is over the bound (a valid file written with
        `zstd --long`), or None for other errors."""
        if self.compression != "zstd" or "too much memory" not in str(err):
            return None
        import zstandard

        try:
            need = f"a window of {format_size(zstandard.get_frame_parameters(self._frame_head).window_size)}"
        except zstandard.ZstdError:
            need = "a larger window"
        limit = self.window or ZSTD_WINDOW_DEFAULT
        return (f"the zstd frame at uncompressed byte {self._frame_at} needs {need}, over "
                f"source.max_window_bytes ({format_size(limit)}); raise source.max_window_bytes (at most 2GiB) "
                "to read it")

    def _more(self) -> bool:
        """Read more compressed input; False at the file's end."""
        data = self._fh.read(INPUT_CHUNK)
        self._input += data
        return bool(data)


def _closed_stream(path: str, compression: str, window: int | None = None) -> "Stream":
    stream = Stream.__new__(Stream)
    stream.path, stream.compression, stream.position, stream.ended, stream._fh = path, compression, -1, True, None
    stream.window = window
    return stream


# -- planning ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scan:
    """What the plan learns from one pass over a compressed file."""

    starts: list[int]          # where each piece's first record starts (the first is 0)
    size: int                  # uncompressed bytes (up to the damage, for a cut-off file)
    refused: str | None = None  # why the file is a bomb (then size is where the scan stopped)
    long: tuple = ()           # (start, stop) of each record over limits.max_record_bytes


def scan(path: str, compression: str, blocksize: int, limits: Limits, compressed_size: int,
         display: str, csv: bool = False) -> Scan:
    """Piece k holds the records whose first byte lies in [k * blocksize, (k+1) * blocksize) of
    the uncompressed stream, as for a plain file's byte ranges: it starts after the first newline
    at or after k * blocksize - 1. Nothing decoded is kept. Records over
    `limits.max_record_bytes` are found on the way (lines, or CSV records when `csv`)."""
    from .long_records import LongRecords

    starts = [0]
    target = blocksize - 1           # the next piece starts after the first newline from here
    long = LongRecords(limits.max_record_bytes, csv) if limits.max_record_bytes else None
    stream = Stream(path, compression, limits.max_window_bytes)
    try:
        while True:
            base = stream.position
            out = stream.chunk()
            if not out:
                break
            if long is not None:
                long.feed(out, base)
            end = base + len(out)
            while target < end:
                q = out.find(b"\n", max(target - base, 0))
                if q < 0:
                    target = end
                    break
                start = base + q + 1
                starts.append(start)
                target = (start // blocksize + 1) * blocksize - 1
            why = limits.check(stream.produced, compressed_size, display)
            if why:
                return Scan([0], stream.produced, why)
    finally:
        stream.close()
    size = stream.position
    while len(starts) > 1 and starts[-1] >= size:
        starts.pop()
    return Scan(starts, size, long=tuple(long.finish(size)) if long is not None else ())


# -- reading ----------------------------------------------------------------------------------

def take(stream: Stream | None, path: str, compression: str, start: int, stop: int,
         final: bool, window: int | None = None) -> tuple[bytes, str | None, Stream | None]:
    """Bytes [start, stop) of the uncompressed stream, with `stream` if it stands at `start`
    (else a new one, decoded up to there). `final`: the stream must end at `stop`; then the
    truncation reason, if any, comes back and the stream is closed. Returns (bytes, truncated,
    the stream for the next piece)."""
    if stream is None or stream.ended or stream.position != start:
        if stream is not None:
            stream.close()
        stream = Stream(path, compression, window)
        stream.skip(start)
    data = stream.read(stop - start)
    if len(data) != stop - start or (final and stream.read(1)):
        stream.close()
        raise OSError(f"the file changed while read (its decompressed stream is no longer {'' if final else 'at least '}"
                      f"{stop} bytes as when the run was planned)")
    if final:
        stream.close()
        return data, stream.truncated, None
    return data, None, stream


def skim(stream: Stream | None, path: str, compression: str, start: int, stop: int, final: bool,
         head: int, window: int | None = None) -> tuple[bytes, str | None, Stream | None]:
    """`take` for a record too long to hold: its first `head` bytes, the rest decoded and
    dropped a chunk at a time. Returns (head, truncated, the stream for the next piece)."""
    if stream is None or stream.ended or stream.position != start:
        if stream is not None:
            stream.close()
        stream = Stream(path, compression, window)
        stream.skip(start)
    data = stream.read(min(head, stop - start))
    stream.skip(stop - start - len(data))
    if stream.position != stop:
        stream.close()
        raise OSError(f"the file changed while read (its decompressed stream is no longer at least {stop} bytes "
                      "as when the run was planned)")
    if final:
        stream.read(1)
        stream.close()
        return data, stream.truncated, None
    return data, None, stream
