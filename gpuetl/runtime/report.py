"""The run report: `_report.json` (everything, as data) and `_report.html` (the same, to look at:
self-contained, bokeh's JavaScript inline, opens offline) next to the dataset; listed in the
manifest with their sha256 like the shards, so `sink.mode: overwrite` may replace them. A failed
run's report goes under `_tmp/`. `gpuetl report OUT` prints it as text."""

from __future__ import annotations

import hashlib
import html
import json
import time
from pathlib import Path

from ..durable import sync_file
from ..words import count, printable
from .reasons import reason_kind
from .versions import recorded_versions

REPORT_JSON = "_report.json"
REPORT_HTML = "_report.html"
REPORT_FORMAT = "gpuetl-report/1"
KINDS = 20                 # reason kinds listed; the rest are one "and N more" line
EXAMPLES = 3               # example reasons per kind
EXAMPLE_CHARS = 300
VALUE_CHARS = 80           # a column's min/max as shown


def build_report(plan, backend, progress, *, result=None, error: BaseException | None = None,
                 find_first=None) -> dict:
    """The report of a run from what it counted (progress) and, when it finished, its result
    (its column profile: what the shards' writers read off their footers, RunResult.columns).
    find_first: given the bad records by kind, adds each kind's first quarantined record
    (`first_records_in_task`: read where the quarantine files are); None: no first records."""
    snap = progress.snapshot()
    counts = result.counts if result is not None else _counts_so_far(snap["stages"])
    stages = result.stages if result is not None else snap["stages"]
    timing = {p["stage"]: p for p in snap["progress"]}
    versions = recorded_versions(backend)
    bad = grouped_reasons(snap["reasons"])
    return {
        "format": REPORT_FORMAT,
        "gpuetl": versions["gpuetl"],
        "run_id": progress.run_id,
        "pipeline": plan.spec.name,
        "pipeline_sha256": plan.loaded.sha256,
        "status": "failed" if error is not None else "succeeded",
        "error": None if error is None else _one_line(error),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": snap["seconds"],
        "backend": backend.name,
        "io": backend.io_path(),
        "versions": versions,
        "plan": {"input_files": len(plan.files), "input_bytes": plan.input_bytes,
                 "partitions": len(plan.partitions), "sink": str(plan.out_dir),
                 "stages": [{"stage": s.index, "name": s.name, "detail": s.detail} for s in plan.stages],
                 "task_groups": [seg.label for seg in plan.segments]},
        "counts": counts,
        "stages": stages,
        "progress": list(timing.values()),
        "throughput": snap["timeline"],
        "workers": snap["workers"],
        "bad_records": find_first(bad) if find_first is not None and bad["kinds"] else bad,
        "warnings": list(result.manifest.get("warnings", [])) if result is not None else [],
        "columns": ([{**e, "min": _shown(e["min"]), "max": _shown(e["max"])} for e in result.columns]
                    if result is not None else []),
    }


def first_records_in_task(executor, data_dir: Path, quarantine: list[dict], filesystem=None):
    """A `find_first` for build_report that runs first_records as a task of the run's executor,
    where the quarantine files are: the process that commits the run opens none of them."""
    def find(bad: dict) -> dict:
        if not quarantine:
            return bad
        import dask

        task = dask.delayed(first_records, pure=False)(bad, data_dir, quarantine, filesystem,
                                                        dask_key_name="report-first-records")
        return executor.compute([task])[0]

    return find


def _counts_so_far(stages: list[dict]) -> dict:
    first = stages[0]["rows_in"] if stages else 0
    return {"rows_in": first, "rows_out": stages[-1]["rows_out"] if stages else 0,
            **{k: sum(s[k] for s in stages) for k in ("filtered", "deduplicated", "quarantined")}}


def grouped_reasons(tallies: dict[str, int]) -> dict:
    """Reasons by kind (reasons.py), the KINDS most common with up to EXAMPLES reasons each, and
    how many kinds and rows the rest hold: a report stays small whatever the input did."""
    kinds: dict[str, dict] = {}
    for reason, n in sorted(tallies.items(), key=lambda kv: (-kv[1], kv[0])):
        entry = kinds.setdefault(reason_kind(reason), {"count": 0, "examples": []})
        entry["count"] += n
        if len(entry["examples"]) < EXAMPLES:
            entry["examples"].append({"reason": _cut(reason, EXAMPLE_CHARS), "count": n})
    ordered = sorted(kinds.items(), key=lambda kv: (-kv[1]["count"], kv[0]))
    shown, rest = ordered[:KINDS], ordered[KINDS:]
    return {"kinds": [{"kind": _cut(k, EXAMPLE_CHARS), **v} for k, v in shown],
            "more": {"kinds": len(rest), "rows": sum(v["count"] for _, v in rest)},
            "distinct_reasons": len(tallies), "rows": sum(tallies.values())}


