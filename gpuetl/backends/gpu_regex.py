"""The RE2 -> libcudf regex dialect, and the case and white-space rules of libcudf's strings.
Pure Python (tested without a GPU).

`to_cudf_regex` rewrites an RE2 pattern (what the plan accepts) into the subset libcudf's regex
engine runs with the SAME meaning, or raises `Unsupported` with the reason. What it changes:
named groups become plain groups, the shorthand classes become explicit ASCII classes (RE2's
`\\d \\s \\w` are ASCII; libcudf's are Unicode), and RE2's end of text (`$` without (?m), and
`\\z`) becomes libcudf's `\\Z`: libcudf's `$` also matches before a final newline.
Sources: libcudf "Regex Features" (cpp/doxygen/regex.md) and cpp/src/strings/regex/regcomp.cpp.
"""

from __future__ import annotations

import re


# ---------------------------------------------------------------------------------------------
# regex translation


class Unsupported(ValueError):
    """The pattern uses something libcudf's regex engine lacks or reads differently."""


_WS = r"\t\n\f\r "                   # RE2's \s (no \v)
_CLASS_BODY = {"d": "0-9", "s": _WS, "w": "0-9A-Za-z_"}
_SHORTHAND = {"d": "[0-9]", "D": "[^0-9]", "s": f"[{_WS}]", "S": f"[^{_WS}]",
              "w": "[0-9A-Za-z_]", "W": "[^0-9A-Za-z_]"}
# escapes libcudf accepts as literals (regcomp.cpp: escapable_chars)
ESCAPABLE = set(".-+*\\?^$|{}()[]<>\"~'`_@=;:!#%&,/ ")
_SIMPLE_ESCAPES = {"t": r"\t", "n": r"\n", "r": r"\r", "f": r"\f", "a": r"\a", "v": r"\x0b"}
_MAX_REPEAT = 999                    # libcudf: counted repeats 0-999 (RE2 allows 1000)


def leading_dotall(pattern: str) -> tuple[str, bool]:
    """(the pattern less a leading `(?s)`, whether it had one). RE2's `(?s)` over the whole
    pattern (`.` matches `\n` too: multi-line records) is libcudf's DOTALL flag; any other
    inline flag stays unsupported (to_cudf_regex)."""
    return (pattern[4:], True) if pattern.startswith("(?s)") else (pattern, False)


def check_regex(pattern: str) -> str | None:
    """Why libcudf cannot run `pattern` with RE2's meaning, or None when it can."""
    try:
        to_cudf_regex(leading_dotall(pattern)[0])
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
                out.append(r"\Z")      # the end of the text (libcudf's $ also matches before a final \n)
            elif e in "bB":
                raise Unsupported(r"word boundaries \b \B (libcudf uses Unicode word characters, RE2 ASCII)")
            elif e in "pP":
                raise Unsupported(r"Unicode classes \p{...}")
            elif e in "QEC":
                raise Unsupported(f"the \\{e} escape")
            elif e.isdigit():
                raise Unsupported("octal escapes or backreferences")
            elif e in ESCAPABLE:
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
        out.append(r"\Z" if c == "$" else c)      # RE2's $ (no (?m)) is the end of the text
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


