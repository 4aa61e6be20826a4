#!/usr/bin/env python
"""Side-by-side benchmark: Apache access logs -> typed, zstd Parquet.

    python benchmarks/bench_access_logs.py [--size 1GB] [--data benchmarks/data]
        [--json benchmarks/results/access_logs.json] [--only NAME ...]

Generates (once, cached by size + seed + generator version) an access log with
``gpuetl.samples.write_access_logs``, warms the page cache by reading it, then
runs every system on that same file, one after the other, each in a fresh
subprocess: parse with the Apache combined regex into 12 string columns, type
them (status int16, size int64 with '-' -> null, time -> UTC timestamp[us]) and
write zstd Parquet. Reports wall seconds (process start included), input MB/s,
output rows (read back from the Parquet files), peak RSS summed over the process
tree (sampled every 50 ms: worker processes count), CPU seconds, the cores kept busy in the
middle of the run, and throughput relative to the fastest system. See benchmarks/README.md for the rules.

Not a test; nothing here is imported by the package.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import side_by_side  # noqa: E402  (the loop and results file every side-by-side benchmark shares)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SYSTEMS = ("pandas", "polars", "duckdb", "gpuetl-cpu", "gpuetl-processes")
PEERS = ("pandas", "polars", "duckdb")

# One pattern for every peer: valid for Python `re`, Rust `regex` (polars) and RE2 (duckdb).
# Groups, in order: ip ident user time request method path protocol status size referer user_agent
PATTERN = (
    r"^(?P<ip>\S+) (?P<ident>\S+) (?P<user>\S+) \[(?P<time>[^\]]+)\] "
    r'"(?P<request>(?P<method>[A-Z]+) (?P<path>[^ "]*) (?P<protocol>[^"]*))" '
    r"(?P<status>\d{3}) (?P<size>\d+|-) "
    r'"(?P<referer>(?:[^"\\]|\\.)*)" "(?P<user_agent>(?:[^"\\]|\\.)*)"$'
)
COLUMNS = ["ip", "ident", "user", "time", "request", "method", "path", "protocol",
           "status", "size", "referer", "user_agent"]
TIME_FORMAT = "%d/%b/%Y:%H:%M:%S %z"
BLOCK_BYTES = 64 << 20  # ~64 MB chunks for the pandas script


# =========================================================================== workers
# Each runs in its own fresh interpreter (see _run_system); imports happen inside.


def _line_blocks(path: str, block: int):
    """Yield lists of lines (no newline), ~block bytes at a time, split on line ends."""
    with open(path, "rb") as f:
        while True:
            data = f.read(block)
            if not data:
                return
            data += f.readline()  # finish the last line of the block
            lines = data.decode("utf-8").split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            yield lines


def work_pandas(src: str, out: str) -> None:
    import pandas as pd

    os.makedirs(out, exist_ok=True)
    for i, lines in enumerate(_line_blocks(src, BLOCK_BYTES)):
        df = pd.Series(lines).str.extract(PATTERN)
        df = df[df["ip"].notna()]
        df["status"] = pd.to_numeric(df["status"]).astype("int16")
        df["size"] = pd.to_numeric(df["size"].where(df["size"] != "-")).astype("Int64")
        df["time"] = pd.to_datetime(df["time"], format=TIME_FORMAT, utc=True).astype("datetime64[us, UTC]")
        df.to_parquet(os.path.join(out, f"part-{i:05d}.parquet"), compression="zstd", index=False)


def polars_parsed(src: str):
    """The polars peer's lazy parse (bench_dedupe.py builds on it)."""
    import polars as pl

    return (
        pl.scan_lines(src, name="line")
        .select(pl.col("line").str.extract_groups(PATTERN).alias("m"))
        .unnest("m")
        .filter(pl.col("ip").is_not_null())
        .with_columns(
            pl.col("status").cast(pl.Int16),
            pl.when(pl.col("size") == "-").then(None).otherwise(pl.col("size")).cast(pl.Int64).alias("size"),
            pl.col("time").str.to_datetime(TIME_FORMAT, time_unit="us").dt.convert_time_zone("UTC"),
        )
    )


