"""The CPU backend: pandas frames with Arrow-backed columns; kernels from pyarrow.compute (RE2)."""

from __future__ import annotations

import decimal
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..columns import COUNT, STAGE, STATUS, STATUS_LIVE, STATUS_QUARANTINED
from ..hashing import hash_columns
from ..sources.json_fields import JsonRead
from ..sources.line_ends import record_ends, records_array
from ..types import ARROW_TYPES, INT_TYPES, UINT_TYPES, Schema, is_nested
from .base import Lines
from .common import conform_frame, empty_frame, hash_series
from .cpu_clf import CLF_TIME_FORMAT, extract_clf, one_array, parse_clf_time, polars, polars_available
from .cpu_text import extract_groups_polars, polars_regex
from .cpu_spill import CpuSpill
from .cpu_values import BAD, FALSE_WORDS, INF_TEXT, TRUE_WORDS, as_arrow, exact_value, scratch_pool
from .host_parquet import HostShardEncoder

_INT_RE = r"^\s*[+-]?\d+\s*$"
_UINT_RE = r"^\s*\+?\d+\s*$"
_FLOAT_RE = r"(?i)^\s*[+-]?(?:\d+\.?\d*(?:e[+-]?\d+)?|\.\d+(?:e[+-]?\d+)?|inf|infinity|nan)\s*$"
# an offset after a time, an hour alone included ("T12Z"; a date's "-10" is not one)
_HAS_ZONE_RE = r"(?:\d:\d\d|[Tt ]\d\d).*(?:[zZ]|[+-]\d\d(?::?\d\d)?)\s*$"


def _chunked(col: pd.Series) -> pa.ChunkedArray:
    """The column's Arrow data as it is held (a frame concatenated from batches: several chunks),
    without the copy that combining would make."""
    arr = pa.array(col)
    return arr if isinstance(arr, pa.ChunkedArray) else pa.chunked_array([arr])


def _bool_mask(arr: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False), dtype=bool)


# A CPU run holds about three partitions at once (two parsed, one being written) plus what the
# allocators keep, so its memory follows the partition; 32 MiB costs no wall or CPU seconds
# against 64 MiB, dedupe and shuffles included (docs/design.md, "Kept, running"). The shards do
# not depend on it. Images and parquet sources keep the file's default (plan/compile.py: _sized_for).
CPU_BLOCKSIZE = 32 << 20


