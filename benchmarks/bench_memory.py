#!/usr/bin/env python
"""Peak memory of `gpuetl run` by input size: does memory stay bounded as the input grows?

    python benchmarks/bench_memory.py [--sizes 1GB 2GB] [--runs streaming dedupe shuffle shuffle+dedupe]
        [--code DIR] [--data benchmarks/data] [--json benchmarks/results/memory.json]

For each size: the access log of bench_access_logs.py (generated once, cached in
benchmarks/data/); for each run kind, `gpuetl run ... --backend cpu` in a fresh process, with
default settings:

* `streaming`: access_logs.yaml (one shard, rows streamed to it in input order);
* `dedupe`: dedupe.yaml (filter + exact dedupe, streamed);
* `shuffle`: access_logs.yaml with 6 shuffled shards (spilled, then each shard written);
* `shuffle+dedupe`: dedupe.yaml with 6 shuffled shards;
* `gzip`: access_logs.yaml on the input's gzip (`gzip -6`, cached next to it).

Peak RSS is that of the process tree: the largest sum of the RSS of the run's process and its
descendants, sampled every 0.1 s from /proc, or `os.wait4`'s ru_maxrss (the largest single
process) where that is larger. Prints a table: run kind, then peak RSS per size and the growth
from the smallest to the largest size. The goal (issue 13, item 4): every run <= 1.5 GB at 1, 2
and 4 GB of input with default settings. `--code DIR` runs another gpuetl source tree (e.g. a
`git archive` of an older commit) for a before/after comparison.

Not a test; the machine may be shared, so seconds are noisy: RSS is what this measures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_access_logs as common  # noqa: E402  (the same input and its cache)

GOAL_MB = 1500
SHARDS = ["shard.count=6", "shard.shuffle=true", "shard.seed=0"]
RUNS = {
    "streaming": (HERE / "access_logs.yaml", []),
    "dedupe": (HERE / "dedupe.yaml", []),
    "shuffle": (HERE / "access_logs.yaml", SHARDS),
    "shuffle+dedupe": (HERE / "dedupe.yaml", SHARDS),
    "gzip": (HERE / "access_logs.yaml", []),
}


def ensure_gzip(path: Path) -> Path:
    """`path`.gz next to it, made once (gzip -6, or Python's gzip where there is no gzip)."""
    out = path.with_name(path.name + ".gz")
    if out.exists():
        return out
    partial = out.with_name(out.name + ".partial")
    with open(path, "rb") as src, open(partial, "wb") as dst:
        if shutil.which("gzip"):
            subprocess.run(["gzip", "-6", "-c"], stdin=src, stdout=dst, check=True)
        else:
            import gzip

            with gzip.GzipFile(fileobj=dst, mode="wb", compresslevel=6, mtime=0) as z:
                shutil.copyfileobj(src, z, 16 << 20)
    partial.replace(out)
    return out


def tree_rss_kib(pid: int) -> int:
    """The summed RSS of `pid` and its descendants (KiB), from /proc; 0 once it is gone."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
        except OSError:
            continue
        p = int(entry)
        children.setdefault(int(fields.get("PPid", "0").strip()), []).append(p)
        rss[p] = int(fields.get("VmRSS", "0 kB").split()[0]) if "VmRSS" in fields else 0
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


def run_one(cmd: list[str], code: Path, log: Path, timeout: float) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(code)
    t0 = time.perf_counter()
    with open(log, "wb") as logf:
        p = subprocess.Popen(cmd, cwd=HERE.parent, env=env, stdout=logf, stderr=subprocess.STDOUT,
                             start_new_session=True)
        peak = [0]
        done = threading.Event()

        def sample():
            while not done.wait(0.1):
                peak[0] = max(peak[0], tree_rss_kib(p.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            done.set()
            sampler.join()
    seconds = time.perf_counter() - t0
    code_ = os.waitstatus_to_exitcode(status)
    out = {"ok": code_ == 0, "seconds": seconds, "cpu_seconds": ru.ru_utime + ru.ru_stime,
           "peak_rss_mb": max(peak[0], ru.ru_maxrss) / 1024, "tree_sampled_mb": peak[0] / 1024,
           "largest_process_mb": ru.ru_maxrss / 1024}
    if not out["ok"]:
        out["error"] = log.read_text(errors="replace")[-2000:]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=common.parse_size, default=[10**9, 2 * 10**9])
    ap.add_argument("--runs", nargs="+", choices=sorted(RUNS), default=["streaming", "dedupe", "shuffle",
                                                                        "shuffle+dedupe"])
    ap.add_argument("--code", type=Path, default=HERE.parent, help="the gpuetl source tree to run")
    ap.add_argument("--data", type=Path, default=HERE / "data")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", type=Path, default=HERE / "results" / "memory.json")
    args = ap.parse_args(argv)
    results = args.json.parent
    results.mkdir(parents=True, exist_ok=True)
    code = args.code.resolve()

    rows = []
    for size in args.sizes:
        src = common.ensure_input(args.data, size, args.seed, 0)
        for kind in args.runs:
            pipeline, sets = RUNS[kind]
            data = ensure_gzip(src) if kind == "gzip" else src
            common.warm_and_count(data)
            out = results / f"out-memory-{kind}"
            shutil.rmtree(out, ignore_errors=True)
            cmd = [sys.executable, "-c", "import sys; from gpuetl.cli import main; sys.exit(main())",
                   "run", str(pipeline), "--backend", "cpu", "--set", f"source.path={data}",
                   "--set", f"sink.path={out}", "--set", "sink.mode=overwrite", *[a for s in sets for a in ("--set", s)]]
            res = run_one(cmd, code, results / f"memory-{kind}-{common.human(size)}.log", args.timeout)
            shutil.rmtree(out, ignore_errors=True)
            res.update(kind=kind, size=common.human(size), input_bytes=data.stat().st_size, command=cmd)
            rows.append(res)
            print(f"  {kind} {common.human(size)}: {res['seconds']:.1f} s, {res['cpu_seconds']:.1f} CPU s, "
                  f"peak RSS {res['peak_rss_mb']:,.0f} MB" + ("" if res["ok"] else "  FAILED"), flush=True)

    sizes = [common.human(s) for s in args.sizes]
    print(f"\npeak RSS of the process tree, MB ({code})")
    print(f"{'run':<16}" + "".join(f"{s:>10}" for s in sizes) + f"{'growth':>10}")
    for kind in args.runs:
        mine = {r["size"]: r for r in rows if r["kind"] == kind}
        cells = [f"{mine[s]['peak_rss_mb']:>10,.0f}" if mine[s]["ok"] else f"{'FAILED':>10}" for s in sizes]
        growth = mine[sizes[-1]]["peak_rss_mb"] - mine[sizes[0]]["peak_rss_mb"] if len(sizes) > 1 else 0.0
        print(f"{kind:<16}" + "".join(cells) + f"{growth:>+10,.0f}")
    worst = max((r["peak_rss_mb"] for r in rows), default=0.0)
    print(f"\ngoal: every run <= {GOAL_MB:,} MB: " + ("met" if worst <= GOAL_MB and all(r["ok"] for r in rows)
                                                      else "NOT met") + f" (largest {worst:,.0f} MB)")
    args.json.write_text(json.dumps({"machine": common.machine_info(), "code": str(code), "runs": rows},
                                    indent=2, default=str))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
