"""The read gate of global steps settled in order (runtime/graph.py): partition i is read only
once partition i - ahead is spilled, so the parsed frames waiting for the step's chain, and the
marked ones waiting for their spill, stay bounded however many partitions there are. Counted by
hooks on the read, the step's advance and the spill; events, not timing, decide what runs when."""

import json
import threading

import dask
import pytest

import gpuetl
from gpuetl.runtime import graph
from gpuetl.runtime.phases import mapping
from gpuetl.steps.dedupe import Dedupe

THREADS = 2
AHEAD = mapping.READ_AHEAD * THREADS        # the gate with two worker threads


class Waiting:
    """Partitions whose read has begun and that are not spilled yet (so neither settled by the
    dedupe): the most at once. With `hold`, settling partition 0 waits until that many reads
    have begun, as a slow chain would."""

    def __init__(self, hold: int | None = None):
        self.lock = threading.Lock()
        self.now = self.most = self.reads = self.spills = 0
        self.hold, self.enough = hold, threading.Event()

    def read(self):
        with self.lock:
            self.now += 1
            self.reads += 1
            self.most = max(self.most, self.now)
            if self.hold is not None and self.reads >= self.hold:
                self.enough.set()

    def settling(self, partition: int):
        if partition == 0 and self.hold is not None:
            assert self.enough.wait(60), f"{self.hold} reads never began while partition 0 was being settled"

    def spilled(self):
        with self.lock:
            self.now -= 1
            self.spills += 1


COUNT = {"now": Waiting()}
real_read, real_advance, real_spill = graph.read_partition, Dedupe.advance, mapping.spill_partition


def counted_read(*args, **kwargs):     # module-level: a cluster's scheduler unpickles it by name
    COUNT["now"].read()
    return real_read(*args, **kwargs)


def counted_advance(self, state, df, keys, partition, backend):
    COUNT["now"].settling(partition)
    return real_advance(self, state, df, keys, partition, backend)


counted_advance.__name__ = "advance"     # a bound method is pickled as getattr(step, its __name__)


def counted_spill(*args, **kwargs):
    out = real_spill(*args, **kwargs)
    COUNT["now"].spilled()
    return out


@pytest.fixture
def count(monkeypatch):
    def start(hold=None):
        monkeypatch.setitem(COUNT, "now", Waiting(hold))
        return COUNT["now"]

    monkeypatch.setattr(graph, "read_partition", counted_read)
    monkeypatch.setattr(Dedupe, "advance", counted_advance)
    monkeypatch.setattr(mapping, "spill_partition", counted_spill)
    return start


@pytest.fixture(params=["sync", "threads", "local cluster"])
def where(request):
    """What runs the tasks: (scheduler, client)."""
    if request.param != "local cluster":
        with dask.config.set(num_workers=THREADS):
            yield request.param, None
        return
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=THREADS, processes=False, dashboard_address=None,
                      scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}) as cluster, Client(cluster) as client:
        yield None, client


def run(tmp_path, where):
    """filter + dedupe over ~26 partitions of JSON lines, with repeats across partitions."""
    scheduler, client = where
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    rows = [{"k": f"key{i % 150}", "n": i % 7} for i in range(1200)]
    (folder / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {"version": 1, "name": "gate",
            "source": {"type": "jsonl", "path": "in/*.jsonl", "blocksize": "1KiB"},
            "columns": {"k": "string", "n": "int64"},
            "steps": [{"filter": "n != 3"}, {"dedupe": {"on": ["k", "n"]}}],
            "sink": {"path": "out", "mode": "overwrite"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler=scheduler,
                                                                     client=client)
    c = result.counts
    assert c["deduplicated"] > 0
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"] == 1200
    return result


def test_reads_wait_for_the_chain(tmp_path, count, where):
    """However far the reads could run while partition 0 is settled, at most `ahead` partitions
    (READ_AHEAD a thread) are read and not spilled at once. On sync the one thread runs the chain
    too: it cannot be held, and the gate is READ_AHEAD."""
    sync = where[0] == "sync"
    waiting = count(hold=None if sync else AHEAD)
    run(tmp_path, where)
    assert waiting.reads == waiting.spills > 2 * AHEAD and waiting.now == 0
    if sync:
        assert 1 <= waiting.most <= mapping.READ_AHEAD
    else:
        assert waiting.most == AHEAD        # reached while partition 0 was held, never passed


@pytest.mark.parametrize("where", [("threads", None)], indirect=False)
def test_without_the_gate_reads_run_ahead_and_the_bytes_are_the_same(tmp_path, count, monkeypatch, where):
    """The check above can fail: ungated, reads go on while the chain is held. The gate changes
    when partitions are read, never what is written."""
    with dask.config.set(num_workers=THREADS):
        count()
        gated = run(tmp_path, where).shards
        monkeypatch.setattr(graph, "_all_in_order", lambda plan: False)
        waiting = count(hold=AHEAD + 3)
        ungated = run(tmp_path, where).shards
    assert waiting.most >= AHEAD + 3
    assert gated == ungated
