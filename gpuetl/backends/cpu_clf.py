"""Kernels for the Common/Combined Log Format presets (CPU backend).

Extraction runs on polars' Rust regex engine, faster here than RE2's submatch extraction
(benchmarks/bench_parse_kernels.py; numbers in benchmarks/README.md). The
preset's alternation (a usual `METHOD PATH PROTOCOL` request or any quoted text) is slow in a
regex engine, so it is taken apart: one regex with the usual request only reads nearly every
line; the lines it leaves get, as on the GPU, the whole line with the request as one quoted
field, then `METHOD PATH PROTOCOL` on the request alone. Both ways give exactly what the
alternation gives (both alternatives end at the first unescaped quote). Rust's `\\S` and `\\d`
are Unicode-aware, RE2's are ASCII: the classes are spelt out so the captures equal pyarrow's
extract_regex byte for byte (tests/backends/test_cpu_clf.py).
"""

from __future__ import annotations

import functools
import importlib.util

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .civil import civil_to_days, days_in_month

REQUEST_RE = r'^(?P<method>[A-Z]+) (?P<path>(?:[^ \t"\\]|\\.)+) (?P<protocol>[A-Za-z0-9./]+)$'
REQUEST_PARTS = ("method", "path", "protocol")


@functools.cache
def polars_available() -> bool:
    """polars is a dependency; where it is missing (a bare GPU image), RE2's extract_regex runs
    the preset regex itself and gives the very same values, and row_hash falls back to hash64."""
    return importlib.util.find_spec("polars") is not None


def polars():
    """polars, imported on first use (the CPU backend works without it). Its thread pool and
    allocator are the process's: the `gpuetl` command sizes them (gpuetl/cli/tuning.py), library
    callers keep their own."""
    import polars as pl

    return pl


def one_array(arr: pa.ChunkedArray) -> pa.Array:
    """One Array from a ChunkedArray: combine_chunks copies even a single chunk."""
    return arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()


def outer_regex(regex: str) -> str:
    """The preset regex with the request as one quoted field (its parts come from REQUEST_RE)."""
    from ..parsing import presets

    return regex.replace(presets.REQUEST_FIELD, '"(?P<request>' + presets.QUOTED_BODY + ')"')


def standard_regex(regex: str) -> str | None:
    """The preset regex with only the request's usual `METHOD PATH PROTOCOL` form (no
    alternation), or None where the regex has no request field. On a line it matches it captures
    what the preset captures: the fields before the request are fixed by spaces and brackets, and
    a usual request, which holds no unescaped quote, ends at the same quote as any other."""
    from ..parsing import presets

    if presets.REQUEST_FIELD not in regex:
        return None
    return regex.replace(presets.REQUEST_FIELD, '"(?P<request>' + REQUEST_RE[1:-1] + ')"')


def _ascii_classes(regex: str) -> str:
    """RE2's ASCII meaning of \\S and \\d in the Rust regex dialect."""
    return regex.replace(r"\S", r"[^\t\n\f\r ]").replace(r"\d", "[0-9]")


def extract_clf(arr: pa.Array, regex: str, names: tuple[str, ...], null_empty: bool = False,
                null_dash: bool = False) -> tuple[dict, np.ndarray]:
    """({name: pa.StringArray}, matched) with the values pc.extract_regex(arr, regex) gives; with
    null_empty, empty values become null, and with null_dash '-' too (the presets' "no value").
    `arr` may be a ChunkedArray (a partition's parse batches); each column comes back as one
    Array all the same.

    One pass of standard_regex takes the lines whose request has the usual form (nearly all of
    them, in less time than the two regexes); only the lines it leaves go through the
    two regexes (outer_regex, then REQUEST_RE on the request)."""
    pl = polars()
    chunks = [polars_lines(c) for c in (arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr])] \
        or [polars_lines(pa.array([], pa.string()))]
    single = standard_regex(regex)
    if single is None or not any(n in REQUEST_PARTS for n in names):
        return _two_regexes(_joined(chunks), regex, names, null_empty, null_dash)
    # chunk by chunk (a partition's parse batches: cache-sized temporaries), then joined in
    # polars, which moves only 16-byte views, so that each column is exported as one piece
    frames = [pl.DataFrame({"line": lines}).select(
        pl.col("line").str.extract_groups(_ascii_classes(single)).alias("g")).unnest("g") for lines in chunks]
    frame = frames[0] if len(frames) == 1 else pl.concat(frames, rechunk=True)
    matched = frame.get_column("ip").is_not_null().to_numpy()
    out = finish_captures(frame, names, null_empty, null_dash)
    if matched.all():
        return out, matched
    rest = ~matched
    others, others_matched = _two_regexes(_joined(chunks).filter(pl.Series(rest)), regex, names, null_empty,
                                          null_dash)
    mask = pa.array(rest)
    out = {name: pc.replace_with_mask(out[name], mask, others[name]) for name in names}
    matched[rest] = others_matched
    return out, matched


