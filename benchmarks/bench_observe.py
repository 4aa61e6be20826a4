"""What watching a run costs: progress, the gpuetl dashboard page's feed and the run report,
against a gpuetl without them, in alternating pairs (ABBA order), on one input.

    python benchmarks/bench_observe.py --size 100MB --pairs 10 --before /tmp/gpuetl-before [--after DIR]

--before: a gpuetl source tree without them (e.g. `git archive` of the commit before). Both run
`gpuetl run` on the local cluster with stderr not a terminal (progress as plain lines); the
measure is the CPU seconds (user + system) of the run's process tree, whose median ratio over
the pairs is printed with the wall times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_access_logs import ensure_input, parse_size, run_command, warm_and_count  # noqa: E402
from bench_tunings import TASKS, command  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=sorted(TASKS), default="dedupe")
    ap.add_argument("--size", default="100MB")
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--before", required=True, help="a gpuetl source tree without progress, page and report")
    ap.add_argument("--after", default=str(ROOT), help="the gpuetl source tree with them (default: this one)")
    ap.add_argument("--data", default=str(HERE / "data"))
    ap.add_argument("--json", default=str(HERE / "results" / "observe.json"))
    args = ap.parse_args(argv)
    src = ensure_input(Path(args.data), parse_size(args.size), 0, 0)
    warm_and_count(src)
    results = Path(args.json).resolve().parent
    results.mkdir(parents=True, exist_ok=True)
    pipeline, sets = TASKS[args.task]
    variants = {"observed": Path(args.after).resolve(), "before": Path(args.before).resolve()}
    pairs = []
    for k in range(args.pairs):
        order = ["observed", "before"] if k % 2 == 0 else ["before", "observed"]
        pair = {}
        for name in order:
            out = results / f"out-observe-{name}"
            pair[name] = run_command(name, command(variants[name], pipeline, src, out, sets), out,
                                     results / f"observe-{name}.log", 1800)
        if not all(r.get("ok") for r in pair.values()):
            print(f"pair {k + 1}: failed: " + "; ".join(str(r.get("error")) for r in pair.values()), flush=True)
            continue
        pairs.append(pair)
        o, b = pair["observed"], pair["before"]
        print(f"pair {k + 1} ({order[0]} first): CPU {o['cpu_seconds']:.2f} / {b['cpu_seconds']:.2f} s = "
              f"{o['cpu_seconds'] / b['cpu_seconds']:.3f}; wall {o['seconds']:.2f} / {b['seconds']:.2f} s", flush=True)
    cpu = [p["observed"]["cpu_seconds"] / p["before"]["cpu_seconds"] for p in pairs]
    wall = [p["observed"]["seconds"] / p["before"]["seconds"] for p in pairs]
    print(f"\n{args.task}, {src.stat().st_size / 1e6:,.0f} MB, {len(pairs)} pairs: median CPU ratio "
          f"{statistics.median(cpu):.3f} (observed {statistics.median(p['observed']['cpu_seconds'] for p in pairs):.2f} s, "
          f"before {statistics.median(p['before']['cpu_seconds'] for p in pairs):.2f} s); median wall ratio "
          f"{statistics.median(wall):.3f}")
    Path(args.json).write_text(json.dumps(pairs, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