# Case and white space: one meaning on both backends, Arrow's (docs/steps.md). lower()/upper()
# map one code point to one (Unicode's simple case mapping, Arrow's utf8proc); libcudf 26.10
# applies the full mapping (ß -> SS, İ -> i̇, ﬁ -> FI, Greek with ypogegrammeni), cases only the
# Basic Multilingual Plane and has an older table for a few letters. The code points where its
# lower or upper differs from Arrow's, found by running libcudf 26.10's tables
# (cpp/src/strings/char_types/char_cases.{h,cu}, char_flags.h, as case.cu applies them) against
# pyarrow's utf8_lower/utf8_upper for every code point, plus every code point of libcudf's
# special-case table: a row holding one is mapped on the host by Arrow (counted).
CASE_DIFFERS = {
    "upper": ((0xDF, 0xDF), (0x130, 0x130), (0x149, 0x149), (0x19B, 0x19B), (0x1C5, 0x1C5), (0x1C8, 0x1C8),
              (0x1CB, 0x1CB), (0x1F0, 0x1F0), (0x1F2, 0x1F2), (0x264, 0x264), (0x277, 0x277), (0x27C, 0x27C),
              (0x390, 0x390), (0x3B0, 0x3B0), (0x587, 0x587), (0x1C8A, 0x1C8A), (0x1E96, 0x1E9A), (0x1F50, 0x1F50),
              (0x1F52, 0x1F52), (0x1F54, 0x1F54), (0x1F56, 0x1F56), (0x1F80, 0x1FAF), (0x1FB2, 0x1FB4),
              (0x1FB6, 0x1FB7), (0x1FBC, 0x1FBC), (0x1FC2, 0x1FC4), (0x1FC6, 0x1FC7), (0x1FCC, 0x1FCC),
              (0x1FD2, 0x1FD3), (0x1FD6, 0x1FD7), (0x1FE2, 0x1FE4), (0x1FE6, 0x1FE7), (0x1FF2, 0x1FF4),
              (0x1FF6, 0x1FF7), (0x1FFC, 0x1FFC), (0x2C5F, 0x2C5F), (0xA7C1, 0xA7C1), (0xA7C8, 0xA7C8),
              (0xA7CA, 0xA7CA), (0xA7CD, 0xA7CD), (0xA7CF, 0xA7CF), (0xA7D1, 0xA7D1), (0xA7D3, 0xA7D3),
              (0xA7D5, 0xA7D5), (0xA7D7, 0xA7D7), (0xA7D9, 0xA7D9), (0xA7DB, 0xA7DB), (0xA7F6, 0xA7F6),
              (0xAB4B, 0xAB4C), (0xFB00, 0xFB06), (0xFB09, 0xFB0D), (0xFB13, 0xFB17), (0x10428, 0x1044F),
              (0x104D8, 0x104FB), (0x10597, 0x105A1), (0x105A3, 0x105B1), (0x105B3, 0x105B9), (0x105BB, 0x105BC),
              (0x10CC0, 0x10CF2), (0x10D70, 0x10D85), (0x118C0, 0x118DF), (0x16E60, 0x16E7F), (0x16EBB, 0x16ED3),
              (0x1DF41, 0x1DF41), (0x1DF49, 0x1DF49), (0x1DF4B, 0x1DF4B), (0x1DF4E, 0x1DF4E), (0x1DF52, 0x1DF52),
              (0x1DF69, 0x1DF69), (0x1DF6B, 0x1DF6B), (0x1DF6D, 0x1DF6D), (0x1DF6F, 0x1DF6F), (0x1DF73, 0x1DF73),
              (0x1DF75, 0x1DF75), (0x1DF77, 0x1DF77), (0x1DF79, 0x1DF79), (0x1DF7B, 0x1DF7B), (0x1DF7D, 0x1DF7D),
              (0x1DF7F, 0x1DF7F), (0x1E922, 0x1E943)),
    "lower": ((0xDF, 0xDF), (0x130, 0x130), (0x149, 0x149), (0x1C5, 0x1C5), (0x1C8, 0x1C8), (0x1CB, 0x1CB),
              (0x1F0, 0x1F0), (0x1F2, 0x1F2), (0x390, 0x390), (0x3B0, 0x3B0), (0x587, 0x587), (0x1C89, 0x1C89),
              (0x1E96, 0x1E9A), (0x1F50, 0x1F50), (0x1F52, 0x1F52), (0x1F54, 0x1F54), (0x1F56, 0x1F56),
              (0x1F80, 0x1FAF), (0x1FB2, 0x1FB4), (0x1FB6, 0x1FB7), (0x1FBC, 0x1FBC), (0x1FC2, 0x1FC4),
              (0x1FC6, 0x1FC7), (0x1FCC, 0x1FCC), (0x1FD2, 0x1FD3), (0x1FD6, 0x1FD7), (0x1FE2, 0x1FE4),
              (0x1FE6, 0x1FE7), (0x1FF2, 0x1FF4), (0x1FF6, 0x1FF7), (0x1FFC, 0x1FFC), (0x2C2F, 0x2C2F),
              (0xA7C0, 0xA7C0), (0xA7C7, 0xA7C7), (0xA7C9, 0xA7C9), (0xA7CB, 0xA7CC), (0xA7CE, 0xA7CE),
              (0xA7D0, 0xA7D0), (0xA7D2, 0xA7D2), (0xA7D4, 0xA7D4), (0xA7D6, 0xA7D6), (0xA7D8, 0xA7D8),
              (0xA7DA, 0xA7DA), (0xA7DC, 0xA7DD), (0xA7E2, 0xA7E2), (0xA7F5, 0xA7F5), (0xAB6C, 0xAB6D),
              (0xFB00, 0xFB06), (0xFB13, 0xFB17), (0x10400, 0x10427), (0x104B0, 0x104D3), (0x10570, 0x1057A),
              (0x1057C, 0x1058A), (0x1058C, 0x10592), (0x10594, 0x10595), (0x10C80, 0x10CB2), (0x10D50, 0x10D65),
              (0x118A0, 0x118BF), (0x16E40, 0x16E5F), (0x16EA0, 0x16EB8), (0x1DF40, 0x1DF40), (0x1DF48, 0x1DF48),
              (0x1DF4A, 0x1DF4A), (0x1DF4D, 0x1DF4D), (0x1DF51, 0x1DF51), (0x1DF68, 0x1DF68), (0x1DF6A, 0x1DF6A),
              (0x1DF6C, 0x1DF6C), (0x1DF6E, 0x1DF6E), (0x1DF72, 0x1DF72), (0x1DF74, 0x1DF74), (0x1DF76, 0x1DF76),
              (0x1DF78, 0x1DF78), (0x1DF7A, 0x1DF7A), (0x1DF7C, 0x1DF7C), (0x1DF7E, 0x1DF7E), (0x1E900, 0x1E921)),
}

# strip(): Unicode white space, as Arrow's utf8_trim_whitespace and Python's str.isspace (libcudf's
# strip() without characters strips every code point up to U+0020, control characters included)
UNICODE_SPACE = "".join(chr(c) for c in (0x9, 0xA, 0xB, 0xC, 0xD, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x85, 0xA0, 0x1680,
                                         *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000))


def case_differs_pattern(how: str) -> str:
    """A libcudf regex character class of the code points where libcudf's `how` ("lower" or
    "upper") differs from Arrow's (CASE_DIFFERS), written as the characters themselves."""
    return "[" + "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in CASE_DIFFERS[how]) + "]"
