"""Value rules the GPU backend applies with integer and array arithmetic, written against `xp` so
numpy runs them in the tests: strict timestamp forms (`timestamp_plan`: a strptime format as a
regex whose captures civil.civil_to_micros turns into UTC microseconds; values outside the strict
form go to the CPU kernel, so results equal the CPU's exactly), exact integer casts, UTF-8
validation and span gathers. Pure Python."""

from __future__ import annotations

from dataclasses import dataclass

from .gpu_regex import ESCAPABLE


# ---------------------------------------------------------------------------------------------
# timestamps: strict forms the GPU parses with integer arithmetic

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DIRECTIVES = {
    "Y": r"([0-9]{4})",
    "m": r"(0[1-9]|1[0-2])",
    "d": r"(0[1-9]|[12][0-9]|3[01])",
    "H": r"([01][0-9]|2[0-3])",
    "M": r"([0-5][0-9])",
    "S": r"([0-5][0-9])",
    "b": "(" + "|".join(MONTHS) + ")",
    "z": r"([+-])([01][0-9]|2[0-3])([0-5][0-9])",
}
STRIP = " \t\n\v\f\r"
_WS_RUN = r"[\t\n\x0b\f\r ]*"


@dataclass(frozen=True)
class TimestampPlan:
    regex: str                       # libcudf-ready, anchored, whitespace allowed around the value
    fields: tuple[str, ...]          # the directive of each capture group, in order ('z' takes 3)
    has_zone: bool


def timestamp_plan(fmt: str | None) -> TimestampPlan | None:
    """A strict GPU form for `fmt` (None: ISO 8601), or None when the GPU does not parse it."""
    if fmt is None:
        body = (r"([0-9]{4})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
                r"(?:[T ]([01][0-9]|2[0-3]):([0-5][0-9]):([0-5][0-9])(?:\.([0-9]{1,6}))?)?"
                r"(?:(Z)|([+-])([01][0-9]|2[0-3]):([0-5][0-9]))?")
        return TimestampPlan("^" + _WS_RUN + body + _WS_RUN + r"\Z",
                             ("Y", "m", "d", "H", "M", "S", "f", "Z", "zs", "zh", "zm"), True)
    parts: list[str] = []
    fields: list[str] = []
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c == "%":
            if i + 1 >= len(fmt):
                return None
            d = fmt[i + 1]
            if d == "%":
                parts.append("%")
            elif d in _DIRECTIVES and d not in fields:
                parts.append(_DIRECTIVES[d])
                fields += ["zs", "zh", "zm"] if d == "z" else [d]
            else:
                return None          # %y %I %p %j %f %B ...: the CPU kernel parses these
            i += 2
            continue
        if c.isalnum() or c in "%":
            if c.isalpha():
                return None          # letters in the literal text could collide with month names
            parts.append(c)
        elif c == " ":
            parts.append(" ")        # strptime lets a space match any run of white space; the
                                     # strict form takes exactly one (the rest: CPU kernel)
        elif c in STRIP:
            return None
        else:
            parts.append("\\" + c if c in ESCAPABLE else c)
        i += 1
    if "Y" not in fields or "d" not in fields or not ({"m", "b"} & set(fields)):
        return None
    return TimestampPlan("^" + _WS_RUN + "".join(parts) + _WS_RUN + r"\Z", tuple(fields), "zs" in fields)


# ---------------------------------------------------------------------------------------------
# exact conversions between typed numbers (Arrow's safe cast), decided from a column's range

_FLOAT_EXACT = {"float64": 2 ** 53, "float32": 2 ** 24}       # integers a float holds exactly


def integer_cast_loses(lo: int, hi: int, target: str) -> bool:
    """Whether integers in [lo, hi] (a column's min and max, as Python ints) can lose a value
    converted to `target`: out of an integer type's range (a round trip cannot see that: -1 ->
    uint64 -> int64 gives -1 back), or past what a float holds exactly (Arrow's safe cast
    refuses both)."""
    import numpy as np

    if target in _FLOAT_EXACT:
        return max(abs(lo), abs(hi)) > _FLOAT_EXACT[target]
    info = np.iinfo(target)
    return lo < int(info.min) or hi > int(info.max)


# ---------------------------------------------------------------------------------------------
# UTF-8 validation as array operations (CuPy on the device; numpy runs it in the tests)


def utf8_bad_bytes(xp, b):
    """A bool per byte of `b` (uint8): True where the byte breaks UTF-8 (RFC 3629: no overlongs,
    no surrogates, nothing past U+10FFFF, no stray or missing continuation bytes). A sequence
    cut off by a newline or the end marks the byte that should have continued it."""
    n = len(b)
    cont = (b & 0xC0) == 0x80
    length = xp.where((b >= 0xC2) & (b <= 0xDF), 2,
                      xp.where((b >= 0xE0) & (b <= 0xEF), 3, xp.where((b >= 0xF0) & (b <= 0xF4), 4, 1)))
    bad = (b == 0xC0) | (b == 0xC1) | (b >= 0xF5)
    covered = xp.zeros(n, dtype=bool)
    # every byte at once, no compaction (so no sync on a device): `going` marks the leads whose
    # sequence still runs at step k; the byte k after such a lead is covered, and the sequence
    # goes on only where that byte continues it
    going = length > 1
    for k in (1, 2, 3):
        going &= length > k
        if k >= n:
            bad |= going                                # cut off by the end of the buffer
            break
        bad[n - k:] |= going[n - k:]                    # cut off by the end of the buffer
        covered[k:] |= going[:n - k]
        # a sequence stops at its first byte that does not continue it (a newline, say): the
        # bytes after belong to no sequence, so the next line's stray continuations are its own
        going[:n - k] &= cont[k:]
        going[n - k:] = False
    nxt = xp.concatenate([b[1:], xp.zeros(1, dtype=b.dtype)])
    bad |= (((b == 0xE0) & (nxt < 0xA0)) | ((b == 0xED) & (nxt > 0x9F)) |
            ((b == 0xF0) & (nxt < 0x90)) | ((b == 0xF4) & (nxt > 0x8F)))
    return bad | (cont & ~covered) | (covered & ~cont)


def span_gather_index(offsets, lo, total: int, xp):
    """Where each byte of the spans [lo[i], lo[i] + length i) lies in the buffer, the spans laid
    end to end (`offsets`: their n + 1 running starts, from 0; `total`: the last, known on the
    host): one gather copies every span at once. Index arithmetic in any array module."""
    pos = xp.arange(total, dtype=xp.int64)
    span = xp.searchsorted(offsets[1:], pos, side="right")
    return lo[span] + (pos - offsets[span])
