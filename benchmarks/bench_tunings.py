"""gpuetl against itself: variants of settings or code, alternating, side by side on one input.

    python benchmarks/bench_tunings.py --task dedupe --size 600MB --rounds 4 \\
        --variant tuned --variant untuned:GPUETL_NO_TUNING=1 --variant before:code=/tmp/old-gpuetl

A variant is NAME or NAME:KEY=VALUE,KEY=VALUE: environment variables for its `gpuetl run`
process, and `code=DIR` for another gpuetl source tree (its PYTHONPATH). Each round runs every
variant once, in turn, in a fresh process; the ratio of each variant to the first is taken
within a round, so the machine's drift between rounds cancels. Tasks: `plain` (access_logs.yaml),
`dedupe` (dedupe.yaml: filter + dedupe) and `shard` (access_logs.yaml + 16 shuffled shards, as
bench_shard.py). Prints per round and the medians; --json writes every run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_access_logs import ensure_input, parse_size, run_command, warm_and_count  # noqa: E402
from bench_shard import VARIANTS as SHARD_SETS  # noqa: E402

TASKS = {
    "plain": (HERE / "access_logs.yaml", []),
    "dedupe": (HERE / "dedupe.yaml", []),
    "shard": (HERE / "access_logs.yaml", SHARD_SETS["shuffle+shard"]),
}


def parse_variant(text: str) -> tuple[str, dict, Path]:
    name, _, rest = text.partition(":")
    env, code = {}, ROOT
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key == "code":
            code = Path(value).resolve()
        else:
            env[key] = value
    return name, env, code


def command(code: Path, pipeline: Path, src: Path, out: Path, sets) -> list[str]:
    cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(code)!r}); "
                                 "from gpuetl.cli import main; sys.exit(main())",
           "run", str(pipeline), "--backend", "cpu", "--set", f"source.path={src}",
           "--set", f"sink.path={out}", "--set", "sink.mode=overwrite"]
    for item in sets:
        cmd += ["--set", item]
    return cmd


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=sorted(TASKS), default="dedupe")
    ap.add_argument("--size", default="600MB")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--variant", action="append", required=True)
    ap.add_argument("--data", default=str(HERE / "data"))
    ap.add_argument("--json", default=str(HERE / "results" / "tunings.json"))
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args(argv)
    variants = [parse_variant(v) for v in args.variant]
    src = ensure_input(Path(args.data), parse_size(args.size), args.seed, 0)
    warm_and_count(src)
    results_dir = Path(args.json).resolve().parent
    results_dir.mkdir(parents=True, exist_ok=True)
    pipeline, sets = TASKS[args.task]
    runs: list[dict] = []
    for round_no in range(args.rounds):
        row = []
        for name, env, code in variants:
            out = results_dir / f"out-tunings-{name}"
            saved = dict(os.environ)
            os.environ.update(env)
            try:
                res = run_command(name, command(code, pipeline, src, out, sets), out,
                                  results_dir / f"tunings-{name}.log", args.timeout)
            finally:
                os.environ.clear()
                os.environ.update(saved)
            res.update(round=round_no, variant=name, env=env, code=str(code))
            runs.append(res)
            row.append(res)
        base = row[0].get("seconds")
        print(f"round {round_no + 1}: " + "  ".join(
            f"{r['variant']} {r.get('seconds', float('nan')):.2f} s"
            + (f" ({r['seconds'] / base:.3f})" if r.get("ok") and base else "")
            + ("" if r.get("ok") else f" ERROR {r.get('error')}") for r in row), flush=True)
    print(f"\n{args.task}, {src.stat().st_size / 1e6:,.0f} MB, {args.rounds} rounds")
    print(f"{'variant':<24} {'median s':>9} {'range s':>15} {'vs first':>9} {'CPU s':>7} {'peak RSS MB':>12}")
    for name, _, _ in variants:
        mine = [r for r in runs if r["variant"] == name and r.get("ok")]
        if not mine:
            print(f"{name:<24} failed")
            continue
        secs = [r["seconds"] for r in mine]
        ratios = [r["seconds"] / b["seconds"] for r in mine for b in runs
                  if b["round"] == r["round"] and b["variant"] == variants[0][0] and b.get("ok")]
        cpu = statistics.median(r.get("cpu_seconds", float("nan")) for r in mine)
        rss = statistics.median(r.get("peak_rss_mb", float("nan")) for r in mine)
        print(f"{name:<24} {statistics.median(secs):>9.2f} {min(secs):>7.2f}–{max(secs):<7.2f} "
              f"{statistics.median(ratios):>9.3f} {cpu:>7.1f} {rss:>12,.0f}")
    Path(args.json).write_text(json.dumps(runs, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
