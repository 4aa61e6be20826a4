"""The command line: gpuetl run | validate | plan | inspect | verify | schema, and its exit codes."""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuetl import samples
from gpuetl.cli import build_parser, main

LINES = 2000
BAD_EVERY = 100          # 20 bad lines: 1% of the input

PIPELINE = """\
version: 1
name: web-access
source:
  type: text
  path: data/*.log
  blocksize: 128KiB
parse:
  preset: apache_combined
columns:
  status: int16
  time: {{type: timestamp, format: "%d/%b/%Y:%H:%M:%S %z"}}
steps:
  - filter: "status >= 200 and status < 500"
  - dedupe: {{on: [ip, time, request]}}
{extra}shard:
  count: 2
sink:
  path: out/web
"""

GPUETL = [sys.executable, "-m", "gpuetl"]


def pipeline_file(folder: Path, extra: str = "", name: str = "pipe.yaml") -> Path:
    path = folder / name
    path.write_text(PIPELINE.format(extra=extra))
    return path


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cli")
    samples.write_access_logs(folder / "data" / "access.log", lines=LINES, bad_every=BAD_EVERY)
    return folder


@pytest.fixture(scope="module")
def dataset(workdir) -> tuple[Path, str]:
    """One committed dataset, shared (read-only) by the tests that inspect it; plus the run's stdout."""
    import contextlib
    import io

    path = pipeline_file(workdir)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", str(path), "--scheduler", "sync"]) == 0
    return workdir / "out" / "web", out.getvalue()


