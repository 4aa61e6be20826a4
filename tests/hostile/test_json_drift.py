"""JSON whose fields drift (#28): dropped fields null in stretches and numbers in others,
objects that carry other fields from record to record, fields that are a value in one record
and an array or object in another, next to bad records. Each case checks the rows, the
quarantine, the accounting identity and that nothing outside the dataset changed."""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
import pytest

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


# -- fields whose shape drifts (#28.2) ------------------------------------------------------------

INCONSISTENT = '{"id": "1", "name": "Mark"}\n{"id": 2, "name": "Hannes"}\n{"id": [3], "name": "Laurens"}\n'
GEOJSON = ('{"type": "Feature", "geometry": {"type": "Point", "coordinates": [4.9, 52.4]}}\n'
           '{"type": "Feature", "geometry": {"type": "LineString", "coordinates": [[4.9, 52.4], [5, 52]]}}\n'
           '{"type": "Feature", "geometry": {"type": "Polygon", "coordinates": [ [ [0,0],[1,0], [0,1] ] ]}}\n'
           '{"type": "Feature", "geometry": null}\n')


def test_a_field_of_several_shapes_is_kept_as_each_values_source_text(tmp_path, surroundings):
    """DuckDB's inconsistent_schemas.ndjson: `id` is "1", 2 and [3]. The plan says what it saw
    and where; the column holds each value's source text, as cuDF's mixed_types_as_string
    gives it (a string keeps its quotes)."""
    (tmp_path / "a.jsonl").write_text(INCONSISTENT + '{"id": {"k" : [1, "x"]}, "name": "Tom"}\n{"id": null, "name": "-"}\n')
    pipeline = gpuetl.Pipeline.from_dict(spec(), base_dir=tmp_path)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        notes = pipeline.plan().notes
        result = run(tmp_path, spec())
    assert [n for n in notes if "'id'" in n] == [
        "source: the field 'id' is a scalar in a.jsonl (byte 0) and an array in a.jsonl (byte 56): 'id' is kept "
        "as a string column holding each value's source text (declare it under `columns` to read it as one type)"]
    assert [r["id"] for r in rows(result)] == ['"1"', "2", "[3]", '{"k" : [1, "x"]}', None]
    assert pq.read_schema(result.out_dir / "part-00000.parquet").field("id").type == "string"
    assert result.counts["quarantined"] == 0


def test_source_text_is_kept_only_for_json_values(tmp_path, surroundings):
    """NaN, Infinity and a lone surrogate are not JSON values: their records are bad, as they are
    in any other column; a number past float64's range and escapes keep their text."""
    (tmp_path / "a.jsonl").write_text('{"id": "1"}\n{"id": [2]}\n{"id": NaN}\n{"id": [1, -Infinity]}\n'
                                      '{"id": "\\udfaa"}\n{"id": {"a": "\\ud83d\\ude00"}}\n{"id": 1e400}\n'
                                      '{"id": "x", "id": [3]}\n')
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec())
    assert [r["id"] for r in rows(result)] == ['"1"', "[2]", '{"a": "\\ud83d\\ude00"}', "1e400", "[3]"]
    assert sorted(quarantined(result).values()) == [
        "invalid JSON: NaN or Infinity is not JSON (it has no NaN or infinity)"] * 2 + [
        "invalid JSON: a \\u escape is half of a surrogate pair, not a character"]


def test_geojson_coordinates_nesting_to_different_depths(tmp_path, surroundings):
    (tmp_path / "a.jsonl").write_text(GEOJSON)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec())
    assert [r["geometry"] for r in rows(result)] == [
        {"type": "Point", "coordinates": "[4.9, 52.4]"},
        {"type": "LineString", "coordinates": "[[4.9, 52.4], [5, 52]]"},
        {"type": "Polygon", "coordinates": "[ [ [0,0],[1,0], [0,1] ] ]"},
        None]


