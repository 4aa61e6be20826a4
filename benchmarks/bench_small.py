#!/usr/bin/env python
"""A small input, the whole process: 10,000 access-log lines (~2 MB) -> typed zstd Parquet.

    .venv/bin/python benchmarks/bench_small.py [--lines 10000] [--rounds 3] [--data benchmarks/data]
        [--json benchmarks/results/small.json]

The same task as bench_access_logs.py (its pipeline file and its polars script), on an input
where start-up is most of the work: `gpuetl run benchmarks/access_logs.yaml --backend cpu` as
a user types it (no cluster: this process's thread pool), `gpuetl run ... --scheduler local`
(a cluster however small the input), and
polars' script (`scan_lines` -> `str.extract_groups` -> `sink_parquet`), each in a fresh process,
the order rotated every round. Reports every round: wall seconds (the whole process), CPU
seconds, peak RSS, and for gpuetl the time from the process's start to its first open of the
input (an audit hook in a two-line launcher, which then calls the command's `main`). The
headline is polars' median wall over gpuetl's (above 1: gpuetl faster; the goal is ≥ 0.67×).

With --floors, three more fresh processes a round that only import, and do no work: what any
pipeline run on the project's stack must load (`floor-stack`: PyYAML, pyarrow with its Parquet
writer and compute kernels, a pydantic model), then that plus pandas and numpy (`floor-frames`:
the CPU backend's frames, DESIGN.md's shared pandas/cuDF API), then that plus dask's graph and
thread pool (`floor-graph`). polars' wall over a floor's is the best ratio a design importing
that much could reach, before reading a byte.

Not a test; nothing here is imported by the package.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_access_logs as base  # noqa: E402  (its polars script, its runner, machine_info)
import side_by_side  # noqa: E402

SYSTEMS = ("gpuetl", "gpuetl-cluster", "polars")

# Imports only: the least a run on that much of the stack costs before its first byte.
_STACK = ("import yaml, pyarrow, pyarrow.parquet, pyarrow.compute\n"
          "from pydantic import BaseModel\n"
          "class Spec(BaseModel):\n    path: str = ''\n")
FLOORS = {
    "floor-stack": _STACK,
    "floor-frames": _STACK + "import numpy, pandas\n",
    "floor-graph": _STACK + "import numpy, pandas, dask, dask.delayed, dask.threaded\n",
}

# Runs the command with an audit hook that notes when the input is first opened (wall clock),
# then hands over to gpuetl.cli.main as the `gpuetl` script does.
LAUNCHER = """
import os, sys, time
mark, src = sys.argv[1], os.path.realpath(sys.argv[2])
seen = []
def hook(event, args):
    if event == "open" and not seen and args and isinstance(args[0], (str, bytes, os.PathLike)) \\
            and os.path.realpath(os.fsdecode(args[0])) == src:
        seen.append(time.time())
        with open(mark, "w") as f:
            f.write(repr(seen[0]))
sys.addaudithook(hook)
sys.argv = ["gpuetl", *sys.argv[3:]]
from gpuetl.cli import main
sys.exit(main())
"""


def ensure_input(data_dir: Path, lines: int, seed: int) -> Path:
    sys.path.insert(0, str(base.ROOT))
    from gpuetl.samples import write_access_logs

    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"access-{lines}lines-seed{seed}-{base.generator_version()}.log"
    if not path.exists():
        tmp = path.with_suffix(".partial")
        write_access_logs(tmp, lines=lines, seed=seed)
        os.replace(tmp, path)
    return path


def command(name: str, src: Path, out: Path, mark: Path) -> list[str]:
    if name == "polars":
        return base.peer_command(HERE / "bench_access_logs.py", "polars", src, out)
    cmd = base.gpuetl_command(src, out)
    args = cmd[cmd.index("run"):] + ["-q"]
    if name == "gpuetl-cluster":
        args += ["--scheduler", "local"]
    return [sys.executable, "-c", LAUNCHER, str(mark), str(src), *args]


def run_floor(name: str, round_no: int) -> dict:
    """One import floor in a fresh interpreter: wall and CPU seconds of the whole process."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", FLOORS[name]], cwd=base.ROOT)
    _, status, ru = os.wait4(p.pid, 0)
    seconds = time.perf_counter() - t0
    ok = os.waitstatus_to_exitcode(status) == 0
    return {"system": name, "ok": ok, "seconds": seconds, "cpu_seconds": ru.ru_utime + ru.ru_stime,
            "peak_rss_mb": ru.ru_maxrss / 1024, "rows": None, "round": round_no,
            **({} if ok else {"error": f"exit status {status}"})}


