"""The run report and the /gpuetl page as a browser draws them: headless Chromium (Debian's
`chromium` package: `apt-get install chromium`) renders each; the DOM holds the stage names and
the screenshot's plot region is not blank. Skipped, saying why, where Chromium is not installed."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from PIL import Image

from gpuetl import Pipeline, samples
from gpuetl.backends.cpu import CpuBackend
from gpuetl.runtime.executor import open_executor
from gpuetl.runtime.run import run_plan

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                None)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (Debian: "
                                                          "apt-get install chromium)")]
PLOT_BLUE = (0x1F, 0x77, 0xB4)      # the colour of the report's line and the page's sparkline
STAGES = ("read/parse", "dedupe", "write shards")


def chromium(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--virtual-time-budget=10000", *args, url], capture_output=True, timeout=180)


def render(url: str, shot) -> tuple[str, int]:
    """The page's DOM once its scripts ran, and the pixels of the plots' blue in a screenshot of
    it (none: nothing was drawn), from one start of the browser."""
    done = chromium(url, "--dump-dom", f"--screenshot={shot}", "--window-size=1200,3000")
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=np.int16)
    return done.stdout.decode(), int((np.abs(pixels - np.array(PLOT_BLUE)) <= 12).all(axis=-1).sum())


def spec() -> dict:
    return {"version": 1, "name": "browser", "source": {"type": "text", "path": "in/*.log", "blocksize": "16KiB"},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
            "steps": [{"filter": "status >= 200 and status < 500"}, {"dedupe": {"on": ["ip", "request"]}}],
            "shard": {"count": 2}, "sink": {"path": "out"}}


def test_report_and_page_render_with_stage_names_and_plots(tmp_path):
    samples.write_access_logs(tmp_path / "in" / "a.log", lines=1500, bad_every=40)
    backend = CpuBackend()
    plan = Pipeline.from_dict(spec(), base_dir=tmp_path).plan(backend)
    with open_executor("local", backend, quiet=True) as executor:
        result = run_plan(plan, backend, executor, log=lambda *_: None)
        page_url = f"http://127.0.0.1:{executor.client.cluster.scheduler.http_server.port}/gpuetl"
        page_dom, page_blue = render(page_url, tmp_path / "page.png")
    report_dom, report_blue = render(result.report.as_uri(), tmp_path / "report.png")
    for name in STAGES:
        assert name in report_dom and name in page_dom
    assert "bk-Canvas" in report_dom or "<canvas" in report_dom        # bokeh drew its plots
    assert "<polyline" in page_dom
    assert report_blue > 200
    assert page_blue > 50
