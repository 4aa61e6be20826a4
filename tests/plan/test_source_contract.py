"""The source stage a format's plan() returns is one of the two declared kinds
(sources/registry.py): a SourceStage the runtime parses, or a RecordStage that makes its frames."""

from __future__ import annotations

import pytest

import gpuetl
from gpuetl import plugins
from gpuetl.sources import registry as source_registry
from gpuetl.sources.stage import plan_byte_ranges


class HalfStage:
    """Has `read` and `schema` but not `default_key`: not a RecordStage."""

    schema = {"line": "string"}

    def read(self, partition, segment, backend):
        raise AssertionError("never read: compile refuses the stage")


class HalfFormat:
    name = "half_stage"
    options = ()

    def plan(self, loaded, files, notes, backend=None):
        return plan_byte_ranges(loaded, files), HalfStage(), {}


@pytest.fixture
def half_format(monkeypatch):
    monkeypatch.setattr(plugins, "entry_points", lambda group: [])
    gpuetl.register_source(HalfFormat)
    yield
    source_registry._REGISTERED.pop(HalfFormat.name, None)
    plugins.reset_plugins()


def test_a_stage_of_neither_kind_is_named(tmp_path, half_format):
    (tmp_path / "in.txt").write_text("a\n")
    spec = {"version": 1, "name": "half", "source": {"type": "half_stage", "path": "in.txt"},
            "sink": {"path": "out"}}
    with pytest.raises(TypeError, match=r"'half_stage'.*HalfStage, neither a SourceStage nor a RecordStage"):
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(scheduler="sync")
    assert not (tmp_path / "out").exists()


def test_the_built_in_stages_are_of_a_declared_kind():
    from gpuetl.sources.images import ImagesStage
    from gpuetl.sources.stage import SourceStage

    assert isinstance(ImagesStage([], {}, {}, 1, False), source_registry.RecordStage)
    assert not isinstance(HalfStage(), source_registry.RecordStage)
    assert SourceStage.default_key == ()