def work_polars(src: str, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    (
        polars_parsed(src)
        .sink_parquet(os.path.join(out, "part-00000.parquet"), compression="zstd")
    )


def work_duckdb(src: str, out: str) -> None:
    import duckdb

    os.makedirs(out, exist_ok=True)

    def lit(s: str) -> str:
        return "'" + s.replace("'", "''") + "'"

    names = "[" + ", ".join(lit(c) for c in COLUMNS) + "]"
    con = duckdb.connect()
    con.execute(f"""
        COPY (
            SELECT r.ip, r.ident, r."user", strptime(r.time, {lit(TIME_FORMAT)}) AS time, r.request, r.method, r.path, r.protocol,
                   CAST(r.status AS SMALLINT) AS status,
                   CAST(NULLIF(r.size, '-') AS BIGINT) AS size,
                   r.referer, r.user_agent
            FROM (
                SELECT regexp_extract(line, {lit(PATTERN)}, {names}) AS r
                FROM read_csv({lit(src)}, columns = {{'line': 'VARCHAR'}}, header = false,
                              delim = {lit(chr(1))}, quote = '', escape = '', auto_detect = false)
            )
            WHERE r.ip <> ''
        ) TO {lit(os.path.join(out, "part-00000.parquet"))} (FORMAT parquet, COMPRESSION zstd)
    """)


WORKERS = {"pandas": work_pandas, "polars": work_polars, "duckdb": work_duckdb}


# =========================================================================== driver


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?i?B?)\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (try 50MB, 1GB, 2GiB)")
    num, unit = float(m.group(1)), m.group(2).upper().rstrip("B")
    mult = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
            "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}[unit]
    return int(num * mult)


def human(n: int) -> str:
    for unit, m in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= m:
            return f"{n / m:g}{unit}"
    return f"{n}B"


def generator_version() -> str:
    return hashlib.sha256((ROOT / "gpuetl" / "samples.py").read_bytes()).hexdigest()[:10]


def ensure_input(data_dir: Path, size: int, seed: int, bad_every: int) -> Path:
    sys.path.insert(0, str(ROOT))
    from gpuetl.samples import write_access_logs

    data_dir.mkdir(parents=True, exist_ok=True)
    name = f"access-{human(size)}-seed{seed}" + (f"-bad{bad_every}" if bad_every else "")
    path = data_dir / f"{name}-{generator_version()}.log"
    if path.exists():
        print(f"input: {path} (cached)")
        return path
    tmp = path.with_suffix(".log.partial")
    t = time.perf_counter()
    n = write_access_logs(tmp, target_bytes=size, seed=seed, bad_every=bad_every)
    dt = time.perf_counter() - t
    os.replace(tmp, path)
    print(f"input: {path} generated, {n / 1e6:,.1f} MB in {dt:.1f} s ({n / 1e6 / dt:,.0f} MB/s)")
    return path


def warm_and_count(path: Path) -> int:
    """Read the whole file once (page cache warm for every system) and count lines."""
    lines = 0
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(16 << 20):
            lines += chunk.count(b"\n")
    return lines


def gpuetl_command(src: Path, out: Path, pipeline: Path = HERE / "access_logs.yaml", sets=()) -> list[str]:
    """`gpuetl run PIPELINE` on `src` into `out`, plus --set overrides (a fresh process)."""
    exe = Path(sys.executable).parent / "gpuetl"
    base = [str(exe)] if exe.exists() else [sys.executable, "-c", "import sys; from gpuetl.cli import main; sys.exit(main())"]
    cmd = base + [
        "run", str(pipeline), "--backend", "cpu",
        "--set", f"source.path={src}", "--set", f"sink.path={out}", "--set", "sink.mode=overwrite",
    ]
    for item in sets:
        cmd += ["--set", item]
    return cmd


