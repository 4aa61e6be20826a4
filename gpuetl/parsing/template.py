r"""``<Field>`` log-format templates (loghub / logparser ``log_format``) -> one regex.

Example: ``template_to_regex("<Date> <Time> <Level>: <Content>")`` returns
``(r"^(?P<Date>.*?)\s+(?P<Time>.*?)\s+(?P<Level>.*?):\s+(?P<Content>.*)$",
("Date", "Time", "Level", "Content"))``.
"""

from __future__ import annotations

import re

from ..spec.names import new_name_problem

__all__ = ["template_to_regex"]

_FIELD_SPLIT = re.compile(r"<([^<>]+)>")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_QUANTIFIER_START = "*+?{"


def template_to_regex(template: str, multiline: bool = False) -> tuple[str, tuple[str, ...]]:
    """Turn a ``<Field>`` log-format template into ``(regex, columns)``.

    ``multiline``: records hold newlines (``source.multiline``). The regex is then
    ``(?s)``: the last field takes the rest of the record, newlines included, while the
    other fields are ``[^\n]*?`` and stay on their line, and so do the spaces between them
    (``[\\t\\f\\r ]``, not ``\\s``): a record whose first line lacks a field does not match
    rather than take the field from a later line. Only the spaces right before the last field
    may span a line break (a message that starts on the next line). (One global flag, not a
    scoped ``(?s:...)`` group, so the GPU engine runs it with its DOTALL flag.)

    Contract (the loghub / logparser ``log_format`` convention):

    * The regex is anchored ``^...$`` and must match the WHOLE line after the
      caller has stripped leading and trailing white space (including ``\\r``)
      from it: ``line.strip()``.
    * Each ``<Field>`` becomes the named group ``(?P<Field>.*?)`` (as few
      characters as possible); the last field is ``(?P<Field>.*)`` and takes
      the rest of the line.  All fields are strings.  ``columns`` lists the
      fields in template order.
    * The text between fields is a regular-expression fragment: ``\\[`` is a
      literal bracket, ``(\\[<PID>\\])?`` an optional part.  Capturing groups
      written in fragments are made non-capturing (``(?:``) so that only the
      fields capture.  A field inside an optional part that is absent comes
      back as ``None`` from Python ``re`` and as ``""`` from
      ``pyarrow.compute.extract_regex`` / cuDF.
    * A run of spaces matches one or more white-space characters (``\\s+``);
      if the run is followed by a quantifier, the quantifier applies to the
      last space (``" ?"`` -> ``\\s?``).

    Raises ``ValueError`` naming the offending field or fragment when a field
    name is not an identifier (letters, digits, underscore; not starting with
    a digit), is duplicated, when there is no field, when parentheses are
    unbalanced, when a fragment uses a construct outside the portable subset
    (lookarounds, backreferences, atomic groups, named groups) or when the
    result does not compile with Python ``re`` or with RE2 (pyarrow).
    """
    if not isinstance(template, str):
        raise ValueError(f"log format template must be a string, got {type(template).__name__}")
    template = template.strip()
    parts = _FIELD_SPLIT.split(template)
    fragments = parts[0::2]
    fields = parts[1::2]
    if not fields:
        raise ValueError(f"log format template {template!r} has no <Field>; at least one field is required")

    seen: set[str] = set()
    for name in fields:
        if not _IDENTIFIER.match(name):
            raise ValueError(
                f"invalid field name <{name}> in log format template: field names must be identifiers "
                "(letters, digits, underscore, not starting with a digit)"
            )
        if name in seen:
            raise ValueError(f"duplicate field <{name}> in log format template")
        if problem := new_name_problem(name):
            raise ValueError(f"field <{name}> in log format template: {problem}")
        seen.add(name)

    converted = _convert_fragments(fragments, last_field=len(fields) - 1 if multiline else None)

    out = ["(?s)^" if multiline else "^"]
    for i, frag in enumerate(converted):
        out.append(frag)
        if i < len(fields):
            quant = ".*" if i == len(fields) - 1 else r"[^\n]*?" if multiline else ".*?"
            out.append(f"(?P<{fields[i]}>{quant})")
    out.append("$")
    regex = "".join(out)

    try:
        compiled = re.compile(regex)
    except re.error as exc:
        raise ValueError(f"log format template {template!r} gives an invalid regex {regex!r}: {exc}") from exc
    if compiled.groups != len(fields):  # pragma: no cover - defensive
        raise ValueError(f"log format template {template!r}: fragments must not capture")
    _check_re2(regex, template)
    return regex, tuple(fields)


