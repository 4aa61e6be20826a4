"""Pure-Python helpers of the GPU backend: no GPU import here, so every rule is tested on CPU.

* `to_cudf_regex` rewrites an RE2 pattern (what the plan accepts) into the subset libcudf's regex
  engine runs with the SAME meaning, or raises `Unsupported` with the reason. What it changes:
  named groups become plain groups (libcudf numbers groups; older versions reject `(?P<`), and the
  shorthand classes become explicit ASCII classes (RE2's `\\d \\s \\w` are ASCII; libcudf's are
  Unicode unless a flag is set, and that flag's handling of `\\S` varied between versions).
  Sources: libcudf "Regex Features" (cpp/doxygen/regex.md) and cpp/src/strings/regex/regcomp.cpp.
* `timestamp_plan` turns a strptime format into a strict regex whose captures the GPU turns into
  UTC microseconds with integer arithmetic (`civil_to_micros`, written against xp so numpy runs it
  here). Values outside the strict form go to the CPU kernel, so results equal the CPU's exactly.
* `FALLBACKS` counts, per process, the rows/columns handed to the CPU kernels and why.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------
# fallback accounting (per process: the runner sums it over workers with client.run)

_LOCK = threading.Lock()
FALLBACKS: Counter = Counter()


def count_fallback(what: str, rows: int = 1) -> None:
    with _LOCK:
        FALLBACKS[what] += int(rows)


def fallback_counts() -> dict[str, int]:
    with _LOCK:
        return dict(FALLBACKS)


def reset_fallbacks() -> None:
    with _LOCK:
        FALLBACKS.clear()


# ---------------------------------------------------------------------------------------------
# regex translation


class Unsupported(ValueError):
    """The pattern uses something libcudf's regex engine lacks or reads differently."""


_WS = r"\t\n\f\r "                   # RE2's \s (no \v)
_CLASS_BODY = {"d": "0-9", "s": _WS, "w": "0-9A-Za-z_"}
_SHORTHAND = {"d": "[0-9]", "D": "[^0-9]", "s": f"[{_WS}]", "S": f"[^{_WS}]",
              "w": "[0-9A-Za-z_]", "W": "[^0-9A-Za-z_]"}
# escapes libcudf accepts as literals (regcomp.cpp: escapable_chars)
_ESCAPABLE = set(".-+*\\?^$|{}()[]<>\"~'`_@=;:!#%&,/ ")
_SIMPLE_ESCAPES = {"t": r"\t", "n": r"\n", "r": r"\r", "f": r"\f", "a": r"\a", "v": r"\x0b"}
_MAX_REPEAT = 999                    # libcudf: counted repeats 0-999 (RE2 allows 1000)


def check_regex(pattern: str) -> str | None:
    """Why libcudf cannot run `pattern` with RE2's meaning, or None when it can."""
    try:
        to_cudf_regex(pattern)
    except Unsupported as err:
        return str(err)
    return None