def peer_command(script: Path, name: str, src: Path, out: Path) -> list[str]:
    """A peer's work function from `script`'s WORKERS, in a fresh interpreter."""
    return [sys.executable, str(script), "--worker", name, "--input", str(src), "--output", str(out)]


def _run_system(name: str, src: Path, out: Path, log: Path, timeout: float) -> dict:
    cmd = (gpuetl_command(src, out) if name == "gpuetl-cpu"
           else gpuetl_command(src, out) + ["--scheduler", "processes"] if name == "gpuetl-processes"
           else peer_command(Path(__file__).resolve(), name, src, out))
    return run_command(name, cmd, out, log, timeout)


def run_command(name: str, cmd: list[str], out: Path, log: Path, timeout: float) -> dict:
    """Run one system's command: wall time, peak RSS and CPU of that process tree, output rows."""
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    res: dict = {"system": name, "command": cmd, "ok": False}
    timed_out = threading.Event()
    with open(log, "wb") as logf:
        t0 = time.perf_counter()
        try:
            p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=logf, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        except OSError as e:
            res["error"] = f"could not start: {e}"
            return res

        def kill():
            timed_out.set()
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        with side_by_side.TreeWatch(p.pid) as watch:     # memory summed over the tree, each thread's CPU
            _, status, ru = os.wait4(p.pid, 0)  # rusage of this child (and its reaped children)
        seconds = time.perf_counter() - t0
        timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
    res["seconds"] = seconds
    tree = watch.summary()
    res["max_process_rss_mb"] = ru.ru_maxrss / 1024  # Linux: KiB; the largest one process reached
    res["peak_rss_mb"] = max(tree.get("peak_rss_mb", 0.0), res["max_process_rss_mb"])  # summed over the tree
    res["cpu_seconds"] = ru.ru_utime + ru.ru_stime
    res["cores_busy"] = res["cpu_seconds"] / seconds if seconds > 0 else None
    res["steady_cores"] = tree.get("steady_cores")
    res["processes"] = tree.get("processes")
    res["busiest_threads"] = tree.get("threads")
    res["returncode"] = p.returncode
    if timed_out.is_set():
        res["error"] = f"timed out after {timeout:.0f} s"
    elif p.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        res["error"] = f"exit code {p.returncode}: " + "\n".join(tail)
    else:
        try:
            res.update(count_output(out))
            res["ok"] = True
        except Exception as e:  # noqa: BLE001 - record, don't crash
            res["error"] = f"could not read output: {type(e).__name__}: {e}"
    return res


def count_output(out: Path) -> dict:
    import pyarrow.parquet as pq

    files = sorted(
        p for p in out.rglob("*.parquet")
        if not any("quarantine" in part.lower() or part.startswith(("_", ".")) for part in p.relative_to(out).parts)
    )
    if not files:
        raise FileNotFoundError(f"no parquet files under {out}")
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    schema = pq.read_schema(files[0])
    return {
        "rows": rows,
        "output_files": len(files),
        "output_bytes": sum(f.stat().st_size for f in files),
        "schema": {f.name: str(f.type) for f in schema},
    }


def machine_info() -> dict:
    from importlib import metadata

    def ver(pkg):
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    cpu_model = None
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu_model,
        "memory_bytes": mem,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": {p: ver(p) for p in ("gpuetl", "pandas", "polars", "duckdb", "pyarrow", "numpy")},
    }