def test_a_declared_field_keeps_the_rules_of_columns(tmp_path, surroundings):
    (tmp_path / "a.jsonl").write_text(INCONSISTENT)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        as_text = run(tmp_path, spec({"id": "string", "name": "string"}))
    assert [r["id"] for r in rows(as_text)] == ["1", "2", "[3]"]
    (tmp_path / "out").rename(tmp_path / "first")
    as_number = run(tmp_path, spec({"id": "int64", "name": "string"}))
    assert [r["id"] for r in rows(as_number)] == [1, 2]
    assert list(quarantined(as_number).values()) == ["field 'id': expected int64, got [3]"]


def test_a_shape_the_sample_did_not_see_quarantines_the_record_with_what_to_declare(tmp_path, surroundings,
                                                                                   monkeypatch):
    from gpuetl.sources.formats import jsonl

    monkeypatch.setattr(jsonl, "JSON_HEAD_RECORDS", 3)         # records 0, 4 and 9 of ten are sampled
    records = [{"id": i, "tags": ["a"], "geo": {"lat": 1.0}, "s": "x"} for i in range(10)]
    records[5]["id"] = [5]
    records[6]["geo"] = {"lat": [1, 2]}
    records[7]["tags"] = "a"
    records[8]["s"] = {"t": 1}
    (tmp_path / "a.jsonl").write_text(lines(*records))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec())
    assert [r["id"] for r in rows(result)] == [0, 1, 2, 3, 4, 9]
    hint = "under `columns` as string to keep each value's source text"
    assert sorted(quarantined(result).values()) == [
        f"field 'geo.lat' is an array here, a number in the sample the schema was inferred from; declare 'geo.lat' {hint}",
        f"field 'id' is an array here, a number in the sample the schema was inferred from; declare 'id' {hint}",
        f"field 's' is an object here, a string in the sample the schema was inferred from; declare 's' {hint}",
        f"field 'tags' is a string here, an array in the sample the schema was inferred from; declare 'tags' {hint}"]


# -- a generated corpus (#28.1, #28.2) ------------------------------------------------------------

_SEPARATORS = [(", ", ": "), (",", ":"), (" , ", " : ")]


def _value(rng, pool: str, depth=0):
    """A JSON value of one of the pool's shapes: v (a value), n (a number or null), a (an
    array), o (an object)."""
    shape = rng.choice(pool)
    if shape == "n":
        return rng.choice([rng.randrange(1000), None])
    if shape == "a" and depth < 3:
        return [_value(rng, pool, depth + 1) for _ in range(rng.randrange(3))]
    if shape == "o" and depth < 3:
        return {"x": _value(rng, pool, depth + 1), "y": rng.choice(["p", None, 1])}
    return rng.choice([rng.randrange(-5, 1000), f"s{rng.randrange(99)}", rng.random(), True, None, "é\u2028"])


