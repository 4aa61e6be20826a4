"""JSON lines and CSV records parsed on the device, with the CPU kernel's bad-record accounting.

Mixed into GpuBackend (gpu.py); like gpu.py it imports RAPIDS plainly and is loaded only for a
GPU run. The rule is the backend's: the device keeps a value only where it is sure to give the
CPU kernel's value; a record it cannot be sure of is read on the host by the CPU kernel (which
also gives a bad record its reason), counted in fallbacks and in the host-transfer ledger.
The patterns and the rules that need no device are in gpu_formats.py (tested on every commit).

JSON: libcudf's reader (recovery mode: a record it cannot read is null, not an error for the
batch; strict validation; every value as its token text, quotes kept) reads each record wrapped
as {"r": <record>}, so a bad record (the wrapper is null) is told from a record whose fields
are all null. A token becomes a value on the device only in the forms whose meaning is fixed
(a JSON string, an integer, a plain decimal, true/false); anything else sends the record to the
CPU kernel. CSV: libcudf's reader over the records that are plainly formed (fields quoted whole
or not at all, the header's number of fields, no carriage return); the CPU kernel reads the rest.
"""

from __future__ import annotations

import cudf
import cupy as cp
import numpy as np
import pyarrow as pa
import pylibcudf as plc

from .gpu_formats import (CSV_QUOTED_FIELD, JSON_DECIMAL_TOKEN, JSON_DOUBTFUL_RECORD, JSON_INT_TOKEN,
                          JSON_MAX_OPENINGS, JSON_OPENINGS, JSON_TEXT_LITERAL, JSON_WRAPPER, csv_delimiter_pattern,
                          csv_device_refusal, csv_quoted_empty_pattern, csv_record_pattern, json_device_refusal,
                          json_key_literal, json_read_tree, json_tree_keys)
from .gpu_tallies import count_fallback

FEW_FIELDS = "CSV record does not have {} fields"


