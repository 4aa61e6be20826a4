"""Quarantine reasons grouped by kind: a reason's text with its variable parts (quoted values,
numbers, file paths) replaced by placeholders, so that 425 reasons that differ only in the bad
value read as the few things that went wrong."""

from __future__ import annotations

import re

# a quoted value ('…' or "…", with backslash escapes), not inside a word (it's, don't)
_QUOTED = re.compile(r"""(?<!\w)('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
# a quoted name right after one of these words says where, not what: it stays
_NAMES = re.compile(r"\b(?:column|field|key|step|split|preset|format)\s*$")
# a path with at least one slash, or a file name with a suffix followed by ':' (a.log:12)
_PATH = re.compile(r"(?<![\w<])(?:[\w.~-]*/)+[\w.-]+|(?<![\w<])[\w-]+\.[A-Za-z]\w{0,5}(?=:)")
# a number that is not part of a word (int16, sha256, UTF-8 stay)
_NUMBER = re.compile(r"(?<![\w.-])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


def reason_kind(reason: str) -> str:
    """`int16: '99999' is out of range` → `int16: <value> is out of range`;
    `column 'n': value is not a valid uint8` keeps the column's name."""
    def quoted(match: re.Match) -> str:
        return match.group(0) if _NAMES.search(reason[:match.start()]) else "<value>"

    kind = _QUOTED.sub(quoted, reason)
    kind = _PATH.sub("<path>", kind)
    return _NUMBER.sub("<n>", kind)


def group_reasons(tallies: dict[str, int]) -> dict[str, dict]:
    """{kind: {count, example}} from all reasons' counts, most common kind first; the example is
    the kind's most common reason (ties: the first in sort order)."""
    kinds: dict[str, dict] = {}
    for reason, n in sorted(tallies.items(), key=lambda kv: (-kv[1], kv[0])):
        entry = kinds.setdefault(reason_kind(reason), {"count": 0, "example": reason})
        entry["count"] += n
    return dict(sorted(kinds.items(), key=lambda kv: (-kv[1]["count"], kv[0])))
