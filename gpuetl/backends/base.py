"""What a backend provides, as small declared facets. Per-partition code asks the backend; it
never checks types.

The shared code in steps/, sources/ and sinks/ is written against what pandas and cuDF share
(Series/DataFrame methods, `.str`, `.dt`) through `backend.xd`, and what numpy and CuPy share
through `backend.xp`. Anything the two libraries do differently, or that one does much faster
another way, is a method of one of the facets below. Each facet is a `typing.Protocol` that
carries no behaviour: every backend implements every method itself (CPU: cpu.py and its facet
modules; GPU: gpu.py and its), so a new backend inherits nothing by accident. Where the GPU
does exactly what the CPU does, its method says so by calling the shared function in
common.py. `Backend` is all the facets together; tests/backends/test_facets.py checks that both
backends satisfy every facet and define every method themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

from ..types import Schema

# The bookkeeping columns live in gpuetl/columns.py; re-exported here for the step modules
# that still import them from this module.
from ..columns import (COUNT, FILE_INDEX, INTERNAL, INTERNAL_TYPES, OFFSET, RAW,  # noqa: F401
                       REASON, STAGE, STATUS, STATUS_DEDUPLICATED, STATUS_DROPPED, STATUS_FILTERED,
                       STATUS_LIVE, STATUS_NAMES, STATUS_QUARANTINED)


@dataclass
class Lines:
    """Records split from a byte buffer: text, offsets and which ones were not valid UTF-8."""

    text: Any            # backend Series of strings (invalid UTF-8 replaced by U+FFFD)
    offsets: Any         # xp int64 array: byte offset of each record's first byte
    bad_utf8: Any        # xp bool array
    raw: Any = None      # where some record is not UTF-8: a binary Series, those records' exact
                         # bytes (less the line ending), null for the others; else None


@runtime_checkable
class PlanningBackend(Protocol):
    """What planning asks of a backend: it never touches data or a device, so a plan for the GPU
    can be checked where RAPIDS is not installed (gpu_detect.GpuPlanning). Every Backend is one."""

    name: str
    # `type: images` on a backend other than the CPU's is refused at plan time unless this is set
    # on the backend object: the GPU image path has not been checked on a GPU yet (docs/gpu.md).
    images_on_gpu: bool

    @property
    def runs_images(self) -> bool:
        """Whether a `type: images` source may run on this backend (asked at plan time): the
        CPU's always, another's once its image path is switched on (images_on_gpu)."""

    def check_regex(self, pattern: str) -> str | None:
        """Why this backend cannot run `pattern` natively (it then uses the CPU kernel for it,
        counted in fallbacks()), or None. Called by the plan: it never touches data."""

    def regex_error(self, pattern: str) -> str | None:
        """Why this backend cannot run `pattern` at all, not even on its CPU fallback (the plan
        then refuses the pipeline, naming the key), or None. RE2 syntax is checked for every
        backend when the file is loaded (expr.parser.regex_problem)."""

    def default_blocksize(self) -> int | None:
        """source.blocksize where the pipeline file sets none (the GPU's: from device memory,
        gpu_detect.gpu_blocksize); None: the file's default."""


