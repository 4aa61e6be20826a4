#!/usr/bin/env python
"""The GPU check, in one run on a GPU machine (issue 3):

1. `pytest -m gpu` (the GPU backend's own tests and the CPU/GPU parity tests);
2. an access log of --size (default 4 GB) from gpuetl.samples.write_access_logs, page cache warmed;
3. KvikIO's read bandwidth for that file (CuFile.pread into device memory, best of 3);
4. the access-log job (benchmarks/access_logs.yaml) with --backend gpu, then --backend cpu on all
   cores (on --cpu-size bytes, a prefix of the same file, default the whole file);
5. the workers' peak host RSS for the GPU job on each of --rss-sizes (default 1GB,4GB), to show
   it stays flat as the input grows;
6. a table on stdout and JSON at --out (default $OUT/gpu_check.json, else benchmarks/results/).

    PYTHONPATH=$PWD:/tmp/site python3 benchmarks/gpu_check.py --out $OUT
    python3 benchmarks/gpu_check.py --size 1GB --rss-sizes 1GB,2GB --skip-tests   # a quick one

Each job runs in a fresh subprocess (so the client never creates a CUDA context and memory is
returned between jobs). Not imported by the package.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def size_of(text: str) -> int:
    t = text.strip().upper()
    num = t.rstrip("KMGIB")
    return int(float(num) * UNITS[t[len(num):]])


# ------------------------------------------------------------------------------- subprocess workers

def worker_job(backend: str, src: str, out: str) -> dict:
    import resource

    from distributed import Client, LocalCluster

    from gpuetl import Pipeline
    from gpuetl.backends import get_backend

    pipeline = Pipeline.from_file(HERE / "access_logs.yaml",
                                  overrides=[f"source.path={src}", f"sink.path={out}", "sink.mode=overwrite"])
    chosen = get_backend(backend)
    if backend == "gpu":
        cluster_cm = chosen.local_cluster()
    else:
        cluster_cm = LocalCluster(n_workers=os.cpu_count(), threads_per_worker=1, processes=True,
                                  dashboard_address=None)
    with cluster_cm as cluster, Client(cluster) as client:
        client.run(lambda: None)                      # workers up before the clock starts
        started = time.perf_counter()
        result = pipeline.run(backend=backend, client=client)
        seconds = time.perf_counter() - started
        rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        fallbacks = chosen.fallbacks(client)
        io = chosen.io_path()
    return {"backend": backend, "seconds": seconds, "input_bytes": os.path.getsize(src),
            "gbps": os.path.getsize(src) / seconds / 1e9, "rows_out": result.counts["rows_out"],
            "counts": result.counts, "workers": len(rss), "worker_peak_rss": max(rss.values()),
            "worker_rss": list(rss.values()), "fallbacks": fallbacks, "io": io,
            "shards": [(s["path"], s["sha256"]) for s in result.shards]}


def worker_kvikio(src: str, repeats: int = 3) -> dict:
    import cupy as cp
    import kvikio

    size = os.path.getsize(src)
    chunk = min(size, 1 << 30)
    buf = cp.empty(chunk, dtype=cp.uint8)
    best = None
    with kvikio.CuFile(src, "r") as fh:
        for _ in range(repeats):
            cp.cuda.runtime.deviceSynchronize()
            t0 = time.perf_counter()
            pos = 0
            while pos < size:
                n = min(chunk, size - pos)
                fh.pread(buf[:n], n, pos).get()
                pos += n
            cp.cuda.runtime.deviceSynchronize()
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
    from gpuetl.backends.gpu import GpuBackend

    return {"bytes": size, "seconds": best, "gbps": size / best / 1e9, "io": GpuBackend().io_path()}


def run_worker(kind: str, *args, timeout: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, *args]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout}s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            out = json.loads(line)
            out["wall_with_startup"] = time.perf_counter() - started
            return out
    return {"error": (proc.stderr or proc.stdout)[-3000:], "returncode": proc.returncode}


# ------------------------------------------------------------------------------- the check

def make_inputs(data: Path, sizes: list[int]) -> dict[int, Path]:
    """One generated file of the largest size; smaller ones are its prefixes (the generator's
    output for a smaller target_bytes is a prefix of a larger one)."""
    from gpuetl.samples import write_access_logs

    data.mkdir(parents=True, exist_ok=True)
    largest = max(sizes)
    big = data / f"access-{largest}.log"
    if not big.exists():
        t0 = time.perf_counter()
        write_access_logs(big, target_bytes=largest, seed=0)
        print(f"generated {big} ({largest / 1e9:.1f} GB) in {time.perf_counter() - t0:.0f}s", flush=True)
    out = {largest: big}
    for s in sorted(set(sizes) - {largest}):
        p = data / f"access-{s}.log"
        if not p.exists():
            with open(big, "rb") as src, open(p, "wb") as dst:
                shutil.copyfileobj(_Limited(src, s), dst)
                dst.write(src.readline())          # finish the line, as target_bytes does
        out[s] = p
    for p in out.values():                          # warm the page cache
        with open(p, "rb") as fh:
            while fh.read(1 << 26):
                pass
    return out


class _Limited:
    def __init__(self, fh, n):
        self.fh, self.left = fh, n

    def read(self, k=-1):
        k = self.left if k < 0 else min(k, self.left)
        data = self.fh.read(k)
        self.left -= len(data)
        return data


def run_tests(timeout: int) -> dict:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                               "tests/backends"], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"summary": f"timed out after {timeout}s", "ok": False}
    lines = [l for l in proc.stdout.splitlines() if l.strip()]
    return {"ok": proc.returncode == 0, "summary": lines[-1] if lines else proc.stderr[-500:],
            "seconds": round(time.perf_counter() - t0, 1), "tail": "\n".join(lines[-40:])}


def machine() -> dict:
    info = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        from gpuetl.backends.gpu import gpu_memory

        import pynvml

        pynvml.nvmlInit()
        info["gpus"] = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
        info["gpu_memory"] = gpu_memory()
        pynvml.nvmlShutdown()
    except Exception as err:
        info["gpus"] = f"unknown ({err})"
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="4GB")
    ap.add_argument("--cpu-size", default=None, help="bytes for the CPU backend's run (default: --size)")
    ap.add_argument("--rss-sizes", default="1GB,4GB")
    ap.add_argument("--data", default="/tmp/gpuetl-check")
    ap.add_argument("--out", default=None)
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per job")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        kind, *rest = args.worker
        out = worker_job(*rest) if kind == "job" else worker_kvikio(*rest)
        print(json.dumps(out))
        return 0

    size = size_of(args.size)
    cpu_size = size_of(args.cpu_size) if args.cpu_size else size
    rss_sizes = [size_of(s) for s in args.rss_sizes.split(",") if s]
    report: dict = {"machine": machine(), "size": size, "cpu_size": cpu_size, "rss_sizes": rss_sizes}
    if not args.skip_tests:
        report["tests"] = run_tests(args.timeout)
        print("pytest -m gpu:", report["tests"]["summary"], flush=True)
    files = make_inputs(Path(args.data), [size, cpu_size, *rss_sizes])
    out_root = Path(args.data) / "out"
    report["kvikio"] = run_worker("kvikio", str(files[size]), timeout=args.timeout)
    report["gpu"] = run_worker("job", "gpu", str(files[size]), str(out_root / "gpu"), timeout=args.timeout)
    report["cpu"] = run_worker("job", "cpu", str(files[cpu_size]), str(out_root / "cpu"), timeout=args.timeout)
    report["rss"] = {}
    for s in rss_sizes:
        report["rss"][s] = (report["gpu"] if s == size and "error" not in report["gpu"] else
                            run_worker("job", "gpu", str(files[s]), str(out_root / f"gpu-{s}"), timeout=args.timeout))
    if cpu_size == size and "shards" in report["gpu"] and "shards" in report["cpu"]:
        report["same_bytes"] = report["gpu"]["shards"] == report["cpu"]["shards"]
    g, c, k = report["gpu"], report["cpu"], report["kvikio"]
    if "gbps" in g and "gbps" in c:
        report["gpu_vs_cpu"] = g["gbps"] / c["gbps"]
    if "gbps" in g and "gbps" in k:
        report["gpu_vs_kvikio"] = g["gbps"] / k["gbps"]
    print_table(report)
    dest = Path(args.out or os.environ.get("OUT") or HERE / "results")
    dest = dest / "gpu_check.json" if dest.suffix != ".json" else dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(report, indent=2, default=str))
    print(f"JSON: {dest}")
    ok = report.get("tests", {}).get("ok", True) and "error" not in g
    return 0 if ok else 1


def print_table(r: dict) -> None:
    def row(name, d, extra=""):
        if "error" in d:
            print(f"{name:<22} ERROR {d['error'].strip().splitlines()[-1][:100]}")
            return
        rss = f"{d['worker_peak_rss'] / 2**20:9.0f}" if "worker_peak_rss" in d else " " * 9
        print(f"{name:<22} {d['input_bytes' if 'input_bytes' in d else 'bytes'] / 1e9:7.2f} {d['seconds']:8.2f} "
              f"{d['gbps']:8.2f} {rss}  {extra}")

    print(f"\n{'what':<22} {'GB':>7} {'seconds':>8} {'GB/s':>8} {'RSS MiB':>9}  note")
    print("-" * 78)
    row("kvikio read", r["kvikio"], r["kvikio"].get("io", ""))
    row("gpuetl --backend gpu", r["gpu"], f"{r['gpu'].get('workers', '?')} worker(s); fallbacks {r['gpu'].get('fallbacks', {})}")
    row("gpuetl --backend cpu", r["cpu"], f"{r['cpu'].get('workers', '?')} workers")
    for s, d in r["rss"].items():
        row(f"gpu RSS @ {s / 1e9:g} GB", d)
    for key in ("gpu_vs_cpu", "gpu_vs_kvikio"):
        if key in r:
            print(f"{key}: {r[key]:.2f}x")
    if "same_bytes" in r:
        print("GPU and CPU shards byte-identical:", r["same_bytes"])
    if "tests" in r:
        print("pytest -m gpu:", r["tests"]["summary"])


if __name__ == "__main__":
    sys.exit(main())
