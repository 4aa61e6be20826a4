"""Loading pipeline files: every mistake comes back as a SpecError naming file, line, key and a hint."""

from __future__ import annotations

import re
import textwrap

import pytest

import gpuetl
from gpuetl import SpecError
from gpuetl.cli import main

GOOD = """\
version: 1
name: web-access
source:
  type: text
  path: data/*.log
parse:
  preset: apache_combined
columns:
  status: int16
  time: {type: timestamp, format: "%d/%b/%Y:%H:%M:%S %z"}
steps:
  - filter: "status >= 200"
  - dedupe: {on: [ip, time, request]}
sink:
  path: out/web
  compression: zstd
"""


def write(tmp_path, text: str, name: str = "pipe.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error_of(tmp_path, text: str, overrides=()) -> str:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        gpuetl.load(path, overrides)
    message = str(info.value)
    assert "pipe.yaml" in message or "--set" in message, message
    assert "Traceback" not in message
    return message


def line_of(text: str, needle: str) -> int:
    """1-based number of the first line of `text` containing `needle`."""
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in the text")


def test_good_file_loads_with_defaults(tmp_path):
    pipeline = gpuetl.load(write(tmp_path, GOOD))
    spec = pipeline.spec
    assert pipeline.name == "web-access"
    assert spec.on_error == "quarantine"
    assert spec.sink.mode == "error"
    assert spec.source.blocksize == 64 * 2**20          # the default is a byte count, not the text "64MiB"
    assert spec.shard.count is None and spec.shard.seed == 0
    assert [s.name for s in pipeline.loaded.steps] == ["filter", "dedupe"]
    assert pipeline.loaded.base_dir == tmp_path.resolve()
    assert len(pipeline.loaded.sha256) == 64


def test_typo_in_key_names_file_line_key_and_hint(tmp_path):
    text = GOOD.replace("  compression: zstd", "  compresion: zstd")
    message = error_of(tmp_path, text)
    assert f"pipe.yaml:{line_of(text, 'compresion')}:" in message
    assert "sink.compresion" in message
    assert "did you mean 'compression'" in message


@pytest.mark.parametrize("old, new, key, expected", [
    ("sink:\n", "shard:\n  count: many\nsink:\n", "shard.count", "whole number"),
    ("  path: data/*.log\n", "  path: data/*.log\n  blocksize: 64MeB\n", "source.blocksize", "64MiB"),
    ("  status: int16", "  status: int17", "columns.status", "did you mean 'int16'"),
    ("  status: int16", "  status: {type: int17}", "columns.status.type", "did you mean 'int16'"),
    ("sink:\n", "on_error: quarantin\nsink:\n", "on_error", "did you mean 'quarantine'"),
    ("sink:\n", "max_error_ratio: 2\nsink:\n", "max_error_ratio", "1"),
])
def test_wrong_types_are_located(tmp_path, old, new, key, expected):
    text = GOOD.replace(old, new)
    assert text != GOOD
    message = error_of(tmp_path, text)
    line = line_of(text, next(x for x in new.splitlines() if key.split(".")[-1] in x))
    assert f"pipe.yaml:{line}: {key}" in message, message
    assert expected in message


@pytest.mark.parametrize("section", ["sink", "source", "version"])
def test_missing_section(tmp_path, section):
    data_lines = GOOD.splitlines(keepends=True)
    start = next(i for i, line in enumerate(data_lines) if line.startswith(section + ":"))
    end = start + 1
    while end < len(data_lines) and data_lines[end].startswith(" "):
        end += 1
    text = "".join(data_lines[:start] + data_lines[end:])
    message = error_of(tmp_path, text)
    assert f"{section}: required key is missing" in message


def test_unknown_step_with_hint(tmp_path):
    text = GOOD.replace("  - dedupe:", "  - dedup:")
    message = error_of(tmp_path, text)
    assert f"pipe.yaml:{line_of(text, 'dedup:')}: steps[1]" in message
    assert "unknown step 'dedup'" in message and "did you mean 'dedupe'" in message


def test_bad_filter_expression_names_its_step_index(tmp_path):
    text = GOOD.replace("  - dedupe: {on: [ip, time, request]}", "  - filter: \"__import__('os')\"")
    message = error_of(tmp_path, text)
    assert f"pipe.yaml:{line_of(text, '__import__')}: steps[1].filter" in message
    assert "__import__" in message


def test_step_parameter_error(tmp_path):
    text = GOOD.replace("{on: [ip, time, request]}", "{on: [ip], keeep: first}")
    message = error_of(tmp_path, text)
    assert "steps[1].dedupe.keeep" in message and "did you mean 'keep'" in message


def test_parse_with_two_rules(tmp_path):
    text = GOOD.replace("  preset: apache_combined", "  preset: apache_combined\n  regex: '^(?P<a>.*)$'")
    message = error_of(tmp_path, text)
    assert f"pipe.yaml:{line_of(text, 'parse:')}: parse" in message
    assert "exactly one of preset, template or regex" in message and "preset, regex" in message


def test_parse_on_a_jsonl_source(tmp_path):
    text = GOOD.replace("type: text", "type: jsonl")
    message = error_of(tmp_path, text)
    assert f"pipe.yaml:{line_of(text, 'parse:')}: parse" in message
    assert "text sources only" in message and "jsonl" in message


def test_invalid_yaml_names_the_line(tmp_path):
    text = GOOD.replace("  compression: zstd", "  compression: [zstd")
    message = error_of(tmp_path, text)
    assert re.search(r"pipe\.yaml:\d+:\d+: not valid YAML", message), message


def test_tab_indentation_is_invalid_yaml(tmp_path):
    text = GOOD.replace("  compression: zstd", "\tcompression: zstd")
    message = error_of(tmp_path, text)
    assert f"pipe.yaml:{line_of(text, 'compression')}:" in message and "not valid YAML" in message


@pytest.mark.parametrize("text", ["", "\n\n", "# just a comment\n"])
def test_empty_file(tmp_path, text):
    path = write(tmp_path, text)
    with pytest.raises(SpecError, match="pipe.yaml: the pipeline file is empty") as info:
        gpuetl.load(path)
    assert "version: 1" in str(info.value)          # the hint says how to start


def test_not_a_mapping(tmp_path):
    with pytest.raises(SpecError, match="is a mapping"):
        gpuetl.load(write(tmp_path, "- a\n- b\n"))


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="no such pipeline file"):
        gpuetl.load(tmp_path / "nope.yaml")