def polars_lines(arr: pa.Array):
    pl = polars()
    return pl.from_arrow(arr) if len(arr) else pl.Series([], dtype=pl.String)


def _joined(chunks: list):
    return chunks[0] if len(chunks) == 1 else polars().concat(chunks)


def _two_regexes(lines, regex: str, names: tuple[str, ...], null_empty: bool, null_dash: bool):
    """The preset's alternation in two steps: the whole line with the request as one quoted
    field, then `METHOD PATH PROTOCOL` on the request alone (both faster than the alternation)."""
    pl = polars()
    outer = _ascii_classes(outer_regex(regex))
    frame = pl.DataFrame({"line": lines}).select(pl.col("line").str.extract_groups(outer).alias("g")).unnest("g")
    matched = frame.get_column("ip").is_not_null()
    if any(n in REQUEST_PARTS for n in names):
        parts = pl.col("request").str.extract_groups(_ascii_classes(REQUEST_RE)).alias("r")
        frame = frame.with_columns(parts).unnest("r")
    return finish_captures(frame, names, null_empty, null_dash), matched.to_numpy()


def finish_captures(frame, names: tuple[str, ...], null_empty: bool, null_dash: bool) -> dict:
    """The captures as Arrow strings, with RE2's "" for request parts that did not take part
    and the presets' nulls."""
    pl = polars()
    if null_empty:          # the presets' way: "" (and a request part that did not take part) is null
        keep = []
        for name in names:
            col = pl.col(name)
            valid = col.str.len_bytes() > 0
            if null_dash:
                valid = valid & (col != "-")
            keep.append(valid.fill_null(False).alias(name))
        values, valid = frame.select(list(names)).to_arrow(), frame.select(keep).to_arrow()
        return {name: _with_validity(one_array(values.column(name)), one_array(valid.column(name)))
                for name in names}
    exprs = []
    for name in names:
        col = pl.col(name)
        if name in REQUEST_PARTS:        # RE2: "" where the request is not METHOD PATH PROTOCOL
            col = pl.when(pl.col("ip").is_not_null()).then(col.fill_null(""))
        drop = None
        if null_empty:
            drop = col.str.len_bytes() == 0
        if null_dash:
            drop = (col == "-") if drop is None else drop | (col == "-")
        exprs.append((pl.when(~drop).then(col) if drop is not None else col).alias(name))
    table = frame.select(exprs).to_arrow()
    return {name: one_array(table.column(name)).cast(pa.string()) for name in names}


def _with_validity(values: pa.Array, valid: pa.Array) -> pa.Array:
    """values (polars' large strings) as Arrow strings, null where `valid` is false. The bytes
    stay where they are and `valid`'s bits become the validity, which is cheaper than a masking
    expression in polars before the export."""
    n = len(values)
    if pa.types.is_large_string(values.type) and n and not valid.offset and not valid.null_count:
        _, offsets_buf, data = values.buffers()
        offsets = np.frombuffer(offsets_buf, dtype=np.int64)[values.offset: values.offset + n + 1]
        if data is not None and offsets[-1] < 2**31:
            return pa.Array.from_buffers(pa.string(), n, [valid.buffers()[1], pa.py_buffer(offsets.astype(np.int32)),
                                                          data])
    return pc.if_else(valid, values, pa.scalar(None, values.type)).cast(pa.string())


