"""The JSON Schema of pipeline files (`gpuetl schema`) agrees with the loader and the contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gpuetl
from gpuetl.cli import main
from gpuetl.spec.schema import pipeline_json_schema
from gpuetl.spec.yamlio import load_with_locations
from gpuetl.steps.base import STEPS

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"

EXAMPLE = {
    "version": 1,
    "name": "web-access",
    "source": {"type": "text", "path": "data/*.log", "blocksize": "64MiB", "compression": "infer",
               "provenance": False},
    "parse": {"preset": "apache_combined"},
    "columns": {"status": "int16", "time": {"type": "timestamp", "format": "%d/%b/%Y:%H:%M:%S %z"}},
    "steps": [
        {"filter": "status >= 200 and method in ['GET', 'POST']"},
        {"derive": {"hour": "hour(time)", "path_len": "len(path)"}},
        {"dedupe": {"on": ["ip", "time", "request"]}},
        {"drop": ["ident"]},
        {"rename": {"size": "bytes"}},
    ],
    "on_error": "quarantine",
    "max_error_ratio": 0.01,
    "shard": {"count": 16, "key": ["ip"], "shuffle": True, "seed": 0,
              "splits": {"train": 0.98, "val": 0.01, "test": 0.01}},
    "sink": {"type": "parquet", "path": "out/web-access", "compression": "zstd", "row_group_rows": 131072,
             "mode": "error"},
}


@pytest.fixture(scope="module")
def schema() -> dict:
    return pipeline_json_schema()


def example_files() -> list[Path]:
    return sorted(PIPELINES.glob("*.y*ml")) if PIPELINES.is_dir() else []


def test_cli_prints_valid_json(capsys, schema):
    assert main(["schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(schema))
    assert printed["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert printed["type"] == "object" and printed["additionalProperties"] is False


def test_top_level_matches_the_contract(schema):
    assert set(schema["required"]) == {"version", "name", "source", "sink"}
    assert set(schema["properties"]) == {"version", "name", "source", "parse", "columns", "steps", "on_error",
                                         "max_error_ratio", "allow_empty_output", "shard", "sink", "strict",
                                         "extra_fields", "cache"}
    assert schema["properties"]["version"]["const"] == 1
    assert set(schema["properties"]["on_error"]["enum"]) == {"fail", "drop", "quarantine"}
    defs = schema["$defs"]
    assert {"text", "jsonl", "csv", "parquet", "images"} == set(defs["Source"]["properties"]["type"]["enum"])
    assert {"error", "overwrite", "resume", "append"} == set(defs["Sink"]["properties"]["mode"]["enum"])
    assert {"zstd", "snappy", "gzip", "lz4", "none"} == set(defs["Sink"]["properties"]["compression"]["enum"])
    assert {"apache_common", "apache_combined", "nginx_combined", "syslog_rfc3164", "syslog_rfc5424",
            "json"} <= set(json.dumps(defs["Parse"]["properties"]["preset"]).replace('"', " ").split())


def test_every_registered_step_is_in_one_of(schema):
    variants = schema["properties"]["steps"]["items"]["oneOf"]
    names = [v["title"] for v in variants]
    assert sorted(names) == sorted(STEPS) and len(set(names)) == len(names)
    for variant in variants:
        assert variant["required"] == [variant["title"]]
        assert variant["additionalProperties"] is False
        assert list(variant["properties"]) == [variant["title"]]
        assert "Example:" in variant["description"]


def test_schema_refs_resolve(schema):
    text = json.dumps(schema)
    refs = {part.split('"')[0] for part in text.split('"$ref": "')[1:]}
    for ref in refs:
        assert ref.startswith("#/$defs/"), ref
        assert ref[len("#/$defs/"):] in schema["$defs"], ref


@pytest.mark.parametrize("name", sorted(STEPS))
def test_each_step_example_loads(name, tmp_path):
    """The example in the schema (and docs) is accepted by the loader."""
    items, _ = load_with_locations(STEPS[name].example, "<example>")   # gpuetl's YAML: `on:` stays a name
    assert [list(item) for item in items] == [[name]]
    pipeline = gpuetl.Pipeline.from_dict({**EXAMPLE, "steps": items, "shard": {}}, base_dir=tmp_path)
    assert pipeline.loaded.steps[0].name == name


def test_example_dict_loads(tmp_path):
    assert gpuetl.Pipeline.from_dict(EXAMPLE, base_dir=tmp_path).name == "web-access"


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_example_pipelines_load(path):
    assert gpuetl.load(path).name


def _validator(schema):
    jsonschema = pytest.importorskip("jsonschema")
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_jsonschema_accepts_examples(schema):
    validator = _validator(schema)
    validator.validate(EXAMPLE)
    for path in example_files():
        data, _ = load_with_locations(path.read_text(), str(path))     # `on:` stays a key name
        validator.validate(data)


def test_jsonschema_rejects_mistakes(schema):
    validator = _validator(schema)
    for bad in ({**EXAMPLE, "sink": {**EXAMPLE["sink"], "compresion": "zstd"}},
                {**EXAMPLE, "steps": [{"dedup": {"on": ["ip"]}}]},
                {**EXAMPLE, "version": 2},
                {k: v for k, v in EXAMPLE.items() if k != "sink"}):
        assert not validator.is_valid(bad), bad
