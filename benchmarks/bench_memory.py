#!/usr/bin/env python
"""Peak memory of `gpuetl run` on plain and gzip inputs of the same access logs.

    python benchmarks/bench_memory.py [--sizes 1GB 2GB] [--data benchmarks/data]
        [--blocksize 64MiB] [--json benchmarks/results/memory.json]

For each size: the access log of bench_access_logs.py (generated once, cached in
benchmarks/data/) and its gzip (`gzip -6`, cached next to it); `gpuetl run
benchmarks/access_logs.yaml --backend cpu` on each, one after the other, each in a fresh
process. Peak RSS comes from `os.wait4`'s rusage of that process: the largest RSS of it or
any child it reaped (the local cluster runs in the same process). Prints a table: input,
bytes on disk, seconds, peak RSS, and the gzip run's RSS minus the plain run's. The
goal (issue 12, item 11): gzip peak RSS <= plain peak RSS + 0.3 GB.

Not a test; the machine may be shared, so seconds are noisy: RSS is what this measures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_access_logs as common  # noqa: E402  (the same input, command and measurement)

GOAL_EXTRA_MB = 300


def ensure_gzip(path: Path) -> Path:
    """`path`.gz next to it, made once (gzip -6, or Python's gzip where there is no gzip)."""
    out = path.with_name(path.name + ".gz")
    if out.exists():
        print(f"input: {out} (cached)")
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
    print(f"input: {out} written ({out.stat().st_size / 1e6:,.0f} MB)")
    return out


def measure(name: str, src: Path, results: Path, blocksize: str, timeout: float) -> dict:
    out = results / f"out-memory-{name}"
    cmd = common.gpuetl_command(src, out, sets=[f"source.blocksize={blocksize}"])
    res = common.run_command(name, cmd, out, results / f"memory-{name}.log", timeout)
    shutil.rmtree(out, ignore_errors=True)
    res["input"] = str(src)
    res["input_bytes"] = src.stat().st_size
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=common.parse_size, default=[10**9, 2 * 10**9])
    ap.add_argument("--data", type=Path, default=HERE / "data")
    ap.add_argument("--blocksize", default="64MiB")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", type=Path, default=HERE / "results" / "memory.json")
    args = ap.parse_args(argv)
    results = args.json.parent
    results.mkdir(parents=True, exist_ok=True)

    rows = []
    for size in args.sizes:
        plain = common.ensure_input(args.data, size, args.seed, 0)
        packed = ensure_gzip(plain)
        for kind, src in (("plain", plain), ("gzip", packed)):
            name = f"{common.human(size)}-{kind}"
            common.warm_and_count(src)
            res = measure(name, src, results, args.blocksize, args.timeout)
            res.update(size=common.human(size), kind=kind)
            rows.append(res)
            print(f"  {name}: {res.get('seconds', 0):.1f} s, peak RSS {res.get('peak_rss_mb', 0):,.0f} MB"
                  + ("" if res["ok"] else f"  FAILED: {res.get('error')}"), flush=True)

    print()
    print(f"{'size':>6} {'input':>6} {'on disk':>9} {'seconds':>8} {'rows out':>11} {'peak RSS':>10} {'vs plain':>9}")
    plain_rss = {r["size"]: r.get("peak_rss_mb") for r in rows if r["kind"] == "plain"}
    extras = []
    for r in rows:
        extra = r.get("peak_rss_mb", 0) - (plain_rss.get(r["size"]) or 0) if r["kind"] == "gzip" else None
        if extra is not None:
            extras.append(extra)
        print(f"{r['size']:>6} {r['kind']:>6} {r['input_bytes'] / 1e6:>7,.0f}MB {r.get('seconds', 0):>8.1f} "
              f"{r.get('rows', 0):>11,} {r.get('peak_rss_mb', 0):>7,.0f} MB "
              + (f"{extra:>+6,.0f} MB" if extra is not None else f"{'':>9}")
              + ("" if r["ok"] else "  FAILED"))
    worst = max(extras, default=0.0)
    print(f"\ngoal: gzip peak RSS <= plain + {GOAL_EXTRA_MB} MB: "
          + ("met" if worst <= GOAL_EXTRA_MB and all(r["ok"] for r in rows) else "NOT met")
          + f" (worst {worst:+,.0f} MB)")
    args.json.write_text(json.dumps({"machine": common.machine_info(), "blocksize": args.blocksize, "runs": rows},
                                    indent=2, default=str))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
