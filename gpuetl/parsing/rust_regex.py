r"""Pipeline regexes (RE2 syntax and meaning) in the dialect of Rust's `regex` crate, which polars
runs (`str.extract_groups`), or None where the two might differ.

Why: RE2's submatch extraction (pyarrow's extract_regex) is the slow part of a user regex on
the CPU; polars' engine extracts the same groups several times faster. Both engines take the
leftmost-first match with Perl's submatch rules and have the same syntax for nearly everything
a log regex uses; what differs is spelt out or refused here:

* `\d \s \w` (and `\D \S \W`) are ASCII in RE2 and Unicode in Rust: written as ASCII classes.
* Inside a character class Rust reads `[` as a nested class and `&& -- ~~` as set operations,
  RE2 as literal characters: a `[` is escaped; the operators are refused.
* A `{` that does not start a counted repetition is a literal in RE2 and an error in Rust:
  escaped (and so is `}`).
* Anything else that is not plainly the same is refused, and the caller keeps RE2: word
  boundaries, Unicode classes (`\p`), `\Q…\E`, `\C`, backreference-like escapes, POSIX classes,
  and inline flags other than `s` and `m` (`(?i)` folds case with different tables).

tests/parsing/test_rust_regex.py checks the captures against pyarrow's, on hostile lines.
"""

from __future__ import annotations

import re

__all__ = ["to_rust_regex"]

_ASCII = {"d": "0-9", "s": r"\t\n\f\r ", "w": "0-9A-Za-z_"}
_SAME_ESCAPES = set("tnfrv") | set("Az")
_FLAGS = re.compile(r"\(\?([a-zA-Z]*)(:|\))")
_REPEAT = re.compile(r"\{\d+(?:,\d*)?\}")


def to_rust_regex(pattern: str) -> str | None:
    """`pattern` with RE2's meaning in Rust's dialect, or None where that is not certain."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            piece = _escape(pattern, i, in_class=False)
            if piece is None:
                return None
            out.append(piece[0])
            i = piece[1]
        elif c == "[":
            piece = _class(pattern, i)
            if piece is None:
                return None
            out.append(piece[0])
            i = piece[1]
        elif c == "(" and pattern.startswith("(?", i):
            if pattern.startswith("(?P<", i):
                end = pattern.find(">", i)
                if end < 0:
                    return None
                out.append(pattern[i:end + 1])
                i = end + 1
                continue
            m = _FLAGS.match(pattern, i)
            if m is None or not set(m.group(1)) <= {"s", "m"}:
                return None           # lookarounds, (?i), (?U), (?<name>…): keep RE2
            out.append(m.group(0))
            i = m.end()
        elif c == "{":
            m = _REPEAT.match(pattern, i)
            if m:
                out.append(m.group(0))
                i = m.end()
            else:
                out.append(r"\{")
                i += 1
        elif c == "}":
            out.append(r"\}")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _escape(pattern: str, i: int, in_class: bool) -> tuple[str, int] | None:
    """(the escape at pattern[i] in Rust's dialect, the index after it), or None."""
    if i + 1 >= len(pattern):
        return None
    e = pattern[i + 1]
    if e in _ASCII:
        return (_ASCII[e] if in_class else f"[{_ASCII[e]}]"), i + 2
    if e in "DSW":
        return (None if in_class else (f"[^{_ASCII[e.lower()]}]", i + 2))
    if e == "x":
        m = re.match(r"\\x(?:[0-9A-Fa-f]{2}|\{[0-9A-Fa-f]{1,6}\})", pattern[i:])
        return (m.group(0), i + len(m.group(0))) if m else None
    if e in _SAME_ESCAPES and not (in_class and e in "Az"):
        return "\\" + e, i + 2
    if not e.isalnum() and e.isascii() and e.isprintable() and e != " ":
        return "\\" + e, i + 2     # an escaped punctuation character: that character, in both
    return None


def _class(pattern: str, i: int) -> tuple[str, int] | None:
    """(the character class at pattern[i] in Rust's dialect, the index after its `]`), or None."""
    n = len(pattern)
    out = ["["]
    j = i + 1
    if j < n and pattern[j] == "^":
        out.append("^")
        j += 1
    if j < n and pattern[j] == "]":          # a `]` first is a literal in both
        out.append(r"\]")
        j += 1
    while j < n:
        c = pattern[j]
        if c == "]":
            out.append("]")
            return "".join(out), j + 1
        if c == "\\":
            piece = _escape(pattern, j, in_class=True)
            if piece is None:
                return None
            out.append(piece[0])
            j = piece[1]
            continue
        if c == "[":
            if pattern.startswith("[:", j):
                return None               # POSIX classes: keep RE2
            out.append(r"\[")
        elif pattern.startswith(("&&", "--", "~~"), j):
            return None
        else:
            out.append(c)
        j += 1
    return None
