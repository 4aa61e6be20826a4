"""The rules by which the GPU backend reads JSON and CSV records on the device (gpu_formats.py),
checked on the CPU against the CPU kernel: every token or record the device decides must get
exactly the CPU kernel's value; the rest goes to the CPU kernel. The device code that applies
them is gpu_records.py (tests/backends/test_gpu_records.py, on a GPU); its patterns compile in
libcudf in the gpu_api tier (gpu.device_patterns)."""

from __future__ import annotations

import json
import math
import re

import pyarrow as pa
import pytest

from gpuetl.backends.cpu import CpuBackend
from gpuetl.backends.gpu_formats import (CSV_QUOTED_FIELD, JSON_DECIMAL_TOKEN, JSON_DOUBTFUL_RECORD, JSON_INT_TOKEN,
                                         JSON_TEXT_LITERAL, csv_delimiter_pattern, csv_device_refusal,
                                         csv_quoted_empty_pattern, csv_record_pattern, json_device_refusal,
                                         json_read_tree, json_tree_keys)
from gpuetl.sources.json_fields import JsonColumn, JsonRead, parse_path

CPU = CpuBackend()
DOUBT = object()


def _quoted(token: str) -> bool:
    return len(token) >= 2 and token.startswith('"') and token.endswith('"')


def device_value(token: str, type_name: str, strict: bool):
    """What gpu_records._json_values makes of one token (libcudf's keep_quotes text), or DOUBT."""
    if token == "null":
        return None
    if type_name == "string":
        if _quoted(token):
            return json.loads(token)            # libcudf unescapes valid escapes as Python does
        return token if re.match(JSON_TEXT_LITERAL, token) else DOUBT
    if type_name == "bool":
        return {"true": True, "false": False}.get(token, DOUBT)
    if _quoted(token):
        if strict:
            return DOUBT
        values, bad = CPU.cast(CPU.series(pa.array([json.loads(token)]), "string"), type_name)
        return DOUBT if bool(bad.iloc[0]) else pa.array(values).to_pylist()[0]
    if type_name == "float64":
        if not re.match(JSON_DECIMAL_TOKEN, token) or token == "-0":
            return DOUBT
        body = token.lstrip("-")
        if len(body.replace(".", "")) > 15:      # the device's float fast path: 15 digits at most
            return DOUBT
        frac = len(body) - body.index(".") - 1 if "." in body else 0
        value = int(body.replace(".", "")) / 10.0 ** frac
        return -value if token.startswith("-") else value
    if not re.match(JSON_INT_TOKEN, token):
        return DOUBT
    info = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}
    number = int(token)
    if type_name.startswith("uint"):
        bits = int(type_name[4:])
        return number if 0 <= number < 2 ** bits else DOUBT
    return number if -2 ** info[type_name] <= number < 2 ** info[type_name] else DOUBT


TOKENS = ['0', '-0', '7', '-12', '123456789012345678', '1234567890123456789', '99999999999999999999',
          '1.0', '1.5', '-0.0', '0.1', '0.30000000000000004', '3.14159265358979', '1e3', '1E-2', '2.5e-3',
          'true', 'false', 'null', '"abc"', '"12"', '" 12 "', '"1.5"', '"12x"', '"true"', '"-0"', '""',
          '"tr\\u00e9s"', '"a\\"b"', '"\\u00e9"', '"line\\nbreak"', '{}', '[1]', '{"a": 1}', '300', '-129',
          '1e400', '-1e400', '1e39', '1e19', 'NaN', 'Infinity', '-Infinity']     # not finite, or past a range
TYPES = ["string", "bool", "float64", "int8", "int64", "uint8", "uint64"]


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("type_name", TYPES)
def test_tokens_the_device_decides_read_as_the_cpu_kernel_reads_them(type_name, strict):
    read = JsonRead((JsonColumn("x", type_name, None),), strict=strict)
    records = ['{"x": ' + t + '}' for t in TOKENS]
    cols, ok, _ = CPU.parse_json(CPU.series(pa.array(records), "string"), read)
    cpu_values = pa.array(cols["x"]).to_pylist()
    decided = 0
    for token, good, cpu in zip(TOKENS, ok.tolist(), cpu_values):
        mine = device_value(token, type_name, strict)
        if mine is DOUBT:
            continue
        decided += 1
        assert good, (token, type_name)
        assert mine == cpu, (token, type_name, mine, cpu)
        if isinstance(cpu, float):
            assert math.copysign(1, mine) == math.copysign(1, cpu), token
    assert decided >= 3            # the device path is not empty (bool: true, false, null)


def test_json_records_libcudf_and_python_read_differently_are_doubtful():
    # (a raw tab or newline inside a string is refused by libcudf's strict validation: a null record)
    doubtful = ['{"x": 1.e5}', '{"x": "\\ud800"}', '{"\\u0078": 1, "x": 2}', '{"x":\x0c1}', '{"k\\"": 1}',
                '{"x": "a\x01b"}', '{"x": 1,}', '{"x": [1, ]}', '{, "x": 1}', '{"x": [1,,2]}']
    plain = ['{"x": 1.5e5}', '{"x": "\\u00e9 \\"q\\""}', '{"x": "v1.x"}', '{"a": {"b": [1, {"c": "d"}]}}',
             '{"a": "x\\n", "b": 1}', '{"m": "say \\"hi\\": x"}', '{"x": "\\ud83d\\ude00"}']
    assert all(re.search(JSON_DOUBTFUL_RECORD, r) for r in doubtful)
    # a surrogate pair is still doubtful (its high half matches): only the rule's cost, not a risk
    assert [bool(re.search(JSON_DOUBTFUL_RECORD, r)) for r in plain] == [False] * 6 + [True]


