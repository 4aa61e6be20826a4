#!/usr/bin/env python
"""Side-by-side benchmark: a user's own regex (8 named groups) on access logs -> zstd Parquet.

    python benchmarks/bench_user_regex.py [--size 300MB] [--only polars gpuetl-cpu]

The same input as bench_access_logs.py (gpuetl.samples.write_access_logs, cached). The task is
what a custom log format asks of gpuetl: not a preset, but `parse: regex:` with 8 named groups
(PATTERN; benchmarks/user_regex.yaml holds the same text), then `status` int16, `size` int64
(a `-` size does not take part in the match: null), `time` -> UTC timestamp[us], zstd Parquet.
polars does the same with `str.extract_groups` and the same casts. Each system runs in a fresh
subprocess, one after the other, after warming the page cache; the headline is
gpuetl-cpu / polars = polars seconds / gpuetl seconds. See benchmarks/README.md.

Not a test; nothing here is imported by the package.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_access_logs as base  # noqa: E402  (input cache, page-cache warming, runner helpers)
import side_by_side  # noqa: E402

SYSTEMS = ("polars", "gpuetl-cpu")
PIPELINE = HERE / "user_regex.yaml"
PATTERN = yaml.safe_load(PIPELINE.read_text())["parse"]["regex"]
TIME_FORMAT = base.TIME_FORMAT


def work_polars(src: str, out: str) -> None:
    import polars as pl

    os.makedirs(out, exist_ok=True)
    (
        pl.scan_lines(src, name="line")
        .select(pl.col("line").str.extract_groups(PATTERN).alias("m"))
        .unnest("m")
        .filter(pl.col("ip").is_not_null())
        .with_columns(
            pl.col("status").cast(pl.Int16),
            pl.col("size").cast(pl.Int64),
            pl.col("time").str.to_datetime(TIME_FORMAT, time_unit="us").dt.convert_time_zone("UTC"),
        )
        .sink_parquet(os.path.join(out, "part-00000.parquet"), compression="zstd")
    )


WORKERS = {"polars": work_polars}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    base.add_common_args(ap, SYSTEMS, WORKERS, "user_regex.json")
    ap.set_defaults(size=base.parse_size("300MB"))
    args = ap.parse_args(argv)
    if args.worker:
        WORKERS[args.worker](args.input, args.output)
        return 0

    src = base.ensure_input(args.data.resolve(), args.size, args.seed, 0)
    input_bytes, lines = side_by_side.warm(src, base.warm_and_count)

    def run(name: str, out: Path, log: Path) -> dict:
        cmd = (base.gpuetl_command(src, out, PIPELINE) if name == "gpuetl-cpu"
               else base.peer_command(Path(__file__).resolve(), name, src, out))
        return base.run_command(name, cmd, out, log, args.timeout)

    results = side_by_side.run_each(args.only or SYSTEMS, run, args.json.resolve().parent, "user-regex-",
                                    input_bytes, args.keep_output)
    by = {r["system"]: r for r in results if r["ok"]}
    summary = {}
    if "polars" in by and "gpuetl-cpu" in by:
        summary["gpuetl_vs_polars"] = by["polars"]["seconds"] / by["gpuetl-cpu"]["seconds"]
        summary["rows_agree"] = by["polars"]["rows"] == by["gpuetl-cpu"]["rows"]
        summary["schemas"] = {name: r["schema"] for name, r in by.items()}
        print(f"\ngpuetl-cpu / polars = {summary['gpuetl_vs_polars']:.2f}x"
              + ("" if summary["rows_agree"] else "  ROWS DISAGREE"))
    side_by_side.write_results(
        args.json, "user_regex",
        input={"path": str(src), "bytes": input_bytes, "lines": lines, "seed": args.seed,
               "generator": base.generator_version()},
        pattern=PATTERN, machine=base.machine_info(), results=results, **summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