def to_cudf_regex(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    prev_open_or_bar = True          # at the start of a group/alternative (empty-branch check)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise Unsupported("a trailing backslash")
            e = pattern[i + 1]
            if e in _SHORTHAND:
                out.append(_SHORTHAND[e])
            elif e in _SIMPLE_ESCAPES:
                out.append(_SIMPLE_ESCAPES[e])
            elif e == "x":
                hexd = pattern[i + 2:i + 4]
                if not re.fullmatch(r"[0-9A-Fa-f]{2}", hexd):
                    raise Unsupported(r"\x{...} escapes (only \xHH)")
                out.append("\\x" + hexd)
                i += 2
            elif e == "A":
                out.append(r"\A")
            elif e == "z":
                out.append("$")       # without (?m), RE2's $ is \z, and so is libcudf's $
            elif e in "bB":
                raise Unsupported(r"word boundaries \b \B (libcudf uses Unicode word characters, RE2 ASCII)")
            elif e in "pP":
                raise Unsupported(r"Unicode classes \p{...}")
            elif e in "QEC":
                raise Unsupported(f"the \\{e} escape")
            elif e.isdigit():
                raise Unsupported("octal escapes or backreferences")
            elif e in _ESCAPABLE:
                out.append("\\" + e)
            elif not e.isalnum():
                out.append("\\x%02x" % ord(e) if ord(e) < 128 else e)
            else:
                raise Unsupported(f"the \\{e} escape")
            i += 2
            prev_open_or_bar = False
            continue
        if c == "[":
            body, i = _translate_class(pattern, i)
            out.append(body)
            prev_open_or_bar = False
            continue
        if c == "(":
            if pattern.startswith("(?P<", i):
                end = pattern.index(">", i)
                out.append("(")
                i = end + 1
            elif pattern.startswith("(?:", i):
                out.append("(?:")
                i += 3
            elif pattern.startswith("(?", i):
                raise Unsupported("inline flags, lookarounds or other (?...) groups")
            else:
                out.append("(")
                i += 1
            if i < n and pattern[i] in ")|":
                raise Unsupported("an empty group or alternative")
            prev_open_or_bar = True
            continue
        if c == "|":
            if prev_open_or_bar or i + 1 >= n or pattern[i + 1] in ")|":
                raise Unsupported("an empty alternative")
            out.append("|")
            i += 1
            prev_open_or_bar = True
            continue
        if c == "{":
            m = re.match(r"\{(\d+)(?:,(\d*))?\}", pattern[i:])
            if m:
                if int(m.group(1)) > _MAX_REPEAT or (m.group(2) and int(m.group(2)) > _MAX_REPEAT):
                    raise Unsupported(f"a counted repeat above {_MAX_REPEAT}")
                out.append(m.group(0))
                i += len(m.group(0))
                if i < n and pattern[i] in "+":
                    raise Unsupported("possessive quantifiers")
                continue
            out.append(r"\{")
            i += 1
            prev_open_or_bar = False
            continue
        if c == "}":
            out.append(r"\}")
            i += 1
            prev_open_or_bar = False
            continue
        out.append(c)
        prev_open_or_bar = False
        i += 1
    return "".join(out)


def _translate_class(pattern: str, i: int) -> tuple[str, int]:
    """pattern[i] == '['; returns (libcudf class, index after ']')."""
    n = len(pattern)
    j = i + 1
    out = ["["]
    if j < n and pattern[j] == "^":
        out.append("^")
        j += 1
    first = True
    while j < n:
        c = pattern[j]
        if c == "]" and not first:
            out.append("]")
            return "".join(out), j + 1
        first = False
        if c == "[" and pattern.startswith("[:", j):
            raise Unsupported("POSIX classes like [[:alpha:]]")
        if c == "\\":
            if j + 1 >= n:
                raise Unsupported("a trailing backslash")
            e = pattern[j + 1]
            if e in _CLASS_BODY:
                out.append(_CLASS_BODY[e].replace("\t", r"\t").replace("\n", r"\n").replace("\f", r"\f")
                           .replace("\r", r"\r"))
            elif e in "DSW":
                raise Unsupported(f"negated shorthand \\{e} inside a character class")
            elif e in _SIMPLE_ESCAPES:
                out.append(_SIMPLE_ESCAPES[e])
            elif e == "x":
                hexd = pattern[j + 2:j + 4]
                if not re.fullmatch(r"[0-9A-Fa-f]{2}", hexd):
                    raise Unsupported(r"\x{...} escapes (only \xHH)")
                out.append("\\x" + hexd)
                j += 2
            elif e.isalnum():
                raise Unsupported(f"the \\{e} escape inside a character class")
            else:
                out.append("\\" + e)
            j += 2
            continue
        out.append(c)
        j += 1
    raise Unsupported("an unterminated character class")


def drop_group_names(pattern: str) -> str:
    """`(?P<name>` -> `(` outside classes and escapes (for engines that number groups)."""
    return re.sub(r"(?<!\\)\(\?P<[A-Za-z_][A-Za-z0-9_]*>", "(", pattern)


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
        return TimestampPlan("^" + _WS_RUN + body + _WS_RUN + "$",
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
            parts.append("\\" + c if c in _ESCAPABLE else c)
        i += 1
    if "Y" not in fields or "d" not in fields or not ({"m", "b"} & set(fields)):
        return None
    return TimestampPlan("^" + _WS_RUN + "".join(parts) + _WS_RUN + "$", tuple(fields), "zs" in fields)


def civil_to_days(xp, y, m, d):
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil)."""
    y = y - (m <= 2).astype(y.dtype)
    era = xp.floor_divide(y, 400)
    yoe = y - era * 400
    mp = (m + 9) % 12
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def days_in_month(xp, y, m):
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    table = xp.asarray([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=xp.int64)
    return table[m - 1] + (leap & (m == 2)).astype(xp.int64)


def civil_to_micros(xp, y, m, d, hh, mm, ss, micro, offset_minutes):
    """UTC microseconds since the epoch; every argument an int64 xp array."""
    days = civil_to_days(xp, y, m, d)
    seconds = days * 86400 + hh * 3600 + mm * 60 + ss - offset_minutes * 60
    return seconds * 1_000_000 + micro