def run_one(name: str, src: Path, results_dir: Path, round_no: int, timeout: float) -> dict:
    if name in FLOORS:
        return run_floor(name, round_no)
    out, log = results_dir / f"small-out-{name}", results_dir / f"small-{name}-{round_no}.log"
    with tempfile.TemporaryDirectory() as tmp:
        mark = Path(tmp) / "first-read"
        started = time.time()
        r = base.run_command(name, command(name, src, out, mark), out, log, timeout)
        if mark.exists():
            r["first_read_s"] = float(mark.read_text()) - started
    r["round"] = round_no
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="+", choices=SYSTEMS + tuple(FLOORS), metavar="NAME")
    ap.add_argument("--floors", action="store_true", help="also time the import floors (see above)")
    ap.add_argument("--data", type=Path, default=HERE / "data")
    ap.add_argument("--json", type=Path, default=HERE / "results" / "small.json")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args(argv)

    src = ensure_input(args.data.resolve(), args.lines, args.seed)
    input_bytes, lines = side_by_side.warm(src, base.warm_and_count)
    results_dir = args.json.resolve().parent
    results_dir.mkdir(parents=True, exist_ok=True)
    systems = list(args.only or SYSTEMS) + [f for f in FLOORS if args.floors and f not in (args.only or ())]
    runs = []
    for k in range(args.rounds):
        order = systems[k % len(systems):] + systems[:k % len(systems)]     # rotated each round
        for name in order:
            r = run_one(name, src, results_dir, k + 1, args.timeout)
            runs.append(r)
            if r["ok"]:
                first = f", first read at {r['first_read_s']:.2f} s" if "first_read_s" in r else ""
                rows = f", {r['rows']:,} rows" if r["rows"] is not None else ", imports only"
                print(f"round {k + 1} {name:<15} {r['seconds']:6.2f} s, CPU {r['cpu_seconds']:5.2f} s, "
                      f"peak RSS {r['peak_rss_mb']:6.0f} MB{rows}{first}", flush=True)
            else:
                print(f"round {k + 1} {name:<15} FAILED: {r.get('error', '')[-300:]}", flush=True)
    medians = {}
    for name in systems:
        ok = [r for r in runs if r["system"] == name and r["ok"]]
        if ok:
            medians[name] = {"seconds": statistics.median(r["seconds"] for r in ok),
                             "cpu_seconds": statistics.median(r["cpu_seconds"] for r in ok)}
            if all("first_read_s" in r for r in ok):
                medians[name]["first_read_s"] = statistics.median(r["first_read_s"] for r in ok)
    print()
    for name, m in medians.items():
        print(f"{name:<15} median {m['seconds']:.2f} s, CPU {m['cpu_seconds']:.2f} s"
              + (f", first read at {m['first_read_s']:.2f} s" if "first_read_s" in m else ""))
    headline = None
    if "gpuetl" in medians and "polars" in medians:
        ratio = medians["polars"]["seconds"] / medians["gpuetl"]["seconds"]
        headline = {"ratio": ratio, "text": f"gpuetl / polars = {ratio:.2f}× (medians of {args.rounds} rounds; "
                                            "goal ≥ 0.67×)"}
        print(headline["text"])
    if "polars" in medians:
        for name in FLOORS:
            if name in medians:
                bound = medians["polars"]["seconds"] / medians[name]["seconds"]
                print(f"polars / {name} = {bound:.2f}× (the most a run that imports this much could reach)")
                medians[name]["polars_over_floor"] = bound
    rows = {r["rows"] for r in runs if r["ok"] and r["rows"] is not None}
    side_by_side.write_results(
        args.json, "small", input={"path": str(src), "bytes": input_bytes, "lines": lines, "seed": args.seed},
        machine=base.machine_info(), load_average=os.getloadavg(), runs=runs, medians=medians,
        rows_agree=len(rows) <= 1, headline=headline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
