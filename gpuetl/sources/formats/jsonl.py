"""JSON lines: one object per line. The fields are declared under `columns` (top-level keys or
paths such as `user.id`, `items[0].sku`) or learnt from a sample of every file.

The sample is each file's head and a few spread-out blocks (at the same offsets whatever the
blocksize or worker count, so the plan and the schema do not depend on them), from at most
JSON_SAMPLE_FILES files chosen with a fixed seed. It checks the declared columns (a column no
sampled record has is a located error with the closest field), learns the schema when nothing is
declared (types widen bool < int64 < float64 < string; a field that is a value in one record and
an array or an object in another is kept as each value's source text, with a plan note), and
names the fields `columns` leaves out."""

from __future__ import annotations

import difflib
import json
import random
from dataclasses import dataclass, field

from ...errors import SpecError
from ...spec.names import field_name_problem
from ...words import count
from ...types import ColumnSpec, Schema
from ..files import InputFile
from ..json_fields import ColumnClash, JsonColumn, JsonRead, parse_path, path_pattern, position_text
from ..parsers import JsonParser
from ..long_records import DEFAULT_MAX_RECORD
from ..ranges import ByteRange, read_head, read_range
from ..counters import PartitionCounters, SourceSummary
from ..stage import SourceStage, declared_columns, plan_byte_ranges, source_stage

JSON_SAMPLE_FILES = 100           # files sampled at most (chosen with a fixed seed when there are more)
JSON_HEAD_BYTES = 256 << 10       # each file's head
JSON_HEAD_RECORDS = 1000          # records read from it at most
JSON_BLOCKS = 4                   # spread-out blocks per uncompressed file past its head
JSON_BLOCK_BYTES = 64 << 10
JSON_BLOCK_RECORDS = 250          # records read from each at most
INFER_DEPTH = 8                   # deeper objects are kept as JSON text
MAX_SAMPLED_PATHS = 10_000
FIELD_HINT = "list the fields to read under `columns`; the others are left out"


class JsonlFormat:
    name = "jsonl"
    options = ("max_record_bytes",)

    def reads_ranges_in_store(self, spec) -> bool:
        """One object per line: objects in the store are read in byte ranges (sources/ranges.py)."""
        return True

    def plan(self, loaded, files, notes, backend=None):
        partitions = plan_byte_ranges(loaded, files)
        stage, metadata = json_stage_and_metadata(loaded, files, notes)
        return partitions, stage, metadata

    def stage(self, loaded, files, notes):
        return json_stage(loaded, files, notes)


def json_stage(loaded, files, notes=None):
    return json_stage_and_metadata(loaded, files, notes if notes is not None else [])[0]


