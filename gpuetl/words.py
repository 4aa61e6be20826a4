"""How gpuetl writes things for a person to read: counts with their nouns, and text that may
hold anything (values, quarantined lines, field and file names) made safe to show."""

from __future__ import annotations

import re


def count(n: int, word: str, plural: str | None = None) -> str:
    """A count and its noun: '1 row', '2 rows', '1,024 input files'."""
    return f"{n:,} {word if n == 1 else plural or word + 's'}"


# What a terminal would act on rather than show: C0 and C1 control characters (ESC starts the
# sequences that set a window's title or clear the screen; NUL, BEL, backspace and carriage
# return rewrite what is shown), DEL, the bidirectional overrides that reorder a line, and lone
# surrogates (which cannot be written as UTF-8 at all).
_UNSHOWABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str, *, keep_newlines: bool = True) -> str:
    """`text` as it may reach a terminal: every character in _UNSHOWABLE written as its escape
    (`\\x1b`, `\\u202e`); tabs and newlines kept unless `keep_newlines` is False. Values,
    quarantined lines, field and file names are the user's data and may hold anything."""
    def escape(match) -> str:
        code = ord(match.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    text = _UNSHOWABLE.sub(escape, text)
    if not keep_newlines:
        text = text.replace("\t", "\\t").replace("\n", "\\n")
    return text