def test_the_read_tree_holds_flat_keys_and_paths():
    cols = tuple(JsonColumn(n, "int64", parse_path(n)) for n in
                 ["a", "user.id", "user.name", "items[0].sku", "items[1].qty", "m[0][1]", "service.name"])
    tree = json_read_tree(JsonRead(cols))
    assert tree["a"] is None and tree["user.id"] is None and tree["service.name"] is None
    assert tree["user"] == {"struct": {"id": None, "name": None}}
    assert tree["items"] == {"list": {"struct": {"sku": None, "qty": None}}}
    assert tree["m"] == {"list": {"list": None}}
    assert tree["service"] == {"struct": {"name": None}}
    assert {"id", "name", "sku", "qty", "user", "items", "m", "service"} <= json_tree_keys(tree)


def test_batches_read_on_the_host_as_a_whole():
    col = JsonColumn("x", "int64", None)
    assert json_device_refusal(JsonRead((col,))) is None
    assert "keep" in json_device_refusal(JsonRead((col,), extra="keep"))
    assert "error" in json_device_refusal(JsonRead((col,), extra="error"))
    assert "list" in json_device_refusal(JsonRead((JsonColumn("t", "list<int64>", None),)))
    assert "float32" in json_device_refusal(JsonRead((JsonColumn("f", "float32", None),)))
    assert "source text" in json_device_refusal(JsonRead((col,), inferred=True, raw=frozenset({("x",)})))
    assert csv_device_refusal(",", ("",)) is None and csv_device_refusal("\t", ("", "NA")) is None
    assert csv_device_refusal('"', ("",)) and csv_device_refusal(",", ('"x"',)) and csv_device_refusal("::", ("",))


# -- CSV -----------------------------------------------------------------------------------------

def _raw_fields(record: str, d: str) -> list[str]:
    """The record's fields as written (quotes kept), as libcudf's reader cuts a plain record."""
    out, i = [], 0
    quoted = re.compile(CSV_QUOTED_FIELD)
    while True:
        if record.startswith('"', i):
            j = quoted.match(record, i).end()
        else:
            j = record.find(d, i)
            j = len(record) if j < 0 else j
        out.append(record[i:j])
        if j >= len(record):
            return out
        i = j + 1


def device_record(record: str, names, d: str, null_values):
    """What gpu_records.parse_csv makes of one record on the device, or DOUBT."""
    if not re.match(csv_record_pattern(d), record) or "\r" in record or not record:
        return DOUBT
    if "" in null_values and re.search(csv_quoted_empty_pattern(d), record):
        return DOUBT
    outside = re.sub(CSV_QUOTED_FIELD, "", record)
    if len(re.findall(csv_delimiter_pattern(d), outside)) + 1 != len(names):
        return DOUBT
    values = []
    for raw in _raw_fields(record, d):          # libcudf: the raw field against the null values
        values.append(None if raw in null_values else raw[1:-1].replace('""', '"') if raw.startswith('"') else raw)
    return values


RECORDS = ['x,y,z', 'x,,z', ',,', '"x,1","y""q",z', '"multi\nline",b,c', 'x,"",z', '"",y,z', 'NA,y,z',
           '"NA",y,z', 'x,y', 'x,y,z,w', 'x,"y,z', 'x"y,b,c', ' "x",b,c', 'x,y,z\r', '"a"b,c,d', 'é,ü,ñ',
           '"",,', '"a\r\nb",c,d', 'a,b,"c"', '"""",b,c']


@pytest.mark.parametrize("null_values", [("",), ("", "NA"), ("NA",), ()])
@pytest.mark.parametrize("d", [",", ";", "\t"])
def test_records_the_device_reads_read_as_the_cpu_kernel_reads_them(d, null_values):
    names = ("a", "b", "c")
    records = [r.replace(",", d) for r in RECORDS]
    cols, ok, _ = CPU.parse_csv(CPU.series(pa.array(records), "string"), names, d, null_values)
    cpu = list(zip(*(pa.array(cols[n]).to_pylist() for n in names)))
    decided = 0
    for record, good, values in zip(records, ok.tolist(), cpu):
        mine = device_record(record, names, d, null_values)
        if mine is DOUBT:
            continue
        decided += 1
        assert good and list(values) == mine, (record, mine, values)
    assert decided >= 8


def test_records_with_stray_quotes_or_the_wrong_field_count_are_doubtful():
    names, nulls = ("a", "b", "c"), ("",)
    for record in ['x,y', 'x,y,z,w', 'x,"y,z', 'x"y,b,c', ' "x",b,c', 'x,y,z\r', '"a"b,c,d', '', 'x,"",z']:
        assert device_record(record, names, ",", nulls) is DOUBT, record