def copy_of(dataset_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(dataset_dir, target)
    return target


def no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text, text


# --------------------------------------------------------------------------- validate


def test_validate_good_file(workdir, capsys):
    path = pipeline_file(workdir, name="good.yaml")
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "'web-access'" in out and "2 steps" in out
    assert "1 input file," in out and "1 input files" not in out       # counts read as English


def test_validate_bad_file_exit_2_with_located_errors(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(PIPELINE.format(extra="").replace("  path: out/web", "  path: out/web\n  compresion: zstd")
                    .replace("- dedupe", "- dedup"))
    assert main(["validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    assert err.startswith("gpuetl validate: error:")
    assert "2 problems" in err
    assert re.search(r"bad\.yaml:14: steps\[1\]: unknown step 'dedup'; did you mean 'dedupe'", err), err
    assert re.search(r"bad\.yaml:19: sink\.compresion: unknown key; did you mean 'compression'", err), err
    no_traceback(err)


def test_validate_bad_file_subprocess_has_no_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("version: 1\nname: x\nsource: {type: text, path: a.log}\nsink: {path: o, mode: eror}\n")
    proc = subprocess.run([*GPUETL, "validate", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "bad.yaml:4: sink.mode: 'eror' is not one of error, overwrite, resume, append; did you mean 'error'?" in proc.stderr
    no_traceback(proc.stdout, proc.stderr)


def test_validate_missing_file(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert "no such pipeline file" in capsys.readouterr().err


# --------------------------------------------------------------------------- plan


def test_plan_prints_stages_schemas_partitions_tasks(workdir, capsys):
    path = pipeline_file(workdir, name="plan.yaml")
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    size = (workdir / "data" / "access.log").stat().st_size
    blocks = -(-size // (128 * 1024))
    last = size - (blocks - 1) * 128 * 1024            # the last two blocks halved (ranges.taper)
    partitions = blocks + (blocks >= 4) * (1 + (last > 64 * 1024))
    assert "pipeline web-access: 1 input file," in out
    assert f"partitions: {partitions} (blocksize 128.0 KiB)" in out
    assert re.search(r"stage 0: read-parse", out) and "stage 1: filter" in out and "stage 2: dedupe" in out
    assert "    status: int16" in out and "    time: timestamp" in out
    assert "output schema: ip: string" in out
    assert re.search(r"shards: 2\b", out)
    tasks = int(re.search(r"^tasks: about (\d+)", out, re.M).group(1))
    assert tasks > partitions * 6                # read, hash, candidates, mark, steps, spill (+ 2 global)
    assert "global steps decided without moving rows: dedupe (all at once)" in out
    assert main(["plan", str(path), "--set", "shard.count=1"]) == 0      # one shard: streamed
    assert "global steps decided without moving rows: dedupe (in input order, partition by partition)" \
        in capsys.readouterr().out
    assert main(["plan", str(path), "--set", "steps=[]"]) == 0
    plain = capsys.readouterr().out
    assert f"tasks: about {2 * partitions + 2} " in plain             # read and spill each, 2 shards
    assert not (workdir / "out" / "plan").exists()


def test_plan_with_set_and_unknown_column(workdir, capsys):
    path = pipeline_file(workdir, name="plan2.yaml")
    assert main(["plan", str(path), "--set", 'steps=[{filter: "nosuch > 1"}]']) == 2
    err = capsys.readouterr().err
    assert "steps[0].filter" in err and "unknown column 'nosuch'" in err
    no_traceback(err)


# --------------------------------------------------------------------------- run


def test_run_prints_dataset_and_counts_identity(dataset):
    out_dir, stdout = dataset
    assert f"dataset: {out_dir.resolve()}" in stdout
    match = re.search(r"rows in ([\d,]+) = out ([\d,]+) \+ filtered ([\d,]+) \+ deduplicated ([\d,]+) "
                      r"\+ quarantined ([\d,]+)", stdout)
    assert match, stdout
    rows_in, rows_out, filtered, dedup, bad = (int(g.replace(",", "")) for g in match.groups())
    assert rows_in == LINES == rows_out + filtered + dedup + bad
    assert bad == LINES // BAD_EVERY
    assert filtered > 0 and dedup > 0
    assert (out_dir / "_SUCCESS").exists()


def test_run_json(workdir, tmp_path, capsys):
    path = pipeline_file(workdir, name="json.yaml")
    assert main(["run", str(path), "--scheduler", "sync", "--json", "--set", f"sink.path={tmp_path / 'o'}"]) == 0
    report = json.loads(capsys.readouterr().out)
    c = report["counts"]
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"] == LINES
    assert report["out"] == str(tmp_path / "o")
    assert len(report["shards"]) == 2 and sum(s["rows"] for s in report["shards"]) == c["rows_out"]


def test_run_over_max_error_ratio_exit_1(workdir, tmp_path, capsys):
    path = pipeline_file(workdir, extra="max_error_ratio: 0.005\n", name="strict.yaml")
    out = tmp_path / "strict"
    assert main(["run", str(path), "--scheduler", "sync", "--set", f"sink.path={out}"]) == 1
    err = capsys.readouterr().err
    assert "20 of 2000 records are bad" in err and "max_error_ratio 0.005" in err
    assert "line does not match preset apache_combined" in err
    no_traceback(err)
    [report] = (out / "_tmp").iterdir()             # the failed run's report, and nothing else
    assert f"report of the failed run: {report / '_report.html'}" in err
    assert [p.name for p in out.iterdir()] == ["_tmp"]


def test_run_under_max_error_ratio_ok(workdir, tmp_path):
    path = pipeline_file(workdir, extra="max_error_ratio: 0.02\n", name="lenient.yaml")
    assert main(["run", str(path), "--scheduler", "sync", "--set", f"sink.path={tmp_path / 'o'}"]) == 0


def test_run_on_error_fail_exit_1(workdir, tmp_path, capsys):
    path = pipeline_file(workdir, extra="on_error: fail\n", name="fail.yaml")
    assert main(["run", str(path), "--scheduler", "sync", "--set", f"sink.path={tmp_path / 'o'}"]) == 1
    err = capsys.readouterr().err
    no_traceback(err)
    assert not (tmp_path / "o" / "_SUCCESS").exists()


def test_run_no_matching_input_exit_2(workdir, tmp_path, capsys):
    path = pipeline_file(workdir, name="noinput.yaml")
    assert main(["run", str(path), "--scheduler", "sync", "--set", "source.path=nothing/*.log",
                 "--set", f"sink.path={tmp_path / 'o'}"]) == 2
    assert "matches no file" in capsys.readouterr().err


def test_run_set_without_equals_exit_2(workdir, capsys):
    path = pipeline_file(workdir, name="noeq.yaml")
    assert main(["run", str(path), "--scheduler", "sync", "--set", "sink.path"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_run_with_local_cluster_and_no_terminal_serves_no_dashboard(workdir, tmp_path, capsys):
    """The local dask cluster (named: a small input gets none by default); with no one at a
    terminal to open a dashboard, none is served (its pages cost an import of bokeh before the
    first task)."""
    path = pipeline_file(workdir, name="cluster.yaml")
    out = tmp_path / "cluster"
    code = main(["run", str(path), "--backend", "cpu", "--scheduler", "local", "--set", f"sink.path={out}"])
    said = capsys.readouterr()
    assert code == 0, said.err
    assert "dashboard" not in said.err
    assert f"dataset: {out}" in said.out
    assert (out / "_SUCCESS").exists()
    no_traceback(said.err)


def test_run_in_a_terminal_prints_the_dashboard_link(workdir, tmp_path, monkeypatch):
    """At a terminal `gpuetl run` serves the local cluster's dashboard and says where (on a free
    port here; the command uses dask's usual 8787, or a free one when that is taken)."""
    import io

    from gpuetl.runtime import executor

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(executor, "DASHBOARD_ADDRESS", ":0")
    monkeypatch.setattr(sys, "stderr", Terminal())
    path = pipeline_file(workdir, name="watched.yaml")
    assert main(["run", str(path), "--backend", "cpu", "--scheduler", "local",
                 "--set", f"sink.path={tmp_path / 'o'}"]) == 0
    link = re.search(r"^dashboard: (http://\S+)$", sys.stderr.getvalue(), re.M)
    assert link and not link[1].endswith(":8787/status"), sys.stderr.getvalue()
    assert (tmp_path / "o" / "_SUCCESS").exists()


# --------------------------------------------------------------------------- inspect and verify


def test_inspect(dataset, capsys):
    out_dir, _ = dataset
    assert main(["inspect", str(out_dir)]) == 0
    text = capsys.readouterr().out
    assert "pipeline web-access, complete, backend cpu, seed 0" in text
    assert "(no split): 2 shards" in text
    assert "status: int16" in text and "time: timestamp" in text


def test_inspect_json(dataset, capsys):
    out_dir, _ = dataset
    assert main(["inspect", str(out_dir), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["complete"] is True
    manifest = info["manifest"]
    assert manifest["format"] == "gpuetl-manifest/1" and manifest["name"] == "web-access"
    assert len(manifest["pipeline_sha256"]) == 64
    assert {"gpuetl", "pandas", "pyarrow", "dask"} <= set(manifest["versions"])
    assert manifest["inputs"][0]["bytes"] > 0
    assert [s["path"] for s in manifest["shards"]] == ["part-00000.parquet", "part-00001.parquet"]
    assert all(s["split"] in (None, "") for s in manifest["shards"])
    assert manifest["quarantine"] and manifest["quarantine"][0]["path"].startswith("_quarantine/")
    assert len(info["sample"]) == 3


@pytest.mark.parametrize("edit, said", [
    (lambda m: m.pop("counts"), "counts must hold the integers"),
    (lambda m: m.update(counts=None), "counts must hold the integers"),
    (lambda m: m.update(schema=12), "schema must be a list of fields"),
], ids=["no counts", "counts null", "schema 12"])
def test_inspect_of_a_malformed_manifest_names_what_is_wrong(dataset, tmp_path, capsys, edit, said):
    """inspect read counts and schema as it found them: a manifest without counts, with counts:
    null or schema: 12 was an "internal error"; it is exit 1 naming the field, as verify's is."""
    copy = copy_of(dataset[0], tmp_path)
    manifest = json.loads((copy / "_manifest.json").read_bytes())
    edit(manifest)
    (copy / "_manifest.json").write_text(json.dumps(manifest))
    assert main(["inspect", str(copy)]) == 1
    err = capsys.readouterr().err
    assert said in err and "internal error" not in err


def test_inspect_says_a_manifest_success_does_not_vouch_for_is_not_complete(dataset, tmp_path, capsys):
    """inspect called a dataset complete when _SUCCESS was there, whatever sha256 it held; an edited
    manifest is not vouched for (verify says the same)."""
    copy = copy_of(dataset[0], tmp_path)
    raw = (copy / "_manifest.json").read_bytes()
    (copy / "_manifest.json").write_bytes(raw.replace(b'"rows_out": ', b'"rows_out":  ', 1))
    assert main(["inspect", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "pipeline web-access, NOT VOUCHED FOR, backend cpu" in out
    assert "_SUCCESS does not hold the manifest's sha256" in out
    assert main(["inspect", str(copy), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["complete"] is False


def test_verify_ok(dataset, capsys):
    out_dir, _ = dataset
    assert main(["verify", str(out_dir)]) == 0
    assert "ok, 5 files match the manifest" in capsys.readouterr().out


def test_verify_flipped_byte(dataset, tmp_path, capsys):
    copy = copy_of(dataset[0], tmp_path)
    shard = copy / "part-00001.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    assert main(["verify", str(copy)]) == 1
    captured = capsys.readouterr()
    assert re.search(r"^BAD part-00001\.parquet: sha256 ", captured.out, re.M), captured.out
    assert "part-00000" not in captured.out
    assert "1 problem" in captured.err


def test_verify_deleted_shard(dataset, tmp_path, capsys):
    copy = copy_of(dataset[0], tmp_path)
    (copy / "part-00000.parquet").unlink()
    assert main(["verify", str(copy)]) == 1
    assert "BAD part-00000.parquet: missing" in capsys.readouterr().out


def test_verify_truncated_and_stray_files(dataset, tmp_path, capsys):
    copy = copy_of(dataset[0], tmp_path)
    shard = copy / "part-00000.parquet"
    shard.write_bytes(shard.read_bytes()[:-10])
    shutil.copy(copy / "part-00001.parquet", copy / "part-00002.parquet")
    assert main(["verify", str(copy)]) == 1
    out = capsys.readouterr().out
    assert "BAD part-00000.parquet: size" in out
    assert "BAD part-00002.parquet: not in the manifest" in out


def test_verify_missing_success(dataset, tmp_path, capsys):
    copy = copy_of(dataset[0], tmp_path)
    (copy / "_SUCCESS").unlink()
    assert main(["verify", str(copy)]) == 1
    assert "BAD _SUCCESS: missing" in capsys.readouterr().out


def test_verify_and_inspect_on_non_dataset(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "nope")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["inspect", str(tmp_path / "empty")]) == 1
    err = capsys.readouterr().err
    assert "no such dataset folder" in err and "no _manifest.json" in err
    no_traceback(err)
    (tmp_path / "a.yaml").write_text("version: 1\n")
    for command in ("verify", "inspect", "report"):           # a wrong name on the command line: 2
        assert main([command, str(tmp_path / "nope")]) == 2
        assert "no such dataset folder" in capsys.readouterr().err
        assert main([command, str(tmp_path / "a.yaml")]) == 2
        assert "a.yaml: a file, not a dataset folder" in capsys.readouterr().err


# --------------------------------------------------------------------------- the parser


@pytest.mark.parametrize("argv", [["frobnicate"], [], ["run"], ["run", "x.yaml", "--backend", "tpu"]])
def test_bad_command_line_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: gpuetl" in err and "gpuetl: error:" in err


def test_every_argument_of_every_command_says_what_it_is():
    """`gpuetl CMD --help` explains each argument: no bare `file`, `out` or `--set KEY=VALUE`."""
    import argparse

    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in commands.choices.items():
        for action in sub._actions:
            assert action.help, f"gpuetl {name}: {action.dest} has no help text"


def test_python_m_version():
    proc = subprocess.run([*GPUETL, "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    import gpuetl

    assert proc.stdout.strip() == f"gpuetl {gpuetl.__version__}"


def test_console_script_is_installed():
    script = Path(sys.executable).with_name("gpuetl")
    if not script.exists():
        pytest.skip("no gpuetl console script next to this python")
    proc = subprocess.run([str(script), "schema"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0 and json.loads(proc.stdout)["title"].startswith("gpuetl pipeline file")


def test_validate_checks_steps_against_the_data_when_it_is_there(tmp_path, capsys):
    from gpuetl.cli import build_parser, main

    (tmp_path / "a.log").write_text("1 x\n")
    (tmp_path / "p.yaml").write_text(
        "version: 1\nname: v\nsource: {type: text, path: a.log}\n"
        "parse: {regex: '^(?P<n>\\\\d+) (?P<w>\\\\w+)$'}\nsteps: [{rename: {n: w}}]\nsink: {path: out}\n")
    assert main(["validate", str(tmp_path / "p.yaml")]) == 2
    assert "steps[0].rename" in capsys.readouterr().err
    assert main(["validate", str(tmp_path / "p.yaml"), "--set", "steps=[]"]) == 0
    assert "2 output columns" in capsys.readouterr().out
    assert main(["validate", str(tmp_path / "p.yaml"), "--set", "source.path=missing/*.log"]) == 2
    assert "source.path: the pattern 'missing/*.log' matches no file" in capsys.readouterr().err


def test_validate_says_valid_only_where_run_would_start(tmp_path, capsys):
    """An input glob that matches nothing fails validate as it fails run (exit 2); --offline checks
    the file alone: no input is listed, so neither the missing input nor the step is looked at."""
    from gpuetl.cli import main

    (tmp_path / "p.yaml").write_text(
        "version: 1\nname: v\nsource: {type: text, path: logs/*.log}\n"
        "parse: {regex: '^(?P<n>\\\\d+) (?P<w>\\\\w+)$'}\nsteps: [{rename: {n: w}}]\nsink: {path: out}\n")
    for command in ("validate", "run"):
        assert main([command, str(tmp_path / "p.yaml")]) == 2
        assert "matches no file" in capsys.readouterr().err
    assert main(["validate", "--offline", str(tmp_path / "p.yaml")]) == 0
    assert "inputs, columns and steps not checked (--offline)" in capsys.readouterr().out
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_text("1 x\n")
    assert main(["validate", str(tmp_path / "p.yaml")]) == 2          # there now: the step is checked
    assert "steps[0].rename" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", "p.yaml"]


@pytest.mark.parametrize("env, shards, expected", [(None, 1, "system"), ("mimalloc", 1, "mimalloc"),
                                                    (None, 2, "mimalloc")])
def test_streamed_runs_give_arrow_the_system_allocator_unless_told(workdir, tmp_path, monkeypatch, env, shards,
                                                                     expected):
    import pyarrow as pa

    before = pa.default_memory_pool()
    monkeypatch.delenv("GPUETL_NO_TUNING", raising=False)      # the command's tunings on (gpuetl/cli/tuning.py)
    if env is None:
        monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    else:
        monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", env)
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    try:
        path = pipeline_file(workdir)
        assert main(["run", str(path), "--scheduler", "sync", "--set", f"sink.path={tmp_path / 'o'}",
                     "--set", f"shard.count={shards}"]) == 0
        assert pa.default_memory_pool().backend_name == expected      # two shards: hash ranges, not streamed
    finally:
        pa.set_memory_pool(before)
        gc.unfreeze()                    # the command's tunings froze the test process's heap


# --------------------------------------------------------------------------- the summary's reasons


def test_run_summary_groups_reasons_by_kind_with_an_example_and_the_rest(tmp_path, capsys):
    """Six kinds of bad record, one of them with 30 distinct values: the summary shows five
    kinds (the 30 as one line, with an example) and says how many kinds and rows it left out."""
    lines = [f'{{"n": "{i}", "b": true, "s": "x"}}' for i in range(30)]
    lines += ['{"n": 1, "b": 1, "s": "x"}', "not json", "[1]",
              '{"n": 1.5, "b": true, "s": "x"}', '{"n": 1, "b": "y", "s": "x"}', '{"n": 1, "b": true, "s": "ok"}']
    (tmp_path / "e.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "p.yaml").write_text("version: 1\nname: k\nsource: {type: jsonl, path: e.jsonl}\n"
                                     "columns: {n: int64, b: bool, s: string}\nstrict: true\nsink: {path: out}\n")
    assert main(["run", str(tmp_path / "p.yaml"), "--scheduler", "sync", "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "      30 × field 'n': expected int64, got <value>  (e.g. field 'n': expected int64, got \"0\")" in out
    assert "got \"17\"" not in out
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    kinds = manifest["bad_record_kinds"]
    assert manifest["counts"]["quarantined"] == sum(k["count"] for k in kinds.values()) == 35
    shown = [line for line in out.splitlines() if " × " in line and not line.startswith("  warning: ")]
    assert len(shown) == 5
    assert "  warning: 35 of 36 records (97.2%) are bad; most common: 30 × field 'n': expected int64" in out
    more = len(kinds) - 5
    left = sum(k["count"] for k in list(kinds.values())[5:])
    assert more > 0 and f"and {more} more kind{'s' if more > 1 else ''} ({left} row{'s' if left > 1 else ''})" in out


CTRL_C_AT_IMPORT = """
import sys

class CtrlC:
    '''Ctrl-C pressed while {module} is being imported.'''
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, CtrlC())
from gpuetl.cli import main          # what the console script does
sys.exit(main({argv!r}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("module", ["pandas", "pyarrow", "yaml"])
def test_ctrl_c_during_start_up_is_one_line_and_exit_130(tmp_path, module):
    """The libraries' imports take most of the command's start-up; an interrupt there ends it as
    one after start-up does: one line, no traceback, exit 130."""
    (tmp_path / "p.yaml").write_text("version: 1\nname: v\nsource: {type: text, path: a.log}\nsink: {path: out}\n")
    code = CTRL_C_AT_IMPORT.format(module=module, argv=["validate", str(tmp_path / "p.yaml")])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert (proc.returncode, proc.stderr) == (130, "gpuetl: interrupted; nothing was committed\n")
    assert proc.stdout == ""


def test_ctrl_c_inside_a_finalizer_still_stops_the_command():
    """Python drops an exception raised in a __del__ (a distributed Future's, during a
    collection): the command's Ctrl-C must not be lost there, or the run goes on and commits."""
    import signal
    import threading
    import time

    from gpuetl import cli

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can be set in the main thread only")
    # Python's own Ctrl-C handler, which the command takes over: a suite started where Ctrl-C is
    # ignored (nohup, a shell's background job) inherits SIG_IGN, and the command leaves that alone
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)

    class SignalledWhileFinalized:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)

    hook = sys.unraisablehook
    try:
        with pytest.raises(KeyboardInterrupt):
            with cli._quiet_interrupt():
                SignalledWhileFinalized()       # gone at once: the interrupt lands in its __del__
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    time.sleep(0.01)
        assert sys.unraisablehook is hook and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        logging.disable(logging.NOTSET)         # the handler turned logging off
        signal.signal(signal.SIGINT, inherited)
