"""What the command and the library say, word for word: counts of one are singular, the Python
API's hints name settings as a pipeline file writes them, a warning blames only what the user set,
and preview's tables fit the terminal's width."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from gpuetl import load
from gpuetl.cli import main
from gpuetl.errors import OutputError

PLURAL_OF_ONE = re.compile(r"(?<![\d,.])1 (rows|files|input files|partitions|records|shards|kinds|bad records|"
                           r"more kinds|steps|columns|output columns)\b")


def pipeline(tmp_path: Path, text: str, files: dict[str, str]) -> Path:
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(data)
    file = tmp_path / "p.yaml"
    file.write_text(textwrap.dedent(text))
    return file


ONE_ROW = """\
    version: 1
    name: one
    source: {type: jsonl, path: in/a.jsonl}
    steps:
      - filter: "n > 0"
    sink: {path: out}
    """


def test_counts_of_one_are_singular_everywhere_printed(tmp_path, capsys):
    file = pipeline(tmp_path, ONE_ROW, {"in/a.jsonl": '{"n": 1, "s": "a"}\n{"n": 0, "s": "b"}\n{"n": 1\n'})
    said = []
    for argv in (["validate", file], ["plan", file], ["preview", file],
                 ["run", file, "--backend", "cpu", "--scheduler", "sync", "--set", "max_error_ratio=1"],
                 ["inspect", tmp_path / "out"], ["report", tmp_path / "out"]):
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        said.append(captured.out + captured.err)
    text = "\n".join(said)
    assert "1 input file" in text and "1 partition" in text and "1 row" in text and "1 record" in text
    assert not PLURAL_OF_ONE.search(text), PLURAL_OF_ONE.search(text).group()
    html = (tmp_path / "out" / "_report.html").read_text()
    assert "1 input file," in html and "1 partition;" in html


def test_the_python_api_names_the_setting_and_the_command_adds_its_flag(tmp_path, capsys):
    file = pipeline(tmp_path, ONE_ROW, {"in/a.jsonl": '{"n": 1}\n'})
    load(file).run(backend="cpu", scheduler="sync")
    with pytest.raises(OutputError) as err:
        load(file).run(backend="cpu", scheduler="sync")
    assert "set sink.mode: overwrite" in str(err.value) and "--set" not in str(err.value)
    load(file, overrides=["sink.mode=overwrite"]).run(backend="cpu", scheduler="sync")   # the hint works
    assert main(["run", str(file), "--backend", "cpu", "--scheduler", "sync"]) == 2
    assert "set sink.mode: overwrite (--set sink.mode=overwrite)" in capsys.readouterr().err


SPLITS = """\
    version: 1
    name: splits
    source: {type: jsonl, path: in/a.jsonl}
    shard: {splits: {train: 0.9, val: 0.1}}
    sink: {path: out}
    """


@pytest.mark.parametrize("key", [None, "k"])
def test_a_small_runs_split_warning_blames_shard_key_only_where_it_was_set(tmp_path, capsys, key):
    text = SPLITS.replace("splits: {", f"key: [{key}], splits: {{") if key else SPLITS
    file = pipeline(tmp_path, text, {"in/a.jsonl": "".join(json.dumps({"k": i % 2, "v": i}) + "\n" for i in range(4))})
    assert main(["run", str(file), "--backend", "cpu", "--scheduler", "sync"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "split 'val' holds" in line]
    assert warnings, "4 rows cannot give a 10% split: a warning is due"
    if key:
        assert "shard.key ['k'] has few distinct values" in warnings[0]
    else:
        assert "shard.key" not in warnings[0] and "4 rows are too few for the shares to even out" in warnings[0]


def test_preview_fits_the_terminal_width(tmp_path, capsys, monkeypatch):
    record = {f"column_{i}": f"value {i} " * 3 for i in range(12)}
    file = pipeline(tmp_path, ONE_ROW.replace('  - filter: "n > 0"', "  []").replace("steps:\n", "steps:"),
                    {"in/a.jsonl": json.dumps(record) + "\n"})
    monkeypatch.setenv("COLUMNS", "60")
    assert main(["preview", str(file)]) == 0
    table = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert table and max(map(len, table)) <= 60
    assert sum("column_11" in line for line in table) == 1          # every column is shown, below the others
