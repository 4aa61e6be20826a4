"""Built-in log line formats, each compiled to ONE whole-line regular expression.

The patterns are backend-neutral: they are written in the common subset of
Python ``re``, RE2 (``pyarrow.compute.extract_regex`` on CPU) and the cuDF
regex engine (``Series.str.extract`` on GPU).  Only these constructs are used:
``(?P<name>...)`` named groups, ``(?:...)`` non-capturing groups, character
classes, ``\\S \\s \\d``, ``{m,n}``/``*``/``+``/``?`` quantifiers and ``^ $``
anchors.  No lookarounds, backreferences, possessive or atomic groups.

Null conventions the caller applies to the captured strings:

* a captured value that is exactly ``-`` means null when ``dash_is_null``;
* an optional group that did not take part in the match comes back as ``None``
  from Python ``re`` but as the EMPTY STRING ``""`` from
  ``pyarrow.compute.extract_regex`` (and cuDF); for the optional fields of the
  presets (``method``/``path``/``protocol`` of a malformed request line,
  syslog ``priority``/``app``/``pid``, rfc5424 ``message``) an empty capture
  therefore means null;
* a line that does not match at all gives a null struct (pyarrow) / ``None``
  (Python ``re``).

Lines are expected without their trailing newline (``\\r`` included).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
from dataclasses import dataclass

__all__ = ["ParseRule", "PRESETS", "preset"]


@dataclass(frozen=True)
class ParseRule:
    """How to turn one log line into columns.

    regex:
        whole-line regex, anchored ``^...$``; its named groups are the output
        columns, in order.  Valid in Python ``re``, RE2 and cuDF.
    columns:
        the output column names in order (== the named groups of ``regex``).
    types:
        default column types; columns not listed stay strings.  A type is a
        dtype name (``"int16"``, ``"int64"``) or a dict such as
        ``{"type": "timestamp", "format": "%d/%b/%Y:%H:%M:%S %z"}``
        (no ``format``: ISO 8601).
    dash_is_null:
        a captured value that is exactly ``-`` becomes null.  Independently of
        this flag, an EMPTY capture of an optional group (a group that did not
        participate: pyarrow/cuDF return ``""`` for it, Python ``re`` returns
        ``None``) must be treated as null.
    """

    regex: str
    columns: tuple[str, ...]
    types: dict[str, object]
    dash_is_null: bool = True

    def __post_init__(self) -> None:
        try:
            compiled = re.compile(self.regex)
        except re.error as exc:  # pragma: no cover - programming error
            raise ValueError(f"invalid regex: {exc}") from exc
        groups = tuple(sorted(compiled.groupindex, key=compiled.groupindex.__getitem__))
        if groups != tuple(self.columns):
            raise ValueError(f"columns {self.columns!r} do not match the regex named groups {groups!r}")
        if compiled.groups != len(groups):
            raise ValueError("regex must not contain unnamed capturing groups")
        unknown = set(self.types) - set(self.columns)
        if unknown:
            raise ValueError(f"types given for unknown columns: {sorted(unknown)}")


# --------------------------------------------------------------------------- #
# building blocks
# --------------------------------------------------------------------------- #

# Inside a double-quoted field: anything but a quote or backslash, or a
# backslash escape (Apache writes `"` as `\"` and `\` as `\\`).
QUOTED_BODY = r'(?:[^"\\]|\\.)*'

# The request line "%r": either the normal `METHOD PATH PROTOCOL` form, split
# into parts, or anything else (e.g. "-" or binary garbage from a scanner), in
# which case method/path/protocol do not participate (empty / None).
REQUEST_FIELD = (
    r'"(?P<request>'
    r'(?P<method>[A-Z]+) (?P<path>(?:[^ \t"\\]|\\.)+) (?P<protocol>[A-Za-z0-9./]+)'
    r"|" + QUOTED_BODY + r')"'
)

_CLF_HEAD = (
    r"^(?P<ip>\S+) (?P<ident>\S+) (?P<user>\S+) \[(?P<time>[^\]]+)\] "
    + REQUEST_FIELD
    + r" (?P<status>\d+|-) (?P<size>\d+|-)"
)

_REFERER_UA = r' "(?P<referer>' + QUOTED_BODY + r')" "(?P<user_agent>' + QUOTED_BODY + r')"'

_CLF_COLUMNS = ("ip", "ident", "user", "time", "request", "method", "path", "protocol", "status", "size")
_COMBINED_COLUMNS = _CLF_COLUMNS + ("referer", "user_agent")

_CLF_TYPES: dict[str, object] = {
    "status": "int16",
    "size": "int64",
    "time": {"type": "timestamp", "format": "%d/%b/%Y:%H:%M:%S %z"},
}

# RFC 3164 / rsyslog "traditional" format:
#   [<PRI>]Mmm dd hh:mm:ss HOST TAG[PID]: MSG       (day space-padded: "Oct  1")
# TAG[PID]: is optional (e.g. "-- MARK --" lines).
_RFC3164 = (
    r"^(?:<(?P<priority>\d{1,3})>)?"
    r"(?P<time>[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2}) "
    r"(?P<host>\S+) "
    r"(?:(?P<app>[^ \t\[\]:]+)(?:\[(?P<pid>\d+)\])?: ?)?"
    r"(?P<message>.*)$"
)

# RFC 5424:
#   <PRI>VERSION SP TIMESTAMP SP HOSTNAME SP APP-NAME SP PROCID SP MSGID SP SD [SP MSG]
# SD is "-" or one or more [ID PARAM="VALUE" ...] elements; `]`, `"` and `\`
# are backslash-escaped inside values.
_SD_ELEMENT = r'\[(?:[^\]"\\]|\\.|"' + QUOTED_BODY + r'")*\]'
_RFC5424 = (
    r"^<(?P<priority>\d{1,3})>(?P<version>\d{1,2}) "
    r"(?P<time>\S+) (?P<host>\S+) (?P<app>\S+) (?P<procid>\S+) (?P<msgid>\S+) "
    r"(?P<structured_data>-|(?:" + _SD_ELEMENT + r")+)"
    r"(?: (?P<message>.*))?$"
)


PRESETS: dict[str, ParseRule] = {
    "apache_common": ParseRule(
        regex=_CLF_HEAD + "$",
        columns=_CLF_COLUMNS,
        types=dict(_CLF_TYPES),
    ),
    "apache_combined": ParseRule(
        regex=_CLF_HEAD + _REFERER_UA + "$",
        columns=_COMBINED_COLUMNS,
        types=dict(_CLF_TYPES),
    ),
    # nginx default: $remote_addr - $remote_user [$time_local] "$request"
    #                $status $body_bytes_sent "$http_referer" "$http_user_agent"
    # (nginx escapes `"` as \x22, which the same pattern accepts.)
    "nginx_combined": ParseRule(
        regex=_CLF_HEAD + _REFERER_UA + "$",
        columns=_COMBINED_COLUMNS,
        types=dict(_CLF_TYPES),
    ),
    "syslog_rfc3164": ParseRule(
        regex=_RFC3164,
        columns=("priority", "time", "host", "app", "pid", "message"),
        # no year in RFC 3164 timestamps: time stays a string
        types={"priority": "int16", "pid": "int64"},
    ),
    "syslog_rfc5424": ParseRule(
        regex=_RFC5424,
        columns=(
            "priority", "version", "time", "host", "app", "procid", "msgid", "structured_data", "message",
        ),
        types={"priority": "int16", "version": "int16", "time": {"type": "timestamp"}},
    ),
}

_NO_REGEX = {"json": "the 'json' format is parsed as JSON lines, it has no regex preset"}


def preset(name: str) -> ParseRule:
    """Return (a copy of) the built-in :class:`ParseRule` called ``name``.

    Unknown names raise ``ValueError`` (never ``KeyError``) with a
    closest-match hint.
    """
    if not isinstance(name, str):
        raise ValueError(f"preset name must be a string, got {type(name).__name__}")
    key = name.strip()
    if key not in PRESETS:
        normalized = key.lower().replace("-", "_")
        if normalized in PRESETS:
            key = normalized
    if key in PRESETS:
        rule = PRESETS[key]
        return dataclasses.replace(rule, types=copy.deepcopy(rule.types))
    if key.lower() in _NO_REGEX:
        raise ValueError(_NO_REGEX[key.lower()])
    known = sorted(PRESETS)
    close = difflib.get_close_matches(key.lower(), known, n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown log format preset {name!r}{hint} (known: {', '.join(known)})")