@runtime_checkable
class Frames(Protocol):
    """Typed frames and columns in the backend's library, and their way to and from the host."""

    xp: Any                  # numpy or cupy
    xd: Any                  # pandas or cudf

    def dtype(self, type_name: str) -> Any:
        """The backend dtype for a contract type name."""

    def series(self, values: Any, type_name: str, index: Any = None) -> Any:
        """A typed Series from a host or device array / list."""

    def frame(self, columns: dict, index: Any = None) -> Any:
        """A frame of these columns (Series or arrays, in this order) over their memory, not a
        copy of it."""

    def empty(self, schema: Schema) -> Any:
        """A typed, empty frame: dask's meta for a stage."""

    def conform(self, df: Any, schema: Schema) -> Any:
        """Return df with exactly the schema's columns, in order, with the schema's dtypes."""

    def nulls(self, n: int, type_name: str, index: Any = None) -> Any:
        """A Series of n nulls."""

    def astype(self, col: Any, type_name: str) -> Any:
        """Exact conversion between already-typed columns (no parsing)."""

    def concat(self, frames: list) -> Any:
        """One frame of the frames' rows, in order."""

    def filter(self, df: Any, mask: Any) -> Any:
        """The rows of df where mask (a bool Series on df's index) is true."""

    def separate(self, df: Any) -> tuple[Any, Any, dict[tuple[int, int], int]]:
        """(the live rows, the quarantined rows, {(stage, status): records} that the other rows
        stand for). A step marks the rows it drops where they lie (runtime/partition.py: run_steps), so
        rows that left the pipeline may sit anywhere in a frame: only the live rows and the
        quarantined ones (whose raw records are kept) are copied; dropped rows are only counted."""

    def to_arrow(self, df: Any, schema: Schema) -> pa.Table:
        """Host Arrow table with the output's exact Arrow types."""

    def from_arrow(self, table: pa.Table) -> Any:
        """A frame of the table's columns, in this backend's library."""

    def host_table(self, df: Any, schema: Schema, reason: str) -> pa.Table:
        """to_arrow() for rows that must reach the host (the quarantine's raw records, key frames
        set aside on disk): a device backend counts them in its host-transfer ledger under
        `reason`."""

    def to_host(self, values: Any):
        """A numpy array from an xp array (no-op on the CPU)."""

    def to_pandas(self, obj: Any) -> Any:
        """A pandas Series or DataFrame on the host from one of this backend's (no-op on the CPU):
        for the few small results read row by row in Python (tallies, a first bad row)."""

    def to_pylist(self, col: Any) -> list:
        """A Series' values as Python objects (exact integers; None or NA for nulls)."""


@runtime_checkable
class Records(Protocol):
    """Bytes to typed records: reading a partition's ranges, splitting, regex, JSON and CSV
    parsing, casts."""

    counts_dropped_fields: bool      # parse_json adds up the extra fields it drops
    piece_bytes: int | None          # the records a partition is parsed in at a time; None: all at once

    def read_block(self, files: list, ranges: tuple) -> Any:
        """Read a partition's byte ranges into one buffer of whole records (sources.ranges.Block)."""

    def batches(self, data: Any) -> list[tuple[int, Any]]:
        """A block's whole lines as (position, buffer) pieces of about piece_bytes, each parsed
        and run through the row steps before the next (runtime/partition.py)."""

    def split_lines(self, data: bytes, base_offset: int, added=()) -> Lines:
        """Split a buffer of whole lines into records, each its bytes less its line ending: the
        '\\n' and one '\\r' right before it, no other byte (sources/line_ends.py). Empty
        records are not records. `added`: positions in `data` of newlines a reader added after a
        file's last line that lacks one (Block.added): only the newline is left out there."""

    def extract(self, text: Any, regex: str, names: tuple[str, ...], kernel: str | None = None) -> tuple[dict, Any]:
        """Apply a whole-record regex: ({name: string Series}, matched bool Series). `kernel`
        names a faster equivalent a backend may use for a preset ('clf', 'combined')."""

    def extract_fields(self, text: Any, regex: str, names: tuple[str, ...], *, kernel: str | None = None,
                       dash_is_null: bool = False) -> tuple[dict, Any]:
        """extract(), with empty captures (and '-' where the format says so) turned into nulls."""

    def parse_json(self, text: Any, read: Any, dropped: dict[str, int] | None = None) -> tuple[dict, Any, Any]:
        """Parse JSON objects, one per record, reading what `read` (sources/json_fields.JsonRead)
        names: ({name: Series}, ok bool Series, reason Series|None). dropped: under
        `extra_fields: drop`, a dict to which {field: records} of the top-level fields left out
        (not null) is added; a backend that does not count them leaves it as it is, and says so
        through counts_dropped_fields."""

    def parse_csv(self, text: Any, names: tuple[str, ...] | list[str], delimiter: str,
                  null_values: tuple[str, ...] = ("",)) -> tuple[dict, Any, Any]:
        """Parse RFC 4180 records (a quoted field may hold newlines and doubled quotes) into the
        named fields, an unquoted field in `null_values` null, a quoted one always its text: ({name: string Series},
        ok bool Series, reason): why the records that are not ok are bad, one string for all of
        them or a string Series."""

    def cast(self, col: Any, type_name: str, *, fmt: str | None = None, timezone: str | None = None) -> tuple[Any, Any]:
        """Parse or convert a column: (typed Series, bad bool Series). A value that was present
        but cannot be represented in the type is bad; nulls stay null and are not bad."""

    def fixed_width(self, col: Any) -> tuple[Any, Any]:
        """(xp uint64 array of the values' bits, xp bool valid mask) for a non-string column."""