SPACE = r"\s"                  # white space between fields
SPACE_ON_THE_LINE = r"[\t\f\r ]"   # the same but a line break (RE2's \s less \n), for multi-line records


def _convert_fragments(fragments: list[str], last_field: int | None = None) -> list[str]:
    """Rewrite the literal fragments: spaces -> ``\\s+``, ``(`` -> ``(?:``.

    ``last_field``: the index of a multi-line record's last field. The spaces up to it stay on
    their line (SPACE_ON_THE_LINE), all but a run that ends the fragment right before it.

    Parenthesis depth is tracked across the fields so that a group may open in
    one fragment and close in a later one, as in ``(\\[<PID>\\])?``.
    """
    depth = 0
    open_at: list[int] = []  # fragment index of each open paren
    result: list[str] = []
    for idx, frag in enumerate(fragments):
        out: list[str] = []
        i, n = 0, len(frag)
        in_class = False
        while i < n:
            c = frag[i]
            if c == "\\":
                if i + 1 >= n:
                    raise ValueError(
                        f"fragment {frag!r} of the log format template ends with a dangling backslash"
                    )
                nxt = frag[i + 1]
                if not in_class and (nxt.isdigit() and nxt != "0" or nxt in "gk"):
                    raise ValueError(
                        f"fragment {frag!r} of the log format template uses a backreference "
                        f"(\\{nxt}), which RE2/cuDF do not support"
                    )
                out.append(frag[i : i + 2])
                i += 2
                continue
            if in_class:
                if c == "]":
                    in_class = False
                out.append(c)
                i += 1
                continue
            if c == "[":
                in_class = True
                out.append(c)
                i += 1
                # a ']' right after '[' or '[^' is a literal
                if i < n and frag[i] == "^":
                    out.append("^")
                    i += 1
                if i < n and frag[i] == "]":
                    out.append("]")
                    i += 1
                continue
            if c == " ":
                j = i
                while j < n and frag[j] == " ":
                    j += 1
                run = j - i
                on_the_line = last_field is not None and (idx < last_field or (idx == last_field and j < n))
                space = SPACE_ON_THE_LINE if on_the_line else SPACE
                if j < n and frag[j] in _QUANTIFIER_START:
                    out.append(f"{space}+" * (run - 1) + space)
                else:
                    out.append(f"{space}+")
                i = j
                continue
            if c == "(":
                depth += 1
                open_at.append(idx)
                if frag.startswith("(?", i):
                    rest = frag[i + 2 : i + 4]
                    if rest[:1] == ":":
                        out.append("(?:")
                        i += 3
                        continue
                    what = {
                        "=": "lookahead", "!": "negative lookahead", "<": "lookbehind or named group",
                        "P": "named group or backreference", ">": "atomic group",
                    }.get(rest[:1], "inline flag or special group")
                    raise ValueError(
                        f"fragment {frag!r} of the log format template uses a {what} '(?{rest[:1]}', "
                        "which is not portable to RE2/cuDF; only (...) and (?:...) groups are allowed "
                        "and only <Field>s capture"
                    )
                out.append("(?:")
                i += 1
                continue
            if c == ")":
                if depth == 0:
                    raise ValueError(
                        f"unbalanced parenthesis: fragment {frag!r} of the log format template closes "
                        "a group that was never opened"
                    )
                depth -= 1
                open_at.pop()
                out.append(c)
                i += 1
                continue
            out.append(c)
            i += 1
        if in_class:
            raise ValueError(
                f"fragment {frag!r} of the log format template has an unterminated character class '['; "
                "a literal bracket is written \\["
            )
        result.append("".join(out))
    if depth:
        frag = fragments[open_at[0]]
        raise ValueError(
            f"unbalanced parenthesis: fragment {frag!r} of the log format template opens a group "
            "that is never closed"
        )
    return result


def _check_re2(regex: str, template: str) -> None:
    """Compile ``regex`` with RE2 through pyarrow; skipped if pyarrow is absent."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:  # pragma: no cover - pyarrow is a hard dependency
        return
    try:
        pc.extract_regex(pa.array(["x"], type=pa.string()), pattern=regex)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(
            f"log format template {template!r} gives a regex that RE2 (pyarrow) rejects: {regex!r}: {exc}"
        ) from exc
