"""JSON lines on the CPU: pyarrow's block reader for the records it reads exactly as gpuetl
would, Python's json record by record (the careful reader) for the others.

The block reader is all or nothing: one record it refuses (a number written as a string, a bad
record, an extra field under `extra_fields: error`) fails the whole batch. So a refused batch is
not handed to the careful reader whole: the records the refusal points at are set aside and the
rest read by block again. A refusal that names a field (`Column(/user/id) changed from number to
string`) sets aside the records whose text holds that key with a value of the kind it changed to;
one that names none is found by splitting (runs of records read by block again in pieces until
the refused runs are small). The careful reader then takes only what was set aside, and both
readers' rows are put back in the records' order. The pieces of a split read are joined in one
form (_comparable): each infers the fields no column reads its own way.

A schema inferred from a sample may keep a field whose shape drifts (a value here, an array
there) as each value's source text (JsonRead.raw): the block reader has no such type, so such a
read goes to the careful reader whole, which scans those values' spans
(_loads_keeping_source_text). Under an inferred schema a value of another shape than the
sample's makes the record bad, naming the field and both shapes (_shape_problem).

Extra fields (top-level keys no column reads): under `extra_fields: drop` the block reader infers
them (its tables then hold them as columns, which the columns read leave out), so each batch
counts, per field, the records in which it was dropped; the careful reader counts its records'
alike. A field whose value is null is not counted: nothing is lost. Inferring takes time growing
with the square of a record's depth (and overflows the stack far enough down), so a record that
may nest deeper than DEEP_LEVELS is left to the careful reader (_deep). Under `keep` the block reader
reads the columns and Python's json only writes each record's other keys back as text.

JSON has no NaN or infinity, but both readers take the literals `NaN` and `Infinity`, and the
block reader reads a float32 past its range (`1e39`) as infinity: a record with a value that is
not finite in a float column is left to the careful reader (one finiteness check on the table's
float leaves), which makes it bad naming the value (`1e400 is out of float64's range`). Python's
json reads `1e400` as infinity too: the careful reader keeps the text such a number was written as.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..sources.json_fields import JsonRead, json_kind, lookup, position_text
from ..types import ARROW_TYPES, type_name_of
from .cpu_values import BAD, as_arrow, exact_value, scratch_pool
from .cpu_clf import one_array

BLOCK_BYTES = 1 << 20         # the reader's block (a 16 MiB batch as one block parses slower: docs/design.md)
DEEP_LEVELS = 1_000           # records nested deeper are not handed to the inferring block reader (_deep)
NAMED_ROUNDS = 16             # refusals that name a field, followed before splitting takes over
SMALL_RUN = 64                # runs of records this short that the block reader refuses go to the careful reader
SPLIT_PIECES = 16             # a refused run is read again in this many pieces

_CHANGED = re.compile(r"Column\((/.*)\) changed from (\w+) to (\w+)")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_VALUE_START = {"string": '"', "number": r"[-0-9]", "boolean": "[tf]", "object": r"\{", "array": r"\[",
                "null": "n"}


def parse_json(backend, text, read: JsonRead, dropped: dict[str, int] | None = None):
    """(columns, ok, reasons or None) for a batch of records: see the module's docstring.
    dropped: under `extra_fields: drop`, {field: records} gets this batch's dropped fields added."""
    arr = as_arrow(text)
    n = len(arr)
    arr, careful = _brace_delimited(arr)
    careful = ~careful
    if read.raw:                   # values kept as their source text: Python's json reads every record
        careful[:] = True
    elif read.extra == "drop":
        careful |= _deep(arr)
    table = None
    if not careful.all() or not n:
        table, careful = _read_blocks(arr, careful, read)
    if table is not None:
        table, careful = _not_finite_to_careful(table, careful, read)
    extra_text = None
    if table is not None and read.extra == "keep":
        table, extra_text, careful = _extra_as_text(arr, table, careful, read)
    if table is not None and dropped is not None:
        _count_dropped(table, read, dropped)
    index = text.index
    schema = read.schema
    if not careful.any():
        values = json_columns(table, read)
        if extra_text is not None:
            values["_extra"] = extra_text
        cols = {name: backend.series(values[name], t, index=index) for name, t in schema.items()}
        return cols, pd.Series(np.ones(n, dtype=bool), index=index), None
    slow_cols, slow_ok, slow_reasons = _read_carefully(backend, arr.filter(pa.array(careful)), read, dropped)
    if table is None:              # every record read carefully
        cols = {name: backend.series(values, schema[name], index=index) for name, values in slow_cols.items()}
        return cols, pd.Series(slow_ok, index=index), _reason_series(slow_reasons, index)
    # both: the block reader's rows first, then the careful reader's, put back in order
    fast_at, slow_at = np.flatnonzero(~careful), np.flatnonzero(careful)
    back = pa.array(np.argsort(np.concatenate([fast_at, slow_at]), kind="stable"))
    fast_values = json_columns(table, read)
    if extra_text is not None:
        fast_values["_extra"] = extra_text
    cols = {}
    for name, t in schema.items():
        joined = pa.concat_arrays([fast_values[name].cast(ARROW_TYPES[t]), slow_cols[name]])
        cols[name] = backend.series(joined.take(back), t, index=index)
    ok = np.ones(n, dtype=bool)
    ok[slow_at] = slow_ok
    reasons: list[str | None] = [None] * n
    for j, i in enumerate(slow_at):
        reasons[i] = slow_reasons[j]
    return cols, pd.Series(ok, index=index), _reason_series(reasons, index)