@runtime_checkable
class Spill(Protocol):
    """Spill pieces (sinks/spill.py sets them aside, sinks/parquet.py reads them back) and the
    shard encoder. A piece is one partition's rows of one split, held between the map tasks and
    the shard writers, in this backend's own form: host Arrow tables in IPC files on the CPU
    (cpu_spill.py over host_spill.py), device frames in Parquet files on a GPU (gpu_spill.py).
    Shared code only hands pieces to these methods, to a shard writer, and takes their len()."""

    spill_suffix: str
    # A shuffled shard's pieces: read once each and the shard's rows held, ordered in turns of
    # shard_batch_bytes taken from them (a device); or read again for every turn (the host)
    spill_read_once: bool
    shard_batch_bytes: int | None    # None: sinks/parquet.py's SHARD_BATCH_BYTES

    def spill_piece(self, df: Any, schema: Schema) -> Any:
        """The live rows, with exactly `schema`'s columns and types, as a piece."""

    def spill_groups(self, piece: Any, split: np.ndarray, ranged: bool) -> dict[int, Any]:
        """{split id: that split's rows}. `split`: each row's split id (host int8). ranged: each
        split's rows grouped by the top 8 bits of the placement hash, input order kept within a
        group (placement.hash_range reads a shard's stretch of it); else in input order."""

    def spill_histogram(self, piece: Any, schema: Schema) -> np.ndarray:
        """Bytes in memory of the piece's rows (the columns of `schema`) per placement-hash
        bucket: float64 of length placement.BUCKETS, equal on every backend."""

    def write_spill(self, piece: Any, path: str, schema: Schema) -> None:
        """Write a piece (of `schema`, as spill_piece made it) to a local path, atomically: a
        retried task never leaves half a one."""

    def read_spill(self, path: str, columns: list[str] | None = None,
                   buckets: tuple[int, int] | None = None) -> Any:
        """A piece written by any backend's write_spill (the file's suffix says which form), or
        a URL in the run store (fetched into the task's folder), as this backend's piece.
        buckets (a ranged piece read for placement buckets [lo, hi)): a backend may return only
        a stretch of the piece's groups that holds every row of those buckets, still grouped,
        for spill_range to narrow."""

    def spill_range(self, piece: Any, lo_bucket: int, hi_bucket: int) -> tuple[Any, Any]:
        """The stretch of a ranged piece holding the rows of placement buckets [lo, hi) (no
        copy) and which of its rows those are (an xp bool array, or None: all)."""

    def spill_column(self, piece: Any, name: str) -> Any:
        """A fixed-width, never-null bookkeeping column of a piece as an xp array."""

    def spill_filter(self, piece: Any, mask: Any) -> Any:
        """The rows of a piece where the xp bool `mask` is true."""

    def spill_concat(self, pieces: list) -> Any:
        """One piece of the pieces' rows, in order."""

    def spill_sort(self, piece: Any, keys: list[str]) -> Any:
        """The piece's rows ordered by `keys`, ascending (stable)."""

    def spill_span(self, piece: Any, name: str) -> tuple[int, int] | None:
        """(smallest, largest) of a uint64 bookkeeping column of a piece; None when it is empty."""

    def keep_rows(self, df: Any, split: np.ndarray) -> dict[int, Any] | None:
        """A streamed partition's live rows per split, as this backend's shard writer takes them,
        kept in this process; None: set them aside as host Arrow (the CPU's encoder reads Arrow)."""

    def shard_encoder(self, schema: Schema, compression: str) -> Any:
        """The encoder of one Parquet shard: the hooks (sinks/shard_writer.py's ShardEncoder:
        conform, concat, slice, nbytes, empty, open, write_group, close, abort) under the one
        shard-writer state machine of the sinks, in this backend's own form of rows."""