class GpuRecordsMixin:
    """parse_json and parse_csv on the device (Backend's contract: columns, ok, reasons)."""

    # -- JSON lines ----------------------------------------------------------------------------
    def parse_json(self, text, read, dropped=None):     # dropped fields are not counted on the device
        why = json_device_refusal(read)
        if why is not None:
            return self._host_json(text, read, why)
        n = len(text)
        if n == 0:
            return ({c.name: self.nulls(0, c.type, index=text.index) for c in read.columns},
                    cudf.Series(cp.zeros(0, dtype=bool), index=text.index), None)
        from .gpu_device import regex_matches

        lines = text.reset_index(drop=True)
        lines = lines.where(~lines.str.startswith("\ufeff"), lines.str.slice(1))   # a BOM is not part of it
        body = lines.str.strip(" \t\r")
        doubt = ~(body.str.startswith("{") & body.str.endswith("}")).fillna(False).values
        doubt |= regex_matches(lines, JSON_DOUBTFUL_RECORD)
        doubt |= (lines.str.count(JSON_OPENINGS) > JSON_MAX_OPENINGS).fillna(False).values
        tree = json_read_tree(read)
        doubt |= _repeated_keys(lines, json_tree_keys(tree))
        try:
            root, names = _read_json_records(body, tree)
            if root.size() != n:
                return self._host_json(text, read, "parse_json: libcudf's reader gave another number of records")
            record_read = _valid(root, n)
            doubt |= ~record_read
            tokens = {col.name: _json_token(root, names, col, lines, record_read) for col in read.columns}
        except Exception as err:       # noqa: BLE001 (libcudf refused the batch: the CPU kernel reads it)
            return self._host_json(text, read, f"parse_json: libcudf's reader refused a batch ({type(err).__name__})")
        cols = {}
        for col in read.columns:
            token, unsure = tokens[col.name]
            values, odd = self._json_values(token, col.type, read.strict)
            cols[col.name] = values
            doubt |= unsure | odd
        return self._json_with_host_records(text, read, cols, doubt)

    def _json_values(self, token, type_name: str, strict: bool):
        """(values, doubt): the column's values from the token texts, and the records whose
        token is not in a form the device reads exactly as the CPU kernel does."""
        from .gpu_device import any_true, regex_matches

        present = token.notna().values
        quoted = (token.str.startswith('"') & token.str.endswith('"') & (token.str.len() >= 2)).fillna(False).values
        bare = present & ~quoted
        inner = token.str.slice(1, -1)
        if type_name == "string":        # a JSON string as it is; an integer or true/false as json.dumps writes it
            literal = regex_matches(token, JSON_TEXT_LITERAL)
            return inner.where(cudf.Series(quoted), token), bare & ~literal
        if type_name == "bool":          # true/false only (a JSON string is not a bool)
            yes, no = (token == "true").fillna(False).values, (token == "false").fillna(False).values
            values = self.nulls(len(token), "bool").where(cudf.Series(~yes), True).where(cudf.Series(~no), False)
            return values, present & ~(yes | no)
        if type_name == "float64":
            number = bare & regex_matches(token, JSON_DECIMAL_TOKEN) & ~(token == "-0").fillna(False).values
            values, fast = self._cast_float(token.where(cudf.Series(number)))
            doubt = bare & ~(number & fast)
        else:                            # integers: JSON integers only (1.0 is not an int64)
            number = bare & regex_matches(token, JSON_INT_TOKEN)
            values, bad = self.cast(token.where(cudf.Series(number)), type_name)
            values = values.reset_index(drop=True)
            doubt = (bare & ~number) | (number & bad.values)
        if strict:                       # strict: a JSON string in a number column is bad (the CPU's reason)
            return values, doubt | quoted
        if any_true(quoted, "control: JSON strings in a number column"):
            # a JSON string is cast with the rules `columns` applies to text, as the CPU kernel does
            text_values, text_bad = self.cast(inner.where(cudf.Series(quoted)), type_name)
            values = values.where(cudf.Series(~quoted), text_values.reset_index(drop=True))
            doubt |= quoted & text_bad.values
        return values, doubt

    def _json_with_host_records(self, text, read, cols, doubt):
        """The device's columns, with the doubtful records read by the CPU kernel and put in place."""
        from .gpu_device import any_true, nonzero_rows, scatter, to_host_copy, with_index

        n = len(text)
        ok = cp.ones(n, dtype=bool)
        reasons = None
        if any_true(doubt, "control: JSON records for the host"):
            rows = nonzero_rows(doubt, "control: JSON records for the host")
            count_fallback("parse_json: records the device cannot decide (host)", len(rows))
            sub = text.reset_index(drop=True).iloc[rows]
            host_cols, host_ok, host_reasons = self.cpu.parse_json(
                self.cpu.series(to_host_copy(sub, "JSON records read on the host"), "string"), read)
            for col in read.columns:
                cols[col.name] = scatter(cols[col.name], rows, self.series(pa.array(host_cols[col.name]), col.type))
            ok[rows] = cp.asarray(np.asarray(host_ok.to_numpy(dtype=bool)))
            texts = [None] * len(rows) if host_reasons is None else pa.array(host_reasons, pa.string()).to_pylist()
            reasons = with_index(scatter(self.nulls(n, "string"), rows, cudf.Series(texts, dtype="str")), text.index)
        return ({name: with_index(col, text.index) for name, col in cols.items()},
                with_index(cudf.Series(ok), text.index), reasons)

    def _host_json(self, text, read, why: str):
        """The whole batch on the host with the CPU kernel (counted)."""
        from .gpu_device import to_host_copy

        count_fallback(why, len(text))
        cols, ok, reasons = self.cpu.parse_json(self.cpu.series(to_host_copy(text, "JSON parsed on the host"), "string"),
                                                read)
        return self._back(cols, ok, reasons, read.schema, text.index)

    # -- CSV -----------------------------------------------------------------------------------
    def parse_csv(self, text, names, delimiter, null_values=("",)):
        why = csv_device_refusal(delimiter, null_values)
        if why is not None:
            return self._host_csv(text, names, delimiter, null_values, why)
        from .gpu_device import any_true, nonzero_rows, regex_matches, to_host_copy, with_index

        n = len(text)
        few_fields = FEW_FIELDS.format(len(names))
        records = text.reset_index(drop=True)
        if any_true(records.str.startswith("\ufeff").fillna(False).values, "control: CSV byte-order mark"):
            # both readers drop a BOM only at the start of what they read: where it counts depends
            # on the batch, so such a batch is read exactly as the CPU kernel reads it, whole
            return self._host_csv(text, names, delimiter, null_values,
                                  "parse_csv: a record starting with a byte-order mark (host)")
        plain = regex_matches(records, csv_record_pattern(delimiter))
        plain &= ~records.str.contains("\r", regex=False).fillna(False).values
        plain &= (records.str.len() > 0).fillna(False).values
        if "" in null_values:
            plain &= ~regex_matches(records, csv_quoted_empty_pattern(delimiter))
        outside = records.str.replace(CSV_QUOTED_FIELD, "", regex=True)
        plain &= (outside.str.count(csv_delimiter_pattern(delimiter)).fillna(-1).values + 1) == len(names)
        rows = nonzero_rows(plain, "control: CSV records the device reads")
        device = []
        if len(rows):
            try:
                device = _read_csv_records(records.iloc[rows], names, delimiter, null_values)
            except Exception as err:   # noqa: BLE001 (libcudf refused the batch: the CPU kernel reads it)
                return self._host_csv(text, names, delimiter, null_values,
                                      f"parse_csv: libcudf's reader refused a batch ({type(err).__name__})")
            if any(len(c) != len(rows) for c in device):
                return self._host_csv(text, names, delimiter, null_values,
                                      "parse_csv: libcudf's reader gave another number of records")
        else:
            device = [cudf.Series([], dtype="str") for _ in names]
        ok = cp.ones(n, dtype=bool)
        reason = few_fields
        if not any_true(~plain, "control: CSV records for the host"):
            return ({name: with_index(c, text.index) for name, c in zip(names, device)},
                    with_index(cudf.Series(ok), text.index), reason)
        others = nonzero_rows(~plain, "control: CSV records for the host")
        count_fallback("parse_csv: records the device cannot decide (host)", len(others))
        host_cols, host_ok, host_reason = self.cpu.parse_csv(
            self.cpu.series(to_host_copy(records.iloc[others], "CSV records read on the host"), "string"),
            names, delimiter, null_values)
        cols = {name: _interleave(c, rows, self.series(pa.array(host_cols[name]), "string"), others)
                for name, c in zip(names, device)}
        ok[others] = cp.asarray(np.asarray(host_ok.to_numpy(dtype=bool)))
        if isinstance(host_reason, str):
            reason = host_reason
        else:                          # one reason per record: nulls for the device's (all good)
            texts = pa.array(host_reason, pa.string()).to_pylist()
            reason = _interleave(self.nulls(len(rows), "string"), rows, cudf.Series(texts, dtype="str"), others)
            reason = with_index(reason, text.index)
        return ({name: with_index(c, text.index) for name, c in cols.items()},
                with_index(cudf.Series(ok), text.index), reason)

    def _host_csv(self, text, names, delimiter, null_values, why: str):
        from .gpu_device import to_host_copy, with_index

        count_fallback(why, len(text))
        cols, ok, reason = self.cpu.parse_csv(self.cpu.series(to_host_copy(text, "CSV parsed on the host"), "string"),
                                              names, delimiter, null_values)
        out = {n: self.series(pa.array(c), "string", index=text.index) for n, c in cols.items()}
        if not isinstance(reason, str):   # one reason per record: a pandas Series from the CPU kernel
            reason = self.series(pa.array(reason), "string", index=text.index)
        return out, with_index(cudf.Series(cp.asarray(ok.to_numpy(dtype=bool))), text.index), reason