def json_stage_and_metadata(loaded, files, notes: list[str]):
    spec = loaded.spec
    declared = declared_columns(loaded)
    sample = sample_json(files, window=spec.source.max_window_bytes, reach=spec.source.max_record_bytes)
    metadata: dict = {}
    shapes: dict = {}
    if declared:
        columns = _declared_read_columns(loaded, declared)
        _check_declared(loaded, columns, sample)
    else:
        inferred = sample.schema(loaded)
        columns = tuple(JsonColumn(name, t, None) for name, t in inferred.items())
        metadata["inferred_schema"] = inferred
        notes.append(f"source: schema inferred from {count(sample.records, 'record')} sampled in {sample.files_read} of "
                     f"{count(len(files), 'file')} (head and spread-out blocks of each): "
                     + ", ".join(f"{n}: {t}" for n, t in inferred.items()))
        raw, texts, drift_notes = sample.source_text_fields()
        shapes = {"inferred": True, "raw": raw, "texts": texts}
        notes.extend(drift_notes)
        if raw:
            metadata["source_text_fields"] = sorted(position_text(at) for at in raw)
    read = JsonRead(columns, strict=spec.strict, extra=spec.extra_fields, **shapes)
    try:
        read.arrow_schema()
    except ColumnClash as err:                 # located at the column that clashed with an earlier one
        raise SpecError(f"{loaded.key('columns', err.column)}: {err}", hint="declare the whole object as one "
                        "struct<...> column, or only paths that agree on what each value is") from None
    extra = sample.extra_fields(read.roots)
    if declared and extra:
        shown = ", ".join(extra[:10]) + (f" and {len(extra) - 10} more" if len(extra) > 10 else "")
        if spec.extra_fields == "error":
            raise SpecError(f"{loaded.key('columns')}: the sampled records have fields not in columns: {shown}",
                            hint="declare them, or set extra_fields: drop or keep")
        what = {"drop": "dropped", "keep": "kept as JSON text in the _extra column"}[spec.extra_fields]
        notes.append(f"source: {len(extra)} field(s) not in columns are {what}: {shown}")
        metadata["extra_fields"] = {"mode": spec.extra_fields, "sampled": extra}
    parser = JsonParser(read)
    return source_stage(loaded, files, parser, casts={},
                        declared={n: c for n, c in declared.items() if c.type == "timestamp"},
                        field_hint=FIELD_HINT, added=("_extra",) if spec.extra_fields == "keep" else (),
                        kind=JsonStage), metadata


def _declared_read_columns(loaded, declared: dict[str, ColumnSpec]) -> tuple[JsonColumn, ...]:
    out = []
    for name, col in declared.items():
        if (problem := field_name_problem(name)):
            raise SpecError(f"{loaded.key('columns', name)}: {problem}")
        path = parse_path(name)
        if path and (index := max((s for s in path if isinstance(s, int)), default=0)) >= _MOST_ITEMS:
            raise SpecError(f"{loaded.key('columns', name)}: the list index {index} is past any list's last item "
                            f"(a list holds fewer than {_MOST_ITEMS:,})")
        out.append(JsonColumn(name, "string" if col.type == "timestamp" else col.type, path))
    return tuple(out)


_MOST_ITEMS = 2**31 - 1        # an Arrow list's items, as the block reader's lists hold them


def _check_declared(loaded, columns: tuple[JsonColumn, ...], sample: "JsonSample") -> None:
    """A declared column that no sampled record has is most likely a typo: say so now, with the
    closest field the sample has, rather than write a column of nulls."""
    if not sample.records:
        return
    for col in columns:
        if col.name in sample.paths or (col.path and path_pattern(col.path) in sample.paths):
            continue
        known = sorted(sample.shown_paths())
        # a name differing only in case is the likeliest slip (`user.ID`: difflib's nearest was `user`)
        hint = ([k for k in known if k.lower() == col.name.lower()]
                or difflib.get_close_matches(col.name, known, n=1, cutoff=0.6))
        raise SpecError(
            f"{loaded.key('columns', col.name)}: none of the {sample.records} records sampled from "
            f"{sample.files_read} file(s) has the field {col.name!r}" + (f"; did you mean {hint[0]!r}?" if hint else ""),
            hint="fields: " + ", ".join(known[:20]) + (" …" if len(known) > 20 else "")
                 + "; nested values are reached by paths such as user.id or items[0].sku")


# -- the sample ---------------------------------------------------------------------------------

@dataclass
class _Kind:
    """What a field held in the sample: a scalar type, or an object/array with its parts."""

    scalar: str | None = None                     # bool | int64 | float64 | string
    fields: dict[str, "_Kind"] | None = None      # an object's
    element: "_Kind | None" = None                # an array's
    is_list: bool = False
    seen_at: dict[str, str] = field(default_factory=dict)   # "an object" -> where it was first seen
    too_deep: bool = False


_ORDER = ("bool", "int64", "float64", "string")


def _widen(a: str | None, b: str) -> str:
    if a is None or a == b:
        return b
    if "bool" in (a, b):              # true is not a number: a field of both is text
        return "string"
    return _ORDER[max(_ORDER.index(a), _ORDER.index(b))]