@runtime_checkable
class Images(Protocol):
    """The image steps (steps/images.py) on the backend's own form of the pixels, kept where it
    keeps them between steps. Each step method returns (frame, bad mask or None, reasons or
    None), the step's quarantine: an image a step cannot process is bad, with its reason."""

    def decode_images(self, df: Any, mode: str, *, resize_to: tuple | None = None,
                      draft_for: tuple | None = None) -> tuple[Any, Any, Any]:
        """Image bytes to raw pixels in `mode`, upright per the orientation column; resize_to
        (how, W, H, filter): a resize fused into the decode; draft_for (how, W, H): the size a
        later resize needs, for a decoder that can decode smaller."""

    def resize_images(self, df: Any, how: str, width: int, height: int, filter: str) -> tuple[Any, Any, Any]:
        """fit | fill | stretch to width x height with the named filter."""

    def center_crop_images(self, df: Any, width: int, height: int) -> tuple[Any, Any, Any]:
        """The centred width x height window of each image."""

    def convert_images(self, df: Any, mode: str) -> tuple[Any, Any, Any]:
        """To RGB or L."""

    def encode_images(self, df: Any, fmt: str, quality: int) -> tuple[Any, Any, Any]:
        """jpeg | png | webp | raw; `format` names the result."""

    def phash_images(self, df: Any, column: str) -> tuple[Any, Any, Any]:
        """A 64-bit perceptual hash (int64) of each image in a new `column`."""

    def image_file_bytes(self, values: list, keys: list[tuple[int, int]], decode_next: bool) -> Any:
        """The images source's `image` column: each record's file bytes (None: not read). keys:
        each record's (file index, offset), unique. decode_next: the source's next step is decode.
        A backend whose decoder reads host memory may then keep the bytes on the host for it and
        leave the column null until decode (image_bytes gives them back where a step needs them)."""

    def image_bytes(self, rows: Any) -> Any:
        """The `image` column of these rows as it reached the step (a quarantined row's raw
        record), the file bytes image_file_bytes kept on the host included."""


@runtime_checkable
class Text(Protocol):
    """Text kernels (normalize_text, mask, near_dedupe, the string functions of expressions)
    and the hashes of rows and strings."""

    def normalize_text(self, col: Any, *, nfkc: bool, lower: bool, collapse_whitespace: bool,
                       strip: bool) -> Any:
        """Unicode NFKC, then lower case, then runs of ASCII white space -> one space, then trim
        ASCII white space at both ends; nulls stay null."""

    def text_lower(self, col: Any) -> Any:
        """lower(): Unicode's simple case mapping, one code point for one (Arrow's utf8_lower:
        'İ' -> 'i', 'ß' stays); nulls stay null."""

    def text_upper(self, col: Any) -> Any:
        """upper(): Unicode's simple case mapping (Arrow's utf8_upper: 'ß' and 'ﬁ' stay)."""

    def text_strip(self, col: Any) -> Any:
        """strip(): Unicode white space off both ends (Arrow's utf8_trim_whitespace, the
        characters of Python's str.isspace), not other control characters."""

    def contains_regex(self, col: Any, pattern: str) -> Any:
        """Whether the RE2 `pattern` matches anywhere in each value (the `matches()` expression
        function); null for null. A backend whose engine reads RE2 differently translates it."""

    def replace_regex(self, col: Any, pattern: str, replacement: str) -> Any:
        """Replace every match of `pattern` (the RE2 subset cuDF also runs: no lookarounds, no
        backreferences) with the literal `replacement`."""

    def minhash(self, col: Any, *, seed: int, a: Any, b: Any, width: int, shingle: str = "char") -> tuple[Any, Any]:
        """(xp uint32 signatures of shape (n, len(a)), xp bool valid) with libcudf's nvtext
        minhash scheme (see backends/cpu_text.py). shingle: 'char' (width characters) or
        'word' (width words)."""

    def string_buffers(self, col: Any) -> tuple[Any, Any, Any]:
        """(xp int64 offsets of n+1, xp uint8 UTF-8 bytes, xp bool valid mask) of a string column."""

    def hash_columns(self, columns: list, seed: int = 0) -> Any:
        """The row hash as a uint64 Series (expressions' hash()); literals are broadcast."""

    def hash64(self, columns: list, seed: int = 0) -> Any:
        """A uint64 hash per row of the given columns, identical on every backend."""

    def row_hash(self, columns: list) -> Any:
        """A uint64 per row for finding equal keys within one run (exact dedupe's candidates):
        equal values hash equal (-0.0 and 0.0, and every NaN, as the CPU's polars row hash makes
        them canonical first); unlike hash64 it need not match other backends or versions."""

    def pack_rows(self, matrix: Any, index: Any = None) -> Any:
        """A (n, k) uint32 matrix as one column (a row's signature travels as one value), or None
        where the backend cannot carry one: callers then recompute."""

    def unpack_rows(self, col: Any, width: int) -> Any:
        """The (n, width) uint32 matrix of a column pack_rows made."""


