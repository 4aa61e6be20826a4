"""A gpuetl page in the Dask dashboard, at /gpuetl (and its data at /gpuetl/json), served by the
scheduler's own HTTP server through distributed's extension points:

- gpuetl's local cluster adds this module to `distributed.scheduler.http.routes` (within a
  dask.config.set around the cluster's start, nothing set for the process);
- an external scheduler loads it with `dask scheduler --preload gpuetl.runtime.dashboard`.

The run's process publishes its progress (runtime/progress.py) to the scheduler's metadata
(`Client.set_metadata`) at most once a second; the page reads it, and the workers' time split
from the scheduler's task stream, on each request. Importing this module imports no bokeh."""

from __future__ import annotations

import html
import json
import time

from tornado import web

METADATA_KEY = "gpuetl-run"
ROUTE = "/gpuetl"
MODULE = __name__
PUBLISH_EVERY = 1.0          # seconds between updates sent to the scheduler
REFRESH = 2                  # seconds between page reloads while a run goes
TOP_REASONS = 10


class DashboardFeed:
    """A progress listener that sends the run's snapshot to the scheduler."""

    def __init__(self, client):
        self.client = client
        self.last = 0.0

    def advanced(self, progress) -> None:
        if time.monotonic() - self.last >= PUBLISH_EVERY:
            self._publish(progress)

    def run_started(self, progress) -> None:
        self._publish(progress)

    def stage_finished(self, stage) -> None:
        self.last = 0.0                     # the next advance publishes at once

    def run_finished(self, progress) -> None:
        self._publish(progress)

    def run_failed(self, progress) -> None:
        self._publish(progress)

    def _publish(self, progress) -> None:
        self.last = time.monotonic()
        snap = progress.snapshot()
        snap.pop("workers", None)           # the page reads the split from the scheduler itself
        snap["reasons"] = dict(sorted(snap["reasons"].items(), key=lambda kv: -kv[1])[:TOP_REASONS])
        snap["started_at"] = progress.wall_started
        try:
            self.client.set_metadata(METADATA_KEY, snap)
        except Exception:                  # a page that lags is no reason to fail a run
            pass


def worker_split(scheduler, started_at: float) -> dict:
    """Per worker: seconds reading, computing, writing since started_at, idle the rest of its
    threads' time, and device memory in use where the worker reports it (GPU workers)."""
    from .progress import task_kind

    try:
        stream = scheduler.get_task_stream(start=started_at)
    except Exception:
        stream = []
    wall = max(0.0, time.time() - started_at)
    split: dict[str, dict] = {}
    for address, ws in scheduler.workers.items():
        gpu = (getattr(ws, "metrics", {}) or {}).get("gpu") or {}
        split[address] = {"read": 0.0, "compute": 0.0, "write": 0.0, "threads": ws.nthreads,
                          "device_memory": gpu.get("memory-used")}
    for record in stream:
        entry = split.get(record.get("worker"))
        if entry is None:
            continue
        for span in record.get("startstops", []):
            if span.get("action") == "compute":
                entry[task_kind(record["key"])] += span["stop"] - span["start"]
    for entry in split.values():
        entry["idle"] = max(0.0, wall * entry["threads"] - entry["read"] - entry["compute"] - entry["write"])
    return split


class _Page(web.RequestHandler):
    def initialize(self, dask_server=None):
        self.server = dask_server

    def state(self) -> dict | None:
        run = self.server.get_metadata([METADATA_KEY], default=None)
        if run is None:
            return None
        return {**run, "workers": worker_split(self.server, run.get("started_at", time.time()))}


class GpuetlJson(_Page):
    def get(self):
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(self.state()))


class GpuetlPage(_Page):
    def get(self):
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(render_page(self.state()))


