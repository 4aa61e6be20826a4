"""Which CPU kernel should parse access logs? Side by side on the same lines, one process, one
thread each: pyarrow.compute.extract_regex (RE2) and polars str.extract_groups (Rust regex)
on the preset regex, and gpuetl's CLF kernel (polars on the preset split in two: the line with
the request as one field, then the request); and for the timestamp, pyarrow's strptime vs the
fixed-width fast path.

    python benchmarks/bench_parse_kernels.py [--size 50MB] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_access_logs import ensure_input, parse_size  # noqa: E402


def best_of(repeat, fn):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="50MB")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=str(HERE / "results" / "parse_kernels.json"))
    args = ap.parse_args(argv)

    import os

    os.environ.setdefault("POLARS_MAX_THREADS", "1")     # before polars starts its pool
    import polars as pl
    import pyarrow as pa
    import pyarrow.compute as pc

    from gpuetl.backends.cpu import CpuBackend
    from gpuetl.backends.cpu_clf import CLF_TIME_FORMAT, extract_clf, parse_clf_time
    from gpuetl.parsing import preset

    src = ensure_input(HERE / "data", parse_size(args.size), 0, 0)
    data = src.read_bytes()
    lines = pa.array(CpuBackend().split_lines(data, 0).text)
    rule = preset("apache_combined")
    series = pl.from_arrow(lines)
    times_str = pc.struct_field(pc.extract_regex(lines, pattern=rule.regex), "time")
    kernels = {
        "pyarrow extract_regex (RE2)": lambda: pc.extract_regex(lines, pattern=rule.regex),
        "polars extract_groups": lambda: series.str.extract_groups(rule.regex),
        "gpuetl CLF kernel (polars, split)": lambda: extract_clf(lines, rule.regex, tuple(rule.columns)),
        "pyarrow strptime (time column)": lambda: pc.strptime(times_str, format=CLF_TIME_FORMAT, unit="us",
                                                              error_is_null=True),
        "gpuetl CLF time fast path": lambda: parse_clf_time(times_str),
    }
    mb = len(data) / 1e6
    results = {}
    print(f"{len(lines):,} lines, {mb:.1f} MB, best of {args.repeat}, one thread each\n")
    print(f"{'kernel':<34} {'seconds':>8} {'MB/s':>8}")
    for name, fn in kernels.items():
        seconds = best_of(args.repeat, fn)
        results[name] = {"seconds": seconds, "mb_per_s": mb / seconds}
        print(f"{name:<34} {seconds:>8.3f} {mb / seconds:>8.1f}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"input_mb": mb, "lines": len(lines), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
