"""Which JSON lines and CSV records the device decides, in libcudf's regex dialect; the rest are
read by the CPU kernel. Pure Python."""

from __future__ import annotations


# ---------------------------------------------------------------------------------------------
# JSON lines and CSV records on the device: which records the device decides, in libcudf's
# regex dialect (tests/backends/test_gpu_api.py compiles each; test_gpu_rules.py checks the
# rules against the CPU kernel with Python's re, which reads these ASCII patterns alike).
#
# The device reads each JSON record with libcudf (recovery mode, strict validation, every value
# kept as its token text: keep_quotes), wrapped as {"r": <record>} so that a record libcudf
# cannot read (the wrapper is null) is told apart from a record whose fields are all null (the
# wrapper is there, its fields null). It keeps a value only where the token says exactly what
# the CPU kernel makes of it; every other record is read on the host by the CPU kernel, which
# also gives each bad record its reason.

JSON_WRAPPER = "r"

# Tokens the device turns into a column's value (anything else present: the record goes to the CPU)
JSON_INT_TOKEN = r"^-?(?:0|[1-9][0-9]{0,17})\Z"               # JSON integers within 18 digits
JSON_DECIMAL_TOKEN = r"^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?\Z"  # no exponent (the float fast path)
JSON_TEXT_LITERAL = r"^(?:-?[1-9][0-9]{0,17}|0|true|false)\Z"  # json.dumps gives the same text

# Records libcudf's strict validator reads differently from Python's json, or whose keys the
# device cannot check: the CPU kernel reads them.
JSON_DOUBTFUL_RECORD = "|".join([
    r"[0-9]\.[eE]",                         # 1.e5: libcudf's validator accepts it, Python's json does not
    r"\\u[dD][89a-fA-F]",                   # a UTF-16 surrogate escape: Python keeps a lone one
    r'\\.(?:[^"\\]|\\.)*"[\t\r ]*:',       # an escape in a key (the duplicate-key check reads keys as written)
    r"[\x00-\x08\x0b\x0c\x0e-\x1f]",        # control characters (never valid JSON outside strings)
    r"[,{\[][\t\r ]*,|,[\t\r ]*[}\]]",       # an empty member: Python's json refuses it (not left to the PDA)
])
JSON_OPENINGS = r"[\[{]"
JSON_MAX_OPENINGS = 256                     # deeper records are Python's RecursionError case: the CPU's

JSON_DEVICE_TYPES = frozenset({"string", "bool", "float64", "int8", "int16", "int32", "int64",
                               "uint8", "uint16", "uint32", "uint64"})


def json_device_refusal(read) -> str | None:
    """Why a JSON batch is read on the host as a whole (None: the device reads it)."""
    if read.extra != "drop":
        return f"parse_json: extra_fields: {read.extra} (host)"
    if read.raw:                # each value's source text: the CPU kernel's, so both backends agree
        return "parse_json: a field kept as source text (host)"
    for col in read.columns:
        if col.type not in JSON_DEVICE_TYPES:
            return f"parse_json: a {col.type.split('<')[0]} column (host)"
    return None


def json_read_tree(read) -> dict:
    """The keys the device reads below the wrapper, as a tree: a key maps to None (a value,
    read as its token text), {"struct": {...}} or {"list": node}. Columns' flat keys are values;
    their paths are structs and lists down to a value (the plan has refused clashes)."""
    tree: dict = {}
    for col in read.columns:
        tree.setdefault(col.name, None)
        if col.path:
            _insert(tree, col.path)
    return tree


def _insert(level: dict, path) -> None:
    key, rest = path[0], path[1:]
    level[key] = _node(level.get(key), rest) if rest else level.get(key)


def _node(node, rest):
    """`node` (None: a value) grown so that the steps in `rest` can be taken from it."""
    if isinstance(rest[0], int):
        node = node if node is not None and "list" in node else {"list": None}
        if len(rest) > 1:
            node["list"] = _node(node["list"], rest[1:])
        return node
    node = node if node is not None and "struct" in node else {"struct": {}}
    _insert(node["struct"], rest)
    return node


def json_tree_keys(tree: dict) -> set[str]:
    """Every key the device reads, at any depth (checked for duplicates within a record)."""
    out: set[str] = set()
    for key, node in tree.items():
        out.add(key)
        while node is not None and "list" in node:
            node = node["list"]
        if node is not None and "struct" in node:
            out |= json_tree_keys(node["struct"])
    return out


def json_key_literal(key: str) -> str:
    """The key as it is written in a record without escapes (a key that needs escapes is found
    by JSON_DOUBTFUL_RECORD instead)."""
    return '"' + key + '"'


# CSV: records the device reads with libcudf's reader, all others with the CPU kernel
def _one_char_class(ch: str) -> str:
    """A libcudf character class holding one character, spelled with a hex escape."""
    return f"[\\x{ord(ch):02x}]"


CSV_QUOTED_FIELD = r'"(?:[^"]|"")*"'


def csv_device_refusal(delimiter: str, null_values) -> str | None:
    """Why a CSV batch is read on the host as a whole (None: the device reads it)."""
    if len(delimiter) != 1 or ord(delimiter) > 0x7f or delimiter in '"\r\n':
        return "parse_csv: a delimiter libcudf's reader takes differently (host)"
    if any(('"' in v or "\n" in v or "\r" in v or delimiter in v) for v in null_values):
        return "parse_csv: a null value with a quote, delimiter or newline (host)"
    return None


def csv_record_pattern(delimiter: str) -> str:
    """A record the device reads: fields quoted whole (doubled quotes inside) or without quotes,
    no quote anywhere else (pyarrow and libcudf read a stray quote differently)."""
    d = _one_char_class(delimiter)
    unquoted = f"[^\"\\x{ord(delimiter):02x}]*"
    field = f"(?:{CSV_QUOTED_FIELD}|{unquoted})"
    return f"^{field}(?:{d}{field})*\\Z"


def csv_quoted_empty_pattern(delimiter: str) -> str:
    """A quoted empty field: libcudf makes it null when "" is a null value; the CPU keeps ''."""
    d = _one_char_class(delimiter)
    return f'(?:^|{d})""(?:{d}|\\Z)'


def csv_delimiter_pattern(delimiter: str) -> str:
    return _one_char_class(delimiter)
