#!/usr/bin/env python
"""What flushing to the disk costs: `bench_access_logs.py`'s gpuetl run with `sink.durable: true`
(the default: every published file fsync'd before its rename, its folder after) and `false`.

    python benchmarks/bench_durable.py [--size 1GB] [--rounds 3] [--data benchmarks/data]
        [--json benchmarks/results/durable.json]

The same generated access log as bench_access_logs.py (cached), the page cache warmed, then
`gpuetl run benchmarks/access_logs.yaml --backend cpu` in a fresh process per run, the two
settings alternating and their order swapped each round (on/off, off/on, ...), so drift in a
shared machine's load falls on both. Reports each run's wall seconds and the medians.

`--fsync-time` adds one durable run in this process (the threads scheduler) with `os.fsync`
wrapped in a timer, in this script only: how many flushes a run makes and the seconds they
take, a figure a loaded machine's wall-time noise cannot hide.

Not a test; nothing here is imported by the package.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_access_logs as bench  # noqa: E402
import side_by_side  # noqa: E402

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=bench.parse_size, default=bench.parse_size("1GB"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data", type=Path, default=HERE / "data")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "out-durable",
                    help="the dataset folder (put it on the disk whose cost you want)")
    ap.add_argument("--json", type=Path, default=HERE / "results" / "durable.json")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--fsync-time", action="store_true", help="also time every fsync of one in-process run")
    ap.add_argument("--skip-wall", action="store_true", help="only the --fsync-time run")
    ap.add_argument("--shards", type=int, help="shard.count (default: the pipeline's, one shard)")
    args = ap.parse_args(argv)

    src = bench.ensure_input(args.data.resolve(), args.size, args.seed, 0)
    input_bytes, lines = side_by_side.warm(src, bench.warm_and_count)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    runs, flushes = [], None
    if args.fsync_time:
        flushes = time_fsyncs(src, args.out, args.shards)
        print(f"in-process durable run: {flushes['calls']} fsync calls, {flushes['fsync_seconds']:.3f} s in fsync "
              f"({flushes['files']} files, {flushes['folders']} folders) of {flushes['run_seconds']:.2f} s; "
              f"output {flushes['output_bytes'] / 1e6:,.1f} MB", flush=True)
    for r in range(0 if args.skip_wall else args.rounds):
        for durable in ((True, False) if r % 2 == 0 else (False, True)):
            sets = [f"sink.durable={'true' if durable else 'false'}"] + ([f"shard.count={args.shards}"] if args.shards else [])
            cmd = bench.gpuetl_command(src, args.out, sets=sets)
            res = bench.run_command(f"durable={durable}", cmd, args.out, args.out.with_suffix(".log"), args.timeout)
            if not res.get("ok") or res.get("rows") != lines:
                print(f"round {r + 1}, durable={durable}: failed: {res.get('error') or res.get('rows')}")
                return 1
            runs.append({"round": r + 1, "durable": durable, "seconds": round(res["seconds"], 2),
                         "cpu_seconds": round(res["cpu_seconds"], 2), "output_bytes": res["output_bytes"]})
            print(f"round {r + 1}  durable={str(durable).lower():5}  {res['seconds']:7.2f} s wall  "
                  f"{res['cpu_seconds']:7.2f} s cpu", flush=True)
    medians = {}
    if runs:
        on = medians["durable"] = statistics.median(x["seconds"] for x in runs if x["durable"])
        off = medians["not_durable"] = statistics.median(x["seconds"] for x in runs if not x["durable"])
        print(f"median: durable {on:.2f} s, not durable {off:.2f} s: {on - off:+.2f} s ({(on / off - 1) * 100:+.1f} %) "
              f"on {input_bytes / 1e6:,.0f} MB, {lines:,} lines")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"input": {"path": str(src), "bytes": input_bytes, "lines": lines},
                                     "runs": runs, "median_seconds": medians, "fsync": flushes,
                                     "machine": bench.machine_info()}, indent=1))
    return 0


def time_fsyncs(src: Path, out: Path, shards: int | None = None) -> dict:
    """One durable run in this process with every os.fsync timed (this script's process only)."""
    import os
    import shutil
    import stat
    import time

    import yaml

    sys.path.insert(0, str(bench.ROOT))
    import gpuetl

    spec = yaml.safe_load((HERE / "access_logs.yaml").read_text())
    spec["source"]["path"], spec["sink"]["path"], spec["sink"]["mode"] = str(src), str(out), "overwrite"
    if shards:
        spec["shard"] = {"count": shards}
    shutil.rmtree(out, ignore_errors=True)
    real, seen = os.fsync, {"calls": 0, "files": 0, "folders": 0, "fsync_seconds": 0.0}

    def timed(fd):
        t = time.perf_counter()
        try:
            return real(fd)
        finally:
            seen["fsync_seconds"] += time.perf_counter() - t
            seen["calls"] += 1
            seen["folders" if stat.S_ISDIR(os.fstat(fd).st_mode) else "files"] += 1

    os.fsync = timed
    try:
        t = time.perf_counter()
        result = gpuetl.Pipeline.from_dict(spec, base_dir=HERE).run(backend="cpu", scheduler="threads")
        seen["run_seconds"] = time.perf_counter() - t
    finally:
        os.fsync = real
    seen["output_bytes"] = sum(s["bytes"] for s in result.shards)
    return seen


if __name__ == "__main__":
    sys.exit(main())
