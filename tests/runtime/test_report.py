"""The run report (runtime/report.py): _report.json and a self-contained _report.html next to
the dataset, listed in the manifest with their sha256; a failed run's under _tmp/; hostile reasons
stay small and escaped; a user's own _report.html is never overwritten."""

from __future__ import annotations

import hashlib
import json
import re

import pyarrow.parquet as pq
import pytest

from gpuetl import Pipeline
from gpuetl.cli import main
from gpuetl.errors import DataError, OutputError
from gpuetl.runtime.report import KINDS, grouped_reasons, render_html
from hostile.conftest import Surroundings
from watched_logs import BAD_EVERY, LINES, watched_spec, write_watched_logs


def spec(mode="error", **extra) -> dict:
    return watched_spec("rep", mode, **extra)


@pytest.fixture
def logs(tmp_path):
    return write_watched_logs(tmp_path)


def run(base, **kw):
    return Pipeline.from_dict(spec(**kw), base_dir=base).run(backend="cpu", scheduler="sync")


def no_remote_scripts(page: str) -> None:
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.I), "a script loaded from elsewhere"
    assert not re.search(r"""<link[^>]*href\s*=\s*["']?https?:""", page, re.I)


def test_report_files_are_written_listed_in_the_manifest_and_verified(logs):
    result = run(logs)
    out = result.out_dir
    entries = {e["path"]: e for e in json.loads((out / "_manifest.json").read_text())["reports"]}
    assert set(entries) == {"_report.json", "_report.html"}
    for name, entry in entries.items():
        data = (out / name).read_bytes()
        assert entry["bytes"] == len(data) and entry["sha256"] == hashlib.sha256(data).hexdigest()
    assert main(["verify", str(out)]) == 0
    assert result.report == out / "_report.html"

    report = json.loads((out / "_report.json").read_text())
    assert report["status"] == "succeeded" and report["counts"] == result.counts
    assert [s["name"] for s in report["plan"]["stages"]] == ["read-parse", "filter", "dedupe"]
    assert {p["stage"] for p in report["progress"]} == {"read/parse", "dedupe", "write shards"}
    assert report["throughput"] and report["workers"]
    for split in report["workers"].values():
        assert set(split) == {"read", "compute", "write", "idle"} and split["read"] > 0
    assert report["bad_records"]["kinds"][0]["count"] == result.counts["quarantined"]
    assert report["backend"] == "cpu" and report["io"] and report["versions"]["pyarrow"]

    # the profile matches the data
    table = pq.read_table([out / s["path"] for s in result.shards][0]).to_pandas()
    for s in result.shards[1:]:
        import pandas as pd

        table = pd.concat([table, pq.read_table(out / s["path"]).to_pandas()])
    columns = {c["column"]: c for c in report["columns"]}
    assert columns["status"]["min"] == table["status"].min() and columns["status"]["max"] == table["status"].max()
    assert columns["user"]["nulls"] == int(table["user"].isna().sum())
    assert columns["status"]["rows"] == result.counts["rows_out"]

    page = (out / "_report.html").read_text()
    no_remote_scripts(page)
    assert "Bokeh" in page and "read/parse" in page and "dedupe" in page and "line does not match" in page


