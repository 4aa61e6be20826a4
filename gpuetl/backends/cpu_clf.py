"""A split-based tokenizer for the Common/Combined Log Format presets (CPU backend).

RE2 spends most of its time extracting submatches; deciding whether a line matches is several
times cheaper (a DFA). So RE2 decides which lines match the preset's regex, and for those lines
the regex is unambiguous: each field ends at the first space, ']' or unescaped '"' after its
start, which numpy finds for all lines at once. Every field and every gap between fields then
becomes one element of a single string array over the original buffer, and field f is every
(2f)-th element: one copy per field. The values equal the regex's captures, field for field
(tests/backends/test_cpu_clf.py compares them with pyarrow's extract_regex).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SPACE, QUOTE, CLOSE, BACKSLASH = 32, 34, 93, 92
REQUEST_RE = r'^(?P<method>[A-Z]+) (?P<path>(?:[^ \t"\\]|\\.)+) (?P<protocol>[A-Za-z0-9./]+)$'
CLF_FIELDS = ("ip", "ident", "user", "time", "request", "status", "size")
COMBINED_FIELDS = CLF_FIELDS + ("referer", "user_agent")


def extract_clf(arr: pa.Array, regex: str, names: tuple[str, ...], combined: bool,
                null_empty: bool = False, null_dash: bool = False) -> tuple[dict, np.ndarray]:
    """({name: pa.StringArray}, matched) with the values pc.extract_regex(arr, regex) gives; with
    null_empty, empty values become null, and with null_dash '-' too (the presets' "no value")."""
    n = len(arr)
    matched = np.asarray(pc.fill_null(pc.match_substring_regex(arr, pattern=regex), False), dtype=bool)
    arr = arr.cast(pa.large_string())
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[arr.offset: arr.offset + n + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    fields = COMBINED_FIELDS if combined else CLF_FIELDS
    starts, ends = offsets[:-1], offsets[1:]
    bounds = np.repeat(starts[:, None], 2 * len(fields), axis=1)   # unmatched rows: empty, null
    slashes = np.flatnonzero(data == BACKSLASH)
    escaped = np.searchsorted(slashes, ends) > np.searchsorted(slashes, starts) if len(slashes) else np.zeros(n, bool)
    simple = np.flatnonzero(matched & ~escaped)
    if len(simple):
        rows, got = _simple_bounds(data, starts[simple], ends[simple], combined)
        bounds[simple[rows]] = got
        escaped[simple[~np.isin(np.arange(len(simple)), rows)]] = True   # not found in a window: general path
    general = np.flatnonzero(matched & escaped)
    if len(general):                       # few lines: work on a copy of just their bytes
        lengths = ends[general] - starts[general]
        local_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        subset = arr.take(pa.array(general)).buffers()[2]
        sub = np.frombuffer(subset, dtype=np.uint8)[:int(lengths.sum())]
        local = _field_bounds(sub, local_starts, local_starts + lengths, combined)
        bounds[general] = local - local_starts[:, None] + starts[general][:, None]
    bounds = np.concatenate([bounds, _request_bounds(arr, data, bounds, matched)], axis=1)
    values = _take_fields(data, bounds, matched, null_empty, null_dash)
    out = dict(zip(fields + ("method", "path", "protocol"), values))
    return {name: out[name] for name in names}, matched


def _request_bounds(arr: pa.Array, data: np.ndarray, bounds: np.ndarray, matched: np.ndarray) -> np.ndarray:
    """method, path, protocol: when the request is `METHOD PATH PROTOCOL` (REQUEST_RE, decided
    by RE2's DFA), method ends at its first space and protocol starts after its last (neither
    can hold a space), path is between; otherwise all three are empty, as RE2 leaves them."""
    start, end = bounds[:, 8], bounds[:, 9]
    out = np.repeat(start[:, None], 6, axis=1)
    if not matched.any():
        return out
    request = _take_fields(data, bounds[:, 8:10], matched)[0]
    rows = np.flatnonzero(np.asarray(pc.fill_null(pc.match_substring_regex(request, pattern=REQUEST_RE), False),
                                     dtype=bool))
    if not len(rows):
        return out
    width = 32
    padded = np.concatenate([data, np.zeros(width, np.uint8)])
    windows = np.lib.stride_tricks.as_strided(padded, shape=(len(data), width), strides=(1, 1))
    s, e = start[rows], end[rows]
    head = windows[s] == SPACE
    first = s + np.argmax(head, axis=1)
    tail_from = np.maximum(e - width, s)
    tail = (windows[tail_from] == SPACE) & (np.arange(width)[None, :] < (e - tail_from)[:, None])
    last = tail_from + (width - 1) - np.argmax(tail[:, ::-1], axis=1)
    for i in np.flatnonzero(~head.any(axis=1) | ~tail.any(axis=1)):   # a method or protocol over 31 bytes
        text = data[s[i]:e[i]].tobytes()
        first[i], last[i] = s[i] + text.index(b" "), s[i] + text.rindex(b" ")
    out[rows] = np.stack([s, first, first + 1, last, last + 1, e], axis=1)
    return out


def _unescaped_quotes(data: np.ndarray, marks: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """Quote positions, less those escaped by an odd run of backslashes before them."""
    quotes = marks[kinds == QUOTE]
    after_slash = np.flatnonzero(data[np.maximum(quotes - 1, 0)] == BACKSLASH)
    if len(after_slash):
        slashes = marks[kinds == BACKSLASH]
        index = np.arange(len(slashes))
        run_start = np.maximum.accumulate(np.where(np.diff(slashes, prepend=-2) != 1, index, 0))
        last = np.searchsorted(slashes, quotes[after_slash]) - 1        # the slash just before
        run = last - run_start[last] + 1
        quotes = np.delete(quotes, after_slash[run % 2 == 1])
    return quotes


_MARKS = np.zeros(256, dtype=bool)
_MARKS[[SPACE, QUOTE, CLOSE, BACKSLASH]] = True


def _first_three(window: np.ndarray, byte: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Columns of the first three `byte`s in each window row, and whether there are three."""
    rows, cols = np.nonzero(window == byte)
    first = np.searchsorted(rows, np.arange(len(window)))
    picks, found = [], np.ones(len(window), dtype=bool)
    for k in range(3):
        at = np.minimum(first + k, len(rows) - 1) if len(rows) else np.zeros(len(window), np.int64)
        hit = (first + k < len(rows)) & (rows[at] == np.arange(len(window))) if len(rows) else ~found
        found &= hit
        picks.append(cols[at] if len(rows) else at)
    return picks, found


def _simple_bounds(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, combined: bool):
    """Field bounds for matching lines without a backslash, where quotes cannot be escaped:
    counted from the line's end, the last six (four) quotes delimit request, referer and agent;
    the first three spaces, found in a 64-byte window, delimit ip, ident and user. Returns the
    rows it could place (all, unless a window was too short) and their bounds."""
    padded = np.concatenate([data, np.zeros(64, np.uint8)])
    windows = np.lib.stride_tricks.as_strided(padded, shape=(len(data), 64), strides=(1, 1))
    quotes = np.flatnonzero(data == QUOTE)
    last = np.searchsorted(quotes, ends) - 1                   # index of the line's last quote
    if combined:
        ua_open, ref_close, ref_open = quotes[last - 1], quotes[last - 2], quotes[last - 3]
        req_close, req_open = quotes[last - 4], quotes[last - 5]
        tail_end = ref_open - 1
    else:
        req_close, req_open = quotes[last], quotes[last - 1]
        tail_end = ends
    (sp0, sp1, sp2), ok = _first_three(windows[starts], SPACE)
    gap = windows[req_close + 2][:, :32] == SPACE        # "status size": one space inside
    mid = np.argmax(gap, axis=1)
    ok &= gap[np.arange(len(gap)), mid]
    sp0, sp1, sp2, mid = starts + sp0, starts + sp1, starts + sp2, req_close + 2 + mid
    cols = [starts, sp0, sp0 + 1, sp1, sp1 + 1, sp2, sp2 + 2, req_open - 2, req_open + 1, req_close,
            req_close + 2, mid, mid + 1, tail_end]
    if combined:
        cols += [ref_open + 1, ref_close, ua_open + 1, ends - 1]
    bounds = np.stack(cols, axis=1)
    rows = np.flatnonzero(ok)
    return rows, bounds[rows]


def _field_bounds(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, combined: bool) -> np.ndarray:
    """(rows, 2 × fields) start/end offsets of each field, for lines known to match."""
    marks = np.flatnonzero(_MARKS[data])
    kinds = data[marks]
    spaces = marks[kinds == SPACE]
    closes = marks[kinds == CLOSE]
    quotes = _unescaped_quotes(data, marks, kinds)
    si = np.searchsorted(spaces, starts)
    sp0, sp1, sp2 = spaces[si], spaces[si + 1], spaces[si + 2]
    rb = closes[np.searchsorted(closes, sp2)]
    qi = np.searchsorted(quotes, rb + 3)
    q_req = quotes[qi]
    s_status = spaces[np.searchsorted(spaces, q_req + 2)]
    s_size = spaces[np.searchsorted(spaces, s_status + 1)] if combined else ends
    cols = [starts, sp0, sp0 + 1, sp1, sp1 + 1, sp2, sp2 + 2, rb, rb + 3, q_req,
            q_req + 2, s_status, s_status + 1, s_size]
    if combined:
        q_ref_end = quotes[qi + 2]
        cols += [s_size + 2, q_ref_end, q_ref_end + 3, ends - 1]
    return np.stack(cols, axis=1)


def _take_fields(data: np.ndarray, bounds: np.ndarray, valid: np.ndarray, null_empty: bool = False,
                 null_dash: bool = False) -> list[pa.Array]:
    """Field f of every row is element 2f of a string array whose elements are the fields and
    the gaps between them, in order, over `data` itself: one copy per field (the take)."""
    rows, width = bounds.shape
    fields = width // 2
    if rows == 0:
        return [pa.array([], pa.string()) for _ in range(fields)]
    wide = len(data) >= 2**31
    offsets = np.empty(rows * width + 1, dtype=np.int64 if wide else np.int32)
    offsets[:-1] = bounds.reshape(-1)
    offsets[-1] = bounds[-1, -1]
    keep = np.repeat(valid[:, None], width, axis=1)
    if null_empty or null_dash:
        length = bounds[:, 1::2] - bounds[:, 0::2]
        drop = length == 0 if null_empty else np.zeros(length.shape, dtype=bool)
        if null_dash and len(data):
            first = data[np.minimum(bounds[:, 0::2], len(data) - 1)]
            drop |= (length == 1) & (first == ord("-"))
        keep[:, 0::2] &= ~drop
    validity = None if keep.all() else pa.array(keep.reshape(-1)).buffers()[1]
    tokens = pa.Array.from_buffers(pa.large_string() if wide else pa.string(), len(offsets) - 1,
                                   [validity, pa.py_buffer(offsets), pa.py_buffer(data)])
    step = np.arange(rows, dtype=np.int64) * width
    out = [tokens.take(pa.array(step + 2 * f)) for f in range(fields)]
    return [o.cast(pa.string()) for o in out] if wide else out


CLF_TIME_FORMAT = "%d/%b/%Y:%H:%M:%S %z"
_MONTHS = [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"]
_MONTH_CODES = np.array([(m[0] << 16) | (m[1] << 8) | m[2] for m in _MONTHS], dtype=np.int64)
_MONTH_ORDER = np.argsort(_MONTH_CODES)
_DAYS_IN_MONTH = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


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
    valid = np.asarray(arr.is_valid(), dtype=bool) & (np.diff(offsets) == 26)
    rows = np.flatnonzero(valid)
    padded = np.concatenate([data, np.zeros(26, np.uint8)])
    window = np.lib.stride_tricks.as_strided(padded, shape=(len(data), 26), strides=(1, 1))
    m = window[offsets[rows]]                                  # rows × 26 bytes
    d = m.astype(np.int16) - 48

    def num(first, width):
        value = d[:, first].astype(np.int64)
        for c in range(first + 1, first + width):
            value = value * 10 + d[:, c]
        return value

    digits = np.concatenate([d[:, 0:2], d[:, 7:11], d[:, 12:14], d[:, 15:17], d[:, 18:20], d[:, 22:26]], axis=1)
    ok = ((digits >= 0) & (digits <= 9)).all(axis=1)
    separators = m[:, [2, 6, 11, 14, 17, 20]]
    ok &= (separators == np.array([47, 47, 58, 58, 58, 32], dtype=np.uint8)).all(axis=1)
    ok &= (m[:, 21] == 43) | (m[:, 21] == 45)
    code = (m[:, 3].astype(np.int64) << 16) | (m[:, 4].astype(np.int64) << 8) | m[:, 5]
    pos = np.minimum(np.searchsorted(_MONTH_CODES[_MONTH_ORDER], code), 11)
    month = _MONTH_ORDER[pos] + 1
    ok &= _MONTH_CODES[month - 1] == code
    day, year = num(0, 2), num(7, 4)
    hour, minute, second = num(12, 2), num(15, 2), num(18, 2)
    zone_h, zone_m = num(22, 2), num(24, 2)
    leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
    dim = _DAYS_IN_MONTH[month - 1] + ((month == 2) & leap)
    ok &= (day >= 1) & (day <= dim) & (hour <= 23) & (minute <= 59) & (second <= 59)
    ok &= (zone_h <= 23) & (zone_m <= 59)
    # days from civil (H. Hinnant): proleptic Gregorian, no Python loop
    y = year - (month <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    mp = (month + 9) % 12
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    days = era * 146097 + doe - 719468
    sign = np.where(m[:, 21] == 45, -1, 1)
    seconds = days * 86400 + hour * 3600 + minute * 60 + second - sign * (zone_h * 3600 + zone_m * 60)
    micros = np.zeros(n, dtype=np.int64)
    micros[rows] = seconds * 1_000_000
    fast = np.zeros(n, dtype=bool)
    fast[rows[ok]] = True
    result = pa.Array.from_buffers(target, n, [pa.array(fast).buffers()[1], pa.py_buffer(micros)])
    rest = np.flatnonzero(~fast & np.asarray(arr.is_valid(), dtype=bool))
    if len(rest):
        parsed = slow(arr.take(pa.array(rest)))
        index = np.arange(n)
        index[rest] = n + np.arange(len(rest))
        result = pa.concat_arrays([result, parsed.cast(target)]).take(pa.array(index))
    return result
