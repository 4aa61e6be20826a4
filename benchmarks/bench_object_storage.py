#!/usr/bin/env python
"""Side-by-side benchmark: gzipped access logs in many objects of an S3 store -> typed zstd
Parquet written back to the store.

    python benchmarks/bench_object_storage.py [--objects 1000] [--mb 1.0] [--rounds 1] [--json FILE]

Starts moto's S3 server on loopback (in this process), uploads `--objects` gzipped access logs of
about `--mb` MB each (uncompressed), then runs, each in a fresh subprocess and against the same
objects:

- gpuetl-cpu: `gpuetl run` with `source.path: s3://bench/logs/*.log.gz`, the apache_combined
  preset, one shard, `sink.path: s3://bench/out-gpuetl` (the full commit protocol);
- s3fs+pandas: a plain script: list, `fs.cat` the objects in batches, gunzip, parse with the same
  regex via pandas `str.extract`, type status/size/time, write one zstd Parquet object.

Reports wall seconds, CPU seconds of the system's processes and of the server (this process),
compressed and uncompressed MB/s, the requests the server answered (and per second), and the
load average when each run started. `--rounds N` runs the systems in turn N times (A B A B ...)
and reports the median of each. The loopback server is moto, in Python: it sets the ceiling for
both systems, and its numbers say nothing about a real store's. Not a test; nothing here is imported by gpuetl.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

PANDAS_SCRIPT = textwrap.dedent(r'''
    import gzip, io, sys
    import pandas as pd, pyarrow as pa, pyarrow.parquet as pq, s3fs
    PATTERN = (r'^(?P<ip>\S+) (?P<ident>\S+) (?P<user>\S+) \[(?P<time>[^\]]+)\] '
               r'"(?P<request>(?P<method>[A-Z]+) (?P<path>[^ "]*) (?P<protocol>[^"]*))" '
               r'(?P<status>\d{3}) (?P<size>\d+|-) '
               r'"(?P<referer>(?:[^"\\]|\\.)*)" "(?P<user_agent>(?:[^"\\]|\\.)*)"$')
    fs = s3fs.S3FileSystem()
    names = sorted(fs.glob("bench/logs/*.log.gz"))
    frames = []
    for i in range(0, len(names), 64):
        for name, data in sorted(fs.cat(names[i:i + 64]).items()):
            lines = pd.Series(gzip.decompress(data).decode("utf-8", "replace").splitlines(), dtype=object)
            frames.append(lines.str.extract(PATTERN))
    df = pd.concat(frames, ignore_index=True).dropna(subset=["ip"])
    df["status"] = df["status"].astype("int16")
    df["size"] = pd.to_numeric(df["size"].replace("-", None)).astype("Int64")
    df["time"] = pd.to_datetime(df["time"], format="%d/%b/%Y:%H:%M:%S %z", utc=True).astype("datetime64[us, UTC]")
    with fs.open("bench/out-pandas/part-00000.parquet", "wb") as fh:
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), fh, compression="zstd")
    print(len(df))
''')

PIPELINE = """\
version: 1
name: bench-s3
source: {type: text, path: "s3://bench/logs/*.log.gz"}
parse: {preset: apache_combined}
shard: {count: 1}
sink: {path: "s3://bench/out-gpuetl", mode: overwrite}
"""


class Requests(logging.Handler):
    """Counts the requests moto's server logs (werkzeug logs one line per request)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record):             # called under the handler's own lock
        if '" ' in record.getMessage():
            self.count += 1