# -- helpers (device) ----------------------------------------------------------------------------

def _valid(col, n: int) -> cp.ndarray:
    """cupy bool: which rows of a pylibcudf column are not null (None: a field no record has)."""
    if col is None:
        return cp.zeros(n, dtype=bool)
    return cudf.Series.from_pylibcudf(plc.unary.is_valid(col)).values


def _strings(col, valid):
    """A pylibcudf strings column as a Series, null where `valid` (its parents') is False."""
    if col is None:
        return cudf.Series([None] * len(valid), dtype="str")
    return cudf.Series.from_pylibcudf(col).where(cudf.Series(valid))


def _field(col, names: dict, key: str):
    """A struct column's field by its name (`names`: the reader's names of its children), or
    None where the reader made no such field (or the column is not a struct)."""
    if col is None or key not in names or col.type().id() != plc.TypeId.STRUCT:
        return None, {}
    return col.child(list(names).index(key)), names[key]


def _has_key(lines, key: str):
    return lines.str.contains(json_key_literal(key), regex=False).fillna(False).values


def _repeated_keys(lines, keys) -> cp.ndarray:
    """Records in which a key the device reads is written twice or more (Python's json keeps the
    last; the device does not promise to): counted as written, anywhere in the record."""
    out = cp.zeros(len(lines), dtype=bool)
    size = lines.str.len()
    for key in sorted(keys):
        if '"' in key or "\\" in key:     # written with escapes: JSON_DOUBTFUL_RECORD finds those records
            continue
        literal = json_key_literal(key)
        left = lines.str.replace(literal, "", regex=False).str.len()
        out |= ((size - left) >= 2 * len(literal)).fillna(False).values
    return out


