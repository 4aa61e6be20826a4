"""Sinks are found by name (sink.type); Parquet is built in and writes what it always wrote."""

from __future__ import annotations

import pytest

import gpuetl
from gpuetl.sinks import base
from gpuetl.sinks.base import Sink, get_sink, sink_names, sink_of_manifest
from gpuetl.sinks.dataset import inspect_dataset, verify_dataset
from gpuetl.sinks.parquet import ParquetSink


def test_parquet_is_the_builtin_sink():
    sink = get_sink("parquet")
    assert isinstance(sink, ParquetSink) and isinstance(sink, Sink)
    assert sink_names() == ["parquet"] or "parquet" in sink_names()
    assert sink.shard_path("train", 3) == "train/part-00003.parquet"
    assert sink.shard_path("", 0) == "part-00000.parquet"
    assert sink_of_manifest({}) is sink and sink_of_manifest({"sink": {"type": "parquet"}}) is sink


def test_an_unknown_sink_type_names_the_closest(tmp_path):
    spec = {"version": 1, "name": "t", "source": {"type": "text", "path": "x"},
            "sink": {"type": "parquett", "path": "out"}}
    with pytest.raises(gpuetl.SpecError) as err:
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path)
    assert "unknown sink type 'parquett'; did you mean 'parquet'?" in str(err.value)
    assert "known: parquet" in str(err.value)


def test_a_sink_missing_methods_is_refused():
    class Half:
        name = "half"

        def write_shard(self, task, pieces, **kwargs):
            raise AssertionError

    with pytest.raises(TypeError, match="missing write_options"):
        gpuetl.register_sink(Half)
    assert "half" not in base._REGISTERED


def test_a_run_goes_through_the_registered_sink(tmp_path, monkeypatch):
    """A sink registered under sink.type is the one that writes and commits the run."""
    calls = []

    class Recording(ParquetSink):
        name = "recording"

        def write_shard(self, task, pieces, **kwargs):
            calls.append(("shard", task.relpath))
            return super().write_shard(task, pieces, **kwargs)

        def output_folder(self, out, log):
            calls.append(("commit", out.name))
            return super().output_folder(out, log)

    (tmp_path / "in.txt").write_text("a\nb\nc\n")
    spec = {"version": 1, "name": "t", "source": {"type": "text", "path": "in.txt"},
            "shard": {"count": 2}, "sink": {"type": "recording", "path": "out"}}
    try:
        gpuetl.register_sink(Recording)
        result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(scheduler="sync")
    finally:
        base._REGISTERED.pop("recording", None)
    assert ("commit", "out") in calls
    assert sorted(c for c in calls if c[0] == "shard") == [("shard", "part-00000.parquet"), ("shard", "part-00001.parquet")]
    assert result.counts["rows_out"] == 3
    manifest, problems = verify_dataset(tmp_path / "out")
    assert problems == []
    assert inspect_dataset(tmp_path / "out")["sample"]
