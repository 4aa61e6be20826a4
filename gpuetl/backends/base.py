"""What every backend provides. Per-partition code asks the backend; it never checks types.

The shared code in steps/, sources/ and sinks/ is written against what pandas and cuDF share
(Series/DataFrame methods, `.str`, `.dt`) through `backend.xd`, and what numpy and CuPy share
through `backend.xp`. Anything the two libraries do differently, or that one does much faster
another way, is a method here, implemented once per backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
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
    can be checked where RAPIDS is not installed (gpu_support.GpuPlanning). Every Backend is one."""

    name: str
    images_on_gpu: bool      # the switch for `type: images` on a GPU backend (Backend.images_on_gpu)

    @property
    def runs_images(self) -> bool:
        """Whether a `type: images` source may run on this backend (sources/images.py asks)."""

    def check_regex(self, pattern: str) -> str | None: ...

    def regex_error(self, pattern: str) -> str | None: ...

    def default_blocksize(self) -> int | None:
        """source.blocksize where the pipeline file sets none (the GPU's: from device memory);
        None: the file's default."""


class Backend(ABC):
    counts_dropped_fields = False     # parse_json adds up the extra fields it drops
    name: str
    xp: Any                  # numpy or cupy
    xd: Any                  # pandas or cudf
    # `type: images` on a backend other than the CPU's is refused at plan time unless this is set
    # on the backend object: the GPU image path has not been checked on a GPU yet (docs/gpu.md).
    images_on_gpu: bool = False

    @property
    @abstractmethod
    def runs_images(self) -> bool:
        """Whether a `type: images` source may run on this backend (asked at plan time): the
        CPU's always, another's once its image path is switched on (images_on_gpu)."""

    def default_blocksize(self) -> int | None:
        """PlanningBackend.default_blocksize: None, the file's default (the GPU's overrides)."""
        return None

    # -- frames --------------------------------------------------------------------------
    @abstractmethod
    def dtype(self, type_name: str) -> Any:
        """The backend dtype for a contract type name."""

    @abstractmethod
    def series(self, values: Any, type_name: str, index: Any = None) -> Any:
        """A typed Series from a host or device array / list."""

    def empty(self, schema: Schema) -> Any:
        """A typed, empty frame: dask's meta for a stage."""
        return self.xd.DataFrame({name: self.series([], t) for name, t in schema.items()})

    def conform(self, df: Any, schema: Schema) -> Any:
        """Return df with exactly the schema's columns, in order, with the schema's dtypes."""
        out = {}
        for name, t in schema.items():
            if name in df.columns:
                col = df[name]
                out[name] = col if col.dtype == self.dtype(t) else self.astype(col, t)
            else:
                out[name] = self.nulls(len(df), t, index=df.index)
        return self.xd.DataFrame(out, index=df.index)

    @abstractmethod
    def nulls(self, n: int, type_name: str, index: Any = None) -> Any:
        """A Series of n nulls."""

    @abstractmethod
    def astype(self, col: Any, type_name: str) -> Any:
        """Exact conversion between already-typed columns (no parsing)."""

    @abstractmethod
    def concat(self, frames: list) -> Any:
        ...

    def filter(self, df: Any, mask: Any) -> Any:
        """The rows of df where mask (a bool Series on df's index) is true."""
        return df[mask]

    def separate(self, df: Any) -> tuple[Any, Any, dict[tuple[int, int], int]]:
        """(the live rows, the quarantined rows, {(stage, status): records} that the other rows
        stand for). A step marks the rows it drops where they lie (runtime/partition.py: run_steps), so
        rows that left the pipeline may sit anywhere in a frame: only the live rows and the
        quarantined ones (whose raw records are kept) are copied; dropped rows are only counted.
        Live rows that all come first are a slice, not a copy."""
        status = self._host_values(df[STATUS])
        live = status == STATUS_LIVE
        k = int(live.sum())
        if k == len(df):
            return df, df.iloc[:0], {}
        rows = df.iloc[:k] if live[:k].all() else self.filter(df, self._mask(live, df))
        bad = status == STATUS_QUARANTINED
        quarantined = self.filter(df, self._mask(bad, df)) if bad.any() else df.iloc[:0]
        dropped = ~live & ~bad
        tallies: dict[tuple[int, int], int] = {}
        if dropped.any():
            # stages and statuses are small numbers: count by (stage + 1) * 8 + status, no sort
            key = (self._host_values(df[STAGE])[dropped].astype(np.int64) + 1) * 8 + status[dropped]
            count = self._host_values(df[COUNT])[dropped].astype(np.int64)
            sums = np.bincount(key) if (count == 1).all() else _exact_sums(key, count)
            tallies = {(int(k) // 8 - 1, int(k) % 8): int(sums[k]) for k in np.flatnonzero(sums)}
        return rows, quarantined, tallies

    def _host_values(self, col: Any) -> np.ndarray:
        """A bookkeeping column (fixed width, never null) as a numpy array."""
        return np.asarray(self.to_host(self.xp.asarray(col.values)))

    def _mask(self, rows: np.ndarray, df: Any) -> Any:
        return self.series(self.xp.asarray(rows), "bool", index=df.index)

    @abstractmethod
    def to_arrow(self, df: Any, schema: Schema) -> pa.Table:
        """Host Arrow table with the output's exact Arrow types."""

    @abstractmethod
    def from_arrow(self, table: pa.Table) -> Any:
        ...

    def host_table(self, df: Any, schema: Schema, reason: str) -> pa.Table:
        """to_arrow() for rows that must reach the host (the quarantine's raw records, key frames
        set aside on disk): a device backend counts them in its host-transfer ledger under
        `reason`."""
        return self.to_arrow(df, schema)

    def to_host(self, values: Any):
        """A numpy array from an xp array (no-op on the CPU)."""
        return values

    def to_pandas(self, obj: Any) -> Any:
        """A pandas Series or DataFrame on the host from one of this backend's (no-op on the CPU):
        for the few small results read row by row in Python (tallies, a first bad row)."""
        return obj

    # -- plan-time checks and run reports (CPU defaults) -----------------------------------
    def check_regex(self, pattern: str) -> str | None:
        """Why this backend cannot run `pattern` natively (it then uses the CPU kernel for it,
        counted in fallbacks()), or None. Called by the plan: it never touches data."""
        return None

    def regex_error(self, pattern: str) -> str | None:
        """Why this backend cannot run `pattern` at all, not even on its CPU fallback (the plan
        then refuses the pipeline, naming the key), or None. RE2 syntax is checked for every
        backend when the file is loaded (expr.parser.regex_problem)."""
        return None

    def note_host_work(self, what: str, count: int = 1) -> None:
        """Work shared code did on the host for this backend (a GPU backend counts it among
        its fallbacks); nothing on the CPU."""

    def fallbacks(self, client: Any = None) -> dict[str, int]:
        """Work handed to the CPU kernels, by reason: {reason: rows or columns}. With a dask
        client, summed over its workers. The CPU backend never falls back."""
        return {}

    def start_reports(self, client: Any = None) -> None:
        """Zero what fallbacks() and host_transfer() count (in this process, or on the client's
        workers), so a run reports only its own work. The CPU backend counts nothing."""

    def host_transfer(self, client: Any = None, input_bytes: int = 0) -> dict:
        """Bytes copied from the device to the host, by reason, and per input byte; which path
        the file reads took. Nothing lives on a device on the CPU: {}."""
        return {}

    def io_path(self) -> str:
        """How this backend reads files, for the manifest."""
        return "posix (python file reads)"

    def versions(self) -> dict[str, str]:
        """The versions of the libraries this backend adds to the manifest's (pandas, pyarrow and
        numpy are always listed)."""
        return {}

    def local_cluster(self, *, quiet: bool = True,
                      dashboard_address: str | None = None) -> AbstractContextManager | None:
        """A context manager giving the dask cluster a local run uses, or None: the runner's
        in-process cluster (runtime/executor.py), which the CPU uses. A GPU brings one worker
        process per device. dashboard_address None: serve no dashboard on a fixed port."""
        return None

    def keep_rows(self, df: Any, split: np.ndarray) -> dict[int, Any] | None:
        """A streamed partition's live rows per split, as this backend's shard writer takes them,
        kept in this process; None: set them aside as host Arrow (the CPU's encoder reads Arrow)."""
        return None

    @abstractmethod
    def shard_encoder(self, schema: Schema, compression: str) -> Any:
        """The encoder of one Parquet shard: the hooks (sinks/shard_writer.py's ShardEncoder:
        conform, concat, slice, nbytes, empty, open, write_group, close, abort) under the one
        shard-writer state machine of the sinks, in this backend's own form of rows."""

    # -- spill pieces (sinks/spill.py sets them aside, sinks/parquet.py reads them back) --------
    # A piece is one partition's rows of one split, held between the map tasks and the shard
    # writers, in this backend's own form: host Arrow tables in IPC files here (the functions
    # in host_spill.py), device frames in Parquet files on a GPU (gpu_spill.py). Shared code
    # only hands pieces to these methods, to a shard writer, and takes their len().
    spill_suffix: str = ".arrow"
    # A shuffled shard's pieces: read once each and the shard's rows held, ordered in turns of
    # shard_batch_bytes taken from them (a device); or read again for every turn (the host)
    spill_read_once: bool = False
    shard_batch_bytes: int | None = None     # None: sinks/parquet.py's SHARD_BATCH_BYTES

    def spill_piece(self, df: Any, schema: Schema) -> Any:
        """The live rows, with exactly `schema`'s columns and types, as a piece. The columns keep
        the partition's chunks (one per parsed piece) unjoined: a ranged piece's gather
        (spill_groups) already writes one chunk per column, and joining first would copy the
        whole partition beside its frame for no less work downstream."""
        return self.to_arrow(df, schema)

    def spill_groups(self, piece: Any, split: np.ndarray, ranged: bool) -> dict[int, Any]:
        """{split id: that split's rows}. `split`: each row's split id (host int8). ranged: each
        split's rows grouped by the top 8 bits of the placement hash, input order kept within a
        group (placement.hash_range reads a shard's stretch of it); else in input order."""
        from .host_spill import arrow_groups

        return arrow_groups(piece, split, ranged)

    def spill_histogram(self, piece: Any, schema: Schema) -> np.ndarray:
        """Bytes in memory of the piece's rows (the columns of `schema`) per placement-hash
        bucket: float64 of length placement.BUCKETS, equal on every backend."""
        from .host_spill import arrow_histogram

        return arrow_histogram(piece, schema)

    def write_spill(self, piece: Any, path: str) -> None:
        """Write a piece to a local path (atomically: a retried task never leaves half a one)."""
        from .host_spill import write_ipc

        write_ipc(piece, path)

    def read_spill(self, path: str, columns: list[str] | None = None,
                   buckets: tuple[int, int] | None = None) -> Any:
        """A piece written by any backend's write_spill (the file's suffix says which form), or
        a URL in the run store (fetched into the task's folder), as this backend's piece.
        buckets (a ranged piece read for placement buckets [lo, hi)): a backend may return only
        a stretch of the piece's groups that holds every row of those buckets, still grouped,
        for spill_range to narrow; the CPU memory-maps its pieces and returns them whole."""
        from .host_spill import read_ipc

        table = read_ipc(path)
        return table.select(columns) if columns is not None else table

    def spill_range(self, piece: Any, lo_bucket: int, hi_bucket: int) -> tuple[Any, Any]:
        """The stretch of a ranged piece holding the rows of placement buckets [lo, hi) (no
        copy) and which of its rows those are (an xp bool array, or None: all)."""
        from ..placement import PLACE, hash_range

        if not len(piece):
            return piece, None
        start, stop, mine = hash_range(piece.column(PLACE).to_numpy(), lo_bucket, hi_bucket)
        return piece.slice(start, stop - start), mine

    def spill_column(self, piece: Any, name: str) -> Any:
        """A fixed-width, never-null bookkeeping column of a piece as an xp array."""
        return piece.column(name).to_numpy()

    def spill_filter(self, piece: Any, mask: Any) -> Any:
        """The rows of a piece where the xp bool `mask` is true."""
        return piece.filter(pa.array(mask))

    def spill_concat(self, pieces: list) -> Any:
        return pa.concat_tables(pieces)

    def spill_sort(self, piece: Any, keys: list[str]) -> Any:
        """The piece's rows ordered by `keys`, ascending (stable)."""
        import pyarrow.compute as pc

        return piece.take(pc.sort_indices(piece, sort_keys=[(k, "ascending") for k in keys]))

    def spill_span(self, piece: Any, name: str) -> tuple[int, int] | None:
        """(smallest, largest) of a uint64 bookkeeping column of a piece; None when it is empty."""
        if not len(piece):
            return None
        values = piece.column(name).to_numpy()
        return int(values.min()), int(values.max())

    def read_block(self, files: list, ranges: tuple) -> Any:
        """Read a partition's byte ranges into one buffer of whole records (sources.ranges.Block)."""
        from ..sources.ranges import read_block

        return read_block(files, ranges)

    piece_bytes: int | None = None     # the records a partition is parsed in at a time; None: all at once

    def batches(self, data: Any) -> list[tuple[int, Any]]:
        """A block's whole lines as (position, buffer) pieces of about piece_bytes, each parsed
        and run through the row steps before the next (runtime/partition.py). One piece here: a
        device wants the largest batch it can hold."""
        return [(0, data)]

    # -- records -------------------------------------------------------------------------
    @abstractmethod
    def split_lines(self, data: bytes, base_offset: int, added=()) -> Lines:
        """Split a buffer of whole lines into records, each its bytes less its line ending: the
        '\\n' and one '\\r' right before it, no other byte (sources/line_ends.py). Empty
        records are not records. `added`: positions in `data` of newlines a reader added after a
        file's last line that lacks one (Block.added): only the newline is left out there."""

    @abstractmethod
    def extract(self, text: Any, regex: str, names: tuple[str, ...], kernel: str | None = None) -> tuple[dict, Any]:
        """Apply a whole-record regex: ({name: string Series}, matched bool Series). `kernel`
        names a faster equivalent a backend may use for a preset ('clf', 'combined')."""

    def extract_fields(self, text: Any, regex: str, names: tuple[str, ...], *, kernel: str | None = None,
                       dash_is_null: bool = False) -> tuple[dict, Any]:
        """extract(), with empty captures (and '-' where the format says so) turned into nulls."""
        cols, matched = self.extract(text, regex, names, kernel=kernel)
        for name, col in cols.items():
            empty = col.str.len() == 0
            if dash_is_null:
                empty = empty | (col == "-")
            cols[name] = col.mask(empty.fillna(False).astype(bool))
        return cols, matched

    @abstractmethod
    def parse_json(self, text: Any, read: Any, dropped: dict[str, int] | None = None) -> tuple[dict, Any, Any]:
        """Parse JSON objects, one per record, reading what `read` (sources/json_fields.JsonRead)
        names: ({name: Series}, ok bool Series, reason Series|None). dropped: under
        `extra_fields: drop`, a dict to which {field: records} of the top-level fields left out
        (not null) is added; a backend that does not count them leaves it as it is, and says so
        through counts_dropped_fields."""

    @abstractmethod
    def parse_csv(self, text: Any, names: tuple[str, ...] | list[str], delimiter: str,
                  null_values: tuple[str, ...] = ("",)) -> tuple[dict, Any, Any]:
        """Parse RFC 4180 records (a quoted field may hold newlines and doubled quotes) into the
        named fields, an unquoted field in `null_values` null, a quoted one always its text: ({name: string Series},
        ok bool Series, reason): why the records that are not ok are bad, one string for all of
        them or a string Series."""

    @abstractmethod
    def cast(self, col: Any, type_name: str, *, fmt: str | None = None, timezone: str | None = None) -> tuple[Any, Any]:
        """Parse or convert a column: (typed Series, bad bool Series). A value that was present
        but cannot be represented in the type is bad; nulls stay null and are not bad."""

    @abstractmethod
    def fixed_width(self, col: Any) -> tuple[Any, Any]:
        """(xp uint64 array of the values' bits, xp bool valid mask) for a non-string column."""

    # -- images: the image steps (steps/images.py) on the backend's own form of the pixels, kept
    # where it keeps them between steps. Each returns (frame, bad mask or None, reasons or None),
    # the step's quarantine: an image a step cannot process is bad, with its reason.
    @abstractmethod
    def decode_images(self, df: Any, mode: str, *, resize_to: tuple | None = None,
                      draft_for: tuple | None = None) -> tuple[Any, Any, Any]:
        """Image bytes to raw pixels in `mode`, upright per the orientation column; resize_to
        (how, W, H, filter): a resize fused into the decode; draft_for (how, W, H): the size a
        later resize needs, for a decoder that can decode smaller."""

    @abstractmethod
    def resize_images(self, df: Any, how: str, width: int, height: int, filter: str) -> tuple[Any, Any, Any]:
        """fit | fill | stretch to width x height with the named filter."""

    @abstractmethod
    def center_crop_images(self, df: Any, width: int, height: int) -> tuple[Any, Any, Any]: ...

    @abstractmethod
    def convert_images(self, df: Any, mode: str) -> tuple[Any, Any, Any]:
        """To RGB or L."""

    @abstractmethod
    def encode_images(self, df: Any, fmt: str, quality: int) -> tuple[Any, Any, Any]:
        """jpeg | png | webp | raw; `format` names the result."""

    @abstractmethod
    def phash_images(self, df: Any, column: str) -> tuple[Any, Any, Any]:
        """A 64-bit perceptual hash (int64) of each image in a new `column`."""

    def image_file_bytes(self, values: list, keys: list[tuple[int, int]], decode_next: bool) -> Any:
        """The images source's `image` column: each record's file bytes (None: not read). keys:
        each record's (file index, offset), unique. decode_next: the source's next step is decode.
        A backend whose decoder reads host memory may then keep the bytes on the host for it and
        leave the column null until decode (image_bytes gives them back where a step needs them)."""
        return self.series(values, "binary")

    def image_bytes(self, rows: Any) -> Any:
        """The `image` column of these rows as it reached the step (a quarantined row's raw
        record), the file bytes image_file_bytes kept on the host included."""
        return rows["image"]

    @abstractmethod
    def string_buffers(self, col: Any) -> tuple[Any, Any, Any]:
        """(xp int64 offsets of n+1, xp uint8 UTF-8 bytes, xp bool valid mask) of a string column."""

    def pack_rows(self, matrix: Any, index: Any = None) -> Any:
        """A (n, k) uint32 matrix as one column (a row's signature travels as one value), or None
        where the backend cannot carry one: callers then recompute."""
        return None

    def unpack_rows(self, col: Any, width: int) -> Any:
        raise NotImplementedError

    def hash_columns(self, columns: list, seed: int = 0) -> Any:
        """The row hash as a uint64 Series (expressions' hash()); literals are broadcast."""
        series = [c for c in columns if hasattr(c, "index")]
        index = series[0].index if series else None
        n = len(series[0]) if series else 1
        full = [c if hasattr(c, "index") else self.series([c] * n, _literal_type(c), index=index) for c in columns]
        return self.series(self.hash64(full, seed), "uint64", index=index)

    # -- what expressions need where pandas and cuDF differ (gpuetl/expr/) -------------------
    def nullable_dtype(self, type_name: str) -> Any:
        """The dtype of a bool or integer column that may hold nulls (pandas needs its nullable
        dtypes for that; cuDF's own dtypes hold nulls)."""
        return self.dtype(type_name)

    def mod(self, a: Any, b: Any, type_name: str) -> Any:
        """a % b with the sign of b (Python's rule); b holds no zeros; nulls stay null."""
        return a % b

    def weekday(self, col: Any) -> Any:
        """Monday = 0 .. Sunday = 6 of a timestamp column."""
        return col.dt.weekday

    def timezone(self, col: Any) -> Any:
        """The time zone of a timestamp column's values (as its dtype names it), None for naive ones."""
        return getattr(col.dtype, "tz", None)

    def to_pylist(self, col: Any) -> list:
        """A Series' values as Python objects (exact integers; None or NA for nulls)."""
        return col.tolist()

    def row_hash(self, columns: list) -> Any:
        """A uint64 per row for finding equal keys within one run (exact dedupe's candidates):
        equal values hash equal (-0.0 and 0.0, and every NaN, as the CPU's polars row hash makes
        them canonical first); unlike hash64 it need not match other backends or versions."""
        from ..hashing import hash_columns

        return hash_columns(self, columns, 0, canonical_floats=True)

    def hash64(self, columns: list, seed: int = 0) -> Any:
        """A uint64 hash per row of the given columns, identical on every backend."""
        from ..hashing import hash_columns

        return hash_columns(self, columns, seed)

    # == text kernels (steps issue: normalize_text, mask, near_dedupe) =====================
    # Written against what pandas and cuDF share where both can; a backend overrides a method
    # when it has a faster or the only exact way (CPU: backends/cpu_text.py, GPU: gpu_text.py).

    def normalize_text(self, col: Any, *, nfkc: bool, lower: bool, collapse_whitespace: bool,
                       strip: bool) -> Any:
        """Unicode NFKC, then lower case, then runs of ASCII white space -> one space, then trim
        ASCII white space at both ends; nulls stay null."""
        raise NotImplementedError(f"{self.name} backend: normalize_text")

    def text_lower(self, col: Any) -> Any:
        """lower(): Unicode's simple case mapping, one code point for one (Arrow's utf8_lower:
        'İ' -> 'i', 'ß' stays); nulls stay null."""
        return col.str.lower()

    def text_upper(self, col: Any) -> Any:
        """upper(): Unicode's simple case mapping (Arrow's utf8_upper: 'ß' and 'ﬁ' stay)."""
        return col.str.upper()

    def text_strip(self, col: Any) -> Any:
        """strip(): Unicode white space off both ends (Arrow's utf8_trim_whitespace, the
        characters of Python's str.isspace), not other control characters."""
        return col.str.strip()

    def contains_regex(self, col: Any, pattern: str) -> Any:
        """Whether the RE2 `pattern` matches anywhere in each value (the `matches()` expression
        function); null for null. A backend whose engine reads RE2 differently translates it."""
        return col.str.contains(pattern, regex=True)

    def replace_regex(self, col: Any, pattern: str, replacement: str) -> Any:
        """Replace every match of `pattern` (the RE2 subset cuDF also runs: no lookarounds, no
        backreferences) with the literal `replacement`."""
        return col.str.replace(pattern, replacement, regex=True)

    def minhash(self, col: Any, *, seed: int, a: Any, b: Any, width: int, shingle: str = "char") -> tuple[Any, Any]:
        """(xp uint32 signatures of shape (n, len(a)), xp bool valid) with libcudf's nvtext
        minhash scheme (see backends/cpu_text.py). shingle: 'char' (width characters) or
        'word' (width words)."""
        raise NotImplementedError(f"{self.name} backend: minhash")


def _literal_type(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    return "string"


def _exact_sums(key: np.ndarray, count: np.ndarray) -> np.ndarray:
    """np.bincount(key, weights=count) in int64 (bincount's weights are float64)."""
    sums = np.zeros(int(key.max()) + 1, dtype=np.int64)
    np.add.at(sums, key, count)
    return sums