def _json_token(root, names, col, lines, record_read):
    """(token Series, doubt): the column's token text in each record (null where absent or null)
    and the records where the device cannot tell an absent value from a value of the wrong kind
    (`user.id` where `user` is a string: libcudf reads null, the CPU kernel a problem). An exact
    top-level key wins over the path, as on the CPU (json_fields.lookup)."""
    n = len(lines)
    flat_col, _ = _field(root, names, col.name)
    if flat_col is not None and flat_col.type().id() != plc.TypeId.STRING:
        raise TypeError("libcudf's reader gave a value that is not a string column")
    flat = _strings(flat_col, record_read)
    doubt = cp.zeros(n, dtype=bool)
    if not col.path:
        return flat, doubt
    node, node_names = _field(root, names, col.path[0])
    valid = record_read & _valid(node, n)
    doubt |= record_read & ~valid & _has_key(lines, col.path[0])
    last = len(col.path) - 1
    for k, step in enumerate(col.path[1:], start=1):
        if isinstance(step, int):
            length = cp.zeros(n, dtype=cp.int64)
            if node is not None and node.type().id() != plc.TypeId.LIST:
                node, node_names = None, {}
            if node is not None:
                length = cudf.Series.from_pylibcudf(plc.lists.count_elements(node)).fillna(0).values
                node = plc.lists.extract_list_element(node, step)
                node_names = list(node_names.values())[-1] if node_names else {}
            inner = valid & _valid(node, n)
            if k < last:           # an element that is there but not what the path reads through
                doubt |= valid & (length > step) & ~inner
        else:
            node, node_names = _field(node, node_names, step)
            inner = valid & _valid(node, n)
            if k < last:
                doubt |= valid & ~inner & _has_key(lines, step)
        valid = inner
    if node is not None and node.type().id() != plc.TypeId.STRING:
        raise TypeError("libcudf's reader gave a leaf that is not a string column")
    leaf = _strings(node, valid)
    has_flat = flat.notna().values
    return flat.where(cudf.Series(has_flat), leaf), doubt & ~has_flat


