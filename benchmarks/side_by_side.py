"""What the side-by-side benchmarks share once their input exists: warm it into the page cache,
run each system in turn into its own output folder, and write the results file.

Not a test; nothing here is imported by the package.
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import time
from pathlib import Path


def warm(src: Path, warm_and_count) -> tuple[int, int]:
    """Read the input once so every system starts from the page cache: (bytes, lines)."""
    input_bytes = src.stat().st_size
    t = time.perf_counter()
    lines = warm_and_count(src)
    print(f"page cache warmed: {input_bytes / 1e6:,.1f} MB, {lines:,} lines read in {time.perf_counter() - t:.2f} s")
    return input_bytes, lines


def run_each(names, run, results_dir: Path, prefix: str, input_bytes: int, keep_output: bool) -> list[dict]:
    """run(name, out, log) -> its result, for each system, one after the other; the output folder
    `{prefix}out-{name}` is removed afterwards unless kept, the log `{prefix}{name}.log` stays."""
    results_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names:
        out, log = results_dir / f"{prefix}out-{name}", results_dir / f"{prefix}{name}.log"
        print(f"running {name} ...", flush=True)
        r = run(name, out, log)
        r.update(input_bytes=input_bytes, log=str(log))
        if r["ok"]:
            r["mb_per_s"] = input_bytes / 1e6 / r["seconds"]
            steady = f", {r['steady_cores']:.2f} cores busy mid-run" if r.get("steady_cores") else ""
            print(f"  {r['seconds']:.2f} s, {r['mb_per_s']:.1f} MB/s, {r['rows']:,} rows, "
                  f"peak RSS {r['peak_rss_mb']:,.0f} MB (process tree), CPU {r['cpu_seconds']:.1f} s{steady}",
                  flush=True)
        else:
            print(f"  FAILED: {r.get('error', '')[:300]}", flush=True)
        if not keep_output:
            shutil.rmtree(out, ignore_errors=True)
        results.append(r)
    return results


def write_results(path: Path, benchmark: str, **fields) -> None:
    doc = {"benchmark": benchmark, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           **fields}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"\nwrote {path}")
