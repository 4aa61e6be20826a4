"""Nested JSON lines -> typed zstd Parquet, side by side: gpuetl (CPU backend) vs polars
`scan_ndjson` and DuckDB `read_json`.

Every system does the same task in a fresh process: read JSON lines of application events with
nested objects and arrays, take `ts` (ISO 8601 -> UTC timestamp), `user.id` (int64), `user.geo`
(struct<lat, lon>), `event`, `items[0].sku` (the first item's sku; null for no items),
`duration_ms` (float64), `ok` (bool) and `tags` (list<string>), leave the other fields out, and
write zstd Parquet. The numbers are in benchmarks/README.md.

    .venv/bin/python benchmarks/bench_jsonl.py --size 250MB
    .venv/bin/python benchmarks/bench_jsonl.py --size 20MB --only polars gpuetl-cpu --rounds 1

Not a test; nothing here is imported by the package.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_access_logs as base  # noqa: E402  (page-cache warming, runner helpers, report)

SYSTEMS = ("polars", "duckdb", "gpuetl-cpu")
PIPELINE = HERE / "jsonl_nested.yaml"
EVENTS = ("click", "view", "purchase", "scroll", "login")
SERVICES = ("api", "web", "worker")
TAGS = ("a", "b", "beta", "mobile", "eu", "us")


# =========================================================================== input

def write_events(path: Path, size: int, seed: int) -> int:
    """JSON lines of about `size` bytes; returns the line count. Some records have no items,
    no geo or a null user; `service.name` is a flat dotted key, `user.name` and `items[].qty`
    are fields the task leaves out."""
    import numpy as np          # here, not at the top: a peer's worker process does not pay for it

    rng = np.random.default_rng(seed)
    lines = 0
    t0 = int(_dt.datetime(2026, 1, 1, tzinfo=_dt.timezone.utc).timestamp() * 1000)
    tmp = path.with_suffix(".part")
    with open(tmp, "w") as fh:
        written = 0
        while written < size:
            n = 20_000
            ms = t0 + np.cumsum(rng.integers(0, 500, n))
            t0 = int(ms[-1])
            uid = rng.integers(1, 100_000, n).tolist()
            lat = np.round(rng.uniform(-90, 90, n), 4).tolist()
            lon = np.round(rng.uniform(-180, 180, n), 4).tolist()
            ev = rng.integers(0, len(EVENTS), n).tolist()
            n_items = rng.integers(0, 4, n).tolist()
            sku = rng.integers(0, 10_000, (n, 3)).tolist()
            qty = rng.integers(1, 9, (n, 3)).tolist()
            dur = np.round(rng.exponential(80, n), 2).tolist()
            ok = (rng.random(n) < 0.95).tolist()
            n_tags = rng.integers(0, 3, n).tolist()
            tag = rng.integers(0, len(TAGS), (n, 2)).tolist()
            shape = rng.integers(0, 20, n).tolist()
            out = []
            for i in range(n):
                sec, milli = divmod(int(ms[i]), 1000)
                ts = _dt.datetime.fromtimestamp(sec, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
                if shape[i] == 0:
                    user = "null"
                else:
                    geo = "" if shape[i] == 1 else f', "geo": {{"lat": {lat[i]}, "lon": {lon[i]}}}'
                    user = f'{{"id": {uid[i]}, "name": "user{uid[i]}"{geo}}}'
                items = ", ".join(f'{{"sku": "SKU-{sku[i][k]}", "qty": {qty[i][k]}}}' for k in range(n_items[i]))
                tags = ", ".join(f'"{TAGS[tag[i][k]]}"' for k in range(n_tags[i]))
                out.append(f'{{"ts": "{ts}.{milli:03d}Z", "service.name": "{SERVICES[ev[i] % 3]}", "user": {user}, '
                           f'"event": "{EVENTS[ev[i]]}", "items": [{items}], "duration_ms": {dur[i]}, '
                           f'"ok": {"true" if ok[i] else "false"}, "tags": [{tags}]}}\n')
            text = "".join(out)
            fh.write(text)
            written += len(text)
            lines += n
    tmp.rename(path)
    return lines


def ensure_input(data_dir: Path, size: int, seed: int) -> Path:
    version = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8]
    path = data_dir / f"events-nested-{base.human(size)}-s{seed}-{version}.jsonl"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        print(f"generating {path.name} ...", flush=True)
        write_events(path, size, seed)
        print(f"  {time.perf_counter() - t:.1f} s", flush=True)
    return path


# =========================================================================== peers

def work_polars(src: str, out: str) -> None:
    import polars as pl

    os.makedirs(out, exist_ok=True)
    schema = {"ts": pl.String,
              "user": pl.Struct({"id": pl.Int64, "geo": pl.Struct({"lat": pl.Float64, "lon": pl.Float64})}),
              "event": pl.String, "items": pl.List(pl.Struct({"sku": pl.String})), "duration_ms": pl.Float64,
              "ok": pl.Boolean, "tags": pl.List(pl.String)}
    (
        pl.scan_ndjson(src, schema=schema)
        .select(
            pl.col("ts").str.to_datetime("%Y-%m-%dT%H:%M:%S%.fZ", time_unit="us", time_zone="UTC"),
            pl.col("user").struct.field("id").alias("user.id"),
            pl.col("user").struct.field("geo").alias("user.geo"),
            pl.col("event"),
            pl.col("items").list.get(0, null_on_oob=True).struct.field("sku").alias("items[0].sku"),
            pl.col("duration_ms"), pl.col("ok"), pl.col("tags"),
        )
        .sink_parquet(os.path.join(out, "part-00000.parquet"), compression="zstd")
    )


def work_duckdb(src: str, out: str) -> None:
    import duckdb

    os.makedirs(out, exist_ok=True)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    target = os.path.join(out, "part-00000.parquet").replace("'", "''")
    source = src.replace("'", "''")
    con.execute(f"""
        COPY (
            SELECT CAST(ts AS TIMESTAMPTZ) AS ts, "user".id AS "user.id", "user".geo AS "user.geo", event,
                   items[1].sku AS "items[0].sku", duration_ms, ok, tags
            FROM read_json('{source}', format = 'newline_delimited', columns = {{
                ts: 'VARCHAR', "user": 'STRUCT(id BIGINT, geo STRUCT(lat DOUBLE, lon DOUBLE))',
                event: 'VARCHAR', items: 'STRUCT(sku VARCHAR)[]', duration_ms: 'DOUBLE', ok: 'BOOLEAN',
                tags: 'VARCHAR[]'}})
        ) TO '{target}' (FORMAT parquet, COMPRESSION zstd)
    """)


WORKERS = {"polars": work_polars, "duckdb": work_duckdb}


# =========================================================================== driver

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    base.add_common_args(ap, SYSTEMS, WORKERS, "jsonl.json")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of every system, the order rotated each round (default 3); the table shows "
                         "each system's median run")
    ap.add_argument("--scheduler", help="gpuetl's --scheduler (default: the command's own choice, "
                                        "this process's thread pool; `local` starts a cluster)")
    args = ap.parse_args(argv)
    if args.worker:
        WORKERS[args.worker](args.input, args.output)
        return 0

    src = ensure_input(args.data.resolve(), args.size, args.seed)
    input_bytes = src.stat().st_size
    t = time.perf_counter()
    lines = base.warm_and_count(src)
    print(f"page cache warmed: {input_bytes / 1e6:,.1f} MB, {lines:,} lines read in {time.perf_counter() - t:.2f} s")
    results_dir = args.json.resolve().parent
    results_dir.mkdir(parents=True, exist_ok=True)
    _compiled_like_an_install()
    systems = list(args.only or SYSTEMS)
    runs: dict[str, list[dict]] = {name: [] for name in systems}
    for k in range(args.rounds):
        for name in systems[k % len(systems):] + systems[:k % len(systems)]:
            out, log = results_dir / f"jsonl-out-{name}", results_dir / f"jsonl-{name}.log"
            load = os.getloadavg()[0]
            cmd = (base.gpuetl_command(src, out, PIPELINE) if name == "gpuetl-cpu"
                   else base.peer_command(Path(__file__).resolve(), name, src, out))
            if name == "gpuetl-cpu" and args.scheduler:
                cmd += ["--scheduler", args.scheduler]
            r = base.run_command(name, cmd, out, log, args.timeout)
            r.update(input_bytes=input_bytes, log=str(log), round=k + 1, load_before=load)
            print(f"round {k + 1} {name:<11} " + (f"{r['seconds']:6.2f} s, {r['cpu_seconds']:6.2f} CPU-s, "
                                                   f"{r['rows']:,} rows, load {load:.1f}" if r["ok"]
                                                   else f"FAILED: {r.get('error', '')[:300]}"), flush=True)
            if not args.keep_output:
                shutil.rmtree(out, ignore_errors=True)
            runs[name].append(r)
    results = [_median_run(runs[name]) for name in systems]
    summary = base.report(results, lines)
    summary["rounds"] = _round_ratios(runs)
    if summary["rounds"]:
        ratios = summary["rounds"]["wall"]
        print(f"per round, gpuetl-cpu / fastest peer: wall {', '.join(f'{x:.2f}' for x in ratios)}; "
              f"CPU {', '.join(f'{x:.2f}' for x in summary['rounds']['cpu'])}")
    doc = {"benchmark": "jsonl_nested", "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "input": {"path": str(src), "bytes": input_bytes, "lines": lines, "seed": args.seed},
           "gpuetl_scheduler": args.scheduler or "the command's default",
           "task": "nested JSON lines -> ts, user.id, user.geo, event, items[0].sku, duration_ms, ok, tags -> zstd Parquet",
           "machine": base.machine_info(), "results": results, "runs": runs, **summary}
    args.json.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"\nwrote {args.json}")
    return 0


def _compiled_like_an_install() -> None:
    """gpuetl runs from its source tree here; with PYTHONDONTWRITEBYTECODE set it would compile
    its modules at every start, which an installed package (byte-compiled by pip) does not.
    Byte-compile them once (into the tree's ignored __pycache__ folders) and let the runs use them."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    import subprocess

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(HERE.parent / "gpuetl")], check=True)


def _median_run(runs: list[dict]) -> dict:
    done = sorted((r for r in runs if r["ok"]), key=lambda r: r["seconds"])
    return done[len(done) // 2] if done else runs[-1]


def _round_ratios(runs: dict[str, list[dict]]) -> dict | None:
    """gpuetl-cpu / the fastest peer of the same round, by wall time and by CPU time."""
    if "gpuetl-cpu" not in runs or len(runs) < 2:
        return None
    out: dict[str, list[float]] = {"wall": [], "cpu": []}
    for k, g in enumerate(runs["gpuetl-cpu"]):
        peers = [rs[k] for name, rs in runs.items() if name != "gpuetl-cpu" and k < len(rs) and rs[k]["ok"]]
        if g["ok"] and peers:
            out["wall"].append(min(p["seconds"] for p in peers) / g["seconds"])
            out["cpu"].append(min(p["cpu_seconds"] for p in peers) / g["cpu_seconds"])
    return out


if __name__ == "__main__":
    sys.exit(main())
