"""Deterministic sample data for examples, tests and benchmarks.

Three generators, all pure stdlib + numpy and deterministic for a given seed
(same bytes on every run and every machine: only integer draws and exact
IEEE arithmetic are used, never libm functions whose last bit may vary):

* :func:`write_access_logs` -- Apache *combined* access log lines, fast enough
  to produce gigabytes (lines are assembled from pre-built string pools with
  one ``"".join`` per ~100k-line chunk, not formatted one by one);
* :func:`write_app_events` -- JSON Lines application events with nulls and
  missing keys;
* :func:`write_syslog` -- RFC 3164 syslog lines;
* :func:`write_java_log` -- a Java application log whose errors carry stack
  traces (multi-line records, for ``source.multiline``).

``python -m gpuetl.samples OUT_DIR`` writes the sample set used by the
example pipelines (see :func:`main`).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gzip as _gzip
import os
import sys
from pathlib import Path

import numpy as np

__all__ = [
    "write_access_logs",
    "write_app_events",
    "write_syslog",
    "write_java_log",
    "write_sample_set",
    "main",
]

CHUNK_LINES = 100_000
_EPOCH_START = int(_dt.datetime(2026, 10, 1, tzinfo=_dt.timezone.utc).timestamp())
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DAYS_IN_POOL = 4096  # ~11 years of day strings; timestamps wrap around after that


# --------------------------------------------------------------------------- helpers


def _obj(seq) -> np.ndarray:
    """A 1-D numpy object array of Python strings (fancy-indexable, C-speed)."""
    a = np.empty(len(seq), dtype=object)
    a[:] = list(seq)
    return a


def _weighted(rng: np.random.Generator, weights, n: int) -> np.ndarray:
    """n indices drawn with integer weights (integer arithmetic only -> portable)."""
    w = np.asarray(weights, dtype=np.int64)
    cum = np.cumsum(w)
    r = rng.integers(0, int(cum[-1]), size=n)
    return np.searchsorted(cum, r, side="right")


def _skewed(rng: np.random.Generator, size: int, n: int) -> np.ndarray:
    """n indices in [0, size) with a heavy head (a few hot clients / pages)."""
    u = rng.random(n)
    return np.minimum((u * u * u * size).astype(np.int64), size - 1)


def _int_strs(values: np.ndarray) -> list[str]:
    return list(map(str, values.tolist()))


class _Writer:
    """Writes text chunks to a plain or gzip file, counting (uncompressed) bytes."""

    def __init__(self, path, gzip: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._raw = open(self.path, "wb")
        if gzip:
            # mtime=0 and no file name in the header -> reproducible gzip bytes
            self._f = _gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, mtime=0, compresslevel=6)
        else:
            self._f = self._raw
        self.nbytes = 0

    def write(self, text: str) -> None:
        data = text.encode("utf-8")
        self._f.write(data)
        self.nbytes += len(data)

    def close(self) -> None:
        if self._f is not self._raw:
            self._f.close()
        self._raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _chunk_rng(seed: int, stream: int, chunk: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), stream, chunk])


# --------------------------------------------------------------------------- access logs

# Strings that stand between fields are folded into the pools so that a line is
# exactly the concatenation of _ACCESS_PIECES pieces (see _access_chunk).

_METHODS = ("GET ", "POST ", "PUT ", "DELETE ", "HEAD ")
_METHOD_W = (78, 12, 3, 2, 5)

# (path prefix, takes a numeric id, possible suffixes, method mask)
_PATHS = (
    ("/", False, ("",)),
    ("/index.html", False, ("",)),
    ("/api/v1/items/", True, ("", "?x=1", "?fields=name,price", "?expand=owner&v=2")),
    ("/api/v1/users/", True, ("", "/orders", "/profile?lang=en")),
    ("/api/v1/search", False, ("?q=gpu", "?q=parquet+etl&page=2", "?q=%E2%9C%93&sort=desc", "?q=logs")),
    ("/static/js/app.", True, (".js", ".min.js")),
    ("/static/css/site.", True, (".css",)),
    ("/img/products/", True, (".png", ".jpg", ".webp")),
    ("/blog/2026/", True, ("-release-notes", "-benchmarks.html", "")),
    ("/login", False, ("", "?next=%2Faccount")),
    ("/health", False, ("",)),
    ("/wp-login.php", False, ("",)),
    ("/.env", False, ("",)),
    ("/favicon.ico", False, ("",)),
)
_PATH_W = (8, 6, 22, 8, 6, 10, 6, 12, 5, 4, 6, 2, 1, 4)

_PROTOCOLS = (' HTTP/1.1" ', ' HTTP/2.0" ', ' HTTP/1.0" ')
_PROTOCOL_W = (70, 27, 3)

_STATUSES = (200, 201, 204, 301, 302, 304, 400, 401, 403, 404, 429, 500, 502, 503)
_STATUS_W = (700, 15, 10, 15, 25, 90, 10, 8, 7, 90, 5, 12, 6, 7)

_IDENT_USER = (" - - [", " - frank [", " - alice [", " - bob [", " - svc-backup [", " - carol@example.com [", " ops - [")
_IDENT_USER_W = (900, 25, 20, 15, 20, 10, 10)

# (offset string, offset seconds)
_TZS = (("-0700", -7 * 3600), ("+0000", 0), ("+0200", 2 * 3600), ("-0400", -4 * 3600),
        ("+0530", 5 * 3600 + 1800), ("+0900", 9 * 3600), ("-0930", -(9 * 3600 + 1800)))
_TZ_W = (40, 25, 12, 10, 6, 5, 2)

_REFERERS = (
    "-",
    "https://example.com/start",
    "https://example.com/",
    "https://www.google.com/",
    "https://duckduckgo.com/?q=gpu+etl",
    "https://example.com/api/v1/items/42?x=1",
    "https://news.ycombinator.com/item?id=41000000",
    "android-app://com.example.app",
    "http://localhost:8080/debug",
)
_REFERER_W = (45, 15, 10, 10, 4, 6, 3, 4, 3)

_USER_AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/128.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:131.0) Gecko/20100101 Firefox/131.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.0 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "curl/8.9.1",
    "python-requests/2.32.3",
    "Googlebot/2.1 (+http://www.google.com/bot.html)",
    'Mozilla/5.0 (compatible; \\"QuotedBot\\"/1.0; +https://example.com/bot)',  # escaped quote
    "-",
)
_UA_W = (35, 20, 15, 12, 6, 5, 4, 2, 1)

_GARBAGE = (
    "### log rotated by logrotate ###",
    "\tat com.example.Handler.handle(Handler.java:42)",
    "GET /only-a-request-line HTTP/1.1",
    "Connection reset by peer",
    "%%%% binary junk \x7f\x7f %%%%",
    '{"msg": "json where a log line should be"}',
)


def _ip_pool(rng: np.random.Generator, n4: int = 4000, n6: int = 300) -> np.ndarray:
    o = rng.integers(1, 255, size=(n4, 4))
    first = np.array([203, 198, 192, 10, 172, 81, 93, 185, 45, 66, 151, 24], dtype=np.int64)
    o[:, 0] = first[rng.integers(0, len(first), size=n4)]
    v4 = [f"{a}.{b}.{c}.{d}" for a, b, c, d in o.tolist()]
    h = rng.integers(0, 0x10000, size=(n6, 3))
    v6 = []
    for i, (a, b, c) in enumerate(h.tolist()):
        v6.append(f"2001:db8::{a:x}" if i % 3 == 0 else f"2001:db8:{a:x}:{b:x}::{c:x}")
    pool = v4 + v6
    order = rng.permutation(len(pool))  # interleave v6 with v4 across the skew
    return _obj([pool[i] for i in order.tolist()])


def _day_pool() -> np.ndarray:
    start = _dt.date(2026, 10, 1) - _dt.timedelta(days=1)  # local time may be a day before UTC
    out = []
    for i in range(_DAYS_IN_POOL):
        d = start + _dt.timedelta(days=i)
        out.append(f"{d.day:02d}/{_MONTHS[d.month - 1]}/{d.year}:")
    return _obj(out)


_HMS_POOL: np.ndarray | None = None


def _hms_pool() -> np.ndarray:
    global _HMS_POOL
    if _HMS_POOL is None:
        _HMS_POOL = _obj([f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}" for s in range(86400)])
    return _HMS_POOL


class _AccessPools:
    def __init__(self, seed: int):
        rng = np.random.default_rng([int(seed), 0xACCE55])
        self.ips = _ip_pool(rng)
        self.days = _day_pool()
        self.hms = _hms_pool()
        self.ident_user = _obj(_IDENT_USER)
        self.tz = _obj([f" {s}] \"" for s, _ in _TZS])
        self.tz_off = np.array([o for _, o in _TZS], dtype=np.int64)
        self.methods = _obj(_METHODS)
        self.path_prefix = _obj([p for p, _, _ in _PATHS])
        self.path_has_id = np.array([h for _, h, _ in _PATHS], dtype=bool)
        self.path_writable = np.array([p.startswith(("/api/", "/login")) for p, _, _ in _PATHS], dtype=bool)
        self.path_suffixes = [_obj(s) for _, _, s in _PATHS]
        self.protocols = _obj(_PROTOCOLS)
        self.status = _obj([f"{s} " for s in _STATUSES])
        self.status_code = np.array(_STATUSES, dtype=np.int64)
        self.referers = _obj([f' "{r}" "' for r in _REFERERS])
        self.uas = _obj([f'{u}"\n' for u in _USER_AGENTS])
        self.garbage = _obj([g + "\n" for g in _GARBAGE])
        self.empty = _obj([""])


_ACCESS_PIECES = 13


def _access_chunk(pools: _AccessPools, rng: np.random.Generator, n: int, t0: int,
                  first_lineno: int, bad_every: int) -> tuple[str, int]:
    """Build n lines as one string. Returns (text, last UTC second used)."""
    # --- row-level draws -------------------------------------------------------------
    ip = _skewed(rng, len(pools.ips), n)
    iu = _weighted(rng, _IDENT_USER_W, n)
    # arrival times: monotone UTC seconds, 0..2 s apart (about one request a second)
    secs = t0 + np.cumsum(rng.integers(0, 3, size=n))
    tz = _weighted(rng, _TZ_W, n)
    method = _weighted(rng, _METHOD_W, n)
    path = _weighted(rng, _PATH_W, n)
    ids = rng.integers(1, 100_000, size=n)
    suffix_pick = rng.integers(0, 1 << 30, size=n)
    proto = _weighted(rng, _PROTOCOL_W, n)
    status = _weighted(rng, _STATUS_W, n)
    # response sizes: a few magnitude buckets, uniform inside each (integers only)
    bucket = _weighted(rng, (10, 45, 35, 9, 1), n)
    lo = np.array([0, 200, 2_000, 50_000, 1_000_000], dtype=np.int64)[bucket]
    hi = np.array([200, 2_000, 50_000, 1_000_000, 50_000_000], dtype=np.int64)[bucket]
    size = lo + rng.integers(0, 1 << 62, size=n) % (hi - lo)
    ref = _weighted(rng, _REFERER_W, n)
    ua = _weighted(rng, _UA_W, n)

    # --- ~1% verbatim repeats of an earlier line in the chunk -----------------------------
    src = np.arange(n)
    dup = np.flatnonzero(rng.integers(0, 100, size=n) == 0)
    dup = dup[dup > 0]
    if dup.size:
        back = rng.integers(1, 50, size=dup.size)
        src[dup] = np.maximum(dup - back, 0)
        while True:  # a repeat of a repeat points at the original
            nxt = src[src]
            if np.array_equal(nxt, src):
                break
            src = nxt
        ip, iu, secs, tz, method, path, ids, suffix_pick, proto, status, size, ref, ua = (
            a[src] for a in (ip, iu, secs, tz, method, path, ids, suffix_pick, proto, status, size, ref, ua)
        )
    last_sec = int(secs.max()) if n else t0

    # --- assemble pieces --------------------------------------------------------------
    local = secs + pools.tz_off[tz] - (_EPOCH_START - 86400)
    day = (local // 86400) % _DAYS_IN_POOL
    sod = local % 86400

    # only API / form endpoints take writes; everything else is read (GET/HEAD)
    write_method = (method == 1) | (method == 2) | (method == 3)
    method = np.where(write_method & ~pools.path_writable[path], 0, method)

    st = pools.status_code[status]
    head_or_304 = (st == 304) | (st == 204) | (method == _METHODS.index("HEAD "))
    size_s = np.array(_int_strs(size), dtype=object)
    size_s[head_or_304] = "-"

    id_s = np.array(_int_strs(ids), dtype=object)
    id_s[~pools.path_has_id[path]] = ""
    suffix = np.empty(n, dtype=object)
    for p, sfx in enumerate(pools.path_suffixes):
        m = path == p
        if m.any():
            suffix[m] = sfx[suffix_pick[m] % len(sfx)]

    pieces = np.empty((n, _ACCESS_PIECES), dtype=object)
    pieces[:, 0] = pools.ips[ip]
    pieces[:, 1] = pools.ident_user[iu]
    pieces[:, 2] = pools.days[day]
    pieces[:, 3] = pools.hms[sod]
    pieces[:, 4] = pools.tz[tz]
    pieces[:, 5] = pools.methods[method]
    pieces[:, 6] = pools.path_prefix[path]
    pieces[:, 7] = id_s
    pieces[:, 8] = suffix
    pieces[:, 9] = pools.protocols[proto]
    pieces[:, 10] = pools.status[status]
    pieces[:, 11] = size_s
    # referer piece carries the separators around it; the UA piece ends the line
    pieces[:, 12] = pools.referers[ref]
    ua_s = pools.uas[ua]

    _plant_bad(pieces, ua_s, pools, rng, n, first_lineno, bad_every)
    flat = np.concatenate([pieces, ua_s[:, None]], axis=1).ravel().tolist()
    return "".join(flat), last_sec


def _bad_rows(n: int, first_lineno: int, bad_every: int) -> np.ndarray:
    """0-based rows of this chunk whose 1-based global line number is a multiple of bad_every."""
    if bad_every <= 0:
        return np.empty(0, dtype=np.int64)
    first = (-first_lineno) % bad_every  # row whose global number first_lineno+row ≡ 0 (mod N)
    return np.arange(first, n, bad_every)


def _plant_bad(pieces, last_col, pools, rng, n, first_lineno, bad_every) -> None:
    rows = _bad_rows(n, first_lineno, bad_every)
    if not rows.size:
        return
    kind = rng.integers(0, len(pools.garbage) + 1, size=rows.size)
    for r, k in zip(rows.tolist(), kind.tolist()):
        if k == len(pools.garbage):
            # a truncated real line: keeps its first pieces, loses the rest
            pieces[r, 4:] = ""
            last_col[r] = "\n"
        else:
            pieces[r, :] = ""
            last_col[r] = pools.garbage[k]


def write_access_logs(path, *, lines: int | None = None, target_bytes: int | None = None,
                      seed: int = 0, bad_every: int = 0, gzip: bool = False) -> int:
    """Write Apache *combined* format access log lines to ``path``.

    Give ``lines`` (exact number of lines) or ``target_bytes`` (stop at the first
    line end at or after that many bytes); with neither, 10,000 lines. The output
    for a seed is byte-for-byte reproducible (with ``target_bytes``, a smaller
    target gives a prefix of a larger one). About 1% of lines repeat an earlier line
    verbatim. With ``bad_every=N > 0`` every Nth line (N, 2N, ... counting from 1)
    is garbage that is not an access log line (some of it a truncated log line).
    ``gzip=True`` writes a gzip stream (reproducible header: no name, mtime 0).

    Returns the number of bytes of log text written (the file size unless gzip).
    """
    if lines is None and target_bytes is None:
        lines = 10_000
    if lines is not None and lines < 0:
        raise ValueError("lines must be >= 0")
    pools = _AccessPools(seed)
    t = _EPOCH_START
    lineno = 1  # global 1-based number of the next line
    chunk = 0
    with _Writer(path, gzip=gzip) as w:
        while True:
            if lines is not None:
                n = min(CHUNK_LINES, lines - (lineno - 1))
                if n <= 0:
                    break
            else:
                if w.nbytes >= target_bytes:
                    break
                n = CHUNK_LINES
            rng = _chunk_rng(seed, 1, chunk)
            text, t = _access_chunk(pools, rng, n, t, lineno, bad_every)
            if lines is None and w.nbytes + len(text) > target_bytes:
                need = target_bytes - w.nbytes  # text is ASCII: chars == bytes
                cut = text.find("\n", max(need - 1, 0))
                text = text[: cut + 1]
            w.write(text)
            lineno += n
            chunk += 1
    return w.nbytes


# --------------------------------------------------------------------------- app events

_EVENTS = ("click", "view", "purchase", "signup", "search", "logout", "error")
_EVENT_W = (40, 35, 5, 3, 12, 3, 2)
_PAGES = ("/home", "/search", "/items/42", "/items/7", "/cart", "/checkout", "/account", "/help", "/café")
_PAGE_W = (30, 15, 10, 10, 8, 5, 8, 4, 1)
_EVENT_GARBAGE = (
    '{"ts": "2026-10-10T13:55:36.123Z", "user_id": ',
    "not json at all",
    "[1, 2, 3]",
    '{"ts": 2026-10-10, "event": click}',
)


def write_app_events(path, *, lines: int, seed: int = 0, bad_every: int = 0) -> int:
    """Write JSON Lines application events to ``path``; returns bytes written.

    Each line is an object like ``{"ts": "2026-10-10T13:55:36.123Z", "user_id": 123,
    "event": "click", "page": "/home", "duration_ms": 12.5, "ok": true}``. Some values
    are ``null`` and some keys are missing; a few lines carry an extra
    ``"props"`` object. ``bad_every=N > 0`` makes every Nth line invalid JSON or
    not an object.
    """
    out_parts: list[str] = []
    t = _EPOCH_START * 1000
    with _Writer(path) as w:
        for chunk, start in enumerate(range(0, lines, CHUNK_LINES)):
            n = min(CHUNK_LINES, lines - start)
            rng = _chunk_rng(seed, 2, chunk)
            ms = t + np.cumsum(rng.integers(0, 2000, size=n))
            t = int(ms[-1])
            user = rng.integers(1, 5000, size=n).tolist()
            ev = _weighted(rng, _EVENT_W, n).tolist()
            page = _weighted(rng, _PAGE_W, n).tolist()
            dur = rng.integers(0, 50_000, size=n).tolist()  # tenths of ms
            ok = rng.integers(0, 20, size=n).tolist()
            # 0 = present, 1 = null, 2 = missing   (per optional field)
            opt = _weighted(rng, (90, 6, 4), n * 4).reshape(n, 4).tolist()
            props = rng.integers(0, 25, size=n).tolist()
            bad = set(_bad_rows(n, start + 1, bad_every).tolist())
            bad_kind = rng.integers(0, len(_EVENT_GARBAGE), size=n).tolist()
            out_parts.clear()
            for i, t_ms in enumerate(ms.tolist()):
                if i in bad:
                    out_parts.append(_EVENT_GARBAGE[bad_kind[i]] + "\n")
                    continue
                sec, milli = divmod(t_ms, 1000)
                ts = _dt.datetime.fromtimestamp(sec, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
                f = [f'"ts": "{ts}.{milli:03d}Z"']
                o = opt[i]
                if o[0] != 2:
                    f.append('"user_id": ' + ("null" if o[0] else str(user[i])))
                f.append(f'"event": "{_EVENTS[ev[i]]}"')
                if o[1] != 2:
                    f.append('"page": ' + ("null" if o[1] else '"' + _PAGES[page[i]] + '"'))
                if o[2] != 2:
                    d = dur[i]
                    f.append('"duration_ms": ' + ("null" if o[2] else f"{d // 10}.{d % 10}"))
                if o[3] != 2:
                    f.append('"ok": ' + ("null" if o[3] else ("false" if ok[i] == 0 or ev[i] == 6 else "true")))
                if props[i] == 0:
                    f.append('"props": {"ab": "variant-b", "items": [1, 2]}')
                out_parts.append("{" + ", ".join(f) + "}\n")
            w.write("".join(out_parts))
    return w.nbytes


# --------------------------------------------------------------------------- syslog

_HOSTS = ("web01", "web02", "db01", "lb01", "worker-7")
_USERS = ("alice", "bob", "deploy", "root", "carol")


def write_syslog(path, *, lines: int, seed: int = 0) -> int:
    """Write RFC 3164 syslog lines to ``path``; returns bytes written.

    Lines look like ``Oct  1 12:34:56 web01 sshd[4242]: Accepted publickey for
    alice from 198.51.100.7 port 50000 ssh2``; some have no ``[pid]``
    (``kernel: ...``) and some start with a ``<PRI>`` such as ``<34>``.
    """
    parts: list[str] = []
    t = _EPOCH_START
    with _Writer(path) as w:
        for chunk, start in enumerate(range(0, lines, CHUNK_LINES)):
            n = min(CHUNK_LINES, lines - start)
            rng = _chunk_rng(seed, 3, chunk)
            secs = (t + np.cumsum(rng.integers(0, 4, size=n))).tolist()
            t = secs[-1]
            kind = _weighted(rng, (30, 10, 12, 10, 8, 10, 8, 6, 6), n).tolist()
            host = rng.integers(0, len(_HOSTS), size=n).tolist()
            pid = rng.integers(300, 65000, size=n).tolist()
            usr = rng.integers(0, len(_USERS), size=n).tolist()
            o = rng.integers(1, 255, size=(n, 2)).tolist()
            port = rng.integers(1024, 65536, size=n).tolist()
            pri = rng.integers(0, 192, size=n).tolist()
            has_pri = (rng.integers(0, 10, size=n) == 0).tolist()
            num = rng.integers(0, 100_000, size=n).tolist()
            parts.clear()
            for i in range(n):
                d = _dt.datetime.fromtimestamp(secs[i], _dt.timezone.utc)
                stamp = f"{_MONTHS[d.month - 1]} {d.day:>2} {d.hour:02d}:{d.minute:02d}:{d.second:02d}"
                ip = f"198.51.{o[i][0]}.{o[i][1]}"
                u = _USERS[usr[i]]
                k = kind[i]
                if k == 0:
                    tag, msg = f"sshd[{pid[i]}]", f"Accepted publickey for {u} from {ip} port {port[i]} ssh2"
                elif k == 1:
                    tag, msg = f"sshd[{pid[i]}]", f"Failed password for invalid user {u}x from {ip} port {port[i]} ssh2"
                elif k == 2:
                    tag, msg = f"CRON[{pid[i]}]", f"({u}) CMD (/usr/local/bin/backup.sh --incremental)"
                elif k == 3:
                    tag, msg = "kernel", f"[{num[i] // 10}.{num[i] % 10:01d}00000] eth0: link up, 1000Mbps, full-duplex"
                elif k == 4:
                    tag, msg = "kernel", f"Out of memory: Killed process {pid[i]} (python3) total-vm:{num[i]}kB"
                elif k == 5:
                    tag, msg = "systemd[1]", f"Started session {num[i]} of user {u}."
                elif k == 6:
                    tag, msg = f"nginx[{pid[i]}]", f'{ip} "GET /health HTTP/1.1" 200'
                elif k == 7:
                    tag, msg = f"postfix/smtpd[{pid[i]}]", f"connect from unknown[{ip}]"
                else:
                    tag, msg = "sudo", f"{u} : TTY=pts/0 ; PWD=/home/{u} ; USER=root ; COMMAND=/usr/bin/apt update"
                prefix = f"<{pri[i]}>" if has_pri[i] else ""
                parts.append(f"{prefix}{stamp} {_HOSTS[host[i]]} {tag}: {msg}\n")
            w.write("".join(parts))
    return w.nbytes


# --------------------------------------------------------------------------- java

_LEVELS = ("INFO ", "DEBUG", "WARN ", "ERROR")
_LOGGERS = ("c.e.shop.OrderService", "c.e.shop.PaymentClient", "c.e.http.Server", "c.e.db.Pool")
_TRACES = (
    ("java.lang.IllegalStateException: order {n} already shipped",
     ("com.example.shop.OrderService.ship(OrderService.java:118)",
      "com.example.shop.OrderController.post(OrderController.java:57)",
      "java.base/java.lang.Thread.run(Thread.java:833)")),
    ("java.net.SocketTimeoutException: Read timed out after {n} ms",
     ("java.base/java.net.SocketInputStream.read(SocketInputStream.java:168)",
      "com.example.shop.PaymentClient.charge(PaymentClient.java:77)")),
)


def write_java_log(path, *, records: int, seed: int = 0) -> int:
    """Write a Java application log (logback's default layout) to ``path``; returns bytes.

    A record is ``2026-10-01 12:00:00.123 INFO  [http-3] c.e.shop.OrderService - message``;
    every tenth is an ERROR followed by its stack trace (``\tat ...`` lines, sometimes a
    ``Caused by:`` part). The file starts with two lines of a banner that belong to no record
    (they are quarantined as ``no_start`` by pipelines/java_app.yaml)."""
    rng = np.random.default_rng([seed, 5])
    level = rng.integers(0, 3, size=records).tolist()
    thread = rng.integers(1, 9, size=records).tolist()
    logger = rng.integers(0, len(_LOGGERS), size=records).tolist()
    num = rng.integers(1, 100_000, size=records).tolist()
    trace = rng.integers(0, len(_TRACES), size=records).tolist()
    caused = (rng.integers(0, 3, size=records) == 0).tolist()
    parts = ["  .   ____          _\n", " :: Spring Boot ::        (v3.2.0)\n"]
    t = _EPOCH_START * 1000
    for i in range(records):
        t += 37 + num[i] % 900
        d = _dt.datetime.fromtimestamp(t // 1000, _dt.timezone.utc)
        stamp = f"{d:%Y-%m-%d %H:%M:%S}.{t % 1000:03d}"
        lvl = _LEVELS[3] if i % 10 == 9 else _LEVELS[level[i]]
        parts.append(f"{stamp} {lvl} [http-{thread[i]}] {_LOGGERS[logger[i]]} - request {num[i]} handled\n")
        if lvl == _LEVELS[3]:
            head, frames = _TRACES[trace[i]]
            parts.append(head.format(n=num[i]) + "\n" + "".join(f"\tat {f}\n" for f in frames))
            if caused[i]:
                parts.append("Caused by: java.io.IOException: Broken pipe\n\t... 3 more\n")
    with _Writer(path) as w:
        w.write("".join(parts))
    return w.nbytes


# --------------------------------------------------------------------------- images

IMAGE_CLASSES = ("beach", "forest", "city", "desert", "snow")


def photo_like(rng: np.random.Generator, width: int, height: int):
    """A deterministic picture with what makes photos compress as they do: smooth light (a
    gradient and blurred random fields), a few shapes, fine texture and sensor-like noise.
    Built from Pillow's C operations, so thousands are quick to write."""
    from PIL import Image, ImageChops, ImageDraw

    def field(cell: int):
        small = rng.integers(0, 256, (height // cell + 2, width // cell + 2, 3), dtype=np.uint8)
        return Image.fromarray(small).resize((width, height), Image.Resampling.BICUBIC)

    light = Image.linear_gradient("L").rotate(float(rng.uniform(0, 360))).resize((width, height))
    tint = Image.new("RGB", (width, height), tuple(int(c) for c in rng.integers(0, 256, 3)))
    img = Image.composite(tint, field(max(width, height) // 6), light)
    img = Image.blend(img, field(5), 0.25)
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(3, 9))):
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        r = rng.uniform(0.05, 0.3) * min(width, height)
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        box = (cx - r, cy - r * rng.uniform(0.5, 1.5), cx + r, cy + r * rng.uniform(0.5, 1.5))
        (draw.ellipse if rng.random() < 0.6 else draw.rectangle)(box, fill=colour)
    noise = Image.frombytes("L", (width, height), rng.normal(128, 9, width * height).clip(0, 255)
                            .astype(np.uint8).tobytes()).convert("RGB")
    return ImageChops.add(img, noise, 1.0, -128)


def write_images(out_dir, n: int, *, size: tuple[int, int] = (500, 375), seed: int = 0,
                 classes=IMAGE_CLASSES, quality: int = 90, start: int = 0) -> list[tuple[Path, int]]:
    """n JPEGs in <out_dir>/<class>/<class>-NNNNN.jpg (ImageFolder layout), deterministic: image i
    is the same whatever chunk writes it, so a large set can be written in chunks (`start`) on
    several processes."""
    out = Path(out_dir)
    written = []
    for i in range(start, start + n):
        label = classes[i % len(classes)]
        rng = np.random.default_rng([seed, i])
        p = out / label / f"{label}-{i:05d}.jpg"
        p.parent.mkdir(parents=True, exist_ok=True)
        photo_like(rng, *size).save(p, "JPEG", quality=quality)
        written.append((p, p.stat().st_size))
    return written


# --------------------------------------------------------------------------- sample set


def write_sample_set(out_dir) -> list[tuple[Path, int]]:
    """Write the sample set used by the example pipelines; returns [(path, bytes)]."""
    out = Path(out_dir)
    written: list[tuple[Path, int]] = []

    def rec(p: Path, nbytes: int) -> None:
        written.append((p, nbytes))

    access = out / "access"
    for i in range(3):
        p = access / f"access-{i:03d}.log"
        rec(p, write_access_logs(p, lines=20_000, seed=100 + i, bad_every=500 if i == 1 else 0))
    p = access / "access-003.log.gz"
    rec(p, write_access_logs(p, lines=20_000, seed=103, gzip=True))

    events = out / "events"
    for i in range(2):
        p = events / f"events-{i:03d}.jsonl"
        rec(p, write_app_events(p, lines=10_000, seed=200 + i, bad_every=1000))

    p = out / "syslog" / "syslog-000.log"
    rec(p, write_syslog(p, lines=10_000, seed=300))

    p = out / "java" / "app-000.log"
    rec(p, write_java_log(p, records=5_000, seed=500))
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m gpuetl.samples",
        description="Write the deterministic sample data set used by the example pipelines.",
    )
    ap.add_argument("out_dir", help="directory to write access/, events/, syslog/ and java/ into (overwritten)")
    ap.add_argument("--photos", type=int, default=0, metavar="N",
                    help="also write N photo-like JPEGs (500x375) into photos/<class>/ for pipelines/images.yaml")
    args = ap.parse_args(argv)
    for p, nbytes in write_sample_set(args.out_dir):
        note = " (uncompressed; %d on disk)" % os.path.getsize(p) if p.suffix == ".gz" else ""
        print(f"wrote {p}  {nbytes:,} bytes{note}")
    if args.photos:
        photos = write_images(Path(args.out_dir) / "photos", args.photos, seed=400)
        print(f"wrote {len(photos)} photos in {Path(args.out_dir) / 'photos'}  {sum(n for _, n in photos):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