class CpuBackend(CpuSpill):
    """Every facet of base.Backend on pandas (Arrow-backed), pyarrow, polars and numpy: the
    spill facet in cpu_spill.py, JSON in cpu_json.py, CLF and text kernels in cpu_clf.py and
    cpu_text.py, images in cpu_image_steps.py."""

    name = "cpu"
    counts_dropped_fields = True
    xp = np
    xd = pd
    runs_images = True          # Pillow (cpu_images.py)
    images_on_gpu = False       # base.PlanningBackend: a switch only a device backend reads

    # -- planning and run reports: the CPU runs every regex, counts nothing, brings no cluster
    def check_regex(self, pattern: str) -> str | None:
        return None

    def regex_error(self, pattern: str) -> str | None:
        return None

    def default_blocksize(self) -> int | None:
        """CPU_BLOCKSIZE where the pipeline file sets none."""
        return CPU_BLOCKSIZE

    def note_host_work(self, what: str, count: int = 1) -> None:
        """All of the CPU's work is host work: nothing to count."""

    def fallbacks(self, client=None) -> dict[str, int]:
        """The CPU backend never falls back."""
        return {}

    def start_reports(self, client=None) -> None:
        """Nothing is counted on the CPU."""

    def host_transfer(self, client=None, input_bytes: int = 0) -> dict:
        """Nothing lives on a device: {}."""
        return {}

    def io_path(self) -> str:
        return "posix (python file reads)"

    def versions(self) -> dict[str, str]:
        """pandas, pyarrow and numpy are always listed; the CPU adds none."""
        return {}

    def local_cluster(self, *, quiet: bool = True, dashboard_address: str | None = None):
        """None: the runner's in-process cluster (runtime/executor.py)."""
        return None

    # -- images: Pillow and simplejpeg a row at a time (cpu_image_steps.py; imported when used) --
    def decode_images(self, df, mode: str, *, resize_to=None, draft_for=None):
        return _image_steps().decode(self, df, mode, resize_to, draft_for)

    def resize_images(self, df, how: str, width: int, height: int, filter: str):
        return _image_steps().resize(self, df, how, width, height, filter)

    def center_crop_images(self, df, width: int, height: int):
        return _image_steps().center_crop(self, df, width, height)

    def convert_images(self, df, mode: str):
        return _image_steps().convert(self, df, mode)

    def encode_images(self, df, fmt: str, quality: int):
        return _image_steps().encode(self, df, fmt, quality)

    def phash_images(self, df, column: str):
        return _image_steps().phash(self, df, column)

    def image_file_bytes(self, values: list, keys: list[tuple[int, int]], decode_next: bool):
        """The file bytes as a binary column, whatever comes next."""
        return self.series(values, "binary")

    def image_bytes(self, rows):
        return rows["image"]

    def shard_encoder(self, schema: Schema, compression: str) -> HostShardEncoder:
        """pyarrow's Parquet writer (backends/host_parquet.py)."""
        return HostShardEncoder(schema, compression)

    # -- frames --------------------------------------------------------------------------
    def dtype(self, type_name: str):
        return pd.ArrowDtype(ARROW_TYPES[type_name])

    def series(self, values, type_name: str, index=None):
        arrow_type = ARROW_TYPES[type_name]
        if isinstance(values, pd.Series):
            values = pa.array(values)
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            arr = values if values.type == arrow_type else values.cast(arrow_type)
        else:
            arr = pa.array(values, type=arrow_type)
        return pd.Series(pd.arrays.ArrowExtensionArray(arr), index=index)

    def nulls(self, n: int, type_name: str, index=None):
        return self.series(pa.nulls(n, ARROW_TYPES[type_name]), type_name, index=index)

    def astype(self, col, type_name: str):
        return self.series(as_arrow(col).cast(ARROW_TYPES[type_name]), type_name, index=col.index)

    def concat(self, frames: list):
        frames = [f for f in frames if f is not None]
        if len(frames) == 1:
            return frames[0]
        return pd.concat(frames, ignore_index=True)

    def filter(self, df, mask):
        """Arrow's filter per column: about twice as fast as pandas' boolean indexing, which
        gathers Arrow-backed columns with a take."""
        if isinstance(getattr(mask, "dtype", None), pd.ArrowDtype):
            rows = _bool_mask(one_array(_chunked(mask)))
        else:
            rows = np.asarray(mask, dtype=bool)
        keep = pa.array(rows)
        cols = {}
        for name in df.columns:
            col = df[name]
            if isinstance(col.dtype, pd.ArrowDtype):
                cols[name] = pd.Series(pd.arrays.ArrowExtensionArray(_chunked(col).filter(keep)), copy=False)
            else:
                cols[name] = pd.Series(col.to_numpy()[rows], dtype=col.dtype)
        out = self.frame(cols)
        out.index = df.index[rows]
        return out

    def to_arrow(self, df, schema: Schema) -> pa.Table:
        arrays = [_chunked(df[name]).cast(ARROW_TYPES[t]) for name, t in schema.items()]
        return pa.Table.from_arrays(arrays, schema=pa.schema([(n, ARROW_TYPES[t]) for n, t in schema.items()]))

    def from_arrow(self, table: pa.Table):
        return table.to_pandas(types_mapper=pd.ArrowDtype, ignore_metadata=True)

    def frame(self, columns: dict, index=None):
        """pandas copies a dict's columns unless told not to (a frame of 15 Arrow columns: 0.38 ms
        against 0.13 ms); under copy-on-write (pandas 3) sharing them is safe."""
        return pd.DataFrame(columns, index=index, copy=False)

    def empty(self, schema: Schema):
        return empty_frame(self, schema)

    def conform(self, df, schema: Schema):
        return conform_frame(self, df, schema)

    def separate(self, df):
        """The status column read once as numpy; live rows that all come first are a slice, not
        a copy; dropped rows are counted by (stage, status) without a sort."""
        status = np.asarray(df[STATUS].values)
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
            key = (np.asarray(df[STAGE].values)[dropped].astype(np.int64) + 1) * 8 + status[dropped]
            count = np.asarray(df[COUNT].values)[dropped].astype(np.int64)
            sums = np.bincount(key) if (count == 1).all() else _exact_sums(key, count)
            tallies = {(int(k) // 8 - 1, int(k) % 8): int(sums[k]) for k in np.flatnonzero(sums)}
        return rows, quarantined, tallies

    def _mask(self, rows: np.ndarray, df):
        return self.series(rows, "bool", index=df.index)

    def host_table(self, df, schema: Schema, reason: str) -> pa.Table:
        """The frame is on the host already: to_arrow()."""
        return self.to_arrow(df, schema)

    def to_host(self, values):
        return values

    def to_pandas(self, obj):
        return obj

    def to_pylist(self, col) -> list:
        return col.tolist()

    # -- records -------------------------------------------------------------------------
    piece_bytes = 16 * 2**20

    def read_block(self, files: list, ranges: tuple):
        """Python file reads (sources.ranges.read_block)."""
        from ..sources.ranges import read_block

        return read_block(files, ranges)

    def batches(self, data: bytes) -> list[tuple[int, memoryview]]:
        """Pieces of at most piece_bytes, each cut after its last whole line (views, no copies);
        a line longer than that is a piece of its own. A piece is parsed and run through the row
        steps before the next (runtime/partition.py), so a partition's temporaries stay piece-sized;
        and a whole 64 MiB partition at once makes every numpy temporary a fresh mmap that the
        kernel must fault in, two threads faulting contend."""
        view = memoryview(data)
        out, start = [], 0
        while len(view) - start > self.piece_bytes:
            cut = _last_newline(view, start, start + self.piece_bytes)
            if cut < 0:                       # one line longer than a piece
                cut = _next_newline(view, start + self.piece_bytes)
                if cut < 0:
                    break
            out.append((start, view[start:cut + 1]))
            start = cut + 1
        if start < len(view) or not out:
            out.append((start, view[start:]))
        return out

    def split_lines(self, data: bytes, base_offset: int, added=()) -> Lines:
        buf = np.frombuffer(data, dtype=np.uint8)
        starts = np.concatenate(([0], np.flatnonzero(buf == 10) + 1)).astype(np.int64)
        if starts[-1] == len(buf):
            starts = starts[:-1]
        ends = record_ends(np, buf, starts, np.asarray(added, dtype=np.int64))
        keep = ends > starts
        if not keep.all():           # blank lines are not records
            starts, ends = starts[keep], ends[keep]
        # the records' bytes less their line endings, side by side (one copy, in the scratch pool)
        raw = records_array(data, starts, ends, memory_pool=scratch_pool())
        string_type = pa.string() if raw.type == pa.binary() else pa.large_string()
        exact = None
        try:
            text = raw.cast(string_type)
            bad = np.zeros(len(starts), dtype=bool)
        except pa.ArrowInvalid:
            text, bad, exact = self._decode_slowly(raw, string_type)
        if string_type != pa.string():
            text = text.cast(pa.string())
        return Lines(text=self.series(text, "string"), offsets=starts + base_offset, bad_utf8=bad,
                     raw=self.series(exact, "binary") if exact is not None else None)

    @staticmethod
    def _decode_slowly(raw: pa.Array, string_type) -> tuple[pa.Array, np.ndarray, pa.Array]:
        """Only when a block holds invalid UTF-8: find which records, keep them (with U+FFFD in
        the text) and their exact bytes (the quarantine's `_raw`)."""
        values, bad, exact = [], [], []
        for item in raw.to_pylist():
            try:
                values.append(item.decode("utf-8"))
                bad.append(False)
                exact.append(None)
            except UnicodeDecodeError:
                values.append(item.decode("utf-8", errors="replace"))
                bad.append(True)
                exact.append(item)
        return pa.array(values, type=string_type), np.array(bad, dtype=bool), pa.array(exact, type=pa.binary())

    def extract_fields(self, text, regex, names, *, kernel=None, dash_is_null=False):
        """In Arrow: no pandas round trip per column (this is the parser's hot path). The text
        may be several batches' (chunks, not joined): each is read on its own."""
        arr = _chunked(text)
        if kernel in ("clf", "combined") and polars_available():
            cols, matched = extract_clf(arr, regex, names, null_empty=True, null_dash=dash_is_null)
        elif (on_polars := polars_regex(regex)) is not None:     # the same captures, faster than RE2's
            cols, matched = extract_groups_polars(arr, on_polars, names, dash_is_null)
        else:
            struct = pc.extract_regex(arr, pattern=regex)
            matched = _bool_mask(struct.is_valid())
            cols = {}
            for name in names:
                field = pc.struct_field(struct, name)
                empty = pc.equal(pc.binary_length(field), 0)
                if dash_is_null:
                    empty = pc.or_(empty, pc.equal(field, "-"))
                cols[name] = pc.if_else(empty, pa.scalar(None, pa.string()), field)
        return ({name: self.series(cols[name], "string", index=text.index) for name in names},
                pd.Series(matched, index=text.index))

    def extract(self, text, regex: str, names: tuple[str, ...], kernel: str | None = None):
        arr = as_arrow(text)
        if kernel in ("clf", "combined") and polars_available():
            cols, matched = extract_clf(arr, regex, names)
            return ({name: self.series(cols[name], "string", index=text.index) for name in names},
                    pd.Series(matched, index=text.index))
        struct = pc.extract_regex(arr, pattern=regex)
        matched = _bool_mask(struct.is_valid())
        out = {}
        for name in names:
            field = pc.struct_field(struct, name)
            out[name] = self.series(field, "string", index=text.index)
        return out, pd.Series(matched, index=text.index)

    def parse_json(self, text, read: JsonRead, dropped: dict[str, int] | None = None):
        """pyarrow's block reader where it reads records as gpuetl would, Python's json record
        by record for the others (backends/cpu_json.py)."""
        from .cpu_json import parse_json

        return parse_json(self, text, read, dropped)

    def parse_csv(self, text, names, delimiter, null_values=("",)):
        """pyarrow's CSV reader over the batch (a quoted field may hold newlines), trusted only
        where a record is one row to it: a record with an odd number of quotes has a quoted field
        that never ends (it ran to the end of its file), and one that holds a carriage return
        may be two rows to the reader, so those are read one by one. The reader's rows are
        counted against the records; should they ever differ, every record is read on its own
        rather than values shifting onto other records."""
        arr = as_arrow(text)
        n = len(arr)
        quotes = pc.count_substring(arr, '"')
        unbalanced = _bool_mask(pc.equal(pc.bit_wise_and(quotes, 1), 1))
        alone = np.zeros(n, dtype=bool)
        if _has_any_byte(arr, (b"\r",)):
            alone = _bool_mask(pc.match_substring(arr, "\r")) & ~unbalanced
        quoted = _bool_mask(pc.greater(quotes, 0)) & ~unbalanced & ~alone
        if quoted.any():
            # the framing pairs every quote; the reader opens a quoted field only where a field starts
            # with a quote. Where the reader would end such a record inside quotes, or break it at a
            # newline outside its quotes (`1,5" disk,"Sony`), the two disagree on where the record
            # ends: those are read alone. Quotes inside a field (`5" x 3"`, `"Sony" Walkman`) are not.
            rows = np.flatnonzero(quoted)
            agreed = _bool_mask(pc.match_substring_regex(arr.take(pa.array(rows)), _one_row_to_the_reader(delimiter)))
            alone[rows[~agreed]] = True
        together = ~unbalanced & ~alone
        read = _read_csv_rows(arr if together.all() else arr.filter(pa.array(together)), names, delimiter,
                              null_values)
        if read is None:                 # the reader's rows do not match the records: one by one
            alone, together = ~unbalanced, np.zeros(n, dtype=bool)
            read = _read_csv_rows(arr.filter(pa.array(together)), names, delimiter, null_values)
        table, parsed = read
        ok = np.zeros(n, dtype=bool)
        ok[together] = parsed
        row_of = np.zeros(n, dtype=np.int64)
        row_of[together] = _gather_index(parsed).to_numpy()
        few_fields = f"CSV record does not have {len(names)} fields"
        reasons: dict[int, str] = {int(i): few_fields for i in np.flatnonzero(together & ~ok)}
        for i in np.flatnonzero(unbalanced):
            reasons[int(i)] = UNTERMINATED_QUOTE
        extra_rows: list[list] = []
        for i in np.flatnonzero(alone):
            values, why = _read_one_csv_record(arr[int(i)].as_py(), names, delimiter, null_values)
            if values is None:
                reasons[int(i)] = why or few_fields
            else:
                ok[i], row_of[i] = True, table.num_rows + len(extra_rows)
                extra_rows.append(values)
        if extra_rows:
            extra = pa.table({name: pa.array([r[k] for r in extra_rows], pa.string()) for k, name in enumerate(names)})
            table = pa.concat_tables([table, extra]) if table.num_rows else extra
        cols = {}
        for name in names:
            if table.num_rows == 0:
                full = pa.nulls(n, pa.string())
            else:
                values = pc.take(table.column(name).combine_chunks(), pa.array(row_of))
                full = pc.if_else(pa.array(ok), values, pa.scalar(None, pa.string()))
            cols[name] = self.series(full, "string", index=text.index)
        distinct = set(reasons.values())
        if len(distinct) <= 1:
            reason = distinct.pop() if distinct else few_fields
        else:
            every = [reasons.get(i) for i in range(n)]
            reason = pd.Series(pd.array(every, dtype=pd.ArrowDtype(pa.string())), index=text.index)
        return cols, pd.Series(ok, index=text.index), reason

    # -- casts ---------------------------------------------------------------------------
    def cast(self, col, type_name: str, *, fmt=None, timezone=None):
        arr = as_arrow(col)
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            return self._convert(col, arr, type_name)
        result = self._parse_strings(arr, type_name, fmt, timezone)
        bad = _bool_mask(pc.and_(arr.is_valid(), result.is_null()))
        return self.series(result, type_name, index=col.index), pd.Series(bad, index=col.index)

    def _parse_strings(self, arr: pa.Array, type_name: str, fmt, timezone) -> pa.Array:
        """The values in the type, null where a value cannot be read. White space around a value
        is allowed; the fast paths take the usual clean columns without trimming them."""
        if type_name == "string":
            return arr
        if type_name in INT_TYPES or type_name in UINT_TYPES:
            plain = _plain_integers(arr, type_name)
            if plain is not None:
                return plain
        if type_name == "timestamp" and fmt == CLF_TIME_FORMAT:
            # the fast path only takes values of exactly the format's width (no white space);
            # what it leaves is trimmed and parsed strictly
            zone = timezone or "UTC"
            return parse_clf_time(arr, slow=lambda rest: strict_strptime(pc.utf8_trim_whitespace(rest),
                                                                         CLF_TIME_FORMAT, zone))
        values = pc.utf8_trim_whitespace(arr)
        if type_name in INT_TYPES or type_name in UINT_TYPES:
            return self._cast_integer(values, type_name)
        if type_name in ("float32", "float64"):
            ok = pc.match_substring_regex(values, _FLOAT_RE)
            number = pc.cast(pc.if_else(ok, values, pa.scalar(None, pa.string())), ARROW_TYPES[type_name])
            # "1e400" (or "1e39" as float32) is past the type's range, not infinity: a bad value
            overflow = pc.fill_null(pc.and_(pc.is_inf(number), pc.invert(pc.match_substring_regex(
                values, INF_TEXT))), False)
            return pc.if_else(overflow, pa.scalar(None, number.type), number)
        if type_name == "bool":
            lowered = pc.utf8_lower(values)
            truthy = pc.is_in(lowered, pa.array(TRUE_WORDS))
            falsy = pc.is_in(lowered, pa.array(FALSE_WORDS))
            return pc.if_else(truthy, True, pc.if_else(falsy, False, pa.scalar(None, pa.bool_())))
        if type_name == "timestamp":
            return self._parse_timestamps(values, fmt, timezone)
        raise ValueError(type_name)  # pragma: no cover - the spec only admits known names

    def _convert(self, col, arr: pa.Array, type_name: str):
        target = ARROW_TYPES[type_name]
        try:
            result = pc.cast(arr, target, safe=True)
            bad = np.zeros(len(arr), dtype=bool)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            if is_nested(type_name):         # a list or struct: each value cast on its own, the rest bad
                result, bad = _cast_each(arr, target)
            else:                            # convert what can be converted exactly; the rest is bad
                values = [exact_value(v, type_name) for v in arr.to_pylist()]
                bad = np.array([v is BAD for v in values], dtype=bool)
                result = pa.array([None if v is BAD else v for v in values], type=target)
        return self.series(result, type_name, index=col.index), pd.Series(bad, index=col.index)

    @staticmethod
    def _cast_integer(values: pa.Array, type_name: str) -> pa.Array:
        pattern = _UINT_RE if type_name in UINT_TYPES else _INT_RE
        ok = pc.match_substring_regex(values, pattern)
        digits = pc.if_else(ok, values, pa.scalar(None, pa.string()))
        try:                 # every value in range (the usual case): Arrow's checked cast is exact
            return pc.cast(digits, ARROW_TYPES[type_name])
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        # Exact range check in decimal (float would lose precision near the 64-bit limits).
        wide = pa.decimal128(38, 0)
        number = pc.cast(digits, wide)
        info = np.iinfo(type_name)
        low, high = (pa.scalar(decimal.Decimal(int(v)), wide) for v in (info.min, info.max))
        in_range = pc.and_(pc.greater_equal(number, low), pc.less_equal(number, high))
        number = pc.if_else(in_range, number, pa.scalar(None, wide))
        return pc.cast(number, ARROW_TYPES[type_name])

    @staticmethod
    def _parse_timestamps(values: pa.Array, fmt: str | None, timezone: str | None) -> pa.Array:
        """Parse to UTC timestamp[us]. Values without a zone are read in `timezone` (default UTC)."""
        target = ARROW_TYPES["timestamp"]
        zone = timezone or "UTC"
        if fmt:
            return strict_strptime(values, fmt, zone)
        zoned = _zoned_iso_timestamps(values)
        if zoned is not None:
            return zoned
        series = pd.Series(values.to_pandas(types_mapper=pd.ArrowDtype))
        has_zone = series.str.contains(_HAS_ZONE_RE, regex=True).fillna(False).astype(bool)
        result = pd.Series(pd.NaT, index=series.index, dtype="datetime64[us, UTC]")
        if has_zone.any():
            result[has_zone] = _in_microseconds(pd.to_datetime(series[has_zone], format="ISO8601", utc=True,
                                                               errors="coerce"))
        naive = ~has_zone & series.notna()
        if naive.any():
            result[naive] = _in_microseconds(_localize(pd.to_datetime(series[naive], format="ISO8601",
                                                                      errors="coerce"), zone))
        return pa.array(result, type=target)

    _NULLABLE = {"bool": "boolean", **{t: t.capitalize() for t in ("int8", "int16", "int32", "int64")},
                 **{t: "U" + t[1:].capitalize() for t in ("uint8", "uint16", "uint32", "uint64")}}

    def nullable_dtype(self, type_name: str):
        return self._NULLABLE[type_name]

    def mod(self, a, b, type_name: str):
        """By numpy: pandas has no '%' for Arrow-backed columns."""
        nulls = a.isna() if not isinstance(b, pd.Series) else a.isna() | b.isna()
        fill = np.nan if type_name.startswith("float") else 0
        left = a.to_numpy(dtype=type_name, na_value=fill)
        right = b.to_numpy(dtype=type_name, na_value=1) if isinstance(b, pd.Series) else b
        out = pd.Series(np.mod(left, right), index=a.index)
        if type_name in self._NULLABLE:
            out = out.astype(self._NULLABLE[type_name])
        return out.mask(nulls)

    def timezone(self, col):
        """Arrow-backed timestamps carry the zone in their Arrow type; numpy's carry none."""
        dtype = col.dtype
        return dtype.pyarrow_dtype.tz if isinstance(dtype, pd.ArrowDtype) else getattr(dtype, "tz", None)

    def weekday(self, col):
        return col.dt.day_of_week      # pandas 3 deprecates .dt.weekday

    def row_hash(self, columns: list):
        """polars' row hash (much faster than the numpy hash64): -0.0 and NaN are made canonical first,
        so values pandas holds equal hash equal."""
        if not polars_available():
            return hash_columns(self, columns, 0, canonical_floats=True)
        pl = polars()

        arrays = {}
        for i, col in enumerate(columns):
            arr = _chunked(col)
            if pa.types.is_floating(arr.type):
                arr = pc.if_else(pc.equal(arr, 0), pa.scalar(0.0, arr.type), arr)
                arr = pc.if_else(pc.is_nan(arr), pa.scalar(float("nan"), arr.type), arr)
            arrays[str(i)] = arr
        return pl.from_arrow(pa.table(arrays)).hash_rows(seed=0).to_numpy()

    def pack_rows(self, matrix, index=None):
        matrix = np.ascontiguousarray(matrix, dtype=np.uint32)
        n, k = matrix.shape
        arr = pa.Array.from_buffers(pa.binary(4 * k), n, [None, pa.py_buffer(matrix)])
        return pd.Series(pd.arrays.ArrowExtensionArray(arr), index=index)

    def unpack_rows(self, col, width):
        arr = as_arrow(col)
        data = np.frombuffer(arr.buffers()[1], dtype=np.uint32)
        return data[arr.offset * width: (arr.offset + len(arr)) * width].reshape(len(arr), width)

    # -- hashing primitives ----------------------------------------------------------------
    def fixed_width(self, col):
        arr = as_arrow(col)
        valid = _bool_mask(arr.is_valid())
        if pa.types.is_timestamp(arr.type):
            arr = arr.cast(pa.int64())
        elif pa.types.is_boolean(arr.type):
            arr = arr.cast(pa.uint8())
        values = arr.fill_null(0).to_numpy(zero_copy_only=False)
        if values.dtype.kind == "f":
            values = values.astype(np.float64).view(np.uint64)
        return values.astype(np.int64).view(np.uint64) if values.dtype.kind == "i" else values.astype(np.uint64), valid

    def string_buffers(self, col):
        arr = as_arrow(col).cast(pa.large_string())
        valid = _bool_mask(arr.is_valid())
        _, offsets_buf, data_buf = arr.buffers()
        offsets = np.frombuffer(offsets_buf, dtype=np.int64)[arr.offset: arr.offset + len(arr) + 1]
        data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        return offsets, data, valid

    def hash64(self, columns: list, seed: int = 0):
        return hash_columns(self, columns, seed)

    def hash_columns(self, columns: list, seed: int = 0):
        return hash_series(self, columns, seed)

    # -- text kernels (steps: normalize_text, mask, near_dedupe); the work is in cpu_text.py
    def text_lower(self, col):
        return col.str.lower()

    def text_upper(self, col):
        return col.str.upper()

    def text_strip(self, col):
        return col.str.strip()

    def contains_regex(self, col, pattern):
        """pandas' Arrow-backed strings match with RE2 (pyarrow), the plan's dialect."""
        return col.str.contains(pattern, regex=True)

    def normalize_text(self, col, *, nfkc, lower, collapse_whitespace, strip):
        from . import cpu_text

        out = cpu_text.normalize(as_arrow(col), nfkc=nfkc, lower=lower, collapse_whitespace=collapse_whitespace,
                                 strip=strip)
        return self.series(out, "string", index=col.index)

    def replace_regex(self, col, pattern, replacement):
        from . import cpu_text

        return self.series(cpu_text.replace_regex(as_arrow(col), pattern, replacement), "string", index=col.index)

    def minhash(self, col, *, seed, a, b, width, shingle="char"):
        from . import cpu_text

        return cpu_text.minhash(as_arrow(col).cast(pa.string()), seed=seed, a=np.asarray(a, dtype=np.uint32),
                                b=np.asarray(b, dtype=np.uint32), width=width, shingle=shingle)


def _cast_each(arr: pa.Array, target: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """(arr cast to target, which values Arrow's safe cast refused) value by value: a nested
    column whose cast fails as a whole (one list item out of range) loses only that record, not
    every record of the batch. The slow way, taken only after the whole cast failed."""
    parts, bad = [], np.zeros(len(arr), dtype=bool)
    for i, value in enumerate(arr.to_pylist()):
        try:                 # a fresh array of the one value: a slice's list keeps all of its items
            parts.append(pc.cast(pa.array([value], arr.type), target, safe=True))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            parts.append(pa.nulls(1, target))
            bad[i] = True
    return (pa.concat_arrays(parts) if parts else pa.array([], target)), bad


def _plain_integers(arr: pa.Array, type_name: str) -> pa.Array | None:
    """The column cast by Arrow alone, when that is exact: every value plain digits with at most
    a leading '-' (Arrow's parser, which also reads '0x' hex, refused nothing and no value has an
    'x'; unsigned: no '-') and in range. None otherwise: the careful path decides then."""
    try:
        result = pc.cast(arr, ARROW_TYPES[type_name])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    odd = (b"x", b"X", b"-") if type_name in UINT_TYPES else (b"x", b"X")
    return None if _has_any_byte(arr, odd) else result


def _has_any_byte(arr: pa.Array, chars: tuple[bytes, ...]) -> bool:
    """Whether any value holds one of these bytes: one scan of the values' bytes (Arrow's
    case-insensitive match_substring runs RE2 over each value, far slower). Bytes under null
    slots count too: a false alarm only sends the column down the careful path."""
    if isinstance(arr, pa.ChunkedArray):
        return any(_has_any_byte(chunk, chars) for chunk in arr.chunks)
    if not len(arr):
        return False
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=width)[arr.offset: arr.offset + len(arr) + 1]
    if data_buf is None or offsets[-1] == offsets[0]:
        return False
    data = np.frombuffer(data_buf, dtype=np.uint8)[offsets[0]: offsets[-1]]
    if len(chars) == 1:               # one byte: a comparison, cheaper than isin
        return bool((data == chars[0][0]).any())
    return bool(np.isin(data, np.frombuffer(b"".join(chars), dtype=np.uint8)).any())


def strict_strptime(values: pa.Array, fmt: str, zone: str) -> pa.Array:
    """strptime that refuses impossible dates (Arrow's reads 30 February as 2 March): pandas'
    parser, which is strict about dates, with the two things it lets through refused too: digits
    past the microsecond, and a 60th or 61st second. Values with %z are converted to UTC; naive
    ones are read in `zone`."""
    series = pd.Series(values.to_pandas(types_mapper=pd.ArrowDtype))
    if "%z" in fmt or "%Z" in fmt:
        parsed = _no_leap_seconds(series, pd.to_datetime(series, format=fmt, utc=True, errors="coerce"), fmt,
                                  utc=True)
    else:                      # a leap second is looked for in the wall time, before the zone's offset
        naive = _no_leap_seconds(series, pd.to_datetime(series, format=fmt, errors="coerce"), fmt, utc=False)
        parsed = _localize(_in_microseconds(naive), zone)
    return pa.array(_in_microseconds(parsed), type=ARROW_TYPES["timestamp"])


_SECONDS_DIRECTIVES = ("%S", "%X", "%T", "%c", "%r")


def _no_leap_seconds(values: pd.Series, parsed: pd.Series, fmt: str, utc: bool) -> pd.Series:
    """pandas' strptime takes seconds up to 61, as C's does, and reads second 60 or 61 as the next
    minute's first ones (23:59:60 became the next day): such a value is a bad value, as on the GPU
    and in ISO form. The few that can be one (second 0 or 1, a '60' or '61' in the text) are read
    again by the same parser with that '60' or '61' written '59': one or two seconds earlier means
    it was the seconds field."""
    if not any(d in fmt for d in _SECONDS_DIRECTIVES) or not len(parsed):
        return parsed
    maybe = (parsed.notna() & parsed.dt.second.isin([0, 1])
             & values.str.contains("6[01]", regex=True).fillna(False).astype(bool))
    if not maybe.any():
        return parsed
    leap = pd.Series(False, index=parsed.index)
    index = maybe[maybe].index
    some = pa.array(values[maybe].astype(object).tolist(), pa.string())
    times = _SIXTY.pattern
    once = np.asarray(pc.equal(pc.count_substring_regex(some, times), 1), dtype=bool)
    if once.any():              # the usual candidate: one '60' or '61' in it, read again written '59'
        one = some.filter(pa.array(once))
        earlier = pd.to_datetime(pd.Series(pc.replace_substring_regex(one, times, "59").to_pylist(), index=index[once]),
                                 format=fmt, utc=utc, errors="coerce")
        step = np.where(np.asarray(pc.match_substring(one, "60"), dtype=bool), 1, 2).astype("timedelta64[s]")
        leap[index[once]] = ((parsed[index[once]] - earlier) == pd.Series(step, index=index[once])) \
            .fillna(False).astype(bool).to_numpy()
    texts = {i: t for i, t, o in zip(index, some.to_pylist(), once) if not o}   # two or more: each in turn
    spots = {i: [(m.start(), m.group()) for m in _SIXTY.finditer(text)] for i, text in texts.items()}
    for k in range(max((len(found) for found in spots.values()), default=0)):
        at = {i: found[k] for i, found in spots.items() if len(found) > k and not leap[i]}
        if not at:
            break
        where = list(at)
        written = pd.Series([texts[i][:p] + "59" + texts[i][p + 2:] for i, (p, _) in at.items()], index=where)
        earlier = pd.to_datetime(written, format=fmt, utc=utc, errors="coerce")
        step = pd.Series([pd.Timedelta(seconds=1 if g == "60" else 2) for _, g in at.values()], index=where)
        leap[where] = ((parsed[where] - earlier) == step).fillna(False).astype(bool).to_numpy()
    return parsed.mask(leap)


_SIXTY = re.compile("6[01]")


_PANDAS_FIRST_US = -(-pd.Timestamp.min.value // 1000)   # the instants pandas' parser can give, in µs
_PANDAS_LAST_US = pd.Timestamp.max.value // 1000


def _zoned_iso_timestamps(values: pa.Array) -> pa.Array | None:
    """Arrow's ISO 8601 cast, when it reads every value and they lie in pandas' range: it refuses
    a value without an offset (read in the source's zone below), an impossible date or time and
    any form it does not know, and gives the instant pandas' parser gives for the others
    (tests/backends/test_cpu_casts.py). None: pandas parses the column."""
    try:
        cast = pc.cast(values, ARROW_TYPES["timestamp"])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    low, high = pc.min_max(cast.cast(pa.int64())).values()
    if low.is_valid and (low.as_py() < _PANDAS_FIRST_US or high.as_py() > _PANDAS_LAST_US):
        return None                # pandas' parser refuses times outside its nanosecond range
    return cast


def _in_microseconds(parsed: pd.Series) -> pd.Series:
    """Parsed times at the column's resolution: a value with digits past the microsecond
    (pandas keeps nanoseconds then) is not a valid timestamp rather than rounded."""
    if parsed.dt.unit == "us":
        return parsed
    lossy = parsed.notna() & (parsed.dt.nanosecond != 0)
    return parsed.mask(lossy).dt.as_unit("us")


def _localize(naive: pd.Series, zone: str) -> pd.Series:
    """Local wall times to UTC: an ambiguous time (the hour repeated when clocks go back) takes
    its first occurrence, a time skipped when clocks go forward moves forward past the gap."""
    if naive.dt.tz is not None:
        return naive.dt.tz_convert("UTC")
    first = np.ones(len(naive), dtype=bool)
    return naive.dt.tz_localize(zone, ambiguous=first, nonexistent="shift_forward").dt.tz_convert("UTC")


def _last_newline(view: memoryview, start: int, end: int) -> int:
    """The position of the last newline in view[start:end], or -1."""
    pos = end
    while pos > start:
        lo = max(start, pos - 65536)
        k = bytes(view[lo:pos]).rfind(b"\n")
        if k >= 0:
            return lo + k
        pos = lo
    return -1


def _next_newline(view: memoryview, pos: int) -> int:
    """The position of the first newline at or after pos, or -1 (a memoryview has no find)."""
    while pos < len(view):
        k = bytes(view[pos:pos + 65536]).find(b"\n")
        if k >= 0:
            return pos + k
        pos += 65536
    return -1


def _joined_lines(arr: pa.Array) -> bytes:
    """One buffer, records separated by newlines (the readers' input)."""
    if len(arr) == 0:
        return b""
    lists = pa.ListArray.from_arrays(pa.array([0, len(arr)], type=pa.int32()), arr.cast(pa.string()))
    return pc.binary_join(lists, "\n")[0].as_buffer().to_pybytes() + b"\n"


def _read_csv_rows(arr: pa.Array, names, delimiter: str, null_values=("",)) -> tuple[pa.Table, np.ndarray] | None:
    """(the rows pyarrow's reader made of these records, which records it took), or None when
    its rows and rejected rows do not add up to one per record. An unquoted field in
    `null_values` is null; a quoted one is always its text (`""` is an empty string)."""
    import pyarrow.csv as pcsv

    names = list(names)
    if len(arr) == 0:
        return pa.table({name: pa.array([], pa.string()) for name in names}), np.zeros(0, dtype=bool)
    rejected: list[int] = []

    def on_invalid(row):
        rejected.append(row.number)
        return "skip"

    body = _joined_lines(arr)
    table = pcsv.read_csv(
        pa.BufferReader(body),
        read_options=pcsv.ReadOptions(column_names=names, use_threads=False, block_size=max(1 << 20, len(body) + 1)),
        parse_options=pcsv.ParseOptions(delimiter=delimiter, newlines_in_values=True, invalid_row_handler=on_invalid),
        convert_options=pcsv.ConvertOptions(column_types={n: pa.string() for n in names}, null_values=list(null_values),
                                            strings_can_be_null=True, quoted_strings_can_be_null=False),
    )
    where = np.array(rejected, dtype=np.int64) - 1          # row numbers, from 1
    if (table.num_rows + len(where) != len(arr) or len(np.unique(where)) != len(where)
            or (len(where) and (where.min() < 0 or where.max() >= len(arr)))):
        return None
    parsed = np.ones(len(arr), dtype=bool)
    parsed[where] = False
    return table, parsed


def _one_row_to_the_reader(delimiter: str) -> str:
    """RE2: a record the reader reads as one row ending outside quotes: each field quoted (doubled
    quotes inside, then any text without a quote, which the reader appends) or not starting with a
    quote (any quote in it is a character to the reader), and no newline outside the quotes."""
    d = f"\\x{ord(delimiter):02x}"
    field = f'(?:"(?:[^"]|"")*"[^"\\n{d}]*|(?:[^"\\n{d}][^\\n{d}]*)?)'
    return f"^{field}(?:{d}{field})*$"


def _read_one_csv_record(line: str, names, delimiter: str, null_values=("",)) -> tuple[list | None, str | None]:
    """One record's values as the reader gives them, or (None, why). A carriage return the
    reader treats as a line break (one outside quotes) makes the record bad: it would cut the
    record in two. So does a quoted field the reader opens and the record does not close (`1,a"b,"c`):
    it would take in the newline after the record, a byte of no record."""
    read = _read_csv_rows(pa.array([line], pa.string()), names, delimiter, null_values)
    cut = "CSV record holds a carriage return (\\r) outside quotes (records end with \\n or \\r\\n)"
    if read is None:
        return None, cut if "\r" in line else UNPAIRED_QUOTES
    table, parsed = read
    if not parsed[0]:
        return None, None
    values = [table.column(name)[0].as_py() for name in names]
    if sum((v or "").count("\n") for v in values) > line.count("\n"):
        return None, OPEN_QUOTE
    if sum((v or "").count("\r") for v in values) != line.count("\r"):
        return None, cut
    return values, None


UNTERMINATED_QUOTE = "CSV record has an unterminated quote (a quoted field runs to the end of the file)"
OPEN_QUOTE = "CSV record opens a quoted field it does not close (a quote inside an unquoted field?)"
UNPAIRED_QUOTES = "CSV record's quotes do not pair up as RFC 4180's (a quote inside an unquoted field?)"


def _gather_index(ok: np.ndarray) -> pa.Array:
    """For each record, the index of its row among the parsed (good) rows; 0 for bad ones."""
    return pa.array(np.maximum(np.cumsum(ok) - 1, 0))


def _image_steps():
    """backends/cpu_image_steps.py, imported when an image step first runs (Pillow and simplejpeg
    are not loaded with the backend)."""
    from . import cpu_image_steps

    return cpu_image_steps


def _exact_sums(key: np.ndarray, count: np.ndarray) -> np.ndarray:
    """np.bincount(key, weights=count) in int64 (bincount's weights are float64)."""
    sums = np.zeros(int(key.max()) + 1, dtype=np.int64)
    np.add.at(sums, key, count)
    return sums
