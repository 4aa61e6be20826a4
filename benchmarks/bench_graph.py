#!/usr/bin/env python
"""How building a run's task graph grows with its partitions.

    .venv/bin/python benchmarks/bench_graph.py [--partitions 400 800 1600 3200] [--rounds 3]

A filter + dedupe plan (benchmarks/dedupe.yaml's steps) over a generated access log, planned
at blocksizes that give about the asked partition counts; then runtime/graph.py's
build_partitions, consumed whole, as the run builds it: in order (the CPU's default, a chain
through every partition) and at once (a cluster's). Reports per count the best of `rounds`:
seconds, microseconds a partition, the tasks, and the memory the graph holds (RSS grown while
building). A graph whose cost is linear in its partitions shows a flat time a partition.

Not a test; nothing here is imported by the package.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from gpuetl import Pipeline  # noqa: E402
from gpuetl.backends import get_backend  # noqa: E402
from gpuetl.runtime.graph import build_partitions, count_tasks  # noqa: E402
from gpuetl.samples import write_access_logs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, nargs="+", default=[400, 800, 1600, 3200])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    backend, proc = get_backend("cpu"), psutil.Process()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "access.log"
        write_access_logs(log, target_bytes=24 * 2**20, seed=0)     # 24 MiB: partitions of a few KiB
        size = log.stat().st_size
        print(f"{'mode':9s} {'partitions':>10s} {'seconds':>8s} {'µs/part':>8s} {'tasks':>7s} {'graph MiB':>9s}")
        for wanted in args.partitions:
            plan = Pipeline.from_file(HERE / "dedupe.yaml", [f"source.path={log}", f"sink.path={tmp}/out",
                                                             f"source.blocksize={max(size // wanted, 1024)}"]
                                      ).plan(backend)
            n = len(plan.partitions)
            for mode, in_order in (("in order", True), ("at once", False)):
                best, grown, tasks = float("inf"), 0, 0
                for _ in range(args.rounds):
                    gc.collect()
                    before = proc.memory_info().rss
                    start = time.perf_counter()
                    parts = build_partitions(plan, backend, in_order=in_order, scratch=tmp,
                                             ahead=2 if in_order else None)
                    took = time.perf_counter() - start
                    if took < best:
                        best, grown, tasks = took, proc.memory_info().rss - before, count_tasks(parts)
                    del parts
                print(f"{mode:9s} {n:10d} {best:8.3f} {best / n * 1e6:8.0f} {tasks:7d} {max(grown, 0) / 2**20:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