def _plc_schema(tree: dict) -> list:
    """json_read_tree's tree as the reader's dtypes: (name, type, children), values as strings."""
    return [(key, *_plc_type(node)) for key, node in tree.items()]


def _plc_type(node):
    if node is None:
        return plc.DataType(plc.TypeId.STRING), []
    if "struct" in node:
        return plc.DataType(plc.TypeId.STRUCT), _plc_schema(node["struct"])
    element, children = _plc_type(node["list"])
    return plc.DataType(plc.TypeId.LIST), [("offsets", plc.DataType(plc.TypeId.INT32), []),
                                           ("element", element, children)]


def _joined(records):
    """The records in one device buffer, a newline between two: a strings column of one row."""
    col, _ = records.to_pylibcudf()
    return plc.strings.combine.join_strings(col, plc.Scalar.from_py("\n"), plc.Scalar.from_py(""))


def _read_json_records(body, tree):
    """(the wrapper column, its children's names): libcudf's JSON reader over the records, each
    wrapped as {"r": record}; recovery mode makes a record it cannot read a null wrapper."""
    wrapped = body.str.insert(0, '{"' + JSON_WRAPPER + '":').str.insert(-1, "}")
    joined = _joined(wrapped)
    got = plc.io.json.read_json(json_reader_options(plc.io.SourceInfo([joined.data()]), tree))
    return got.columns[0], got.child_names[JSON_WRAPPER]


def json_reader_options(source, tree: dict):
    """The JSON reader's settings (built on the host: the gpu_api tier builds them too)."""
    return (plc.io.json.JsonReaderOptions.builder(source)
            .lines(True)
            .recovery_mode(plc.io.types.JSONRecoveryMode.RECOVER_WITH_NULL)
            .keep_quotes(True)
            .prune_columns(True)
            .strict_validation(True)
            .numeric_leading_zeros(False)
            .nonnumeric_numbers(False)
            .unquoted_control_chars(False)
            .dtypes([(JSON_WRAPPER, plc.DataType(plc.TypeId.STRUCT), _plc_schema(tree))])
            .build())


def _read_csv_records(records, names, delimiter: str, null_values) -> list:
    """libcudf's CSV reader over plainly formed records: one strings Series per column. An
    unquoted field in null_values is null; a quoted one keeps its text (libcudf compares the raw
    field, quotes included; a quoted empty field is left to the host where "" is a null value)."""
    joined = _joined(records)
    got = plc.io.csv.read_csv(csv_reader_options(plc.io.SourceInfo([joined.data()]), names, delimiter, null_values))
    return [cudf.Series.from_pylibcudf(c) for c in got.columns]


def csv_reader_options(source, names, delimiter: str, null_values):
    """The CSV reader's settings (built on the host: the gpu_api tier builds them too)."""
    options = (plc.io.csv.CsvReaderOptions.builder(source)
               .delimiter(delimiter)
               .quotechar('"')
               .quoting(plc.io.types.QuoteStyle.MINIMAL)
               .doublequote(True)
               .skipinitialspace(False)
               .skip_blank_lines(False)
               .keep_default_na(False)
               .na_filter(bool(null_values))
               .build())
    options.set_header(-1)
    options.set_names(list(names))
    options.set_dtypes([plc.DataType(plc.TypeId.STRING) for _ in names])
    if null_values:
        options.set_na_values(list(null_values))
    return options


def _interleave(a, a_rows, b, b_rows):
    """One Series of a's values at a_rows and b's at b_rows (together every row once)."""
    merged = cudf.concat([a.reset_index(drop=True), b.reset_index(drop=True)], ignore_index=True)
    order = cp.argsort(cp.concatenate([a_rows, b_rows]))
    return merged.iloc[order].reset_index(drop=True)