def _corpus(seed: int):
    """(files {name: bytes}, the pipeline, {k: source text of `d`} of the good records, the
    good lines): records keyed by `k`, with a top-level field `d`, an object `s` whose `x`
    may drift, an array `l` whose items may, fields `u` and `v` null in stretches and a number
    (`u`: now and then a string) in others, written with varied white space and mixed with bad lines."""
    import random

    rng = random.Random(seed)
    plain = rng.random() < 0.3          # Vega's movies: numbers or null only, dropped, read in large blocks
    pools = ["n", "n", "n"] if plain else [rng.choice(["n", "n", "v", "va", "vo", "ao", "vao", "a"]) for _ in range(3)]
    stretch = rng.choice([3, 40, 150])
    rate = rng.choice([0.05, 1.0])                 # how often a line is bad
    files, d_text, good, k = {}, {}, set(), 0
    for f in range(rng.randrange(1, 4)):
        out = []
        for _ in range(rng.randrange(20, 600)):
            k += 1
            item, colon = rng.choice(_SEPARATORS)
            fields = {"k": k, "d": _value(rng, pools[0]), "s": {"x": _value(rng, pools[1]), "y": "t"},
                      "l": [_value(rng, pools[2]) for _ in range(rng.randrange(3))],
                      "u": None if (k // stretch) % 2 else rng.choice([k] * 9 + [f"{k}"]),
                      "v": None if (k // stretch) % 2 else k}
            if rng.random() < 0.02:               # a shape seen rarely: the sample may miss it
                fields[rng.choice(["u", "k2"])] = rng.choice([[k], {"z": k}])
                fields["s"]["y"] = rng.choice([["t"], "t", {"z": 1}])
            texts = {name: json.dumps(v, ensure_ascii=rng.random() < 0.5, separators=(item, colon))
                     for name, v in fields.items()}
            line = "{" + item.join(f'"{name}"{colon}{text}' for name, text in texts.items()) + "}"
            roll = rng.random() / rate
            if roll < 0.03:
                data = line[: rng.randrange(1, len(line) - 1)].encode() + b"\xff\xfe}"
            elif roll < 0.05:
                data = (line[:-1] + ', "\\uDFAA": 0}').encode()
            elif roll < 0.06:
                data = rng.choice([b"[1, 2]", line.encode() + b" x", b'"text"'])
            else:
                data = line.encode()
                d_text[k] = None if fields["d"] is None else texts["d"]
                good.add(data)
            out.append(data)
        files[f"{f}.jsonl"] = b"\n".join(out) + b"\n"
    s = spec(rng.choice([{"k": "int64"}, {"k": "int64", "s.y": "string"}]) if plain else
             None if rng.random() < 0.5 else
             rng.choice([{"k": "int64", "d": "string", "s.x": "string", "l": "string"},
                         {"k": "int64", "s.y": "string"}, {"k": "int64", "s": "struct<y: string>"}]),
             extra_fields="drop" if plain else rng.choice(["drop", "drop", "keep"]), allow_empty_output=True)
    s["source"]["blocksize"] = 1 << 20 if plain else rng.choice([2048, 8192, 1 << 20])
    return files, s, d_text, good


_SHAPE_OR_VALUE = re.compile(r"in the sample the schema was inferred from; declare|is not a valid|"
                             r"^field '[a-z0-9.]+': expected |^field 'k2?': .*(expected an|is an? )")


def _check_corpus(tmp_path, seed: int) -> None:
    files, s, d_text, good = _corpus(seed)
    base = tmp_path / str(seed)
    base.mkdir()
    for name, data in files.items():
        (base / name).write_bytes(data)
    result = run(base, s)                   # no internal error; the identity holds (run checks it)
    c = result.counts
    assert c["rows_in"] == sum(data.count(b"\n") for data in files.values())
    assert c["rows_out"] + c["quarantined"] == c["rows_in"] and c["quarantined"] >= c["rows_in"] - len(good)
    got = [r for f in sorted(result.out_dir.glob("part-*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert {r["k"] for r in got} <= set(d_text)            # no bad line was kept
    for record in (r for f in sorted((result.out_dir / "_quarantine").glob("*.parquet"))
                   for r in pq.read_table(f).to_pylist()):
        if record["_raw"] in good:                    # a good line: a shape or a value its column cannot take
            assert _SHAPE_OR_VALUE.search(record["_reason"]), record["_reason"]
    manifest = json.loads((result.out_dir / "_manifest.json").read_text())
    if "d" in manifest.get("source_text_fields", []):
        assert {r["k"]: r["d"] for r in got} == {k: d_text[k] for k in (r["k"] for r in got)}


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [range(i, i + 20) for i in range(0, 200, 20)], ids=lambda r: f"{r.start}-{r.stop}")
def test_a_generated_corpus_of_drifting_json_keeps_the_identity(tmp_path, seeds, monkeypatch):
    """200 seeded corpora: drift at the top level, inside objects and arrays, in dropped and
    declared fields, across small blocks and files, mixed with bad lines. A sample of a few
    records per file leaves shapes it did not see to the records that follow."""
    from gpuetl.sources.formats import jsonl

    monkeypatch.setattr(jsonl, "JSON_HEAD_RECORDS", 25)
    for seed in seeds:
        _check_corpus(tmp_path, seed)
