"""JSON whose fields drift (#28): dropped fields null in stretches and numbers in others,
objects that carry other fields from record to record, fields that are a value in one record
and an array or object in another, next to bad records. Each case checks the rows, the
quarantine, the accounting identity and that nothing outside the dataset changed."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

import gpuetl

from .test_json_inputs import lines, quarantined, rows, run, spec


def _dvd_sales(n=3000, bad_at=1700) -> bytes:
    """Vega's movies as a user met them: `US DVD Sales` (not declared, so dropped) is null for
    stretches of 500 records and a number between them, `meta` holds other fields (a string
    here, a number there) beside the declared `meta.id`, and one line is cut short and not
    UTF-8. The bad line makes the block reader refuse the batch without naming a field, so the
    batch is read again in pieces, each of which infers the dropped fields its own way."""
    out = []
    for i in range(n):
        sales = None if (i // 500) % 2 == 0 else i
        extra = {"note": "x"} if (i // 700) % 2 == 0 else {"note": i, "flag": True}
        out.append(json.dumps({"Title": f"m{i}", "US DVD Sales": sales, "meta": {"id": i, **extra}}).encode())
    out[bad_at] = b'{"Title": "Am\xe9lie", "US DVD Sal}'
    return b"".join(line + b"\n" for line in out)


def test_dropped_fields_inferred_differently_in_pieces_do_not_stop_the_run(tmp_path, surroundings):
    (tmp_path / "movies.jsonl").write_bytes(_dvd_sales())
    s = spec({"Title": "string", "meta.id": "int64"})
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, s)
    got = rows(result)
    assert len(got) == 2999 and result.counts["quarantined"] == 1
    assert [r["meta.id"] for r in got[1698:1701]] == [1698, 1699, 1701]
    assert all(r["Title"] == f"m{r['meta.id']}" for r in got)
    [(raw, reason)] = quarantined(result).items()
    assert raw.startswith('{"Title": "Am') and "UTF-8" in reason
    # the dropped field is counted across the pieces: each record read with a number has it
    manifest = json.loads((result.out_dir / "_manifest.json").read_text())
    assert manifest["extra_fields"]["dropped"] == {"US DVD Sales": 1499}


def test_preview_reads_the_same_records(tmp_path, surroundings):
    (tmp_path / "movies.jsonl").write_bytes(_dvd_sales(n=1200, bad_at=600))
    with surroundings(tmp_path):
        shown = gpuetl.Pipeline.from_dict(spec({"Title": "string"}), base_dir=tmp_path).preview(n=5)
    assert shown.quarantined.num_rows == 1
    assert shown.stages[0].rows.column("Title").to_pylist() == [f"m{i}" for i in range(5)]
    assert shown.stages[0].rows_out == 1199
