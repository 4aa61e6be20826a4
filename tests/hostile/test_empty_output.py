"""Runs that keep nothing (#28.3): a preset that matches none of 2,000 lines must not commit
an empty dataset with exit 0. Such a run fails (exit 1) naming the most common kinds of bad
record, whatever max_error_ratio says, unless `allow_empty_output: true`; a run emptied by
`filter` alone commits; a run with more than a tenth of its records bad warns, in the summary
and the report (`--quiet` silences the terminal only)."""

from __future__ import annotations

import json

import pytest
import yaml

import gpuetl
from gpuetl.cli import main
from gpuetl.errors import DataError

from .test_sources import assert_identity

LINES = "".join(f"event {i} happened\n" for i in range(2000))
GOOD = '1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 2 "-" "x"\n'


def pipeline(tmp_path, **over) -> dict:
    (tmp_path / "a.log").write_text(LINES)
    return {"version": 1, "name": "t", "source": {"type": "text", "path": "a.log"},
            "parse": {"preset": "apache_combined"}, "sink": {"path": "out"}, **over}


def written(tmp_path, s) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(s))
    return str(path)


@pytest.mark.parametrize("ratio", [None, 1.0])
def test_a_preset_matching_no_line_fails_and_commits_nothing(tmp_path, surroundings, capsys, ratio):
    path = written(tmp_path, pipeline(tmp_path, **({} if ratio is None else {"max_error_ratio": ratio})))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        assert main(["run", path, "--backend", "cpu", "--scheduler", "sync"]) == 1
    err = capsys.readouterr().err
    assert "no record was kept: all 2,000 records are bad; nothing was committed" in err
    assert "most common: 2,000 × line does not match preset apache_combined" in err
    assert "allow_empty_output: true" in err
    out = tmp_path / "out"
    assert not (out / "_SUCCESS").exists() and not (out / "_manifest.json").exists()
    assert not list(out.glob("*.parquet")) and not (out / "_quarantine").exists()


def test_allow_empty_output_commits_the_empty_dataset_and_warns(tmp_path, surroundings, capsys):
    path = written(tmp_path, pipeline(tmp_path, allow_empty_output=True))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        assert main(["run", path, "--backend", "cpu", "--scheduler", "sync"]) == 0
    out = capsys.readouterr().out
    warning = ("warning: 2,000 of 2,000 records (100.0%) are bad; most common: 2,000 × line does not match "
               "preset apache_combined")
    assert warning in out
    assert (tmp_path / "out" / "_SUCCESS").exists()
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["counts"]["rows_out"] == 0 and manifest["counts"]["quarantined"] == 2000
    report = json.loads((tmp_path / "out" / "_report.json").read_text())
    assert [w for w in report["warnings"] if "are bad" in w] == [warning.removeprefix("warning: ")]


def test_a_run_emptied_by_filter_alone_commits(tmp_path):
    (tmp_path / "a.log").write_text(LINES)
    s = {"version": 1, "name": "t", "source": {"type": "text", "path": "a.log"}, "steps": [{"filter": "len(line) < 0"}],
         "sink": {"path": "out"}}
    result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert_identity(result)
    assert result.counts["rows_out"] == 0 and result.counts["filtered"] == 2000
    assert (tmp_path / "out" / "_SUCCESS").exists() and not result.manifest["warnings"]


def test_bad_records_and_a_filter_emptying_the_rest_fail(tmp_path):
    s = pipeline(tmp_path, steps=[{"filter": "status > 500"}])
    (tmp_path / "a.log").write_text(GOOD + "junk\n" * 10)
    with pytest.raises(DataError, match=r"no record was kept: 10 records are bad and the other 1 were filtered"):
        gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert not (tmp_path / "out" / "_SUCCESS").exists()


@pytest.mark.parametrize("quiet", [False, True])
def test_more_than_a_tenth_bad_warns_in_the_summary_and_the_report(tmp_path, capsys, quiet):
    s = pipeline(tmp_path)
    (tmp_path / "a.log").write_text(GOOD * 80 + "junk\n" * 21)
    argv = ["run", written(tmp_path, s), "--backend", "cpu", "--scheduler", "sync"] + (["--quiet"] if quiet else [])
    assert main(argv) == 0
    printed = capsys.readouterr()
    warning = "21 of 101 records (20.8%) are bad; most common: 21 × line does not match preset apache_combined"
    assert (warning in printed.out) is not quiet and warning not in printed.err
    assert json.loads((tmp_path / "out" / "_report.json").read_text())["warnings"] == [warning]
    assert warning in json.loads((tmp_path / "out" / "_manifest.json").read_text())["notes"]


def test_a_tenth_bad_or_fewer_does_not_warn(tmp_path):
    s = pipeline(tmp_path)
    (tmp_path / "a.log").write_text(GOOD * 90 + "junk\n" * 10)
    result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts["quarantined"] == 10 and result.manifest["warnings"] == []


def test_the_json_summary_carries_the_warning(tmp_path, capsys):
    s = pipeline(tmp_path)
    (tmp_path / "a.log").write_text(GOOD * 80 + "junk\n" * 21)
    assert main(["run", written(tmp_path, s), "--backend", "cpu", "--scheduler", "sync", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["warnings"] == [
        "21 of 101 records (20.8%) are bad; most common: 21 × line does not match preset apache_combined"]
