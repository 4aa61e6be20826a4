"""A source format and a step from outside the package run end to end, registered by the public
functions or found through a `gpuetl.plugins` entry point; a broken plugin is a clear error."""

from __future__ import annotations

import importlib.metadata
import sys

import pyarrow.parquet as pq
import pytest
import yaml

import gpuetl
from gpuetl import plugins
from gpuetl.sources import registry as source_registry
from gpuetl.steps.base import STEPS

from .toy import Exclaim, ShoutFormat, register


def _pipeline(tmp_path):
    (tmp_path / "words.txt").write_text("hello\n# a comment\nworld\n")
    return {"version": 1, "name": "toy", "source": {"type": "toy_shout", "path": "words.txt"},
            "steps": [{"toy_exclaim": 2}], "sink": {"path": "out"}}


@pytest.fixture
def clean_registries(monkeypatch):
    """Leave the registries and the plugin scan as they were: other tests list every step."""
    monkeypatch.setattr(plugins, "_loaded", False)
    yield
    STEPS.pop(Exclaim.name, None)
    source_registry._REGISTERED.pop(ShoutFormat.name, None)
    plugins.reset_plugins()


def _check_run(tmp_path):
    result = gpuetl.Pipeline.from_dict(_pipeline(tmp_path), base_dir=tmp_path).run(scheduler="sync")
    rows = pq.read_table(tmp_path / "out" / result.shards[0]["path"]).column("word").to_pylist()
    assert rows == ["HELLO!!", "WORLD!!"]
    counts = result.counts
    assert (counts["rows_in"], counts["rows_out"], counts["quarantined"]) == (3, 2, 1)
    assert counts["rows_in"] == counts["rows_out"] + counts["filtered"] + counts["deduplicated"] + counts["quarantined"]
    assert result.manifest["toy"] == {"format": "toy_shout"}


def test_registered_by_function(tmp_path, clean_registries, monkeypatch):
    monkeypatch.setattr(plugins, "entry_points", lambda group: [])
    register()
    _check_run(tmp_path)


def test_unknown_before_registration_names_the_known_formats(tmp_path, clean_registries, monkeypatch):
    monkeypatch.setattr(plugins, "entry_points", lambda group: [])
    spec = _pipeline(tmp_path)
    spec["source"]["type"] = "toy_shuot"
    with pytest.raises(gpuetl.SpecError) as err:
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path)
    assert "unknown source type 'toy_shuot'" in str(err.value)
    assert "jsonl" in str(err.value) and "parquet" in str(err.value)


def _fake_distribution(tmp_path, value: str):
    site = tmp_path / "site"
    info = site / "gpuetl_toy-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gpuetl-toy\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[gpuetl.plugins]\ntoy = {value}\n")
    return site


def test_found_through_an_entry_point(tmp_path, clean_registries, monkeypatch):
    site = _fake_distribution(tmp_path, "plugins.toy:register")
    monkeypatch.syspath_prepend(str(site))
    assert [ep.name for ep in importlib.metadata.entry_points(group="gpuetl.plugins")] == ["toy"]
    assert "toy_shout" not in source_registry._REGISTERED and "toy_exclaim" not in STEPS
    _check_run(tmp_path)


def test_a_broken_plugin_is_named(tmp_path, clean_registries, monkeypatch):
    site = _fake_distribution(tmp_path, "gpuetl_no_such_module:register")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(plugins.PluginError) as err:
        gpuetl.Pipeline.from_dict(_pipeline(tmp_path), base_dir=tmp_path)
    message = str(err.value)
    assert "'toy'" in message and "gpuetl-toy" in message and "gpuetl_no_such_module" in message


def test_registration_refuses_a_taken_name_and_a_non_step(clean_registries):
    class Text:
        name = "text"

        def plan(self, loaded, files, notes, backend=None):
            raise AssertionError

    with pytest.raises(ValueError, match="already registered"):
        gpuetl.register_source(Text)
    with pytest.raises(TypeError):
        gpuetl.register_step(object)
    with pytest.raises(TypeError, match="needs a `name`"):
        gpuetl.register_source(object())


def test_plugins_are_not_looked_for_while_every_name_is_known(tmp_path, clean_registries, monkeypatch):
    looked = []
    monkeypatch.setattr(plugins, "entry_points", lambda group: looked.append(group) or [])
    (tmp_path / "a.txt").write_text("x\n")
    spec = {"version": 1, "name": "t", "source": {"type": "text", "path": "a.txt"}, "steps": [{"drop": ["line"]}],
            "sink": {"path": "out"}}
    with pytest.raises(gpuetl.SpecError):        # no columns left: compiled, so every name was looked up
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).plan()
    assert looked == []
    spec["steps"] = [{"toy_exclaim": 1}]
    with pytest.raises(gpuetl.SpecError, match="toy_exclaim"):
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path)
    assert looked == ["gpuetl.plugins"]


@pytest.mark.parametrize("body, said", [
    ("import sys\nsys.exit(0)\n", "SystemExit(0): it called sys.exit()"),
    ("import sys\nsys.exit('bye')\n", "SystemExit('bye')"),
    ("raise SystemExit\n", "SystemExit(None)"),
    ("raise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here"),
])
def test_a_plugin_that_exits_or_raises_at_import_is_an_error_naming_it(tmp_path, clean_registries, monkeypatch,
                                                                        capsys, body, said):
    """Plugins load when a step name is unknown: one that calls sys.exit(0) at import would end
    `run` and `validate` with exit 0 and nothing written; it is exit 2 naming the plugin."""
    from hostile.conftest import snapshot

    from gpuetl.cli import main

    site = _fake_distribution(tmp_path, "gpuetl_exits_at_import")
    (site / "gpuetl_exits_at_import.py").write_text(body)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)         # no __pycache__ beside the plugin
    (tmp_path / "pipe.yaml").write_text(yaml.safe_dump(_pipeline(tmp_path)))
    before = snapshot(tmp_path)
    for command in (["validate"], ["run", "--backend", "cpu", "--scheduler", "sync"]):
        sys.modules.pop("gpuetl_exits_at_import", None)
        plugins.reset_plugins()
        assert main([command[0], str(tmp_path / "pipe.yaml"), *command[1:]]) == 2
        err = capsys.readouterr().err
        assert "the gpuetl plugin 'toy' (gpuetl_exits_at_import from gpuetl-toy) failed to load" in err, err
        assert said in err and "internal error" not in err
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()


def test_a_keyboard_interrupt_while_a_plugin_loads_goes_through(tmp_path, clean_registries, monkeypatch):
    site = _fake_distribution(tmp_path, "gpuetl_interrupted_at_import")
    (site / "gpuetl_interrupted_at_import.py").write_text("raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(KeyboardInterrupt):
        gpuetl.Pipeline.from_dict(_pipeline(tmp_path), base_dir=tmp_path)
