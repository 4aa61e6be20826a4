"""jsonl sources (#15): paths into nested values, nested column types, lossless coercion of
JSON strings, the sampled schema and its drift, extra fields, declared fields no record has."""

from __future__ import annotations

import gzip
import json

import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.errors import SpecError
from gpuetl.sources.json_fields import parse_path
from gpuetl.types import ARROW_TYPES, canonical_type_name


def run(tmp_path, columns=None, out="out", path="*.jsonl", blocksize=1 << 20, **over):
    s = {"version": 1, "name": "t", "source": {"type": "jsonl", "path": path, "blocksize": blocksize},
         "sink": {"path": out, "mode": "overwrite"}, **over}
    if columns is not None:
        s["columns"] = columns
    result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    c = result.counts
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    return result


def plan(tmp_path, columns=None, path="*.jsonl", **over):
    s = {"version": 1, "name": "t", "source": {"type": "jsonl", "path": path}, "sink": {"path": "out"}, **over}
    if columns is not None:
        s["columns"] = columns
    return gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).plan()


def rows(result):
    return pq.read_table(result.out_dir / "part-00000.parquet").to_pylist()


def write(folder, name, records):
    (folder / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def test_paths_parse():
    assert parse_path("user.id") == ("user", "id")
    assert parse_path("items[0].sku") == ("items", 0, "sku")
    assert parse_path("a[1][2]") == ("a", 1, 2)
    assert parse_path("plain") is None
    assert parse_path("a..b") is None and parse_path("a[x]") is None


def test_nested_type_names_are_canonical_and_typed():
    assert canonical_type_name("struct<lat:float64,  lon: float64>") == "struct<lat: float64, lon: float64>"
    assert str(ARROW_TYPES["list<struct<a: int64>>"]) == "list<item: struct<a: int64>>"
    # .get as well as [] (the GPU's from-Arrow cast looks types up with .get)
    assert ARROW_TYPES.get("list<struct<a: int64>>") == ARROW_TYPES["list<struct<a: int64>>"]
    assert ARROW_TYPES.get("int46") is None and ARROW_TYPES.get("int46", "x") == "x"
    with pytest.raises(ValueError, match="did you mean 'int64'"):
        canonical_type_name("list<int46>")
    with pytest.raises(ValueError, match="timestamp"):
        canonical_type_name("struct<t: timestamp>")


@pytest.mark.parametrize("blocksize", [16, 1 << 20])
def test_paths_and_list_indices_reach_nested_values(tmp_path, blocksize):
    write(tmp_path, "a.jsonl", [
        {"user": {"id": 1, "name": "ann"}, "items": [{"sku": "x1"}, {"sku": "x2"}]},
        {"user": {"id": "2"}, "items": []},
        {"user": None},
        {"user": "bob", "items": [{"sku": "z"}]},
        {"user": {"id": 4}, "items": [{"sku": 7}]},
    ])
    result = run(tmp_path, {"user.id": "int64", "items[0].sku": "string", "items[1].sku": "string"},
                 blocksize=blocksize)
    assert [(r["user.id"], r["items[0].sku"], r["items[1].sku"]) for r in rows(result)] == [
        (1, "x1", "x2"), (2, None, None), (None, None, None), (4, "7", None)]
    assert result.bad_records == {"field 'user.id': user is a string, not an object": 1}


@pytest.mark.parametrize("slow", [False, True])
def test_an_exact_top_level_key_wins_over_the_path(tmp_path, slow):
    """The same on the block reader and record by record (a bad record sends its batch there)."""
    write(tmp_path, "a.jsonl", [{"service.name": "flat", "service": {"name": "nested"}},
                                {"service": {"name": "nested only"}},
                                {"service.name": None, "service": {"name": "under a null key"}}]
          + (["not json"] if slow else []))
    result = run(tmp_path, {"service.name": "string"})
    assert [r["service.name"] for r in rows(result)] == ["flat", "nested only", "under a null key"]


def test_struct_and_list_columns_keep_nested_data_typed(tmp_path):
    write(tmp_path, "a.jsonl", [
        {"geo": {"lat": 1.5, "lon": 2, "alt": 9}, "tags": ["a", "b"]},
        {"geo": None, "tags": []},
        {"geo": {"lat": "x"}, "tags": ["c"]},
        {"geo": {"lat": 3.0}, "tags": "not a list"},
    ])
    result = run(tmp_path, {"geo": "struct<lat: float64, lon: float64>", "tags": "list<string>"})
    t = pq.read_table(result.out_dir / "part-00000.parquet")
    assert str(t.schema.field("geo").type) == "struct<lat: double, lon: double>"
    assert str(t.schema.field("tags").type) == "list<element: string>"
    assert t.to_pylist() == [{"geo": {"lat": 1.5, "lon": 2.0}, "tags": ["a", "b"]}, {"geo": None, "tags": []}]
    assert sorted(result.bad_records) == ["field 'geo': lat: expected float64, got \"x\"",
                                          "field 'tags': value: expected an array, got a string"]


def test_without_columns_nested_objects_become_structs(tmp_path):
    write(tmp_path, "a.jsonl", [{"id": 1, "user": {"id": 5, "tags": ["x"], "geo": {"lat": 1.5, "lon": 2}}},
                                {"id": 2, "user": {"id": 6}}, {"id": 3, "odd": {"a,b": 1}}])
    result = run(tmp_path)
    assert result.manifest["inferred_schema"] == {
        "id": "int64", "user": "struct<id: int64, tags: list<string>, geo: struct<lat: float64, lon: int64>>",
        "odd": "string"}         # a key that cannot name a struct field: the object kept as JSON text
    assert rows(result) == [
        {"id": 1, "user": {"id": 5, "tags": ["x"], "geo": {"lat": 1.5, "lon": 2}}, "odd": None},
        {"id": 2, "user": {"id": 6, "tags": None, "geo": None}, "odd": None},
        {"id": 3, "user": None, "odd": '{"a,b": 1}'}]


@pytest.mark.parametrize("strict", [False, True])
def test_json_strings_are_cast_with_the_text_rules(tmp_path, strict):
    write(tmp_path, "a.jsonl", [{"n": "190", "f": "1.5"}, {"n": " -3 ", "f": 2}, {"n": "12x"}, {"n": 1.0},
                                {"n": 7, "f": "nan?"}])
    # strict: every record is bad, which is what is tested: the empty dataset is committed all the same
    result = run(tmp_path, {"n": "int64", "f": "float64"}, strict=strict, allow_empty_output=strict)
    if strict:
        assert [(r["n"], r["f"]) for r in rows(result)] == []
        assert result.counts["quarantined"] == 5
        assert "field 'n': expected int64, got \"190\"" in result.bad_records
    else:
        assert [(r["n"], r["f"]) for r in rows(result)] == [(190, 1.5), (-3, 2.0)]
        assert sorted(result.bad_records) == ["field 'f': \"nan?\" is not a valid float64",
                                              "field 'n': \"12x\" is not a valid int64",
                                              "field 'n': expected int64, got 1.0"]


def test_a_declared_field_no_record_has_is_a_located_error(tmp_path):
    write(tmp_path, "a.jsonl", [{"duration_ms": 5, "user": {"id": 1}}])
    with pytest.raises(SpecError, match=r"columns\.duraton_ms: .*did you mean 'duration_ms'"):
        plan(tmp_path, {"duraton_ms": "int64"})
    with pytest.raises(SpecError, match=r"did you mean 'user\.id'"):
        plan(tmp_path, {"user.di": "int64"})


def test_inference_samples_every_file_and_widens(tmp_path):
    first = [{"a": 1, "b": True, "c": 1} for _ in range(3000)]      # past the old 1,000-record window
    write(tmp_path, "1.jsonl", first)
    write(tmp_path, "2.jsonl", [{"a": 2.5, "b": 1, "c": "x", "d": {"k": 1}}])
    stages = plan(tmp_path)
    assert stages.metadata["inferred_schema"] == {"a": "float64", "b": "string", "c": "string",
                                                  "d": "struct<k: int64>"}
    assert any("schema inferred from" in n for n in stages.notes)


def test_inference_does_not_depend_on_blocksize(tmp_path):
    write(tmp_path, "a.jsonl", [{"a": i, "s": {"x": i}} for i in range(2000)] + [{"a": 0.5}])
    small = gpuetl.Pipeline.from_dict({"version": 1, "name": "t", "sink": {"path": "o"},
                                       "source": {"type": "jsonl", "path": "a.jsonl", "blocksize": 4096}},
                                      base_dir=tmp_path).plan()
    assert small.metadata == plan(tmp_path, path="a.jsonl").metadata
    assert small.metadata["inferred_schema"]["a"] == "float64"     # the sample reaches the file's last record


def test_an_object_in_one_file_and_a_scalar_in_another_names_both(tmp_path):
    write(tmp_path, "1.jsonl", [{"user": {"id": 1}}])
    write(tmp_path, "2.jsonl", [{"user": "bob"}])
    got = plan(tmp_path)
    assert got.metadata["inferred_schema"] == {"user": "string"}
    assert got.metadata["source_text_fields"] == ["user"]
    assert any("'user' is an object in 1.jsonl (byte 0) and a scalar in 2.jsonl (byte 0)" in n for n in got.notes)


@pytest.mark.parametrize("mode", ["drop", "keep", "error"])
def test_extra_fields(tmp_path, mode):
    (tmp_path / "d").mkdir()
    write(tmp_path / "d", "a.jsonl", [{"a": 1}, {"a": 2, "x": {"y": [1]}, "z": "é"}])
    if mode == "error":
        with pytest.raises(SpecError, match="fields not in columns: x, z"):
            plan(tmp_path, {"a": "int64"}, path="d/a.jsonl", extra_fields="error")
        # past the sampled head of a compressed file: found by the run, the record quarantined
        body = "".join(json.dumps(r) + "\n" for r in [{"a": 1}] * 40000 + [{"a": 2, "x": 1}] + [{"a": 3}] * 9)
        (tmp_path / "d" / "a.jsonl").unlink()
        (tmp_path / "d" / "a.jsonl.gz").write_bytes(gzip.compress(body.encode()))
    result = run(tmp_path, {"a": "int64"}, path="d/a.jsonl*", extra_fields=mode)
    if mode == "drop":
        assert rows(result) == [{"a": 1}, {"a": 2}]
        assert any("2 field(s) not in columns are dropped: x, z" in n for n in result.manifest["notes"])
    elif mode == "keep":
        assert rows(result) == [{"a": 1, "_extra": None}, {"a": 2, "_extra": '{"x": {"y": [1]}, "z": "é"}'}]
    else:
        assert result.counts["quarantined"] == 1 and result.counts["rows_out"] == 40009
        assert result.bad_records == {"field 'x' is not in columns (extra_fields: error)": 1}


def test_extra_fields_is_for_json_sources(tmp_path):
    (tmp_path / "a.csv").write_text("a\n1\n")
    with pytest.raises(SpecError, match="extra_fields is for JSON sources"):
        gpuetl.Pipeline.from_dict({"version": 1, "name": "t", "source": {"type": "csv", "path": "a.csv"},
                                   "extra_fields": "keep", "sink": {"path": "o"}}, base_dir=tmp_path)


def test_a_byte_order_mark_before_the_first_record(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(b'\xef\xbb\xbf{"a": 1}\n{"a": 2}\n')
    result = run(tmp_path, {"a": "int64"})
    assert rows(result) == [{"a": 1}, {"a": 2}]
    assert run(tmp_path, out="o2").manifest["inferred_schema"] == {"a": "int64"}


@pytest.mark.parametrize("strict", [False, True])
def test_a_declared_column_null_in_every_row_is_reported(tmp_path, strict):
    write(tmp_path, "a.jsonl", [{"a": 1, "b": None}, {"a": 2}])
    if strict:
        with pytest.raises(gpuetl.errors.DataError, match="'b' are null in every row"):
            run(tmp_path, {"a": "int64", "b": "int64"}, strict=True)
        return
    result = run(tmp_path, {"a": "int64", "b": "int64"})
    assert result.manifest["empty_columns"] == ["b"]
    assert any("'b' are null in every row" in n for n in result.manifest["notes"])


def test_parquet_sources_keep_nested_columns(tmp_path):
    import pyarrow as pa

    src = pa.table({"id": [1, 2], "user": [{"id": 5, "tags": ["a"]}, None],
                    "xs": pa.array([[1.5], []], pa.list_(pa.float32()))})
    pq.write_table(src, tmp_path / "in.parquet")
    result = gpuetl.Pipeline.from_dict({"version": 1, "name": "t", "source": {"type": "parquet", "path": "in.parquet"},
                                        "sink": {"path": "out"}}, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    t = pq.read_table(result.out_dir / "part-00000.parquet")
    assert str(t.schema.field("user").type) == "struct<id: int64, tags: list<element: string>>"
    assert t.to_pylist() == [{"id": 1, "user": {"id": 5, "tags": ["a"]}, "xs": [1.5]},
                             {"id": 2, "user": None, "xs": []}]


def test_validate_exits_2_on_a_typo_and_plan_shows_the_inferred_schema(tmp_path, capsys):
    from gpuetl.cli import main

    write(tmp_path, "a.jsonl", [{"duration_ms": 5, "user": {"id": 1}}])
    (tmp_path / "typo.yaml").write_text("version: 1\nname: t\nsource: {type: jsonl, path: a.jsonl}\n"
                                        "columns:\n  duraton_ms: int64\nsink: {path: out}\n")
    (tmp_path / "open.yaml").write_text("version: 1\nname: t\nsource: {type: jsonl, path: a.jsonl}\nsink: {path: out}\n")
    assert main(["validate", str(tmp_path / "typo.yaml")]) == 2
    err = capsys.readouterr().err
    assert "typo.yaml:5: columns.duraton_ms" in err and "did you mean 'duration_ms'" in err
    assert main(["plan", str(tmp_path / "open.yaml")]) == 0
    assert "duration_ms: int64, user: struct<id: int64>" in capsys.readouterr().out


def test_columns_that_read_one_value_two_ways_are_refused(tmp_path):
    write(tmp_path, "a.jsonl", [{"user": {"id": 1}, "items": [{"sku": "a"}]}])
    with pytest.raises(SpecError, match=r"columns\.user\.id: the column 'user\.id' reads 'user' as an object, and the "
                                        r"column 'user' reads it as string"):
        plan(tmp_path, {"user": "string", "user.id": "int64"})
    with pytest.raises(SpecError, match="items"):
        plan(tmp_path, {"items[0]": "string", "items[1].sku": "string"})
    assert plan(tmp_path, {"items[0].sku": "string", "items[1].sku": "string", "user.id": "int64"}).output_schema \
        == {"items[0].sku": "string", "items[1].sku": "string", "user.id": "int64"}


def test_the_json_preset_of_a_text_source_is_planned_like_jsonl(tmp_path):
    """`parse: {preset: json}` reads lines as jsonl does: the same sampled schema, notes and
    manifest entries, not a bare stage without them."""
    write(tmp_path, "a.log", [{"a": 1, "u": {"id": 2}}, {"a": 2.5, "extra": True}])
    as_text = gpuetl.Pipeline.from_dict({"version": 1, "name": "t", "sink": {"path": "o"}, "parse": {"preset": "json"},
                                         "source": {"type": "text", "path": "a.log"}}, base_dir=tmp_path).plan()
    as_jsonl = plan(tmp_path, path="a.log")
    assert as_text.metadata == as_jsonl.metadata
    assert as_text.metadata["inferred_schema"] == {"a": "float64", "u": "struct<id: int64>", "extra": "bool"}
    assert any("schema inferred from" in n for n in as_text.notes)


def test_a_list_index_is_taken_through_the_offsets_of_a_sliced_list():
    """The block reader's list columns may be slices of a longer array: the element at an index
    is the one of each row's own list, null past its end or for a null list."""
    import pyarrow as pa

    from gpuetl.backends.cpu_json import _json_step

    whole = pa.array([[9], [1, 2], None, [], [3, 4, 5], [6]], pa.list_(pa.int64()))
    sliced = whole.slice(1, 5)
    assert _json_step(sliced, 0).to_pylist() == [1, None, None, 3, 6]
    assert _json_step(sliced, 2).to_pylist() == [None, None, None, 5, None]
    structs = pa.array([{"sku": "a"}, None, {"sku": None}], pa.struct([("sku", pa.string())]))
    assert _json_step(structs, "sku").to_pylist() == ["a", None, None]