CLF_TIME_FORMAT = "%d/%b/%Y:%H:%M:%S %z"
_MONTHS = [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"]
_MONTH_CODES = np.array([(m[0] << 16) | (m[1] << 8) | m[2] for m in _MONTHS], dtype=np.int64)
_MONTH_ORDER = np.argsort(_MONTH_CODES)
_DIGIT_COLUMNS = np.array([0, 1, 7, 8, 9, 10, 12, 13, 15, 16, 18, 19, 22, 23, 24, 25])
_SEPARATOR_COLUMNS = np.array([2, 6, 11, 14, 17, 20])
_SEPARATORS = np.array([47, 47, 58, 58, 58, 32], dtype=np.uint8)         # / / : : : space


def parse_clf_time(arr: pa.Array, slow=None) -> pa.Array:
    """`10/Oct/2026:13:55:36 -0700` → UTC timestamp[us] at a fraction of strptime's cost: fixed
    positions, numpy arithmetic. Values that are not exactly of this shape and range go to
    `slow` (default pc.strptime; the CPU backend passes its strict parser), whose verdict stands."""
    n = len(arr)
    target = pa.timestamp("us", tz="UTC")
    arr = arr.cast(pa.large_string())
    _, offsets_buf, data_buf = arr.buffers()
    if slow is None:
        def slow(values):
            return pc.strptime(values, format=CLF_TIME_FORMAT, unit="us", error_is_null=True)
    if n == 0 or data_buf is None:
        return slow(arr).cast(target)
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[arr.offset: arr.offset + n + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8)
    is_valid = np.asarray(arr.is_valid(), dtype=bool)
    valid = is_valid & (np.diff(offsets) == 26)
    if valid.all():             # the usual column: n values of 26 bytes back to back, no copy
        rows = np.arange(n)
        m = data[offsets[0]: offsets[0] + 26 * n].reshape(n, 26)
    else:
        rows = np.flatnonzero(valid)
        padded = np.concatenate([data, np.zeros(26, np.uint8)])
        window = np.lib.stride_tricks.as_strided(padded, shape=(len(data), 26), strides=(1, 1))
        m = window[offsets[rows]]                              # rows × 26 bytes
    # a digit minus '0' is 0..9; anything else wraps past 9 in uint8
    ok = ((m[:, _DIGIT_COLUMNS] - np.uint8(48)) <= 9).all(axis=1)
    ok &= (m[:, _SEPARATOR_COLUMNS] == _SEPARATORS).all(axis=1)
    ok &= (m[:, 21] == 43) | (m[:, 21] == 45)

    def num(first, width):
        value = m[:, first].astype(np.int32) - 48
        for c in range(first + 1, first + width):
            value = value * 10 + (m[:, c].astype(np.int32) - 48)
        return value

    code = (m[:, 3].astype(np.int32) << 16) | (m[:, 4].astype(np.int32) << 8) | m[:, 5]
    pos = np.minimum(np.searchsorted(_MONTH_CODES[_MONTH_ORDER], code), 11)
    month = _MONTH_ORDER[pos] + 1
    ok &= _MONTH_CODES[month - 1] == code
    day, year = num(0, 2), num(7, 4)
    hour, minute, second = num(12, 2), num(15, 2), num(18, 2)
    zone_h, zone_m = num(22, 2), num(24, 2)
    ok &= (day >= 1) & (day <= days_in_month(np, year, month)) & (hour <= 23) & (minute <= 59) & (second <= 59)
    ok &= (zone_h <= 23) & (zone_m <= 59)
    days = civil_to_days(np, year, month, day).astype(np.int64)
    offset = (zone_h * 3600 + zone_m * 60) * np.where(m[:, 21] == 45, -1, 1)
    seconds = days * 86400 + (hour * 3600 + minute * 60 + second - offset)
    micros = np.zeros(n, dtype=np.int64)
    micros[rows] = seconds * 1_000_000
    fast = np.zeros(n, dtype=bool)
    fast[rows[ok]] = True
    result = pa.Array.from_buffers(target, n, [pa.array(fast).buffers()[1], pa.py_buffer(micros)])
    rest = np.flatnonzero(~fast & is_valid)
    if len(rest):
        parsed = slow(arr.take(pa.array(rest)))
        index = np.arange(n)
        index[rest] = n + np.arange(len(rest))
        result = pa.concat_arrays([result, parsed.cast(target)]).take(pa.array(index))
    return result