def test_report_as_text_and_opened_in_a_browser(logs, capsys, monkeypatch):
    out = run(logs).out_dir
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "succeeded" in text and "rows in 600" in text and "dedupe" in text and "column status" in text
    assert f"  bad records by kind ({LINES // BAD_EVERY} rows):\n" in text       # the kinds' lines have a heading
    opened = []
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url) or True)
    assert main(["report", str(out), "--open"]) == 0
    assert opened == [(out / "_report.html").resolve().as_uri()]
    capsys.readouterr()
    assert main(["report", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run_id"]


def test_report_of_a_folder_without_one_is_a_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 1
    assert "no _report.json" in capsys.readouterr().err


def test_report_of_a_dataset_in_a_store_says_what_the_store_answered(s3, capsys, monkeypatch):
    """report read the store with a bare cat_file: no credentials (or an endpoint that refuses)
    was an "internal error … a bug in gpuetl"; it is the message inspect and verify give."""
    assert main(["report", s3.url("out")]) == 1
    assert "no _report.json" in capsys.readouterr().err
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert main(["report", s3.url("out")]) == 1
    err = capsys.readouterr().err
    assert "no usable credentials" in err and "AWS_ACCESS_KEY_ID" in err and "internal error" not in err


@pytest.mark.slow
def test_overwrite_replaces_the_report(logs):
    first = json.loads((run(logs).out_dir / "_report.json").read_text())["run_id"]
    out = run(logs, mode="overwrite").out_dir
    assert json.loads((out / "_report.json").read_text())["run_id"] != first
    assert main(["verify", str(out)]) == 0


def test_a_users_own_report_file_in_the_sink_is_refused_never_overwritten(logs):
    out = logs / "out"
    out.mkdir()
    mine = out / "_report.html"
    mine.write_text("<p>my notes</p>")
    with Surroundings()(logs, dataset=None):
        with pytest.raises(OutputError, match="_report.html"):
            run(logs, mode="overwrite")
    assert mine.read_text() == "<p>my notes</p>"


@pytest.mark.slow
def test_a_failed_run_writes_its_report_under_tmp_and_says_where(logs):
    said = []
    pipeline = Pipeline.from_dict(spec(max_error_ratio=0.001), base_dir=logs)
    with pytest.raises(DataError):
        pipeline.run(backend="cpu", scheduler="sync", log=said.append)
    [line] = [s for s in said if s.startswith("report of the failed run: ")]
    page = logs / line.split(": ", 1)[1]
    assert page.parent.parent == logs / "out" / "_tmp" and page.exists()
    report = json.loads(page.with_name("_report.json").read_text())
    assert report["status"] == "failed" and "max_error_ratio" in report["error"]
    assert report["bad_records"]["rows"] == LINES // BAD_EVERY
    assert main(["report", str(page.parent)]) == 0
    assert not (logs / "out" / "_report.html").exists()
    # the next run removes it with the other leftovers of earlier runs
    run(logs, mode="overwrite")
    assert not page.parent.exists()


def test_ten_thousand_distinct_reasons_keep_the_report_small():
    tallies = {f"value {i}{'x' * (i % 7)} in field_{i} is not valid": 1 for i in range(10_000)}
    grouped = grouped_reasons(tallies)
    assert len(grouped["kinds"]) == KINDS
    assert grouped["more"]["kinds"] > 0 and grouped["rows"] == 10_000
    assert sum(k["count"] for k in grouped["kinds"]) + grouped["more"]["rows"] == 10_000
    assert len(json.dumps(grouped)) < 20_000


def _report(reasons: dict) -> dict:
    return {"pipeline": "<b>p</b>", "run_id": "r", "status": "succeeded", "seconds": 1.0, "backend": "cpu",
            "io": "posix", "created_at": "now", "error": None,
            "plan": {"stages": [{"stage": 0, "name": "read-parse", "detail": ""}], "input_files": 1,
                     "input_bytes": 10, "partitions": 1, "sink": "/tmp/x"},
            "counts": {"rows_in": 1, "rows_out": 0, "filtered": 0, "deduplicated": 0, "quarantined": 1},
            "stages": [], "progress": [], "throughput": [[0.0, 0, 0], [1.0, 1, 10]], "workers": {},
            "bad_records": grouped_reasons(reasons), "columns": [], "versions": {"gpuetl": "0"}}


def test_reasons_with_markup_are_escaped_in_the_page():
    page = render_html(_report({"bad value '<script>alert(1)</script>'": 3, "x</td><img src=x onerror=alert(2)>": 1}))
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;b&gt;p&lt;/b&gt;" in page
    no_remote_scripts(page)


def test_the_page_of_many_reasons_stays_small():
    small = len(render_html(_report({"one reason": 1})))
    many = len(render_html(_report({f"value {i}{'x' * (i % 7)} in field_{i} is not valid" * 5: 1
                                    for i in range(10_000)})))
    assert many - small < 30_000


@pytest.mark.parametrize("entry", [{"path": "../victim.html", "bytes": 1, "sha256": "0" * 64}, "not an entry"])
def test_a_manifest_report_entry_outside_the_dataset_is_not_trusted(logs, capsys, entry):
    out = run(logs).out_dir
    victim = logs / "victim.html"
    victim.write_text("mine")
    manifest = json.loads((out / "_manifest.json").read_text())
    manifest["reports"] = [entry]
    (out / "_manifest.json").write_text(json.dumps(manifest))
    assert main(["verify", str(out)]) == 1
    assert "report" in capsys.readouterr().out
    with pytest.raises(OutputError):
        run(logs, mode="overwrite")
    assert victim.read_text() == "mine"


def test_the_pages_bokehjs_is_what_bokeh_itself_inlines_without_importing_bokeh(monkeypatch):
    """bokeh_scripts reads BokehJS from bokeh's files: the same text bokeh.resources renders in
    mode "inline" (its defaults: minified, log level info), and no bokeh module is imported for
    it (importing bokeh.resources costs ~0.2 CPU-s a run)."""
    import subprocess
    import sys

    for name in ("BOKEH_LOG_LEVEL", "BOKEH_MINIFIED", "BOKEH_DEV", "BOKEH_RESOURCES"):
        monkeypatch.delenv(name, raising=False)
    code = ("import sys; from gpuetl.runtime.report import bokeh_scripts; page = bokeh_scripts(); "
            "print(len(page), sorted(m for m in sys.modules if m.split('.')[0] in ('bokeh', 'jinja2')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split(" ", 1)
    assert out[1].strip() == "[]"
    from bokeh.resources import Resources

    from gpuetl.runtime.report import bokeh_scripts

    expected = Resources(mode="inline", components=["bokeh", "bokeh-api"]).render_js()
    assert bokeh_scripts() == expected and int(out[0]) == len(expected)