def _scalar_type(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64" if -2**63 <= value < 2**63 else "string"    # no wider integer: keep its digits
    if isinstance(value, float):
        return "float64"
    return "string"


@dataclass
class JsonSample:
    records: int = 0
    files_read: int = 0
    top: dict[str, _Kind] = field(default_factory=dict)
    paths: set[str] = field(default_factory=set)          # every key and path seen (`items[].sku`)
    keys: dict[str, None] = field(default_factory=dict)   # top-level keys, in order of first sight
    skipped: int = 0                                       # sampled lines no object could be read from

    def add(self, obj: dict, where: str) -> None:
        self.records += 1
        for key, value in obj.items():
            if key not in self.keys:
                self.keys[key] = None
                self.paths.add(key)
                self.top[key] = _Kind()
            self._observe(self.top[key], value, key, where, 1)

    def _observe(self, kind: _Kind, value, pattern: str, where: str, depth: int) -> None:
        """Note what one value is; `pattern` is its path with list indices left out (`items[].sku`)."""
        if value is None:
            return
        nested = isinstance(value, (dict, list))
        if nested and depth > INFER_DEPTH:
            kind.too_deep = True
            return
        what = "an object" if isinstance(value, dict) else "an array" if nested else "a scalar"
        if what not in kind.seen_at:
            kind.seen_at[what] = where
        if isinstance(value, dict):
            if kind.fields is None:
                kind.fields = {}
            for key, inner in value.items():
                sub = kind.fields.get(key)
                path = f"{pattern}.{key}"
                if sub is None:
                    sub = kind.fields[key] = _Kind()
                    if len(self.paths) < MAX_SAMPLED_PATHS:
                        self.paths.add(path)
                self._observe(sub, inner, path, where, depth + 1)
        elif nested:
            kind.is_list = True
            path = pattern + "[]"
            if kind.element is None:
                kind.element = _Kind()
                if len(self.paths) < MAX_SAMPLED_PATHS:
                    self.paths.add(path)
            for item in value:
                self._observe(kind.element, item, path, where, depth + 1)
        else:
            scalar = _scalar_type(value)
            if kind.scalar != scalar:
                kind.scalar = _widen(kind.scalar, scalar)

    def source_text_fields(self) -> tuple[frozenset, frozenset, list[str]]:
        """(the positions kept as each value's source text, the positions the sample saw only
        as strings, a note for each of the former) of the inferred schema. A position is a
        tuple of keys, None standing for an array's items: ('geometry', 'coordinates'),
        ('items', None, 'x'). A field whose values differ in shape (a value here, an array or
        an object there), at its level or in the items of its arrays, is kept as source text."""
        raw: set = set()
        texts: set = set()
        notes: list[str] = []

        def walk(kind: _Kind, at: tuple, name: str) -> None:
            drift = _drift(kind)
            if drift is not None:
                raw.add(at)
                (k1, w1), (k2, w2) = list(drift.seen_at.items())[:2]
                what = f"the field {name!r} is" if drift is kind else f"the array items of the field {name!r} are"
                notes.append(f"source: {what} {k1} in {w1} and {k2} in {w2}: {name!r} is kept as a string "
                             "column holding each value's source text (declare it under `columns` to read it "
                             "as one type)")
                return
            if kind.too_deep:
                return
            if kind.fields is not None:
                if kind.fields and all(_usable_struct_name(key) for key in kind.fields):
                    for key, sub in kind.fields.items():
                        walk(sub, at + (key,), f"{name}.{key}")
            elif kind.is_list:
                if kind.element is not None:
                    walk(kind.element, at + (None,), f"{name}[]")
            elif kind.scalar == "string":
                texts.add(at)

        for key in self.keys:
            walk(self.top[key], (key,), key)
        return frozenset(raw), frozenset(texts), notes

    def shown_paths(self) -> list[str]:
        return [p.replace("[]", "[0]") for p in self.paths]

    def extra_fields(self, roots) -> list[str]:
        return [k for k in self.keys if k not in roots]

    def schema(self, loaded) -> Schema:
        if not self.records:
            skipped = (f" ({self.skipped:,} sampled line(s) starting with '{{' are not JSON objects it can read: "
                       "invalid JSON, or a lone surrogate escape; a run quarantines them)" if self.skipped else "")
            raise SpecError(f"{loaded.key('source', 'path')}: found no JSON objects to learn the fields from{skipped}",
                            hint="declare the fields and their types under `columns`")
        out = {}
        for key in self.keys:
            if (problem := field_name_problem(key)):
                raise SpecError(f"{loaded.key('source', 'path')}: the input field {problem}", hint=FIELD_HINT)
            out[key] = _type_of(self.top[key])
        return out


def _drift(kind: _Kind) -> _Kind | None:
    """The kind, or that of its arrays' items (at any depth), that the sample saw in more
    than one shape (a value, an array, an object); None when there is none."""
    while True:
        if len(kind.seen_at) > 1:
            return kind
        if not kind.is_list or kind.element is None or kind.fields is not None:
            return None
        kind = kind.element


def _type_of(kind: _Kind) -> str:
    """The column type a field's sample gives: objects become structs, arrays lists; an empty
    object or array, one nested too deep, or one only ever null inside, is kept as JSON text;
    one whose shape drifts (_drift) as each value's source text."""
    if kind.too_deep or _drift(kind) is not None:
        return "string"
    if kind.fields is not None:
        if not kind.fields or not all(_usable_struct_name(name) for name in kind.fields):
            return "string"
        return "struct<" + ", ".join(f"{name}: {_type_of(sub)}" for name, sub in kind.fields.items()) + ">"
    if kind.is_list:
        if kind.element is None or (kind.element.scalar is None and kind.element.fields is None
                                    and not kind.element.is_list):
            return "string" if kind.element is None else "list<string>"
        return f"list<{_type_of(kind.element)}>"
    return kind.scalar or "string"


def _usable_struct_name(name: str) -> bool:
    """A key that can be a struct field in a type name (no ',', ':', '<', '>'); an object with
    others is kept as JSON text."""
    return bool(name.strip()) and name == name.strip() and not any(c in name for c in ",:<>")


def _sampled_files(files: list[InputFile]) -> list[InputFile]:
    if len(files) <= JSON_SAMPLE_FILES:
        return files
    chosen = random.Random(0).sample(range(len(files)), JSON_SAMPLE_FILES)
    return [files[i] for i in sorted(chosen)]


def _blocks(f: InputFile, window: int | None = None, reach: int = DEFAULT_MAX_RECORD) -> list[tuple[int, bytes]]:
    """(offset, bytes) of the whole lines in a file's head and in a few spread-out blocks (at
    offsets drawn from the file's name and size, so the same file is sampled alike every time)."""
    out = [read_head(f, JSON_HEAD_BYTES, window, reach)]
    if f.compression or f.size <= JSON_HEAD_BYTES + JSON_BLOCK_BYTES:
        return out
    rng = random.Random(f"{f.display}:{f.size}")
    starts = sorted(rng.randrange(JSON_HEAD_BYTES, f.size - JSON_BLOCK_BYTES) for _ in range(JSON_BLOCKS))
    for start in starts:
        data = read_range(f, ByteRange(f.index, start, JSON_BLOCK_BYTES), reach=reach)
        out.append((data.start, bytes(data.data)))
    return out


def sample_json(files: list[InputFile], window: int | None = None, reach: int = DEFAULT_MAX_RECORD) -> JsonSample:
    """The sample of these files (see the module's docstring). `window`: source.max_window_bytes;
    `reach`: source.max_record_bytes (a longer record is stepped over)."""
    sample = JsonSample()
    for f in _sampled_files(files):
        sample.files_read += 1
        for k, (start, data) in enumerate(_blocks(f, window, reach)):
            records = _record_lines(start, data)
            for line_at, raw in _spread(records, JSON_BLOCK_RECORDS if k else JSON_HEAD_RECORDS):
                try:
                    obj = json.loads(raw.decode("utf-8", "replace"))
                except (ValueError, RecursionError):   # bad, too deep, too many digits: the run quarantines it
                    sample.skipped += 1
                    continue
                if not isinstance(obj, dict) or (b"\\u" in raw and _lone_surrogate(obj)):
                    sample.skipped += 1
                    continue
                try:
                    sample.add(obj, f"{f.display} (byte {line_at})")
                except RecursionError:
                    continue
    return sample


def _lone_surrogate(obj: dict) -> bool:
    """Whether a \\uD800-\\uDFFF escape without its pair left a character UTF-8 cannot hold
    (in a key or a value): the run quarantines such a record, so it teaches the schema nothing."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    except (ValueError, RecursionError):
        return False
    return False


def _record_lines(start: int, data: bytes) -> list[tuple[int, bytes]]:
    """(offset, stripped line) of the lines that may be JSON objects (a BOM at a file's start
    is not part of its first record)."""
    out, pos = [], start
    for raw in data.split(b"\n"):
        line_at, pos = pos, pos + len(raw) + 1
        raw = raw.strip().lstrip(b"\xef\xbb\xbf") if line_at == 0 else raw.strip()
        if raw.startswith(b"{"):
            out.append((line_at, raw))
    return out


def _spread(records: list, limit: int) -> list:
    """At most `limit` of them, evenly spread (the first and the last included), so a block with
    more records than that is sampled from its end as well as its start."""
    if len(records) <= limit:
        return records
    step = (len(records) - 1) / (limit - 1)
    return [records[round(i * step)] for i in range(limit)]


# -- after the run ------------------------------------------------------------------------------

@dataclass
class JsonStage(SourceStage):
    """A JSON source's stage (jsonl, the text format's json preset): lines parsed by the
    JsonParser; its run summary names the fields `extra_fields: drop` left out, and asks the
    run to check that each declared column got a value (a record may lack any field)."""

    def summarize(self, spec, counters: list[PartitionCounters], metadata: dict) -> SourceSummary:
        fields, notes = {}, []
        dropped = dropped_fields_summary(spec, [c.dropped_fields for c in counters])
        if dropped is not None:
            fields["extra_fields"] = {**metadata.get("extra_fields", {"mode": "drop"}), "dropped": dropped["dropped"]}
            notes.append(dropped["note"])
        return SourceSummary(fields, notes, filled=tuple(spec.columns))


def dropped_fields_summary(spec, per_partition: list[dict[str, int] | None]) -> dict | None:
    """The manifest's account of the extra fields a JSON source left out (`extra_fields: drop`):
    {"dropped": {field: records}, most first, "note": one line}; "dropped" is None where a
    backend did not count them (the note says so). None in the other modes."""
    if spec.extra_fields != "drop":
        return None
    if any(counts is None for counts in per_partition):
        return {"dropped": None, "note": "source: the fields not in columns were dropped; this backend "
                                         "does not count them (the CPU backend does)"}
    total: dict[str, int] = {}
    for counts in per_partition:
        for name, n in counts.items():
            total[name] = total.get(name, 0) + n
    ordered = dict(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))
    if not ordered:
        return {"dropped": {}, "note": "source: no record had a field that is not in columns"}
    shown = ", ".join(f"{name} ({count(n, 'record')})" for name, n in list(ordered.items())[:10])
    more = f" and {len(ordered) - 10} more" if len(ordered) > 10 else ""
    return {"dropped": ordered, "note": f"source: {len(ordered)} field(s) not in columns were dropped: {shown}{more}"}
