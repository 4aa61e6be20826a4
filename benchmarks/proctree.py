"""A process tree watched from outside while it runs (Linux /proc): its resident memory summed
over every process in it, and each thread's CPU time, sampled every `interval` seconds.

- `peak_rss_mb`: the largest sum of RSS over the tree's processes at one sample. `os.wait4`'s
  ru_maxrss is one process's maximum, which says nothing of a tree of worker processes.
- `steady_cores`: CPU seconds of the whole tree over the middle of the run (from 20 % to 80 % of
  its wall time) divided by that time: the cores kept busy once started, before the tail.
- `threads`: the busiest threads (process name, thread name, CPU seconds): a thread near one
  core while the others share what is left is the GIL, or a serial part, showing.

Not a test; nothing here is imported by the package.
"""

from __future__ import annotations

import os
import threading
import time

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
                    self.threads[(pid, int(tid))] = (proc[0], got[0], got[1])
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
        busiest = sorted(self.threads.values(), key=lambda t: -t[2])[:8]
        return {"peak_rss_mb": max(s[2] for s in self.samples) / 2**20,
                "steady_cores": steady,
                "processes": len({p for p, _ in self.threads}),
                "threads": [{"process": p, "thread": t, "cpu_seconds": round(c, 2)} for p, t, c in busiest]}
