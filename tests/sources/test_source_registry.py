"""Source formats are found by name: the built-in ones lazily, an unknown name with a hint."""

from __future__ import annotations

import pytest

import gpuetl
from gpuetl.sources import registry
from gpuetl.sources.registry import SourceFormat, get_source, source_names


def test_every_builtin_format_is_a_source_format():
    for name in ("text", "jsonl", "csv", "parquet", "images"):
        fmt = get_source(name)
        assert fmt.name == name and isinstance(fmt, SourceFormat)
    assert {"text", "jsonl", "csv", "parquet", "images"} <= set(source_names())


@pytest.mark.parametrize("typo, hint", [("jsnol", "'jsonl'"), ("parqet", "'parquet'"), ("xml", None)])
def test_an_unknown_type_names_the_closest_and_the_known(tmp_path, typo, hint):
    spec = {"version": 1, "name": "t", "source": {"type": typo, "path": "x"}, "sink": {"path": "out"}}
    with pytest.raises(gpuetl.SpecError) as err:
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path)
    message = str(err.value)
    assert "source" in message and f"unknown source type {typo!r}" in message
    assert ("did you mean " + hint in message) if hint else "did you mean" not in message
    assert "known: csv, images, jsonl, parquet, text" in message


def test_get_source_of_an_unknown_name_is_a_spec_error():
    with pytest.raises(gpuetl.SpecError, match="unknown source type 'nope'"):
        get_source("nope")


def test_a_type_that_is_not_a_string_is_refused(tmp_path):
    spec = {"version": 1, "name": "t", "source": {"type": 3, "path": "x"}, "sink": {"path": "out"}}
    with pytest.raises(gpuetl.SpecError, match="source.type"):
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path)


def test_a_format_without_plan_is_refused():
    class NoPlan:
        name = "no_plan"

    with pytest.raises(TypeError, match="plan"):
        gpuetl.register_source(NoPlan)
    assert "no_plan" not in registry._REGISTERED


def test_replace_swaps_a_registered_format():
    class One:
        name = "registry_test_one"

        def plan(self, loaded, files, notes, backend=None):
            return [], None, {}

    try:
        gpuetl.register_source(One)
        with pytest.raises(ValueError, match="already registered"):
            gpuetl.register_source(One)
        other = One()
        gpuetl.register_source(other, replace=True)
        assert get_source("registry_test_one") is other and other.options == ()
    finally:
        registry._REGISTERED.pop("registry_test_one", None)


@pytest.mark.parametrize("source, stray, readers", [
    ({"type": "jsonl", "delimiter": ";"}, "delimiter", "csv"),
    ({"type": "text", "max_pixels": 10}, "max_pixels", "images"),
    ({"type": "csv", "exif_transpose": False}, "exif_transpose", "images"),
])
def test_an_option_of_another_format_is_refused(tmp_path, source, stray, readers):
    spec = {"version": 1, "name": "t", "source": {**source, "path": "x"}, "sink": {"path": "out"}}
    with pytest.raises(gpuetl.SpecError) as err:
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path)
    assert f"{stray}: not read by {source['type']} sources (only by {readers})" in str(err.value)


def test_an_option_of_its_own_format_is_kept(tmp_path):
    spec = {"version": 1, "name": "t", "source": {"type": "csv", "path": "x", "delimiter": ";"}, "sink": {"path": "out"}}
    assert gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).spec.source.delimiter == ";"