@runtime_checkable
class ExpressionHooks(Protocol):
    """What expressions (gpuetl/expr/) need where pandas and cuDF differ."""

    def nullable_dtype(self, type_name: str) -> Any:
        """The dtype of a bool or integer column that may hold nulls (pandas needs its nullable
        dtypes for that; cuDF's own dtypes hold nulls)."""

    def mod(self, a: Any, b: Any, type_name: str) -> Any:
        """a % b with the sign of b (Python's rule); b holds no zeros; nulls stay null."""

    def weekday(self, col: Any) -> Any:
        """Monday = 0 .. Sunday = 6 of a timestamp column."""

    def timezone(self, col: Any) -> Any:
        """The time zone of a timestamp column's values (as its dtype names it), None for naive ones."""


@runtime_checkable
class RunReports(Protocol):
    """What a run reports about the backend, and the cluster it brings."""

    def versions(self) -> dict[str, str]:
        """The versions of the libraries this backend adds to the manifest's (pandas, pyarrow and
        numpy are always listed)."""

    def io_path(self) -> str:
        """How this backend reads files, for the manifest."""

    def fallbacks(self, client: Any = None) -> dict[str, int]:
        """Work handed to the CPU kernels, by reason: {reason: rows or columns}. With a dask
        client, summed over its workers."""

    def start_reports(self, client: Any = None) -> None:
        """Zero what fallbacks() and host_transfer() count (in this process, or on the client's
        workers), so a run reports only its own work."""

    def host_transfer(self, client: Any = None, input_bytes: int = 0) -> dict:
        """Bytes copied from the device to the host, by reason, and per input byte; which path
        the file reads took ({} where nothing lives on a device)."""

    def note_host_work(self, what: str, count: int = 1) -> None:
        """Work shared code did on the host for this backend (a GPU backend counts it among
        its fallbacks)."""

    def local_cluster(self, *, quiet: bool = True,
                      dashboard_address: str | None = None) -> AbstractContextManager | None:
        """A context manager giving the dask cluster a local run uses, or None: the runner's
        in-process cluster (runtime/executor.py). dashboard_address None: serve no dashboard on
        a fixed port."""


@runtime_checkable
class Backend(PlanningBackend, Frames, Records, Spill, Images, Text, ExpressionHooks, RunReports, Protocol):
    """A whole backend: every facet. Callers that need only one facet may say so in their
    annotations (e.g. `backend: Spill`)."""

    name: str


FACETS: tuple[type, ...] = (PlanningBackend, Frames, Records, Spill, Images, Text, ExpressionHooks, RunReports)


def facet_members(facet: type) -> list[str]:
    """The names a facet declares (its methods, properties and attributes), in order."""
    names = [n for n in vars(facet) if not n.startswith("_")]
    return names + [n for n in getattr(facet, "__annotations__", {}) if n not in names and not n.startswith("_")]