RAW_CHARS = 160           # a bad record's bytes as shown
SCAN_ROWS = 1_000_000    # quarantined rows read at most to find each kind's first record


def first_records(bad: dict, data_dir: Path | None, quarantine: list[dict], filesystem=None) -> dict:
    """Each kind's first quarantined record as it was (its bytes cut to RAW_CHARS, control
    characters escaped) and where it is (`file:offset`), from the quarantine files; kinds with
    none there (on_error: drop) keep only their reasons."""
    wanted = {k["kind"] for k in bad["kinds"]}
    found: dict[str, dict] = {}
    if not wanted or data_dir is None:
        return bad
    import pyarrow.parquet as pq

    scanned = 0
    for piece in quarantine:
        try:
            reader = pq.ParquetFile(str(Path(data_dir) / piece["path"]), filesystem=filesystem)
            batches = reader.iter_batches(batch_size=8192, columns=["_file", "_offset", "_raw", "_reason"])
            for batch in batches:
                for file, offset, raw, reason in zip(*(c.to_pylist() for c in batch.columns)):
                    kind = _cut(reason_kind(reason or ""), EXAMPLE_CHARS)
                    if kind in wanted and kind not in found:
                        found[kind] = {"where": f"{file}:{offset}", "raw": _raw_shown(raw)}
                scanned += batch.num_rows
                if len(found) == len(wanted) or scanned >= SCAN_ROWS:
                    break
        except (OSError, ValueError, KeyError):
            continue
        if len(found) == len(wanted) or scanned >= SCAN_ROWS:
            break
    for kind in bad["kinds"]:
        if kind["kind"] in found:
            kind["first"] = found[kind["kind"]]
    return bad


def _raw_shown(raw) -> str:
    if raw is None:
        return ""
    if isinstance(raw, bytes):
        text = raw[:RAW_CHARS * 4].decode("utf-8", "backslashreplace")
    else:
        text = str(raw)
    return printable(_cut(text, RAW_CHARS), keep_newlines=False)


def _shown(value):
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            return f"<{len(value)} bytes>"
    return _cut(str(value), VALUE_CHARS)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


# -- writing ------------------------------------------------------------------------------------

