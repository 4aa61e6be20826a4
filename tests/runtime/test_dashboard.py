"""The gpuetl page in the Dask dashboard (runtime/dashboard.py): served by the scheduler of
gpuetl's own cluster (its routes set only while it starts), or of any scheduler started with
`--preload gpuetl.runtime.dashboard`; fetched during a run on a free port."""

from __future__ import annotations

import json
import urllib.request

import dask
import distributed  # noqa: F401  (its config defaults)
import pytest

from gpuetl import Pipeline, samples
from gpuetl.backends.cpu import CpuBackend
from gpuetl.runtime.dashboard import render_page
from gpuetl.runtime.executor import open_executor
from gpuetl.runtime.run import run_plan

pytestmark = pytest.mark.slow


def spec() -> dict:
    return {"version": 1, "name": "dash", "source": {"type": "text", "path": "in/*.log", "blocksize": "16KiB"},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
            "steps": [{"filter": "status >= 200 and status < 500"}, {"dedupe": {"on": ["ip", "request"]}}],
            "shard": {"count": 2}, "sink": {"path": "out"}}


def fetch(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read().decode()


class FetchDuringRun:
    """A progress listener that fetches the page while partitions are still being counted."""

    def __init__(self, base: str):
        self.base, self.pages = base, []

    def advanced(self, progress):
        if not self.pages and progress.stages["read"].finished is None:
            self.pages.append(fetch(self.base + "/gpuetl"))
            self.pages.append(fetch(self.base + "/gpuetl/json"))


def test_the_page_is_served_during_a_run_with_the_stages_and_reasons(tmp_path):
    samples.write_access_logs(tmp_path / "in" / "a.log", lines=800, bad_every=40)
    routes_before = list(dask.config.get("distributed.scheduler.http.routes"))
    backend = CpuBackend()
    plan = Pipeline.from_dict(spec(), base_dir=tmp_path).plan(backend)
    with open_executor("local", backend, quiet=True) as executor:
        server = executor.client.cluster.scheduler.http_server
        watcher = FetchDuringRun(f"http://127.0.0.1:{server.port}")
        run_plan(plan, backend, executor, log=lambda *_: None, listeners=[watcher])
        status, after = fetch(watcher.base + "/gpuetl")
    assert dask.config.get("distributed.scheduler.http.routes") == routes_before     # set for the start only
    (code, page), (_, data) = watcher.pages
    assert code == 200 and status == 200
    for name in ("read/parse", "dedupe", "write shards", "filter", "read-parse"):
        assert name in page, page
    assert "running" in page and "done" in after
    state = json.loads(data)
    assert state["pipeline"] == "dash" and state["workers"] and state["io"] == backend.io_path()
    assert "reads: " + backend.io_path() in page
    for split in state["workers"].values():
        assert {"read", "compute", "write", "idle"} <= set(split)
    assert "line does not match preset apache_combined" in after


def test_a_scheduler_started_with_the_preload_serves_the_page():
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, dashboard_address="127.0.0.1:0",
                      scheduler_kwargs={"preload": ["gpuetl.runtime.dashboard"]}) as cluster:
        status, page = fetch(f"http://127.0.0.1:{cluster.scheduler.http_server.port}/gpuetl")
    assert status == 200 and "No gpuetl run has reported" in page


def test_the_page_escapes_reasons_and_shows_device_memory():
    run = {"pipeline": "<p>", "run_id": "r", "failed": None, "done": False, "seconds": 1.0,
           "partitions": {"done": 1, "total": 2},
           "progress": [{"stage": "read/parse", "fraction": 0.5, "records": 10, "bytes": 100, "mb_per_s": 1.0}],
           "stages": [{"stage": 0, "name": "read-parse", "rows_in": 10, "rows_out": 9, "filtered": 0,
                       "deduplicated": 0, "quarantined": 1}],
           "timeline": [[0.0, 0, 0], [1.0, 10, 100]],
           "workers": {"tcp://w": {"read": 1.0, "compute": 0.5, "write": 0.1, "idle": 2.0, "device_memory": 3 << 30}},
           "reasons": {"<script>alert(1)</script>": 1}}
    page = render_page(run)
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;p&gt;" in page
    assert "3,072 MiB" in page and "<svg" in page