def _reason_series(reasons: list, index) -> pd.Series:
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.array(reasons, pa.string())), index=index)


# -- the block reader -------------------------------------------------------------------------

def _brace_delimited(arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(the records, less a UTF-8 byte-order mark before one; which are one brace-delimited
    text, white space around it allowed). Among those, pyarrow's reader (which reads values
    across line breaks and several values on one line) gives exactly one row per record, so a
    row count equal to the record count means one object per record."""
    if not len(arr):
        return arr, np.ones(0, dtype=bool)
    ok = pc.and_(pc.starts_with(arr, "{"), pc.ends_with(arr, "}"))
    if pc.all(ok).as_py():
        return arr, np.ones(len(arr), dtype=bool)
    if pc.any(pc.starts_with(arr, "\ufeff")).as_py():       # a file saved by a Windows editor
        arr = pc.if_else(pc.starts_with(arr, "\ufeff"), pc.utf8_slice_codeunits(arr, 1), arr)
    trimmed = pc.utf8_trim(arr, " \t\r")
    ok = pc.and_(pc.starts_with(trimmed, "{"), pc.ends_with(trimmed, "}"))
    return arr, np.asarray(pc.fill_null(ok, False).to_numpy(zero_copy_only=False), dtype=bool)


def _read_blocks(arr: pa.Array, careful: np.ndarray, read: JsonRead) -> tuple[pa.Table | None, np.ndarray]:
    """(the block reader's table of the records not marked careful, the careful marks): the
    records the reader refuses are added to the careful ones (see the module's docstring)."""
    schema = read.arrow_schema()
    options = _parse_options(schema, read)
    careful = careful.copy()
    refused = False
    for _ in range(NAMED_ROUNDS):
        rows = np.flatnonzero(~careful)
        subset = arr if len(rows) == len(arr) else arr.filter(pa.array(~careful))
        table, error = _try_read(subset, schema, options)
        if table is not None:
            return table, careful
        suspects = _named_suspects(subset, error)
        refused = suspects is None or not suspects.any()
        if refused:
            break
        careful[rows[suspects]] = True
        if careful.all():
            return None, careful
    rows = np.flatnonzero(~careful)
    pieces: list[pa.Table] = []
    _split_refused(arr, rows, schema, options, careful, pieces, refused=refused)
    if careful.all():
        return None, careful
    return pa.concat_tables([_comparable(t, schema) for t in pieces], promote_options="default"), careful


def _comparable(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """One piece of a split read in the form every piece shares, so the pieces concatenate
    whatever each piece's records inferred (a dropped field null in one piece and a number in
    another, fields inferred inside a declared object: _parse_options): the schema's columns as
    their declared types, each other (dropped) field only as which records have it (true, or
    null: what _count_dropped counts)."""
    names, columns = [], []
    for f in schema:
        if f.name in table.column_names:
            names.append(f.name)
            columns.append(_as_declared(one_array(table.column(f.name)), f.type))
    for name, column in zip(table.column_names, table.columns):
        if name not in schema.names:
            names.append(name)
            columns.append(pc.if_else(pc.is_valid(column), True, pa.scalar(None, pa.bool_())))
    return pa.table(columns, names=names)


def _split_refused(arr, rows: np.ndarray, schema, options, careful: np.ndarray, pieces: list,
                   refused: bool = False) -> None:
    """Read these records by block; a run the reader refuses is read again in SPLIT_PIECES
    pieces, down to SMALL_RUN records, which are marked careful, as is a run most of whose
    pieces are refused (the careful reader takes them all at less cost than more splitting).
    `pieces` gets the tables in record order. `refused`: the reader is known to refuse this run."""
    if not refused:
        table, _ = _try_read(arr.take(pa.array(rows)), schema, options)
        if table is not None:
            pieces.append(table)
            return
    if len(rows) <= SMALL_RUN:
        careful[rows] = True
        return
    parts = [part for part in np.array_split(rows, SPLIT_PIECES) if len(part)]
    tables = [_try_read(arr.take(pa.array(part)), schema, options)[0] for part in parts]
    if sum(t is None for t in tables) > len(parts) // 2:
        careful[rows] = True
        return
    for part, table in zip(parts, tables):
        if table is not None:
            pieces.append(table)
        else:
            _split_refused(arr, part, schema, options, careful, pieces, refused=True)


def _deep(arr: pa.Array) -> np.ndarray:
    """Which records may nest deeper than DEEP_LEVELS (counted by brackets, strings not told
    apart: a bound from above). Inferring the fields no column reads (`drop`), pyarrow's reader
    takes time growing with the square of a record's depth, so one hostile record could stall a
    partition for hours; such records go to the careful reader, whose work is linear in their
    length. Only records long enough to be that deep are looked at."""
    n = len(arr)
    deep = np.zeros(n, dtype=bool)
    if not n:
        return deep
    offsets = np.frombuffer(arr.buffers()[1], np.int64 if pa.types.is_large_string(arr.type) else np.int32,
                            count=n + 1, offset=arr.offset * (8 if pa.types.is_large_string(arr.type) else 4))
    long = np.flatnonzero(np.diff(offsets) > 2 * DEEP_LEVELS)
    if not len(long):
        return deep
    data = np.frombuffer(arr.buffers()[2], np.uint8)
    for i, start, end in zip(long.tolist(), offsets[long].tolist(), offsets[long + 1].tolist()):
        text = data[start:end]
        opens = (text == 0x7B) | (text == 0x5B)                                   # { [
        if np.count_nonzero(opens) > DEEP_LEVELS:                 # opened that often: how deep at most
            step = opens.astype(np.int32) - ((text == 0x7D) | (text == 0x5D))     # } ]
            deep[i] = np.cumsum(step).max() > DEEP_LEVELS
    return deep


def _parse_options(schema: pa.Schema, read: JsonRead):
    """`drop`: the reader infers the other fields, to count them (_count_dropped)."""
    import pyarrow.json as pj

    return pj.ParseOptions(explicit_schema=schema,
                           unexpected_field_behavior={"error": "error", "drop": "infer"}.get(read.extra, "ignore"))


def _count_dropped(table: pa.Table, read: JsonRead, dropped: dict[str, int]) -> None:
    """Add to `dropped` the records of the block reader's table that have each field no column
    reads (inferred: see _parse_options), not null."""
    roots = read.roots
    for name, column in zip(table.column_names, table.columns):
        if name not in roots and (present := len(column) - column.null_count):
            dropped[name] = dropped.get(name, 0) + present


def _extra_as_text(arr: pa.Array, table: pa.Table, careful: np.ndarray, read: JsonRead):
    """(the block reader's table, the `_extra` text of its records, the careful marks) under
    `extra_fields: keep`: each record the block reader took has its other keys written back as
    JSON text by Python's json, exactly as the careful reader writes them. A record Python's json
    cannot read or write back (nested too deeply, a lone surrogate) is left to the careful reader,
    and taken out of the table."""
    fast_at = np.flatnonzero(~careful)
    roots = read.roots
    texts: list[str | None] = []
    refused = np.zeros(len(fast_at), dtype=bool)
    for j, line in enumerate(arr.filter(pa.array(~careful)).to_pylist()):
        try:
            obj = json.loads(line)
            extra = {k: v for k, v in obj.items() if k not in roots}
            texts.append(_written_back(extra) if extra else None)
        except (ValueError, RecursionError, TypeError, AttributeError):
            refused[j] = True
            texts.append(None)
            continue
        if _SURROGATE_ESCAPE.search(line) and _has_lone_surrogate(obj):
            refused[j] = True
    extra_text = pa.array(texts, pa.string())
    if refused.any():
        careful = careful.copy()
        careful[fast_at[refused]] = True
        table, extra_text = table.filter(pa.array(~refused)), extra_text.filter(pa.array(~refused))
    return table, extra_text, careful


def _not_finite_to_careful(table: pa.Table, careful: np.ndarray, read: JsonRead):
    """(the table, the careful marks) with the records holding a value that is not finite in a
    float column (NaN, Infinity, a float32 past its range) taken out of the table and marked
    careful: see the module's docstring."""
    bad = None
    for field in read.arrow_schema():
        if field.name in table.column_names:
            rows = _not_finite_rows(one_array(table.column(field.name)))
            if rows is not None:
                bad = rows if bad is None else bad | rows
    if bad is None:
        return table, careful
    careful = careful.copy()
    careful[np.flatnonzero(~careful)[bad]] = True
    return table.filter(pa.array(~bad)), careful


def _not_finite_rows(values: pa.Array) -> np.ndarray | None:
    """Which rows hold a float leaf (at any depth) that is not finite; None when none does."""
    kind = values.type
    if pa.types.is_floating(kind):
        total = pc.sum(values).as_py()      # one pass: finite unless a value is not (or the sum overflows)
        if total is None or math.isfinite(total):
            return None
        not_finite = pc.invert(pc.fill_null(pc.is_finite(values), True))
        if not pc.any(not_finite).as_py():
            return None
        return np.asarray(not_finite.to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_struct(kind):
        bad = None
        for child in values.flatten():         # the struct's nulls applied to its fields
            rows = _not_finite_rows(child)
            if rows is not None:
                bad = rows if bad is None else bad | rows
        return bad
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        inner = _not_finite_rows(values.flatten())
        if inner is None:
            return None
        bad = np.zeros(len(values), dtype=bool)
        parents = np.asarray(pc.list_parent_indices(values).to_numpy(zero_copy_only=False))
        bad[parents[inner]] = True
        return bad
    return None


def _try_read(arr: pa.Array, schema: pa.Schema, parse_options) -> tuple[pa.Table | None, str | None]:
    """(the table, None) when the reader takes every record as one row; else (None, why)."""
    import pyarrow.json as pj

    if not len(arr):
        return schema.empty_table(), None
    try:
        table = pj.read_json(pa.BufferReader(_joined(arr)), parse_options=parse_options,
                             read_options=pj.ReadOptions(block_size=_block_size(arr), use_threads=False))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        return None, str(err)
    if table.num_rows != len(arr):
        return None, "rows and records differ"
    return table, None


def _named_suspects(arr: pa.Array, error: str) -> np.ndarray | None:
    """The records a refusal that names a field points at: those whose text holds the field's
    key followed by a value of the kind it changed to (any value for a list's element). None when
    the refusal names no field. A record set aside by mistake is only read carefully."""
    found = _CHANGED.search(error or "")
    if not found:
        return None
    path, _, to = found.groups()
    steps = [s for s in path.split("/") if s and s != "[]"]
    if not steps:
        return None
    key = re.escape(json.dumps(steps[-1], ensure_ascii=False)[1:-1])     # as the text writes it
    after = _VALUE_START.get(to, "") if not path.endswith("/[]") else ""
    try:
        hit = pc.match_substring_regex(arr, f'"{key}"\\s*:\\s*{after}')
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):      # a key RE2 will not take: split instead
        return None
    return np.asarray(pc.fill_null(hit, False).to_numpy(zero_copy_only=False), dtype=bool)


def _joined(arr: pa.Array) -> pa.Buffer:
    """One buffer, records separated by newlines: the reader's input, handed over without a copy
    to Python bytes, from the scratch pool (this thread frees it after the read)."""
    lists = pa.ListArray.from_arrays(pa.array([0, len(arr)], type=pa.int32()), arr.cast(pa.string()))
    return pc.binary_join(lists, "\n", memory_pool=scratch_pool())[0].as_buffer()


def _block_size(arr: pa.Array) -> int:
    """About BLOCK_BYTES, and at least the longest record, which a block must hold whole."""
    longest = pc.max(pc.binary_length(arr)).as_py() or 0
    return max(BLOCK_BYTES, longest + 2)


def json_columns(table: pa.Table, read: JsonRead) -> dict[str, pa.Array]:
    """Each column's values from the block reader's table: the flat key where a record has it,
    else the value at the column's path (a list index past a list's end is null). Objects keep
    only the fields their type names (the reader may have inferred others: _parse_options)."""
    out = {}
    for col in read.columns:
        declared = ARROW_TYPES[col.type]
        flat = _as_declared(one_array(table.column(col.name)), declared) if col.name in table.column_names else None
        if not col.path:
            out[col.name] = flat
            continue
        value = one_array(table.column(col.path[0]))
        for step in col.path[1:]:
            value = _json_step(value, step)
        value = _as_declared(value, declared)
        if flat is not None and flat.null_count < len(flat):
            value = pc.coalesce(flat, value)
        out[col.name] = value
    return out


def _as_declared(values: pa.Array, declared: pa.DataType) -> pa.Array:
    return values if values.type == declared else values.cast(declared)


def _json_step(value: pa.Array, step) -> pa.Array:
    """One step down a path: a struct's field, or a list's element by index (null past its end),
    taken through the list's offsets (an if_else over nested lists copies them whole)."""
    if not isinstance(step, int):
        return pc.struct_field(value, [value.type.get_field_index(step)])
    if isinstance(value, pa.ChunkedArray):
        value = one_array(value)
    offsets = np.asarray(value.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    lengths = offsets[1:] - offsets[:-1]
    present = lengths > step
    if value.null_count:
        present &= np.asarray(value.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    at = pa.array(offsets[:-1] + step, mask=~present)
    return value.values.take(at)


# -- the careful reader -----------------------------------------------------------------------

def _read_carefully(backend, arr: pa.Array, read: JsonRead, dropped: dict[str, int] | None = None
                    ) -> tuple[dict[str, pa.Array], np.ndarray, list]:
    """({column: values}, ok, reasons), record by record with Python's json: a record it cannot
    read, however it fails (too deeply nested, an integer of thousands of digits, two objects on
    one line), is quarantined with the reason; the run goes on. JSON strings in number columns
    are gathered and cast afterwards with the rules `columns` applies to text (backend.cast).
    dropped: as parse_json's, for every record read as an object."""
    n = len(arr)
    ok = np.ones(n, dtype=bool)
    reasons: list[str | None] = [None] * n
    columns: dict[str, list] = {c.name: [None] * n for c in read.columns}
    pending: dict[str, tuple[list[int], list[str]]] = {}
    extra_text: list[str | None] = [None] * n
    roots = read.roots
    arrow_schema = None
    raw_tree = _position_tree(read.raw) if read.raw else None
    for i, line in enumerate(arr.to_pylist()):
        try:
            obj = (json.loads(line, parse_float=_json_float, parse_constant=_NotFinite) if raw_tree is None
                   else _loads_keeping_source_text(line, raw_tree))
        except json.JSONDecodeError as err:
            why = "text after the first JSON value (one line must be one record)" if err.msg == "Extra data" else err.msg
            ok[i], reasons[i] = False, f"invalid JSON: {why}"
            continue
        except (RecursionError, ValueError, TypeError) as err:    # too deep; an integer over Python's digit limit
            why = "nested too deeply to read" if isinstance(err, RecursionError) else str(err)[:200]
            if raw_tree is not None:              # pyarrow's reader has no source text to give
                ok[i], reasons[i] = False, f"invalid JSON: {why}"
                continue
            arrow_schema = arrow_schema or read.arrow_schema()
            obj = _one_record_as_arrow_reads_it(line, arrow_schema, f"invalid JSON: {why}")
            if dropped is not None and not isinstance(obj, _Unreadable):     # obj holds the columns' keys only
                for key in _top_level_fields(line):
                    if key not in roots:
                        dropped[key] = dropped.get(key, 0) + 1
        if isinstance(obj, _Unreadable):
            ok[i], reasons[i] = False, obj.reason
            continue
        if _SURROGATE_ESCAPE.search(line) and _has_lone_surrogate(obj):
            ok[i], reasons[i] = False, "invalid JSON: a \\u escape is half of a surrogate pair, not a character"
            continue
        if not isinstance(obj, dict):
            ok[i], reasons[i] = False, f"expected a JSON object, got {json_kind(obj)}"
            continue
        if dropped is not None:
            for key, value in obj.items():
                if key not in roots and value is not None:
                    dropped[key] = dropped.get(key, 0) + 1
        problem = None
        for col in read.columns:
            value, problem = lookup(obj, col)
            if problem:
                break
            if read.inferred and (problem := _shape_problem(value, ARROW_TYPES[col.type], (col.name,), read)):
                break
            try:
                value, problem, as_text = _json_value(value, col.type, read.strict)
            except (RecursionError, ValueError) as err:
                problem, as_text = ("nested too deeply to write back as text" if isinstance(err, RecursionError)
                                    else str(err)[:200]), False
            if problem:
                problem = f"field {col.name!r}: {problem}"
                break
            if as_text:
                at, texts = pending.setdefault(col.name, ([], []))
                at.append(i)
                texts.append(value)
            else:
                columns[col.name][i] = value
        if not problem and read.extra != "drop":
            extra = {k: v for k, v in obj.items() if k not in roots}
            if extra and read.extra == "error":
                problem = f"field {next(iter(extra))!r} is not in columns (extra_fields: error)"
            elif extra and read.extra == "keep":
                try:
                    extra_text[i] = _written_back(extra)
                except RecursionError:
                    problem = "an extra field is nested too deeply to write back as text"
                except ValueError:
                    problem = _unwritable_extra(extra)
        if problem:
            ok[i], reasons[i] = False, problem
    by_name = {c.name: c for c in read.columns}
    for name, (at, texts) in pending.items():
        t = by_name[name].type
        values, bad = backend.cast(backend.series(pa.array(texts, pa.string()), "string"), t)
        values, bad = as_arrow(values).to_pylist(), np.asarray(bad, dtype=bool)
        for j, i in enumerate(at):
            if not ok[i]:
                continue
            if bad[j]:
                ok[i], reasons[i] = False, f"field {name!r}: {json.dumps(texts[j])[:80]} is not a valid {t}"
            else:
                columns[name][i] = values[j]
    cols = {}
    for col in read.columns:
        values = [v if ok[i] else None for i, v in enumerate(columns[col.name])]
        cols[col.name] = pa.array(values, type=ARROW_TYPES[col.type])
    if read.extra == "keep":
        cols["_extra"] = pa.array([v if ok[i] else None for i, v in enumerate(extra_text)], pa.string())
    return cols, ok, reasons


def _shape_of(value) -> str:
    return "an object" if isinstance(value, dict) else json_kind(value)


def _shape_problem(value, arrow_type: pa.DataType, at: tuple, read: JsonRead) -> str | None:
    """A value of an inferred column (at any depth) whose shape (a value, an array, an object)
    is not the one the sample gave its type: the reason naming where, both shapes, and what to
    declare. Positions kept as source text take any shape."""
    if value is None or at in read.raw:
        return None
    if pa.types.is_struct(arrow_type):
        if not isinstance(value, dict):
            return _shape_reason(value, at, "an object")
        for f in arrow_type:
            if (problem := _shape_problem(value.get(f.name), f.type, at + (f.name,), read)):
                return problem
        return None
    if pa.types.is_list(arrow_type):
        if not isinstance(value, list):
            return _shape_reason(value, at, "an array")
        for item in value:
            if (problem := _shape_problem(item, arrow_type.value_type, at + (None,), read)):
                return problem
        return None
    if not isinstance(value, (dict, list)):
        return None
    if pa.types.is_string(arrow_type):
        return _shape_reason(value, at, "a string") if at in read.texts else None   # else JSON text
    return _shape_reason(value, at, "true/false" if pa.types.is_boolean(arrow_type) else "a number")


def _shape_reason(value, at: tuple, sampled: str) -> str:
    field = position_text(at)
    return (f"field {field!r} is {_shape_of(value)} here, {sampled} in the sample the schema was inferred "
            f"from; declare {field!r} under `columns` as string to keep each value's source text")


def _position_tree(positions) -> dict:
    """JsonRead.raw as a tree for _loads_keeping_source_text: {key: subtree or _SOURCE_TEXT},
    {None: subtree} for an array's items."""
    tree: dict = {}
    for at in positions:
        node = tree
        for step in at[:-1]:
            node = node.setdefault(step, {})
        node[at[-1]] = _SOURCE_TEXT
    return tree


_SOURCE_TEXT = object()
_WHITE = re.compile(r"[ \t\n\r]*")


def _loads_keeping_source_text(text: str, tree: dict):
    """json.loads, but the values at the tree's positions are their source text (a string with
    its quotes, a number as written, an array or object with its white space); null stays None.
    The same errors as json.loads for text that is not one JSON value."""
    pos = _WHITE.match(text, 0).end()
    value, pos = _value_keeping_source_text(text, pos, tree)
    end = _WHITE.match(text, pos).end()
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _value_keeping_source_text(text: str, pos: int, node):
    if node is _SOURCE_TEXT:
        value, end = _DECODER.raw_decode(text, pos)       # checks the value is JSON
        if value is None:
            return None, end
        source = text[pos:end]
        if ("N" in source or "I" in source) and _not_json_literal(value):
            raise ValueError("NaN or Infinity is not JSON (it has no NaN or infinity)")
        if _SURROGATE_ESCAPE.search(source) and _has_lone_surrogate(value):
            raise ValueError("a \\u escape is half of a surrogate pair, not a character")
        return source, end
    first = text[pos:pos + 1]
    if first == "{" and None not in node:
        return _object_keeping_source_text(text, pos + 1, node)
    if first == "[" and None in node:
        return _array_keeping_source_text(text, pos + 1, node[None])
    return _DECODER.raw_decode(text, pos)


def _not_json_literal(value) -> bool:
    """Whether a value holds NaN, Infinity or -Infinity (at any depth)."""
    if isinstance(value, _NotFinite):
        return value.is_literal
    if isinstance(value, dict):
        return any(_not_json_literal(v) for v in value.values())
    if isinstance(value, list):
        return any(_not_json_literal(v) for v in value)
    return False


def _object_keeping_source_text(text: str, pos: int, node: dict):
    out: dict = {}
    pos = _WHITE.match(text, pos).end()
    if text[pos:pos + 1] == "}":
        return out, pos + 1
    while True:
        if text[pos:pos + 1] != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, pos)
        key, pos = json.decoder.scanstring(text, pos + 1)
        pos = _WHITE.match(text, pos).end()
        if text[pos:pos + 1] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
        pos = _WHITE.match(text, pos + 1).end()
        child = node.get(key)
        out[key], pos = (_DECODER.raw_decode(text, pos) if child is None
                         else _value_keeping_source_text(text, pos, child))
        pos = _WHITE.match(text, pos).end()
        if text[pos:pos + 1] == "}":
            return out, pos + 1
        if text[pos:pos + 1] != ",":
            raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
        pos = _WHITE.match(text, pos + 1).end()


def _array_keeping_source_text(text: str, pos: int, node):
    out: list = []
    pos = _WHITE.match(text, pos).end()
    if text[pos:pos + 1] == "]":
        return out, pos + 1
    while True:
        item, pos = _value_keeping_source_text(text, pos, node)
        out.append(item)
        pos = _WHITE.match(text, pos).end()
        if text[pos:pos + 1] == "]":
            return out, pos + 1
        if text[pos:pos + 1] != ",":
            raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
        pos = _WHITE.match(text, pos + 1).end()


def _json_value(value, type_name: str, strict: bool):
    """(value, problem, as_text): one JSON value for a column of this type. `as_text`: a JSON
    string for a number column, to be cast with the text rules (not under `strict`)."""
    if value is None:
        return None, None, False
    if type_name == "string":
        return (value if isinstance(value, str) else _written_back(value)), None, False
    if type_name.startswith(("list<", "struct<")):
        return _conform(value, ARROW_TYPES[type_name], "")
    if isinstance(value, str) and not strict and type_name != "bool":
        return value, None, True
    problem = _json_value_problem(value, type_name)
    return (None, problem, False) if problem else (exact_value(value, type_name), None, False)


def _conform(value, arrow_type: pa.DataType, where: str):
    """A nested value checked against its declared type, as the block reader would read it
    (leaves as they are in JSON: "4" is not an int64); fields the type does not name are left out."""
    if value is None:
        return None, None, False
    if pa.types.is_struct(arrow_type):
        if not isinstance(value, dict):
            return None, f"{where or 'value'}: expected an object, got {json_kind(value)}", False
        out = {}
        for f in arrow_type:
            inner, problem, _ = _conform(value.get(f.name), f.type, f"{where}.{f.name}" if where else f.name)
            if problem:
                return None, problem, False
            out[f.name] = inner
        return out, None, False
    if pa.types.is_list(arrow_type):
        if not isinstance(value, list):
            return None, f"{where or 'value'}: expected an array, got {json_kind(value)}", False
        out = []
        for k, item in enumerate(value):
            inner, problem, _ = _conform(item, arrow_type.value_type, f"{where}[{k}]")
            if problem:
                return None, problem, False
            out.append(inner)
        return out, None, False
    name = type_name_of(arrow_type)
    if name == "string":
        return (value if isinstance(value, str) else _written_back(value)), None, False
    problem = _json_value_problem(value, name)
    if problem:
        return None, f"{where}: {problem}" if where else problem, False
    return exact_value(value, name), None, False


def _json_value_problem(value, type_name: str) -> str | None:
    if value is None:
        return None
    if type_name == "string" or type_name == "timestamp":
        return None if isinstance(value, str) or type_name == "string" else f"expected a string, got {value!r}"
    # JSON types must fit as they are, as in pyarrow's reader: "4" is not an int64, true is not 1
    if isinstance(value, _NotFinite) and (value.is_literal or type_name.startswith("float")):
        return value.problem(type_name)
    fits = (isinstance(value, bool) if type_name == "bool"
            else isinstance(value, (int, float)) and not isinstance(value, bool) if type_name.startswith("float")
            else isinstance(value, int) and not isinstance(value, bool))
    if not fits or exact_value(value, type_name) is BAD:
        shown = value.text if isinstance(value, _NotFinite) else json.dumps(value)[:80]
        if fits and type_name == "float32":
            return f"{shown} is out of float32's range"
        return f"expected {type_name}, got {shown}"
    return None


def _unwritable_extra(extra: dict) -> str:
    """The reason naming the first extra field `_extra` cannot hold as JSON text."""
    for key, value in extra.items():
        try:
            if isinstance(value, _NotFinite):
                raise ValueError(value.problem("float64"))
            _written_back(value)
        except ValueError as err:
            return f"field {key!r} (an extra field, kept in _extra): {err}"
    return "an extra field cannot be written back as JSON text"


class _NotFinite(float):
    """A number Python's json reads as not finite, with the text it was written as: past
    float64's range (`1e400`), or a literal JSON does not have (`NaN`, `Infinity`, `-Infinity`)."""

    def __new__(cls, text: str):
        number = super().__new__(cls, text)
        number.text = text
        return number

    @property
    def is_literal(self) -> bool:
        return self.text in ("NaN", "Infinity", "-Infinity")

    def problem(self, type_name: str) -> str:
        return (f"{self.text} is not JSON (it has no NaN or infinity)" if self.is_literal
                else f"{self.text} is out of {type_name}'s range")


class _WrittenFloat(float):
    """A JSON number read as a float, with the text it was written as: a string column keeps
    `19.990`, `1E-7` and a 30-digit number as written, not as the float's shortest repr."""

    def __new__(cls, text: str):
        number = super().__new__(cls, text)
        number.text = text
        return number


def _json_float(text: str) -> float:
    """Python's json reads `1e400` as infinity: such a number keeps its text (_NotFinite), and
    so does every other (_WrittenFloat)."""
    number = _WrittenFloat(text)
    return number if math.isfinite(number) else _NotFinite(text)


_DECODER = json.JSONDecoder(parse_float=_json_float, parse_constant=_NotFinite)   # as the careful reader's json.loads


def _written_back(value) -> str:
    """A JSON value that is not a string, as JSON text (for a string column or `_extra`);
    ValueError for a value JSON has no text for (NaN, Infinity), or one that holds such a value
    or a number past float64's range (written as the number's own text when it is the value)."""
    if isinstance(value, _NotFinite):
        if value.is_literal:
            raise ValueError(value.problem("float64"))
        return value.text
    if isinstance(value, _WrittenFloat):
        return value.text
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise ValueError("holds NaN, Infinity or a number past float64's range (JSON text has no value for it)") from None


def _has_lone_surrogate(obj) -> bool:
    """Whether a \\uD800-\\uDFFF escape without its pair left a character UTF-8 cannot hold
    (Python's json reads one; the block reader refuses it)."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


_STRUCTURE = re.compile(r'["{}\[\],]')
_NULL_VALUE = re.compile(r"\s*:\s*null\s*[,}]")


def _top_level_fields(line: str) -> list[str]:
    """The top-level keys with a value other than null of a record Python's json cannot read
    (nested past its recursion limit; pyarrow's reader has read it), in one pass over its text:
    pyarrow inferring the record's types would take time growing with the square of its depth."""
    keys: dict[str, None] = {}
    depth, pos, key_next = 0, 0, False
    try:
        while (m := _STRUCTURE.search(line, pos)) is not None:
            c, pos = m.group(), m.end()
            if c == '"':
                text, pos = json.decoder.scanstring(line, pos)
                if key_next:
                    key_next = False
                    if not _NULL_VALUE.match(line, pos):
                        keys[text] = None
            elif c in "{[":
                depth += 1
                key_next = depth == 1 and c == "{"
            elif c == ",":
                key_next = depth == 1
            else:
                depth -= 1
    except ValueError:           # not JSON after all: what was found so far
        pass
    return list(keys)


class _Unreadable:
    def __init__(self, reason: str):
        self.reason = reason


def _one_record_as_arrow_reads_it(line: str, arrow_schema: pa.Schema, reason: str):
    """A record Python's json cannot hold (nested deeper than its recursion limit, an integer
    over its digit limit) as pyarrow's reader reads it, so the record gets what the whole-block
    reader gives it in a batch without bad records; _Unreadable(reason) when that fails too."""
    import pyarrow.json as pj

    try:
        table = pj.read_json(pa.BufferReader(line.encode() + b"\n"), parse_options=pj.ParseOptions(
            explicit_schema=arrow_schema, unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _Unreadable(reason)
    if table.num_rows != 1:
        return _Unreadable(reason)
    return {k: v for k, v in table.to_pylist()[0].items() if v is not None}
