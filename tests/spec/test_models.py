"""The typed models behind pipeline files (gpuetl.spec.models) and byte sizes (gpuetl.spec.sizes)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuetl.spec.models import Parse, PipelineSpec, Shard, Sink, Source
from gpuetl.spec.sizes import format_size, parse_size

MINIMAL = {"version": 1, "name": "web", "source": {"type": "text", "path": "a.log"}, "sink": {"path": "out"}}


def spec(**changes) -> PipelineSpec:
    return PipelineSpec.model_validate({**MINIMAL, **changes})


def test_defaults():
    s = spec()
    assert s.source.blocksize == 64 * 2**20
    assert s.source.compression == "infer" and s.source.provenance is False
    assert s.parse is None and s.columns == {} and s.steps == []
    assert s.on_error == "quarantine" and s.max_error_ratio is None
    assert s.shard == Shard() and s.shard.count is None and s.shard.shuffle is False and s.shard.seed == 0
    assert s.sink.type == "parquet" and s.sink.compression == "zstd" and s.sink.mode == "error"


def test_models_are_frozen():
    s = spec()
    with pytest.raises(ValidationError):
        s.name = "other"


@pytest.mark.parametrize("text, expected", [
    ("64MiB", 64 * 2**20), ("1GiB", 2**30), ("256MB", 256 * 10**6), ("512k", 512_000), ("1.5KiB", 1536),
    ("  2 mib ", 2 * 2**20), (1048576, 1048576), ("1048576", 1048576), ("10b", 10),
])
def test_sizes(text, expected):
    assert parse_size(text) == expected
    assert Source(type="text", path="x", blocksize=text).blocksize == expected


@pytest.mark.parametrize("bad", ["64MeB", "", "MiB", "-1MiB", 0, -5, True, "0.1b", "1e6"])
def test_bad_sizes(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_format_size():
    assert format_size(512) == "512 B"
    assert format_size(64 * 2**20) == "64.0 MiB"


def test_source_paths():
    assert Source(type="text", path="a/*.log").paths == ["a/*.log"]
    assert Source(type="text", path=["a", "b"]).paths == ["a", "b"]
    for empty in ("", "  ", []):
        with pytest.raises(ValidationError, match="at least one path"):
            Source(type="text", path=empty)


@pytest.mark.parametrize("delimiter", ["", ";;", "\n", '"', "§"])
def test_csv_delimiter(delimiter):
    with pytest.raises(ValidationError, match="one ASCII character"):
        Source(type="csv", path="a.csv", delimiter=delimiter)
    assert Source(type="csv", path="a.csv", delimiter="\t").delimiter == "\t"


def test_parse_exactly_one():
    assert Parse(template="<Date> <Content>").template == "<Date> <Content>"
    with pytest.raises(ValidationError, match="exactly one"):
        Parse()
    with pytest.raises(ValidationError, match="got preset, template"):
        Parse(preset="json", template="<A>")
    with pytest.raises(ValidationError):
        Parse(preset="apache_combind")


def test_parse_only_for_text_sources():
    assert spec(parse={"preset": "json"}).parse.preset == "json"
    for kind in ("jsonl", "csv"):
        with pytest.raises(ValidationError, match="text sources only"):
            spec(source={"type": kind, "path": "x"}, parse={"preset": "json"})


def test_shard_key_string_becomes_list():
    assert Shard(key="ip").key == ["ip"]
    assert Shard(key=["ip", "path"]).key == ["ip", "path"]


def test_shard_bounds():
    assert Shard(target_bytes="256MiB").target_bytes == 256 * 2**20
    for bad in ({"count": 0}, {"count": 100_001}, {"seed": -1}, {"count": 2, "target_bytes": 10}):
        with pytest.raises(ValidationError):
            Shard(**bad)


@pytest.mark.parametrize("splits, message", [
    ({}, "at least one split"),
    ({"train": 0.5, "val": 0.4}, "add up to 1"),
    ({"train": 1.0, "val": 0.0}, "must be in"),
    ({"train": 1.2, "val": -0.2}, "must be in"),
    ({"tr ain": 1.0}, "letters, digits"),
    ({"tr/ain": 1.0}, "letters, digits"),
])
def test_bad_splits(splits, message):
    with pytest.raises(ValidationError, match=message):
        Shard(splits=splits)


def test_good_splits():
    splits = {"train": 0.98, "val": 0.01, "test": 0.01}
    assert Shard(splits=splits).splits == splits
    assert Shard(splits={"all": 1}).splits == {"all": 1}


def test_sink():
    assert Sink(path="o", row_group_bytes="8MiB").row_group_bytes == 8 * 2**20
    with pytest.raises(ValidationError, match="at most one of row_group_rows and row_group_bytes"):
        Sink(path="o", row_group_rows=10, row_group_bytes=10)
    with pytest.raises(ValidationError):
        Sink(path="o", row_group_rows=0)
    with pytest.raises(ValidationError):
        Sink(path="o", compression="brotli")
    with pytest.raises(ValidationError):
        Sink(path="o", type="csv")


def test_steps_shape():
    assert spec(steps=None).steps == []
    with pytest.raises(ValidationError, match="steps is a list"):
        spec(steps={"filter": "x"})
    with pytest.raises(ValidationError, match="item 1 must be a mapping with exactly one key"):
        spec(steps=[{"filter": "a > 1"}, {"filter": "a > 1", "drop": ["b"]}])
    with pytest.raises(ValidationError, match="item 0"):
        spec(steps=["filter"])


def test_column_types():
    s = spec(columns={"status": "int16", "time": {"type": "timestamp", "format": "%d/%b/%Y:%H:%M:%S %z"}})
    assert set(s.columns) == {"status", "time"}
    with pytest.raises(ValidationError):
        spec(columns={"status": "int17"})


@pytest.mark.parametrize("name", ["web access", "", "a.b", "ü", "x" * 129])
def test_bad_names(name):
    with pytest.raises(ValidationError):
        spec(name=name)


def test_extra_keys_forbidden_everywhere():
    for section in ("source", "sink"):
        with pytest.raises(ValidationError, match="Extra inputs"):
            spec(**{section: {**MINIMAL[section], "bogus": 1}})
    with pytest.raises(ValidationError, match="Extra inputs"):
        spec(bogus=1)