def test_duplicated_key(tmp_path):
    text = GOOD + "sink:\n  path: elsewhere\n"
    message = error_of(tmp_path, text)
    assert f"pipe.yaml:{len(GOOD.splitlines()) + 1}:" in message and "'sink' is given twice" in message


def test_duplicated_nested_key(tmp_path):
    text = GOOD.replace("  compression: zstd", "  compression: zstd\n  path: again")
    message = error_of(tmp_path, text)
    assert "'sink.path' is given twice" in message


@pytest.mark.parametrize("form", ["{on: [ip, time]}", "\n      on: [ip, time]"])
def test_yaml11_on_key_stays_a_name(tmp_path, form):
    text = GOOD.replace("{on: [ip, time, request]}", form)
    pipeline = gpuetl.load(write(tmp_path, text))
    dedupe = pipeline.loaded.steps[1]
    assert dedupe.name == "dedupe"
    assert list(dedupe.params.on) == ["ip", "time"]


def test_yes_no_values_are_still_booleans(tmp_path):
    text = GOOD.replace("  path: data/*.log", "  path: data/*.log\n  provenance: yes")
    assert gpuetl.load(write(tmp_path, text)).spec.source.provenance is True


def test_set_overrides(tmp_path):
    path = write(tmp_path, GOOD)
    pipeline = gpuetl.load(path, ["sink.path=/x", "shard.count=4", "source.blocksize=1MiB"])
    assert pipeline.spec.sink.path == "/x"
    assert pipeline.spec.shard.count == 4
    assert pipeline.spec.source.blocksize == 2**20
    assert pipeline.loaded.sha256 != gpuetl.load(path).loaded.sha256


def test_set_override_error_is_located_on_the_set(tmp_path):
    message = error_of(tmp_path, GOOD, overrides=["shard.count=many"])
    assert "(--set shard.count=many) shard.count" in message


@pytest.mark.parametrize("text, overrides", [
    (GOOD.replace("  path: data/*.log", "  path: data/*.log\n  storage_options: {secret: TOPSECRET-456}"),
     ["source.storage_options.secret.x=1"]),
    (GOOD, ["source.storage_options.secret=TOPSECRET-456", "source.storage_options.secret.x=1"]),
    (GOOD, ["sink.storage_options.secret=TOPSECRET-456", "sink.storage_options=TOPSECRET-456"]),
], ids=["in the file", "given with --set", "a --set quoted"])
def test_set_errors_never_write_a_storage_options_secret(tmp_path, text, overrides):
    """A --set into a storage_options value quoted the value ("secret is 'TOPSECRET-456', not a
    mapping"); storage_options' strings are blotted out of every error (object-storage.md)."""
    message = error_of(tmp_path, text, overrides)
    assert "TOPSECRET" not in message and "***" in message


def test_set_without_equals(tmp_path):
    path = write(tmp_path, GOOD)
    with pytest.raises(SpecError, match="expected KEY=VALUE"):
        gpuetl.load(path, ["sink.path"])


def test_set_without_equals_is_exit_2(tmp_path, capsys):
    path = write(tmp_path, GOOD)
    assert main(["validate", str(path), "--set", "sink.path"]) == 2
    err = capsys.readouterr().err
    assert "expected KEY=VALUE" in err and "Traceback" not in err


def test_version_2_rejected(tmp_path):
    message = error_of(tmp_path, GOOD.replace("version: 1", "version: 2"))
    assert "pipe.yaml:1: version" in message and "2" in message


def test_name_with_spaces_rejected(tmp_path):
    message = error_of(tmp_path, GOOD.replace("name: web-access", "name: web access"))
    assert "pipe.yaml:2: name" in message
    assert "letters, digits" in message


@pytest.mark.parametrize("splits", ["{train: 0.5, val: 0.2}", "{train: 0.9, val: 0.2}"])
def test_splits_must_sum_to_one(tmp_path, splits):
    text = GOOD.replace("sink:\n", f"shard:\n  splits: {splits}\nsink:\n")
    message = error_of(tmp_path, text)
    assert f"pipe.yaml:{line_of(text, 'splits:')}: shard.splits" in message and "add up to 1" in message


def test_count_and_target_bytes_exclusive(tmp_path):
    text = GOOD.replace("sink:\n", "shard:\n  count: 2\n  target_bytes: 1MiB\nsink:\n")
    assert "at most one of count and target_bytes" in error_of(tmp_path, text)


def test_several_problems_reported_together(tmp_path):
    text = GOOD.replace("  compression: zstd", "  compresion: zstd").replace("int16", "int17")
    message = error_of(tmp_path, text)
    assert message.splitlines()[0].endswith("2 problems in the pipeline file")
    assert "sink.compresion" in message and "columns.status" in message


def test_from_dict_uses_dict_as_file_name(tmp_path):
    with pytest.raises(SpecError, match=r"<dict>.*sink: required key is missing"):
        gpuetl.Pipeline.from_dict({"version": 1, "name": "x", "source": {"type": "text", "path": "a"}},
                                  base_dir=tmp_path)
