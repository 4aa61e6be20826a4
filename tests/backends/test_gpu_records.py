"""JSON lines and CSV parsed on the device (gpu_records.py) against the CPU kernel on the same
records: the same values, the same ok flags, the same reasons for the bad records. Where every
record is plainly formed nothing may be handed to the CPU kernel (the fallback counters stay
zero); hostile records may go to it, counted under their one reason, and only those. End to end,
a jsonl and a csv pipeline give the CPU backend's rows and quarantine. Needs cuDF and a GPU:
`pytest -m gpu` (the rules themselves are checked on CPU: test_gpu_records_rules.py)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

cudf = pytest.importorskip("cudf")

import gpuetl  # noqa: E402
from gpuetl.backends.cpu import CpuBackend  # noqa: E402
from gpuetl.backends.gpu import GpuBackend  # noqa: E402
from gpuetl.backends.gpu_tallies import fallback_counts, reset_tallies  # noqa: E402
from gpuetl.sources.json_fields import JsonColumn, JsonRead, parse_path  # noqa: E402

pytestmark = pytest.mark.gpu
CPU = CpuBackend()
HOST_RECORDS = {"parse_json: records the device cannot decide (host)",
                "parse_csv: records the device cannot decide (host)"}


@pytest.fixture(scope="module")
def gpu():
    return GpuBackend()


def host(values) -> list:
    if isinstance(values, cudf.Series):
        return values.to_arrow().to_pylist()
    return pa.array(values).to_pylist()


def reasons_of(reasons, ok: list) -> list:
    """The reason of each bad record (None for the good ones), whatever form the kernel gave."""
    n = len(ok)
    every = [reasons] * n if reasons is None or isinstance(reasons, str) else host(reasons)
    return [None if good else why for good, why in zip(ok, every)]


def read_of(columns: dict, strict=False) -> JsonRead:
    return JsonRead(tuple(JsonColumn(n, t, parse_path(n)) for n, t in columns.items()), strict=strict)


def compare_json(gpu, lines: list[str], read: JsonRead) -> dict:
    """Device and CPU kernel on the same records; returns the device run's fallback counters."""
    reset_tallies()
    gcols, gok, greasons = gpu.parse_json(gpu.series(pa.array(lines, pa.string()), "string"), read)
    counts = fallback_counts()
    ccols, cok, creasons = CPU.parse_json(CPU.series(pa.array(lines, pa.string()), "string"), read)
    for name in read.schema:
        assert host(gcols[name]) == host(ccols[name]), name
    assert host(gok) == host(cok)
    assert reasons_of(greasons, host(gok)) == reasons_of(creasons, host(cok))
    return counts


CLEAN = [
    {"id": 1, "name": "a", "score": 1.5, "ok": True, "user": {"uid": 7, "tag": "x"}, "items": [{"sku": "s1"}]},
    {"id": -2, "name": "line\nbreak \"q\" é", "score": 0.1, "ok": False, "user": {"uid": None}},
    {"id": 3, "name": "ünï", "score": -2, "items": []},
    {"id": "190", "score": "2.25", "name": 42, "ok": None},        # JSON strings cast with the text rules
    {},
    {"service.name": "flat", "service": {"name": "nested"}, "id": 123456789012345678},
    {"service": {"name": "only nested"}, "id": 5, "score": 12345.678901234},
]
CLEAN_COLUMNS = {"id": "int64", "name": "string", "score": "float64", "ok": "bool", "user.uid": "int32",
                 "user.tag": "string", "items[0].sku": "string", "service.name": "string"}


def test_plain_json_records_stay_on_the_device(gpu):
    lines = [json.dumps(r, ensure_ascii=ascii) for ascii in (True, False) for r in CLEAN]
    assert compare_json(gpu, lines, read_of(CLEAN_COLUMNS)) == {}


HOSTILE = [
    'not json', '[1, 2]', '{"id": "three"}', '{"id": 4.5}', '{"id": 6, "ok": "yes"}', '{"score": 1e400}',
    '{"id":', '{"id": 1.e5}', '{"name": "\\ud800"}', '{"id": 1, "id": 2}', '{"\\u0069d": 5}',
    '{"id": 1} {"id": 2}', '\ufeff{"id": 8}', '{"id": 9, "user": "bob"}', '{"user": {"uid": "7"}}',
    '{"user": [1]}', '{"items": {"sku": 1}}', '{"items": [5]}', '{"a": ' * 300 + '1' + '}' * 300,
    '{"id": 99999999999999999999}', '{"id": -0, "score": -0}', '{"score": NaN}', '{"id": 1,}',
    "{'id': 1}", '  {"id": 10}\t', '{"id": 01}', '{"name": "a\tb"}', '{"score": 1E2}', '{"ok": 1}',
    '{"name": 1.50}', '{"name": {"x": 1}}', '{"id": true}', '{"id": "  12 "}', '{"id": "12x"}',
]


@pytest.mark.parametrize("strict", [False, True])
def test_hostile_json_records_get_the_cpu_kernels_rows_and_reasons(gpu, strict):
    lines = HOSTILE + [json.dumps(r) for r in CLEAN]
    counts = compare_json(gpu, lines, read_of(CLEAN_COLUMNS, strict))
    records = counts.pop("parse_json: records the device cannot decide (host)", 0)
    assert all(k.startswith("cast ") for k in counts), counts     # JSON strings cast by the text rules
    assert 0 < records < len(lines)                               # the plain records stayed on the device