def start_store():
    """moto's S3 server on loopback with a request counter, a `bench` bucket, and the environment
    a gpuetl process needs to reach it: (server, counter, env, s3fs filesystem)."""
    import s3fs
    from moto.server import ThreadedMotoServer

    counter = Requests()
    logging.getLogger("werkzeug").addHandler(counter)
    logging.getLogger("werkzeug").setLevel(logging.INFO)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}",
           "AWS_EC2_METADATA_DISABLED": "true", "PYTHONPATH": str(ROOT)}
    fs = s3fs.S3FileSystem(key="bench", secret="bench", client_kwargs={"endpoint_url": env["AWS_ENDPOINT_URL"]})
    fs.mkdir("bench")
    return server, counter, env, fs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=1000)
    ap.add_argument("--mb", type=float, default=1.0, help="uncompressed MB per object")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each system, alternating")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from gpuetl.samples import write_access_logs

    server, counter, env, fs = start_store()

    lines = max(1, int(args.mb * 1e6 / 205))            # ~205 bytes per generated line
    raw_bytes = gz_bytes = 0
    with tempfile.TemporaryDirectory() as tmp:
        sample = Path(tmp) / "x.log"
        batch = {}
        for i in range(args.objects):
            write_access_logs(sample, lines=lines, seed=i)
            data = sample.read_bytes()
            raw_bytes += len(data)
            packed = gzip.compress(data, compresslevel=6)
            gz_bytes += len(packed)
            batch[f"bench/logs/{i:05d}.log.gz"] = packed
            if len(batch) == 64 or i == args.objects - 1:
                fs.pipe(batch)
                batch = {}
        print(f"{args.objects} objects: {raw_bytes / 1e6:.0f} MB of logs, {gz_bytes / 1e6:.0f} MB gzipped",
              file=sys.stderr)
        (Path(tmp) / "p.yaml").write_text(PIPELINE)
        (Path(tmp) / "plain.py").write_text(PANDAS_SCRIPT)
        systems = {
            "gpuetl-cpu": [sys.executable, "-m", "gpuetl", "run", str(Path(tmp) / "p.yaml"), "--backend", "cpu"],
            "s3fs+pandas": [sys.executable, str(Path(tmp) / "plain.py")],
        }
        runs: dict[str, list[dict]] = {name: [] for name in systems}
        for _ in range(args.rounds):
            for name, cmd in systems.items():
                before, load = counter.count, os.getloadavg()[0]
                children, own = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
                started = time.perf_counter()
                proc = subprocess.run(cmd, env={**env, "TMPDIR": tmp}, capture_output=True, text=True)
                wall = time.perf_counter() - started
                if proc.returncode != 0:
                    print(f"{name} failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
                    continue
                after_children, after_own = (resource.getrusage(resource.RUSAGE_CHILDREN),
                                             resource.getrusage(resource.RUSAGE_SELF))
                cpu = sum(getattr(after_children, f) - getattr(children, f) for f in ("ru_utime", "ru_stime"))
                server_cpu = sum(getattr(after_own, f) - getattr(own, f) for f in ("ru_utime", "ru_stime"))
                requests = counter.count - before
                run = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "server_cpu_s": round(server_cpu, 2),
                       "gz_MB_s": round(gz_bytes / 1e6 / wall, 1), "raw_MB_s": round(raw_bytes / 1e6 / wall, 1),
                       "requests": requests, "requests_s": round(requests / wall, 1), "load": round(load, 1)}
                runs[name].append(run)
                print(f"{name:<12} {wall:7.1f} s  {cpu:6.1f} CPU-s (server {server_cpu:5.1f})  "
                      f"{raw_bytes / 1e6 / wall:6.1f} MB/s of logs ({gz_bytes / 1e6 / wall:5.1f} MB/s gzipped)  "
                      f"{requests} requests ({requests / wall:.0f}/s)  load {load:.1f}", file=sys.stderr)
        results = {name: {key: statistics.median(r[key] for r in done) for key in done[0]} | {"runs": done}
                   for name, done in runs.items() if done}
        for name, r in results.items():
            print(f"{name:<12} median of {len(r['runs'])}: {r['wall_s']:7.1f} s  {r['cpu_s']:6.1f} CPU-s  "
                  f"{r['raw_MB_s']:6.1f} MB/s of logs  {r['requests']:.0f} requests ({r['requests_s']:.0f}/s)")
    server.stop()
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"objects": args.objects, "raw_bytes": raw_bytes,
                                               "gz_bytes": gz_bytes, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