def report(results: list[dict], expected_rows: int) -> dict:
    ok = [r for r in results if r["ok"]]
    fastest = min((r["seconds"] for r in ok), default=None)
    peers_ok = [r for r in ok if r["system"] in PEERS]
    fastest_peer = min(peers_ok, key=lambda r: r["seconds"], default=None)
    rows_seen = {r["rows"] for r in ok}
    for r in results:
        if r["ok"]:
            r["mb_per_s"] = r["input_bytes"] / 1e6 / r["seconds"]
            r["vs_fastest"] = fastest / r["seconds"]
            notes = []
            if len(rows_seen) > 1:
                notes.append("ROWS DISAGREE")
            if r["rows"] != expected_rows:
                notes.append(f"expected {expected_rows:,} rows")
            r["warning"] = "; ".join(notes) or None

    hdr = f"{'system':<11} {'seconds':>8} {'MB/s':>8} {'rows':>12} {'peak RSS MB':>12} {'vs fastest':>11}  note"
    print()
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        if r["ok"]:
            print(f"{r['system']:<11} {r['seconds']:>8.2f} {r['mb_per_s']:>8.1f} {r['rows']:>12,} "
                  f"{r['peak_rss_mb']:>12,.0f} {r['vs_fastest']:>10.2f}×  {r['warning'] or ''}")
        else:
            first = (r.get("error") or "failed").splitlines()
            print(f"{r['system']:<11} {'-':>8} {'-':>8} {'-':>12} {'-':>12} {'-':>11}  FAILED: {first[-1][:100] if first else ''}")
    print("(vs fastest = throughput relative to the fastest system; 1.00× is the fastest)")

    headline = None
    g = next((r for r in results if r["system"] == "gpuetl-cpu"), None)
    if g is not None:
        if g["ok"] and fastest_peer is not None:
            ratio = fastest_peer["seconds"] / g["seconds"]
            headline = {"ratio": ratio, "fastest_peer": fastest_peer["system"],
                        "text": f"gpuetl-cpu / fastest peer = {ratio:.2f}× (fastest peer: {fastest_peer['system']})"}
        elif not g["ok"]:
            headline = {"ratio": None, "text": "gpuetl-cpu / fastest peer = n/a (gpuetl-cpu failed; see JSON)"}
    if headline:
        print()
        print(headline["text"])
    return {"rows_agree": len(rows_seen) <= 1, "fastest": fastest, "headline": headline}


def add_common_args(ap: argparse.ArgumentParser, systems, workers, results_file: str) -> None:
    """The options every side-by-side benchmark shares (bench_dedupe.py uses them too)."""
    ap.add_argument("--size", type=parse_size, default=parse_size("1GB"), help="input size (default 1GB; e.g. 50MB, 2GiB)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", type=Path, default=HERE / "data", help="where the generated input is cached")
    ap.add_argument("--json", type=Path, default=HERE / "results" / results_file, help="results file")
    ap.add_argument("--only", nargs="+", choices=systems, metavar="NAME", help=f"run only these of {', '.join(systems)}")
    ap.add_argument("--timeout", type=float, default=3600, help="per-system limit in seconds (default 3600)")
    ap.add_argument("--keep-output", action="store_true", help="keep the Parquet outputs under results/")
    # internal: run one peer inside a fresh interpreter
    ap.add_argument("--worker", choices=sorted(workers), help=argparse.SUPPRESS)
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--output", help=argparse.SUPPRESS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, SYSTEMS, WORKERS, "access_logs.json")
    ap.add_argument("--bad-every", type=int, default=0, help="plant a garbage line every N lines (default 0: none)")
    args = ap.parse_args(argv)

    if args.worker:
        WORKERS[args.worker](args.input, args.output)
        return 0

    src = ensure_input(args.data.resolve(), args.size, args.seed, args.bad_every)
    input_bytes, lines = side_by_side.warm(src, warm_and_count)
    expected = lines - (lines // args.bad_every if args.bad_every > 0 else 0)
    results = side_by_side.run_each(args.only or SYSTEMS, lambda name, out, log: _run_system(name, src, out, log, args.timeout),
                                    args.json.resolve().parent, "", input_bytes, args.keep_output)
    summary = report(results, expected)
    side_by_side.write_results(
        args.json, "access_logs",
        input={"path": str(src), "bytes": input_bytes, "lines": lines, "expected_rows": expected,
               "seed": args.seed, "bad_every": args.bad_every, "generator": generator_version()},
        pattern=PATTERN, machine=machine_info(), results=results, **summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