def test_json_batches_the_device_does_not_read_are_counted_whole(gpu):
    lines = ['{"id": 1, "x": 2}', '{"id": 2}']
    counts = compare_json(gpu, lines, JsonRead((JsonColumn("id", "int64", None),), extra="keep"))
    assert counts == {"parse_json: extra_fields: keep (host)": 2}


CSV_CLEAN = ['x,y,z', '"x,1","y""q",z', '"multi\nline",b,c', 'x,,z', 'é,ü,ñ', 'NA,b,c', '"NA",b,c', ',,']
CSV_HOSTILE = ['x,y', 'x,y,z,w', 'x,"y,z', 'x"y,b,c', ' "x",b,c', 'x,y,z\r', '"a"b,c,d', '"",y,z',
               '"a\r\nb",c,d', '"""",b,c']


def compare_csv(gpu, records, names, d, null_values) -> dict:
    reset_tallies()
    gcols, gok, greason = gpu.parse_csv(gpu.series(pa.array(records, pa.string()), "string"), names, d, null_values)
    counts = fallback_counts()
    ccols, cok, creason = CPU.parse_csv(CPU.series(pa.array(records, pa.string()), "string"), names, d, null_values)
    for name in names:
        assert host(gcols[name]) == host(ccols[name]), name
    assert host(gok) == host(cok)
    assert reasons_of(greason, host(gok)) == reasons_of(creason, host(cok))
    return counts


@pytest.mark.parametrize("null_values", [("",), ("", "NA"), ("NA",)])
@pytest.mark.parametrize("d", [",", "\t"])
def test_plain_csv_records_stay_on_the_device(gpu, d, null_values):
    records = [r.replace(",", d) for r in CSV_CLEAN]
    assert compare_csv(gpu, records, ("a", "b", "c"), d, null_values) == {}


@pytest.mark.parametrize("null_values", [("",), ("NA",)])
def test_hostile_csv_records_get_the_cpu_kernels_rows_and_reasons(gpu, null_values):
    counts = compare_csv(gpu, CSV_HOSTILE + CSV_CLEAN, ("a", "b", "c"), ",", null_values)
    assert set(counts) == {"parse_csv: records the device cannot decide (host)"}
    assert counts["parse_csv: records the device cannot decide (host)"] <= len(CSV_HOSTILE)


# -- end to end ----------------------------------------------------------------------------------

def _run(tmp_path, backend, source, columns, out):
    spec = {"version": 1, "name": "t", "source": {"blocksize": 256, "provenance": True, **source},
            "sink": {"path": out, "mode": "overwrite"}, "columns": columns}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend=backend, scheduler="sync")
    c = result.counts
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    rows = [r for s in result.shards for r in pq.read_table(result.out_dir / s["path"]).to_pylist()]
    bad = sorted((r["_file"], r["_offset"], r["_raw"], r["_reason"]) for q in result.quarantine
                 for r in pq.read_table(result.out_dir / q["path"]).to_pylist())
    return c, rows, bad, result.manifest.get("fallbacks", {})


def test_a_jsonl_pipeline_gives_the_cpu_backends_dataset(tmp_path):
    (tmp_path / "a.jsonl").write_text("\n".join(HOSTILE + [json.dumps(r) for r in CLEAN] * 5) + "\n")
    source = {"type": "jsonl", "path": "a.jsonl"}
    columns = {**CLEAN_COLUMNS, "ok": "bool"}
    cpu = _run(tmp_path, "cpu", source, columns, "o-cpu")
    dev = _run(tmp_path, "gpu", source, columns, "o-gpu")
    assert dev[:3] == cpu[:3]
    assert all(k in HOST_RECORDS or k.startswith("cast ") for k in dev[3]), dev[3]


def test_a_csv_pipeline_with_quoted_newlines_gives_the_cpu_backends_dataset(tmp_path):
    body = "a,b,c\n" + "\n".join((CSV_CLEAN + ['x,y', 'x,y,z,w', ' "x",b,c', '"a"b,c,d']) * 4) + "\n"
    (tmp_path / "a.csv").write_text(body)
    source = {"type": "csv", "path": "a.csv"}
    cpu = _run(tmp_path, "cpu", source, {"a": "string"}, "o-cpu")
    dev = _run(tmp_path, "gpu", source, {"a": "string"}, "o-gpu")
    assert dev[:3] == cpu[:3]
    assert set(dev[3]) <= HOST_RECORDS | {"records framed on the host (csv, multiline)"}, dev[3]


def test_drifting_json_fields_give_the_cpu_backends_dataset(tmp_path):
    """#28.2: a field of several shapes is each value's source text, and a shape the sample did
    not see quarantines its record, on the device as on the CPU (such a read goes to the host)."""
    records = ['{"id": "1", "g": {"c": [1, 2]}}', '{"id": 2, "g": {"c": [[1, 2]]}}', '{"id": [3], "g": null}']
    (tmp_path / "a.jsonl").write_text("\n".join(records * 40) + "\n")
    source = {"type": "jsonl", "path": "a.jsonl"}
    cpu = _run(tmp_path, "cpu", source, {}, "o-cpu")
    dev = _run(tmp_path, "gpu", source, {}, "o-gpu")
    assert dev[:3] == cpu[:3]
    assert [r["id"] for r in dev[1][:3]] == ['"1"', "2", "[3]"]
    assert "parse_json: a field kept as source text (host)" in dev[3], dev[3]
