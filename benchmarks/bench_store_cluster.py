#!/usr/bin/env python
"""What a run on a cluster without a shared disk costs: the same pipeline, s3:// in and out,
on gpuetl's own cluster (spills and shards in the local staging folder) and on an external
scheduler with two worker processes, each with its own TMPDIR (spills, shard records and shards
through the store, sinks/runstore.py), side by side.

    python benchmarks/bench_store_cluster.py [--objects 40] [--mb 1.0] [--rounds 2] [--json FILE]

Starts moto's S3 server on loopback (in this process), uploads `--objects` uncompressed access
logs (read in byte ranges by the workers themselves), and runs `gpuetl run` (shuffled, 4 shards,
2 splits) in turns. Reports wall seconds, CPU seconds of the `gpuetl run` process, of the two
workers (both kinds of run use them only in the second) and of the server (this process), and the
requests the server answered. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from bench_object_storage import start_store  # noqa: E402  (the same loopback store)

PIPELINE = """\
version: 1
name: bench-store-cluster
source: {type: text, path: "s3://bench/logs/*.log", blocksize: 4MiB}
parse: {preset: apache_combined}
steps:
  - dedupe: {on: [ip, time, request]}
shard: {count: 4, key: [ip], shuffle: true, seed: 0, splits: {train: 0.9, val: 0.1}}
sink: {path: "s3://bench/out", mode: overwrite}
"""


def cpu(usage) -> float:
    return usage.ru_utime + usage.ru_stime


def workers_cpu(procs) -> float:
    import psutil

    return sum(sum(psutil.Process(p.pid).cpu_times()[:2]) for p in procs[1:])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=40)
    ap.add_argument("--mb", type=float, default=1.0, help="MB per object")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from gpuetl.samples import write_access_logs

    server, counter, env, fs = start_store()
    dask_cli = str(Path(sys.executable).with_name("dask"))
    lines = max(1, int(args.mb * 1e6 / 205))
    raw = 0
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i in range(args.objects):
            write_access_logs(tmp / "x.log", lines=lines, seed=i)
            data = (tmp / "x.log").read_bytes()
            raw += len(data)
            fs.pipe_file(f"bench/logs/{i:05d}.log", data)
        (tmp / "p.yaml").write_text(PIPELINE)
        print(f"{args.objects} objects, {raw / 1e6:.0f} MB of logs", file=sys.stderr)
        try:
            address_file = tmp / "scheduler.json"
            procs.append(subprocess.Popen([dask_cli, "scheduler", "--host", "127.0.0.1", "--port", "0",
                                           "--no-dashboard", "--scheduler-file", str(address_file)], cwd=tmp,
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            for name in ("w1", "w2"):
                (tmp / name).mkdir()
                procs.append(subprocess.Popen([dask_cli, "worker", "--scheduler-file", str(address_file),
                                               "--nthreads", "1", "--no-nanny", "--no-dashboard", "--host",
                                               "127.0.0.1", "--local-directory", str(tmp / name)], cwd=tmp / name,
                                              env={**env, "TMPDIR": str(tmp / name)},
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            while not address_file.exists():
                time.sleep(0.2)
            address = json.loads(address_file.read_text())["address"]
            from distributed import Client

            with Client(address, timeout="60s") as client:
                client.wait_for_workers(2, timeout=120)
            base = [sys.executable, "-m", "gpuetl", "run", str(tmp / "p.yaml"), "--backend", "cpu"]
            systems = {"own cluster (local staging)": base,
                       "external, 2 workers (through the store)": base + ["--scheduler", address]}
            runs: dict[str, list[dict]] = {name: [] for name in systems}
            for _ in range(args.rounds):
                for name, cmd in systems.items():
                    before, load = counter.count, os.getloadavg()[0]
                    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
                    workers = workers_cpu(procs)
                    started = time.perf_counter()
                    proc = subprocess.run(cmd, env={**env, "TMPDIR": str(tmp)}, capture_output=True, text=True)
                    wall = time.perf_counter() - started
                    if proc.returncode != 0:
                        print(f"{name} failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
                        continue
                    run = {"wall_s": round(wall, 2),
                           "client_cpu_s": round(cpu(resource.getrusage(resource.RUSAGE_CHILDREN)) - cpu(children), 2),
                           "workers_cpu_s": round(workers_cpu(procs) - workers, 2),
                           "server_cpu_s": round(cpu(resource.getrusage(resource.RUSAGE_SELF)) - cpu(own), 2),
                           "requests": counter.count - before, "load": round(load, 1)}
                    run["requests_s"] = round(run["requests"] / wall, 1)
                    runs[name].append(run)
                    print(f"{name:<42} {wall:6.1f} s  client {run['client_cpu_s']:5.1f} CPU-s  workers "
                          f"{run['workers_cpu_s']:5.1f} CPU-s  server "
                          f"{run['server_cpu_s']:5.1f} CPU-s  {run['requests']} requests ({run['requests_s']:.0f}/s)"
                          f"  load {load:.1f}", file=sys.stderr)
        finally:
            for proc in reversed(procs):
                proc.terminate()
                proc.wait(timeout=30)
    server.stop()
    results = {name: {k: statistics.median(r[k] for r in done) for k in done[0]} for name, done in runs.items() if done}
    for name, r in results.items():
        print(f"{name:<42} median: {r['wall_s']:6.1f} s  {raw / 1e6 / r['wall_s']:5.1f} MB/s of logs  "
              f"{r['requests']:.0f} requests ({r['requests_s']:.0f}/s)")
    if args.json:
        Path(args.json).write_text(json.dumps({"objects": args.objects, "raw_bytes": raw, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
