"""What the side-by-side benchmarks share once their input exists: warm it into the page cache,
run each system in turn into its own output folder, watch its process tree (TreeWatch: memory
summed over the tree, each thread's CPU), and write the results file.

Not a test; nothing here is imported by the package.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import threading
import time
from pathlib import Path


def warm(src: Path, warm_and_count) -> tuple[int, int]:
    """Read the input once so every system starts from the page cache: (bytes, lines)."""
    input_bytes = src.stat().st_size
    t = time.perf_counter()
    lines = warm_and_count(src)
    print(f"page cache warmed: {input_bytes / 1e6:,.1f} MB, {lines:,} lines read in {time.perf_counter() - t:.2f} s")
    return input_bytes, lines


def run_each(names, run, results_dir: Path, prefix: str, input_bytes: int, keep_output: bool) -> list[dict]:
    """run(name, out, log) -> its result, for each system, one after the other; the output folder
    `{prefix}out-{name}` is removed afterwards unless kept, the log `{prefix}{name}.log` stays."""
    results_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names:
        out, log = results_dir / f"{prefix}out-{name}", results_dir / f"{prefix}{name}.log"
        print(f"running {name} ...", flush=True)
        r = run(name, out, log)
        r.update(input_bytes=input_bytes, log=str(log))
        if r["ok"]:
            r["mb_per_s"] = input_bytes / 1e6 / r["seconds"]
            steady = f", {r['steady_cores']:.2f} cores busy mid-run" if r.get("steady_cores") else ""
            print(f"  {r['seconds']:.2f} s, {r['mb_per_s']:.1f} MB/s, {r['rows']:,} rows, "
                  f"peak RSS {r['peak_rss_mb']:,.0f} MB (process tree), CPU {r['cpu_seconds']:.1f} s{steady}",
                  flush=True)
        else:
            print(f"  FAILED: {r.get('error', '')[:300]}", flush=True)
        if not keep_output:
            shutil.rmtree(out, ignore_errors=True)
        results.append(r)
    return results


def write_results(path: Path, benchmark: str, **fields) -> None:
    doc = {"benchmark": benchmark, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           **fields}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"\nwrote {path}")


# -- the process tree, watched from outside while it runs (Linux /proc) --------------------------
#
# A process tree watched from outside while it runs (Linux /proc): its resident memory summed
# over every process in it, and each thread's CPU time, sampled every `interval` seconds.
#
# - `peak_rss_mb`: the largest sum of RSS over the tree's processes at one sample. `os.wait4`'s
#   ru_maxrss is one process's maximum, which says nothing of a tree of worker processes.
# - `steady_cores`: CPU seconds of the whole tree over the middle of the run (from 20 % to 80 % of
#   its wall time) divided by that time: the cores kept busy once started, before the tail.
# - `threads`: the busiest threads (process name, thread name, CPU seconds): a thread near one
#   core while the others share what is left is the GIL, or a serial part, showing.
#


TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree(root: int) -> list[int]:
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return pids


def _stat(path: str) -> tuple[str, float] | None:
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return name, (int(fields[11]) + int(fields[12])) / TICK      # utime + stime


class TreeWatch:
    def __init__(self, pid: int, interval: float = 0.05):
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, float, int]] = []       # (time, tree CPU seconds, tree RSS bytes)
        self.threads: dict[tuple[int, int], tuple[str, str, float]] = {}
        self.sched: dict[tuple[int, int], tuple[float, float, float, float]] = {}    # first/last seen, CPU, run queue
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.ended = time.perf_counter()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        now = time.perf_counter()
        rss = 0
        for pid in _tree(self.pid):
            proc = _stat(f"/proc/{pid}/stat")
            if proc is None:
                continue
            try:
                with open(f"/proc/{pid}/statm") as f:
                    rss += int(f.read().split()[1]) * PAGE
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                got = _stat(f"/proc/{pid}/task/{tid}/stat")
                if got is not None:
                    key = (pid, int(tid))
                    self.threads[key] = (proc[0], "main" if key[1] == pid else got[0], got[1])
                    try:
                        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                            on_cpu, queued = (int(x) / 1e9 for x in f.read().split()[:2])
                    except (OSError, ValueError):
                        continue
                    first = self.sched.get(key, (now,))[0]
                    self.sched[key] = (first, now, on_cpu, queued)
        cpu = sum(c for _, _, c in self.threads.values())        # a thread gone keeps its last figure
        if rss:
            self.samples.append((now, cpu, rss))

    def summary(self) -> dict:
        if not self.samples:
            return {}
        t0, t1 = self.started, self.ended
        a, b = t0 + 0.2 * (t1 - t0), t0 + 0.8 * (t1 - t0)
        inside = [s for s in self.samples if a <= s[0] <= b]
        steady = ((inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
                  if len(inside) >= 2 and inside[-1][0] > inside[0][0] else None)
        busiest = sorted(self.threads, key=lambda k: -self.threads[k][2])[:8]
        return {"peak_rss_mb": max(s[2] for s in self.samples) / 2**20,
                "steady_cores": steady,
                "processes": len({p for p, _ in self.threads}),
                "threads": [self._thread_line(k) for k in busiest]}

    def _thread_line(self, key) -> dict:
        """A thread's CPU seconds, its seconds waiting for a core (the run queue: the machine's
        load) and the rest of the time it was seen, asleep (a lock such as the GIL, I/O, or no
        work): a busy task thread that sleeps much while the run queue is short waits on the GIL."""
        process, name, cpu = self.threads[key]
        line = {"process": process, "thread": name, "cpu_seconds": round(cpu, 2)}
        if key in self.sched:
            first, last, on_cpu, queued = self.sched[key]
            line.update(run_queue_seconds=round(queued, 2),
                        asleep_seconds=round(max(0.0, (last - first) - on_cpu - queued), 2))
        return line