def write_report(report: dict, folder: Path, durable: bool = True) -> list[dict]:
    """Write both files into folder, one of this run's own temporary folders; their manifest
    entries (path, bytes, sha256). A report an earlier attempt of the same run left there (a
    resumed run) is replaced; anything but a plain file in its place is an error. `durable`:
    each flushed to the disk (the commit then moves it into the dataset: gpuetl/durable.py)."""
    entries = []
    for name, data in ((REPORT_JSON, json.dumps(report, indent=1, default=str).encode()),
                       (REPORT_HTML, render_html(report).encode())):
        path = Path(folder) / name
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise FileExistsError(f"{path}: not a report gpuetl wrote; it will not write over it")
        path.unlink(missing_ok=True)
        with open(path, "xb") as fh:          # created here: never through a link
            fh.write(data)
            if durable:
                sync_file(fh)
        entries.append({"path": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return entries


def read_report(out: str | Path, dataset_version: int | None = None) -> tuple[dict, Path | str | None]:
    """The report of the dataset at out (or of a failed run: a folder under _tmp/ holding one);
    on an object store (s3://...), read from there and its HTML named by URL. dataset_version:
    the report of that version of an append dataset (its JSON, kept under _versions/; no page)."""
    from ..errors import DataError

    from ..sinks.dataset import dataset_folder
    from ..storage import is_remote, join

    remote = is_remote(out)
    if not remote:
        dataset_folder(out)            # a wrong name on the command line: exit 2, as verify says it
    if dataset_version is not None:
        from ..sinks.dataset import read_version_report

        report = read_version_report(out, dataset_version)
        if report is not None:
            return report, None
    path = join(str(out), REPORT_JSON) if remote else Path(out) / REPORT_JSON
    try:
        if remote:                     # the store's errors as gpuetl's (credentials, endpoint), as inspect's
            from ..sinks.objectstore import ObjectStoreReader

            text = ObjectStoreReader(str(out)).read(REPORT_JSON)
            if text is None:
                raise FileNotFoundError(path)
        else:
            text = path.read_text()
        report = json.loads(text)
    except FileNotFoundError:
        raise DataError(f"{out}: no {REPORT_JSON} (not a gpuetl dataset, or written before gpuetl wrote reports)",
                        hint="run the pipeline again to get one") from None
    except (OSError, ValueError, RecursionError) as err:
        raise DataError(f"{path}: not a readable report ({err})") from None
    if not isinstance(report, dict) or report.get("format") != REPORT_FORMAT:
        raise DataError(f"{path}: not a gpuetl run report")
    return report, (join(str(out), REPORT_HTML) if remote else path.with_name(REPORT_HTML))


# -- as text ------------------------------------------------------------------------------------

def render_text(report: dict) -> str:
    c = report.get("counts", {})
    lines = [f"run {report.get('run_id')} of pipeline {report.get('pipeline')!r}: {report.get('status')}, "
             f"{report.get('seconds', 0):.1f} s, backend {report.get('backend')} ({report.get('io')})"]
    if report.get("error"):
        lines.append(f"  error: {report['error']}")
    lines += [f"  warning: {warning}" for warning in report.get("warnings", [])]
    plan = report.get("plan", {})
    lines.append(f"  input: {count(plan.get('input_files') or 0, 'file')}, {plan.get('input_bytes', 0) / 1e6:,.1f} MB, "
                 f"{count(plan.get('partitions') or 0, 'partition')}")
    lines.append(f"  rows in {c.get('rows_in', 0):,} = out {c.get('rows_out', 0):,} + filtered {c.get('filtered', 0):,} "
                 f"+ deduplicated {c.get('deduplicated', 0):,} + quarantined {c.get('quarantined', 0):,}")
    for s in report.get("stages", []):
        dropped = ", ".join(f"{k} {s[k]:,}" for k in ("filtered", "deduplicated", "quarantined") if s.get(k))
        lines.append(f"  stage {s['stage']} {s['name']:<16} {s['rows_in']:>12,} → {s['rows_out']:<12,} {dropped}")
    for p in report.get("progress", []):
        lines.append(f"  {p['stage']:<16} {p['seconds']:>8.2f} s  {p['records']:>12,} record{'' if p['records'] == 1 else 's'}  "
                     f"{p['mb_per_s']:>8.1f} MB/s")
    for worker, split in report.get("workers", {}).items():
        lines.append(f"  worker {worker}: " + ", ".join(f"{k} {v:.2f} s" for k, v in split.items()))
    bad = report.get("bad_records", {})
    if bad.get("kinds"):
        lines.append(f"  bad records by kind ({count(bad.get('rows', 0), 'row')}):")
    for kind in bad.get("kinds", []):
        lines.append(f"  {kind['count']:>10,} × {kind['kind']}")
        if kind.get("first"):
            lines.append(f"               first at {kind['first']['where']}: {kind['first']['raw']}")
        for ex in kind["examples"]:
            if ex["reason"] != kind["kind"]:
                lines.append(f"               e.g. {ex['reason']} ({ex['count']:,})")
    if bad.get("more", {}).get("kinds"):
        lines.append(f"  and {count(bad['more']['kinds'], 'more kind')} ({count(bad['more']['rows'], 'row')})")
    for col in report.get("columns", []):
        lines.append(f"  column {col['column']} ({col['type']}): nulls {col['nulls']:,}, min {col['min']!r}, "
                     f"max {col['max']!r}")
    return "\n".join(lines)


# -- as HTML ------------------------------------------------------------------------------------

_STYLE = """<style>
 body { font-family: system-ui, sans-serif; margin: 1.5em; }
 table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
 th, td { border-bottom: 1px solid #ddd; padding: 0.2em 0.8em; text-align: left; vertical-align: top; }
 td.n { text-align: right; font-variant-numeric: tabular-nums; }
 .failed { color: #b00; }
 .warning { color: #a60; }
 .plot { margin: 1em 0; }
</style>"""


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(value) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"
        return f'<td class="n">{text}</td>'
    return f"<td>{html.escape('' if value is None else str(value))}</td>"


def _body(report: dict) -> str:
    e = html.escape
    status = report["status"]
    parts = [f"<h1>gpuetl run report: {e(str(report['pipeline']))}</h1>",
             f"<p>run {e(str(report['run_id']))}, <span class=\"{e(status)}\">{e(status)}</span>, "
             f"{report['seconds']:.1f} s, backend {e(report['backend'])}, I/O {e(str(report['io']))}, "
             f"{e(report['created_at'])}</p>"]
    if report.get("error"):
        parts.append(f"<p class=\"failed\">{e(report['error'])}</p>")
    parts += [f"<p class=\"warning\">warning: {e(warning)}</p>" for warning in report.get("warnings", [])]
    plan = report["plan"]
    parts.append("<h2>Plan</h2>" + _table(["stage", "name", "detail"],
                                          [[s["stage"], s["name"], s["detail"]] for s in plan["stages"]]))
    parts.append(f"<p>{count(plan['input_files'], 'input file')}, {count(plan['input_bytes'], 'byte')}, "
                 f"{count(plan['partitions'], 'partition')}; sink {e(plan['sink'])}</p>")
    c = report["counts"]
    parts.append("<h2>Records</h2>" + _table(["rows in", "out", "filtered", "deduplicated", "quarantined"],
                                             [[c["rows_in"], c["rows_out"], c["filtered"], c["deduplicated"],
                                               c["quarantined"]]]))
    parts.append(_table(["stage", "name", "rows in", "rows out", "filtered", "deduplicated", "quarantined"],
                        [[s["stage"], s["name"], s["rows_in"], s["rows_out"], s["filtered"], s["deduplicated"],
                          s["quarantined"]] for s in report["stages"]]))
    parts.append("<h2>Timings</h2>" + _table(["stage", "seconds", "records", "bytes", "MB/s"],
                                             [[p["stage"], p["seconds"], p["records"], p["bytes"], p["mb_per_s"]]
                                              for p in report["progress"]]))
    parts.append(_table(["worker", "read", "compute", "write", "idle"],
                        [[w, s.get("read", 0.0), s.get("compute", 0.0), s.get("write", 0.0), s.get("idle", 0.0)]
                         for w, s in report["workers"].items()]))
    bad = report["bad_records"]
    rows = []
    for kind in bad["kinds"]:
        # the reasons that differ from the kind's name; the first record's bytes and place
        examples = "; ".join(f"{x['reason']} ({x['count']:,})" for x in kind["examples"] if x["reason"] != kind["kind"])
        first = kind.get("first") or {}
        rows.append([kind["count"], kind["kind"], first.get("where", ""), first.get("raw", ""), examples])
    parts.append("<h2>Bad records by kind</h2>" + (_table(["rows", "kind", "first at", "first record", "other reasons"],
                                                          rows) if rows else "<p>none</p>"))
    if bad["more"]["kinds"]:
        parts.append(f"<p>and {count(bad['more']['kinds'], 'more kind')} ({count(bad['more']['rows'], 'row')})</p>")
    if report["columns"]:
        parts.append("<h2>Columns</h2>" + _table(
            ["column", "type", "values", "nulls", "min", "max"],
            [[col["column"], col["type"], col["rows"], col["nulls"], col["min"], col["max"]]
             for col in report["columns"]]))
    parts.append("<h2>Versions</h2>" + _table(["library", "version"], [[k, v] for k, v in report["versions"].items()]))
    parts.append("<h2>Throughput and time per worker</h2>")
    points = report["throughput"]
    if 0 < len(points) < CHART_POINTS:       # a chart of one or two samples is a flat line and a spike
        seconds, _, nbytes = points[-1]
        rate = nbytes / seconds / 1e6 if seconds > 0 else 0.0
        parts.append(f"<p>input read: {rate:,.1f} MB/s ({count(nbytes, 'byte')} in {seconds:,.2f} s; "
                     f"{count(len(points), 'partition')} finished, too few points for a chart)</p>")
    return "\n".join(parts)


def throughput_bins(points: list, bins: int = 40) -> tuple[list[float], list[float]]:
    """MB/s of input read in `bins` equal spans of the run, from the cumulative samples
    [seconds, records, bytes] (each partition's finish is one sample: too spiky to plot as is)."""
    if not points:
        return [], []
    start, end = 0.0, points[-1][0]          # samples are seconds since the run started
    width = (end - start) / bins or 1.0
    done = [0.0] * (bins + 1)
    previous = 0
    for t, _, nbytes in points:
        done[min(bins, int((t - start) / width))] += nbytes - previous
        previous = nbytes
    return [start + k * width for k in range(bins + 1)], [b / width / 1e6 for b in done]


def render_html(report: dict) -> str:
    """The report as one HTML file: tables, and plots drawn by BokehJS in the browser from the
    report's numbers. bokeh's JavaScript (its core and its plotting API) is inlined
    (bokeh_scripts), so the file opens offline."""
    scripts = bokeh_scripts()
    points = report["throughput"]
    seconds, rates = throughput_bins(points) if len(points) >= CHART_POINTS else ([], [])
    workers = report["workers"]
    data = {"seconds": seconds, "rates": rates, "workers": list(workers),
            "split": {k: [workers[w].get(k, 0.0) for w in workers] for k in SPLIT}}
    title = html.escape(f"gpuetl run report: {report['pipeline']}")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>{_STYLE}\n'
            f"{scripts}\n</head><body>\n{_body(report)}\n"
            '<div id="throughput" class="plot"></div><div id="split" class="plot"></div>\n'
            f'<script type="application/json" id="gpuetl-data">{_json_in_html(data)}</script>\n'
            f"<script>{_PLOTS}</script>\n</body></html>\n")


BOKEH_JS = ("bokeh.min.js", "bokeh-api.min.js")


def bokeh_scripts() -> str:
    """BokehJS inline, as bokeh.resources.Resources(mode="inline", components=["bokeh",
    "bokeh-api"]).render_js() writes it (minified, log level "info"), read from the files bokeh
    installs: importing bokeh.resources (bokeh's models' base, jinja2) costs ~0.2 CPU-s, more
    than the rest of the report; bokeh's Python is not imported at all."""
    import importlib.util

    found = importlib.util.find_spec("bokeh")
    if found is None or not found.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'bokeh'", name="bokeh")
    folder = Path(found.submodule_search_locations[0]) / "server" / "static" / "js"
    parts = []
    for name in BOKEH_JS:
        with open(folder / name, "rb") as f:
            parts.append(f"/* BEGIN {name} */\n{f.read().decode('utf-8')}\n/* END {name} */")
    parts.append('Bokeh.set_log_level("info");')
    return "".join(f"<script>\n{js}\n</script>\n" for js in parts)


CHART_POINTS = 4          # fewer samples (partitions finished) than this: the rate as a number
SPLIT = ("read", "compute", "write", "idle")
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#cccccc")


def _json_in_html(value) -> str:
    """JSON that cannot end its <script> element early (no '<' left as is)."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


_PLOTS = """
(function () {
  const data = JSON.parse(document.getElementById("gpuetl-data").textContent);
  const plt = Bokeh.Plotting;
  if (data.seconds.length > 0) {
    const throughput = plt.figure({title: "input read (MB/s)", height: 220, sizing_mode: "stretch_width",
                                   x_axis_label: "seconds since start", tools: "pan,box_zoom,reset,save"});
    throughput.step({x: data.seconds, y: data.rates, mode: "after", line_width: 2, line_color: "%s"});
    plt.show(throughput, "#throughput");
  }
  if (data.workers.length === 0) { return; }
  const split = plt.figure({title: "time per worker (s): read / compute / write / idle", height: 160 + 30 * data.workers.length,
                            sizing_mode: "stretch_width", tools: "save",
                            y_range: new Bokeh.FactorRange({factors: data.workers})});
  // the legend above the plot, in one row: inside it would cover the bars and cut off "idle"
  split.add_layout(new Bokeh.Legend({orientation: "horizontal", location: "top_left"}), "above");
  const kinds = %s, colours = %s;
  let left = data.workers.map(() => 0);
  kinds.forEach((kind, k) => {
    const right = left.map((x, i) => x + data.split[kind][i]);
    split.hbar({y: data.workers, left: left, right: right, height: 0.6, fill_color: colours[k],
                line_color: colours[k], legend_label: kind});
    left = right;
  });
  plt.show(split, "#split");
})();
""" % (COLOURS[0], json.dumps(list(SPLIT)), json.dumps(list(COLOURS)))
