#!/usr/bin/env python
"""Side-by-side benchmark: gzipped access logs in many objects of an S3 store -> typed zstd
Parquet written back to the store.

    python benchmarks/bench_object_storage.py [--objects 1000] [--mb 1.0] [--json FILE]

Starts moto's S3 server on loopback (in this process), uploads `--objects` gzipped access logs of
about `--mb` MB each (uncompressed), then runs, each in a fresh subprocess and against the same
objects:

- gpuetl-cpu: `gpuetl run` with `source.path: s3://bench/logs/*.log.gz`, the apache_combined
  preset, one shard, `sink.path: s3://bench/out-gpuetl` (the full commit protocol);
- s3fs+pandas: a plain script: list, `fs.cat` the objects in batches, gunzip, parse with the same
  regex via pandas `str.extract`, type status/size/time, write one zstd Parquet object.

Reports wall seconds, compressed and uncompressed MB/s and the requests the server answered (and
per second). The loopback server is moto, in Python: it sets the ceiling for both systems, and
its numbers say nothing about a real store's. Not a test; nothing here is imported by gpuetl.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=1000)
    ap.add_argument("--mb", type=float, default=1.0, help="uncompressed MB per object")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import s3fs
    from moto.server import ThreadedMotoServer

    sys.path.insert(0, str(ROOT))
    from gpuetl.samples import write_access_logs

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
        results = {}
        for name, cmd in systems.items():
            before = counter.count
            started = time.perf_counter()
            proc = subprocess.run(cmd, env={**env, "TMPDIR": tmp}, capture_output=True, text=True)
            wall = time.perf_counter() - started
            if proc.returncode != 0:
                print(f"{name} failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
                continue
            requests = counter.count - before
            results[name] = {"wall_s": round(wall, 2), "gz_MB_s": round(gz_bytes / 1e6 / wall, 1),
                             "raw_MB_s": round(raw_bytes / 1e6 / wall, 1), "requests": requests,
                             "requests_s": round(requests / wall, 1)}
            print(f"{name:<12} {wall:7.1f} s  {raw_bytes / 1e6 / wall:6.1f} MB/s of logs "
                  f"({gz_bytes / 1e6 / wall:5.1f} MB/s gzipped)  {requests} requests ({requests / wall:.0f}/s)")
    server.stop()
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"objects": args.objects, "raw_bytes": raw_bytes,
                                               "gz_bytes": gz_bytes, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