def render_page(run: dict | None) -> str:
    e = html.escape
    refresh = f'<meta http-equiv="refresh" content="{REFRESH}">' if not run or not run.get("done") else ""
    head = (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\">{refresh}<title>gpuetl</title><style>"
            "body{font-family:system-ui,sans-serif;margin:1.5em} table{border-collapse:collapse;margin-bottom:1.5em}"
            "th,td{border-bottom:1px solid #ddd;padding:.2em .8em;text-align:left} td.n{text-align:right}"
            "</style></head><body>")
    if run is None:
        return head + "<h1>gpuetl</h1><p>No gpuetl run has reported to this scheduler yet.</p></body></html>"
    state = "failed: " + run["failed"] if run.get("failed") else ("done" if run.get("done") else "running")
    parts = [head, f"<h1>gpuetl: {e(str(run['pipeline']))}</h1>",
             f"<p>run {e(str(run['run_id']))}, {e(state)}, {run['seconds']:.1f} s, partitions "
             f"{run['partitions']['done']} of {run['partitions']['total']}, backend {e(str(run.get('backend')))}, "
             f"reads: {e(str(run.get('io')))}</p>",
             "<h2>Progress</h2><table><tr><th>stage</th><th>done</th><th>records</th><th>MB</th><th>MB/s</th></tr>"]
    for p in run["progress"]:
        parts.append(f"<tr><td>{e(p['stage'])}</td><td class=n>{p['fraction']:.0%}</td><td class=n>{p['records']:,}"
                     f"</td><td class=n>{p['bytes'] / 1e6:,.1f}</td><td class=n>{p['mb_per_s']:,.1f}</td></tr>")
    parts.append("</table><h2>Records per stage</h2><table><tr><th>stage</th><th>in</th><th>out</th>"
                 "<th>filtered</th><th>deduplicated</th><th>quarantined</th></tr>")
    for s in run["stages"]:
        parts.append(f"<tr><td>{s['stage']}: {e(s['name'])}</td>" + "".join(
            f"<td class=n>{s[k]:,}</td>" for k in ("rows_in", "rows_out", "filtered", "deduplicated", "quarantined"))
            + "</tr>")
    parts.append("</table><h2>Throughput (records read)</h2>" + _sparkline(run.get("timeline", [])))
    parts.append("<h2>Time per worker (s)</h2><table><tr><th>worker</th><th>read</th><th>compute</th><th>write</th>"
                 "<th>idle</th><th>device memory</th></tr>")
    for worker, w in run.get("workers", {}).items():
        memory = "-" if w.get("device_memory") is None else f"{w['device_memory'] / 2**20:,.0f} MiB"
        parts.append(f"<tr><td>{e(worker)}</td>" + "".join(f"<td class=n>{w[k]:,.2f}</td>" for k in
                                                         ("read", "compute", "write", "idle"))
                     + f"<td class=n>{memory}</td></tr>")
    parts.append("</table><h2>Top quarantine reasons</h2><table><tr><th>records</th><th>reason</th></tr>")
    for reason, n in run.get("reasons", {}).items():
        parts.append(f"<tr><td class=n>{n:,}</td><td>{e(reason)}</td></tr>")
    parts.append("</table></body></html>")
    return "".join(parts)


def _sparkline(points: list, width: int = 600, height: int = 80) -> str:
    """Records read over time as an inline SVG line (no script, no library)."""
    if len(points) < 2:
        return "<p>(not enough samples yet)</p>"
    t_max = max(p[0] for p in points) or 1
    r_max = max(p[1] for p in points) or 1
    xy = " ".join(f"{p[0] / t_max * width:.1f},{height - p[1] / r_max * height:.1f}" for p in points)
    return (f'<svg width="{width}" height="{height}" role="img" aria-label="records read over time">'
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{xy}"/></svg>'
            f"<p>{r_max:,} records in {t_max:.1f} s</p>")


routes: list[tuple] = [(ROUTE, GpuetlPage, {}), (ROUTE + "/json", GpuetlJson, {})]


def dask_setup(scheduler) -> None:
    """`dask scheduler --preload gpuetl.runtime.dashboard`: add the page to a running scheduler's
    dashboard (workers ignore this preload)."""
    from distributed.http.utils import get_handlers

    application = getattr(scheduler, "http_application", None)
    if application is None or not hasattr(scheduler, "get_task_stream"):
        return
    application.add_handlers(r".*$", get_handlers(scheduler, [MODULE], prefix="/"))
