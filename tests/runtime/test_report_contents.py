"""What the run report shows: the dataset's own column types, each kind of bad record by its
first record's bytes and place, and a number instead of a chart where a run gave too few points."""

from __future__ import annotations

import json
import re
import textwrap

from gpuetl.cli import main
from gpuetl.runtime.report import CHART_POINTS, render_html

PIPELINE = """\
    version: 1
    name: rep
    source: {type: jsonl, path: in/a.jsonl}
    columns: {s: string, n: int16, x: float64, t: {type: timestamp, format: "%Y-%m-%dT%H:%M:%S%z"},
              tags: "list<string>", geo: "struct<lat: float64>"}
    max_error_ratio: 1
    sink: {path: out}
    """
GOOD = ['{"s": "a", "n": 3, "x": 0.5, "t": "2024-01-01T00:00:00+0000", "tags": ["x"], "geo": {"lat": 1.5}}',
        '{"s": "b", "n": 4, "x": 1.5, "t": "2024-01-02T00:00:00+0000", "tags": [], "geo": {"lat": 2.5}}']
BAD = ["not json \x1b[2J and then some", "not json either"]


def run(tmp_path, on_error: str = "quarantine") -> dict:
    (tmp_path / "in").mkdir()
    text = "\n".join([GOOD[0], BAD[0], GOOD[1], BAD[1]]) + "\n"
    (tmp_path / "in" / "a.jsonl").write_text(text)
    (tmp_path / "p.yaml").write_text(textwrap.dedent(PIPELINE) + f"on_error: {on_error}\n")
    assert main(["run", str(tmp_path / "p.yaml"), "--backend", "cpu", "--scheduler", "sync", "-q"]) == 0
    return json.loads((tmp_path / "out" / "_report.json").read_text())


def test_column_types_are_the_datasets_types_not_parquets_storage_types(tmp_path, capsys):
    report = run(tmp_path)
    types = {c["column"]: c["type"] for c in report["columns"]}
    assert types == {"s": "string", "n": "int16", "x": "float64", "t": "timestamp[us, UTC]",
                     "tags.list.element": "string", "geo.lat": "float64"}
    capsys.readouterr()
    assert main(["report", str(tmp_path / "out")]) == 0
    assert "column n (int16):" in capsys.readouterr().out
    assert "<td>timestamp[us, UTC]</td>" in (tmp_path / "out" / "_report.html").read_text()


def test_each_kind_shows_its_first_bad_records_bytes_and_where_it_is(tmp_path, capsys):
    report = run(tmp_path)
    [kind] = report["bad_records"]["kinds"]
    offset = len(GOOD[0]) + 1
    assert kind["count"] == 2
    assert kind["first"] == {"where": f"in/a.jsonl:{offset}", "raw": "not json \\x1b[2J and then some"}
    capsys.readouterr()
    assert main(["report", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert f"first at in/a.jsonl:{offset}: not json \\x1b[2J and then some" in text and "\x1b" not in text
    page = (tmp_path / "out" / "_report.html").read_text()
    assert f"<td>in/a.jsonl:{offset}</td><td>not json \\x1b[2J and then some</td>" in page and "\x1b" not in page


def test_without_a_quarantine_the_kinds_keep_their_reasons(tmp_path):
    report = run(tmp_path, on_error="drop")
    [kind] = report["bad_records"]["kinds"]
    assert kind["count"] == 2 and "first" not in kind


def test_too_few_points_give_a_number_instead_of_a_chart(tmp_path):
    report = run(tmp_path)
    assert len(report["throughput"]) < CHART_POINTS            # one partition: one sample
    page = (tmp_path / "out" / "_report.html").read_text()
    data = json.loads(re.search(r'id="gpuetl-data">(.*?)</script>', page, re.S).group(1))
    assert data["seconds"] == [] and data["rates"] == []
    assert re.search(r"<p>input read: [\d.,]+ MB/s \([\d,]+ bytes in [\d.]+ s; 1 partition finished, too few "
                     r"points for a chart\)</p>", page)
    report["throughput"] = [[0.1 * k, 10 * k, 1000 * k] for k in range(1, 11)]   # ten partitions finished
    data = json.loads(re.search(r'id="gpuetl-data">(.*?)</script>', render_html(report), re.S).group(1))
    assert len(data["seconds"]) == len(data["rates"]) > 10
    assert "too few points" not in render_html(report)


def test_the_worker_chart_puts_its_legend_above_the_bars(tmp_path):
    page = (lambda r: render_html(r))(run(tmp_path))
    script = re.findall(r"<script>(.*?)</script>", page, re.S)[-1]
    legend = script.index('split.add_layout(new Bokeh.Legend({orientation: "horizontal", location: "top_left"}), '
                          '"above")')
    assert legend < script.index("legend_label: kind")           # there before the bars add their items to it
