"""Shuffle + shard vs the same pipeline without sharding, side by side on the same input.

    python benchmarks/bench_shard.py [--size 1GB] [--json benchmarks/results/shard.json]

Both runs use benchmarks/access_logs.yaml on the CPU backend in a fresh `gpuetl run` process;
the sharded run adds `shard: {count: 16, shuffle: true, seed: 0, splits: {train: .98, val: .01,
test: .01}}`. The headline is the time ratio sharded / plain (goal ≤ 1.5×), measured in one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_access_logs import (ensure_input, gpuetl_command, machine_info, parse_size, run_command,  # noqa: E402
                               warm_and_count)

VARIANTS = {
    "plain": [],
    "shuffle+shard": ["shard.count=16", "shard.shuffle=true", "shard.seed=0",
                      "shard.splits={train: 0.98, val: 0.01, test: 0.01}"],
    "key+target_bytes": ["shard.target_bytes=64MiB", "shard.key=[ip]", "shard.shuffle=true"],
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1GB")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default=str(HERE / "data"))
    ap.add_argument("--json", default=str(HERE / "results" / "shard.json"))
    ap.add_argument("--timeout", type=float, default=3600)
    args = ap.parse_args(argv)
    src = ensure_input(Path(args.data), parse_size(args.size), args.seed, 0)
    lines = warm_and_count(src)
    results_dir = Path(args.json).resolve().parent     # absolute: gpuetl resolves a relative sink.path
    #                                                     against the pipeline file's folder
    results_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for name, sets in VARIANTS.items():
        print(f"running {name} ...", flush=True)
        out = results_dir / f"out-shard-{name}"
        res = run_command(name, gpuetl_command(src, out, sets=sets), out, results_dir / f"shard-{name}.log",
                          args.timeout)
        results.append(res)
        print(f"  {res.get('seconds', float('nan')):.2f} s, {res.get('rows', 0):,} rows, "
              f"{res.get('output_files', 0)} files" + (f"  ERROR {res['error']}" if res.get("error") else ""))
    base = results[0].get("seconds")
    print(f"\n{'variant':<18} {'seconds':>8} {'MB/s':>8} {'files':>6} {'rows':>12} {'vs plain':>9}")
    size_mb = src.stat().st_size / 1e6
    for r in results:
        if r.get("ok"):
            r["ratio_to_plain"] = r["seconds"] / base if base else None
            print(f"{r['system']:<18} {r['seconds']:>8.2f} {size_mb / r['seconds']:>8.1f} {r['output_files']:>6} "
                  f"{r['rows']:>12,} {r['ratio_to_plain']:>8.2f}×")
    rows = {r.get("rows") for r in results if r.get("ok")}
    if len(rows) > 1:
        print("WARNING: the variants disagree on the row count")
    out = {"input": str(src), "input_bytes": src.stat().st_size, "lines": lines, "machine": machine_info(),
           "results": results, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.json).write_text(json.dumps(out, indent=2, default=str))
    sharded = next((r for r in results if r["system"] == "shuffle+shard" and r.get("ok")), None)
    if sharded and base:
        print(f"\nshuffle+shard / plain = {sharded['ratio_to_plain']:.2f}× (goal ≤ 1.5×)")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
