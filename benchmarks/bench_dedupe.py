#!/usr/bin/env python
"""Side-by-side benchmark: filter + exact dedupe of Apache access logs -> zstd Parquet.

    python benchmarks/bench_dedupe.py [--size 1GB] [--data benchmarks/data]
        [--json benchmarks/results/dedupe.json] [--only NAME ...]

The same input as bench_access_logs.py (generated once with gpuetl.samples.write_access_logs,
cached by size + seed + generator version; ~1 % of the lines are repeats), the same parse
(Apache combined regex -> 12 columns; status int16, size int64 with '-' -> null, time -> UTC
timestamp[us]), then: keep rows with status < 400, drop exact duplicate rows (all 12 columns;
the first copy in file order stays) and write zstd Parquet. Systems: pandas (drop_duplicates),
polars (unique(keep="first", maintain_order=True)) and gpuetl-cpu (benchmarks/dedupe.yaml), each
in a fresh subprocess, one after the other, after warming the page cache. Prints a table and
the ratio gpuetl-cpu / polars (polars seconds / gpuetl seconds: above 1 means gpuetl is faster).
See benchmarks/README.md.

Not a test; nothing here is imported by the package.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import bench_access_logs as base  # noqa: E402  (input cache, page-cache warming, runner helpers)
import side_by_side  # noqa: E402

SYSTEMS = ("pandas", "polars", "gpuetl-cpu")
PEERS = ("pandas", "polars")
PATTERN, TIME_FORMAT = base.PATTERN, base.TIME_FORMAT


def work_pandas(src: str, out: str) -> None:
    import pandas as pd

    os.makedirs(out, exist_ok=True)
    parts = []
    for lines in base._line_blocks(src, base.BLOCK_BYTES):
        df = pd.Series(lines).str.extract(PATTERN)
        df = df[df["ip"].notna()]
        df["status"] = pd.to_numeric(df["status"]).astype("int16")
        df["size"] = pd.to_numeric(df["size"].where(df["size"] != "-")).astype("Int64")
        df["time"] = pd.to_datetime(df["time"], format=TIME_FORMAT, utc=True).astype("datetime64[us, UTC]")
        parts.append(df[df["status"] < 400])
    df = pd.concat(parts, ignore_index=True).drop_duplicates(keep="first")
    df.to_parquet(os.path.join(out, "part-00000.parquet"), compression="zstd", index=False)


def work_polars(src: str, out: str) -> None:
    import polars as pl

    os.makedirs(out, exist_ok=True)
    (
        base.polars_parsed(src)
        .filter(pl.col("status") < 400)
        .unique(keep="first", maintain_order=True)
        .sink_parquet(os.path.join(out, "part-00000.parquet"), compression="zstd")
    )


WORKERS = {"pandas": work_pandas, "polars": work_polars}


def report(results: list[dict]) -> dict:
    ok = [r for r in results if r["ok"]]
    fastest = min((r["seconds"] for r in ok), default=None)
    rows_seen = {r["rows"] for r in ok}
    hdr = f"{'system':<11} {'seconds':>8} {'MB/s':>8} {'rows':>12} {'peak RSS MB':>12} {'vs fastest':>11}  note"
    print("\n" + hdr + "\n" + "-" * len(hdr))
    for r in results:
        if r["ok"]:
            r["mb_per_s"] = r["input_bytes"] / 1e6 / r["seconds"]
            r["vs_fastest"] = fastest / r["seconds"]
            r["warning"] = "ROWS DISAGREE" if len(rows_seen) > 1 else None
            print(f"{r['system']:<11} {r['seconds']:>8.2f} {r['mb_per_s']:>8.1f} {r['rows']:>12,} "
                  f"{r['peak_rss_mb']:>12,.0f} {r['vs_fastest']:>10.2f}×  {r['warning'] or ''}")
        else:
            last = (r.get("error") or "failed").splitlines()[-1][:100]
            print(f"{r['system']:<11} {'-':>8} {'-':>8} {'-':>12} {'-':>12} {'-':>11}  FAILED: {last}")
    by = {r["system"]: r for r in ok}
    ratio = by["polars"]["seconds"] / by["gpuetl-cpu"]["seconds"] if {"polars", "gpuetl-cpu"} <= set(by) else None
    text = f"gpuetl-cpu / polars = {ratio:.2f}× (goal ≥ 0.7×)" if ratio is not None else "gpuetl-cpu / polars = n/a"
    print("\n" + text)
    return {"rows_agree": len(rows_seen) <= 1, "fastest": fastest, "headline": {"ratio": ratio, "text": text}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    base.add_common_args(ap, SYSTEMS, WORKERS, "dedupe.json")
    args = ap.parse_args(argv)
    if args.worker:
        WORKERS[args.worker](args.input, args.output)
        return 0

    src = base.ensure_input(args.data.resolve(), args.size, args.seed, 0)
    input_bytes, lines = side_by_side.warm(src, base.warm_and_count)

    def run(name: str, out: Path, log: Path) -> dict:
        cmd = (base.gpuetl_command(src, out, HERE / "dedupe.yaml") if name == "gpuetl-cpu"
               else base.peer_command(Path(__file__).resolve(), name, src, out))
        return base.run_command(name, cmd, out, log, args.timeout)

    results = side_by_side.run_each(args.only or SYSTEMS, run, args.json.resolve().parent, "dedupe-", input_bytes,
                                    args.keep_output)
    summary = report(results)
    side_by_side.write_results(
        args.json, "dedupe",
        input={"path": str(src), "bytes": input_bytes, "lines": lines, "seed": args.seed,
               "generator": base.generator_version()},
        task="parse (apache combined) + type + filter status < 400 + exact dedupe of whole rows (first kept) + zstd Parquet",
        machine=base.machine_info(), results=results, **summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
