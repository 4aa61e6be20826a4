"""Hostile runs on the default CPU path without a cluster (runtime/executor.py: `chosen_scheduler`
gives 'threads'; `Executor._ordered_threads` for independent partitions, `Executor._ordered_shared`
for partitions that share a global step such as `dedupe`).

What is claimed, each against the same pipeline with and without a global `dedupe`:
- a step that fails in one partition fails the run with the step's error, commits nothing, leaves
  no temporary folder (resume: keeps it, and the resumed run writes the same bytes), and no task
  of the run still runs or writes once `Pipeline.run` has returned;
- an error of gpuetl's raised while another was handled reads the same as on `--scheduler sync`;
- Ctrl-C in `gpuetl run`: one line, exit 130, nothing committed, nothing left (resume continues);
- the results held for a slow writer stay bounded (a few beyond the one being written);
- library manners: runs in a row, in a caller's thread, two at once, next to a caller's own dask
  computations, with `num_workers=1`, inside a dask task: nothing left behind (threads, dask
  callbacks, dask settings), each run's report about its own tasks only.
"""

from __future__ import annotations

import copy
import filecmp
import json
import threading
import time
from pathlib import Path

import dask
import pytest
import yaml
from dask.callbacks import Callback
from pydantic import RootModel

import gpuetl
from gpuetl.cli import main
from gpuetl.errors import DataError
from gpuetl.runtime.executor import local_threads
from gpuetl.samples import write_access_logs
from gpuetl.steps.base import STEPS, RowStep

from .interrupt import interrupted_run

# --------------------------------------------------------------------------- plugin steps (this module)

_lock = threading.Lock()
_calls = [0]                   # transform calls of the hostile steps since reset()
ARMED = [True]                 # whether hostile_tp_fail fails (off for a resumed run)
BARRIER: list = [None]         # hostile_tp_meet: a threading.Barrier its first calls wait at
_met: set = set()              # hostile_tp_meet: the values whose first call came
THEN: list = [None]            # hostile_tp_meet: an Event its first calls wait for after the barrier


def _count() -> int:
    with _lock:
        _calls[0] += 1
        return _calls[0]


class Nth(RootModel[int]):
    """which transform call (from 1) the step acts on"""


class FailAt(RowStep):
    name = "hostile_tp_fail"
    summary = "Raise ValueError in the n-th partition's transform (a little slow, so others run meanwhile)."
    example = "- hostile_tp_fail: 3"
    Params = Nth

    def transform(self, df, backend):
        k = _count()
        time.sleep(0.02)
        if ARMED[0] and k == self.params.root:
            raise ValueError(f"hostile step failed in call {k}")
        return df


class WrappedAt(RowStep):
    name = "hostile_tp_wrapped"
    summary = "In the n-th call, raise a RuntimeError while handling gpuetl's DataError."
    example = "- hostile_tp_wrapped: 3"
    Params = Nth

    def transform(self, df, backend):
        if _count() == self.params.root:
            try:
                raise DataError("the data of this partition is bad")
            except DataError:
                raise RuntimeError("cleaning up after it failed too")
        return df


class Meet(RowStep):
    name = "hostile_tp_meet"
    summary = ("The first call with each value waits at BARRIER (two runs, given two values, meet; or a "
               "caller's compute starts), then for THEN.")
    example = "- hostile_tp_meet: 1"
    Params = Nth

    def transform(self, df, backend):
        with _lock:
            first = self.params.root not in _met
            _met.add(self.params.root)
        if first and BARRIER[0] is not None:
            try:
                BARRIER[0].wait(10)
            except threading.BrokenBarrierError:
                pass
            if THEN[0] is not None:
                THEN[0].wait(10)
        return df


HOSTILE_STEPS = (FailAt, WrappedAt, Meet)


@pytest.fixture(autouse=True)
def hostile_steps():
    for cls in HOSTILE_STEPS:
        gpuetl.register_step(cls)
    _calls[0] = 0
    ARMED[0] = True
    BARRIER[0] = THEN[0] = None
    _met.clear()
    yield
    for cls in HOSTILE_STEPS:
        STEPS.pop(cls.name, None)


# --------------------------------------------------------------------------- inputs and helpers

_LOG: dict[int, bytes] = {}


def _log(path: Path, lines: int = 3000) -> Path:
    """~37 partitions of 16 KiB at 3000 lines; generated once a session."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if lines not in _LOG:
        write_access_logs(path, lines=lines, bad_every=97)
        _LOG[lines] = path.read_bytes()
    path.write_bytes(_LOG[lines])
    return path


def spec(base: Path, out: str = "out", steps=(), mode: str = "error", blocksize: str = "16KiB", **extra) -> dict:
    return {"version": 1, "name": "thread-pool", "source": {"type": "text", "path": str(base / "in" / "*.log"),
                                                           "blocksize": blocksize},
            "parse": {"preset": "apache_combined"}, "steps": list(steps), "on_error": "quarantine",
            "sink": {"path": str(base / out), "mode": mode}, **extra}


@pytest.fixture
def base(tmp_path) -> Path:
    _log(tmp_path / "in" / "a.log")
    return tmp_path


def run(base: Path, scheduler=None, **kw):
    return gpuetl.Pipeline.from_dict(spec(base, **kw), base_dir=base).run(backend="cpu", scheduler=scheduler)


def ours() -> list[str]:
    """The threads of gpuetl's thread pool and scheduler still alive."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith(("gpuetl-task", "gpuetl-scheduler")))


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def data_files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.parquet") if "_tmp" not in p.parts)


def assert_same_bytes(a: Path, b: Path) -> None:
    names = data_files(a)
    assert names and names == data_files(b), (names, data_files(b))
    differ = [n for n in names if not filecmp.cmp(a / n, b / n, shallow=False)]
    assert not differ, f"{a} and {b} differ in {differ}"


DEDUPE = [{"dedupe": {}}]
STEPS_OF = {"plain": [], "dedupe": DEDUPE}


# --------------------------------------------------------------------------- a step that fails


@pytest.mark.parametrize("kind", ["plain", "dedupe"])
def test_a_step_failing_in_one_partition_fails_the_run_commits_nothing_and_no_task_runs_on(base, kind):
    with pytest.raises(ValueError, match="hostile step failed in call 4"):
        run(base, steps=[{"hostile_tp_fail": 4}, *STEPS_OF[kind]])
    at_return, left = _calls[0], tree(base / "out")
    time.sleep(0.5)
    assert _calls[0] == at_return, "a task of the failed run still ran after Pipeline.run returned"
    assert ours() == [], "gpuetl's threads outlived the run"
    assert left == [] and tree(base / "out") == [], f"the failed run left {left} / {tree(base / 'out')}"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dedupe"])      # the shared path; plain resumes: tests/runtime/test_resume.py
def test_under_resume_a_failed_run_keeps_its_work_and_the_resumed_run_writes_the_same_bytes(base, kind):
    steps = [{"hostile_tp_fail": 12}, *STEPS_OF[kind]]
    with pytest.raises(ValueError, match="hostile step failed"):
        run(base, steps=steps, mode="resume")
    at_return, left = _calls[0], tree(base / "out")
    time.sleep(0.5)
    assert _calls[0] == at_return and tree(base / "out") == left, "a task still ran after Pipeline.run returned"
    assert ours() == []
    assert any(n.startswith("_tmp/") for n in left) and "_SUCCESS" not in left
    ARMED[0] = False
    resumed = run(base, steps=steps, mode="resume")
    assert (base / "out" / "_SUCCESS").exists() and not (base / "out" / "_tmp").exists()
    fresh = run(base, scheduler="sync", out="fresh", steps=steps)
    assert resumed.counts == fresh.counts
    assert_same_bytes(base / "out", base / "fresh")


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
@pytest.mark.parametrize("kind", ["plain", "dedupe"])
def test_gpuetls_error_raised_while_handling_another_reads_the_same_on_every_scheduler(base, kind, scheduler):
    """Executor.compute and the cluster branch of Executor.ordered (and _ordered_shared) unwrap an
    error whose cause or context is gpuetl's (`_raise_ours`), so the command says gpuetl's message
    (exit 1, with the failed run's report); _ordered_threads hands back the raw error, which the
    command calls an internal error, a bug in gpuetl."""
    with pytest.raises(DataError, match="the data of this partition is bad"):
        run(base, scheduler=scheduler, steps=[{"hostile_tp_wrapped": 3}, *STEPS_OF[kind]])


# --------------------------------------------------------------------------- Ctrl-C


@pytest.fixture
def many(tmp_path) -> Path:
    """~100 partitions of 16 KiB."""
    for i in range(2):
        _log(tmp_path / "in" / f"{i}.log", lines=4_000)
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dedupe"])      # plain runs: tests/hostile/test_user_mistakes.py
def test_ctrl_c_under_resume_keeps_the_finished_partitions_and_resume_writes_the_same_bytes(many, kind, capsys):
    pipe = many / "pipe.yaml"
    pipe.write_text(yaml.safe_dump(spec(many, steps=STEPS_OF[kind], mode="resume")))
    stopped = interrupted_run(pipe, lambda: len(list((many / "out").glob("_tmp/*/maps/p*.json"))) >= 10)
    assert stopped.returncode == 130, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1].startswith("gpuetl: interrupted; nothing was committed; the finished "
                                                            "work is kept")
    assert not (many / "out" / "_SUCCESS").exists()
    assert main(["run", str(pipe), "--no-progress"]) == 0
    assert "partitions already done, skipped" in capsys.readouterr().err
    run(many, scheduler="sync", out="fresh", steps=STEPS_OF[kind])
    assert_same_bytes(many / "out", many / "fresh")
    assert main(["verify", str(many / "out")]) == 0


# --------------------------------------------------------------------------- memory: results held for a slow writer


@pytest.mark.parametrize("kind", ["plain", pytest.param("dedupe", marks=pytest.mark.slow)])
def test_results_held_for_a_stuck_writer_stay_bounded(base, kind, monkeypatch):
    """The streaming writer's first write waits until the map phase stops making progress (a
    writer far slower than the parsing). Held = partitions spilled (their rows in memory,
    MapResult.tables) minus those the writer took. Independent partitions: at most `ahead`
    (2 x threads) beyond the next one the writer awaits (Executor._ordered_threads). With dedupe the read
    gate (graph.py) only waits for partition i - threads to be *spilled*, not written: the bound
    is _ordered_shared's, whose scheduler starts no task while more than `ahead` results wait
    and the next one the writer takes is among them; the tasks already running (one a thread)
    still finish (docs/design.md, "Memory")."""
    from gpuetl.runtime.phases import mapping
    from gpuetl.sinks.shard_writer import ShardWriter

    state = {"spilled": 0, "written": 0, "held": 0}
    spill, write = mapping.spill_partition, ShardWriter.write

    def counted_spill(*a, **k):
        result = spill(*a, **k)
        with _lock:
            state["spilled"] += 1
            state["held"] = max(state["held"], state["spilled"] - state["written"])
        return result

    def stuck_write(self, rows):
        if state["written"] == 0:            # the first write: until the map phase stands still
            last = -1
            while state["spilled"] != last:
                last = state["spilled"]
                time.sleep(0.25)
        with _lock:
            state["written"] += 1
        return write(self, rows)

    monkeypatch.setattr(mapping, "spill_partition", counted_spill)
    monkeypatch.setattr(ShardWriter, "write", stuck_write)
    with dask.config.set(num_workers=2):
        result = run(base, steps=STEPS_OF[kind])
    partitions = state["spilled"]
    assert partitions > 25 and result.counts["rows_out"]
    ahead, threads = 2 * 2, 2
    bound = ahead + 2 if kind == "plain" else ahead + 1 + threads
    assert state["held"] <= bound, f"{state['held']} of {partitions} partitions' results were held at once"


# --------------------------------------------------------------------------- the same bytes on every scheduler


# --------------------------------------------------------------------------- library manners


def _manners() -> tuple:
    return ours(), set(Callback.active), copy.deepcopy(dask.config.config)


@pytest.mark.slow
def test_runs_in_a_row_and_in_a_callers_thread_leave_nothing_behind(base):
    before = _manners()
    run(base, out="a", blocksize="64KiB")
    run(base, out="b", steps=DEDUPE, blocksize="64KiB")
    assert _manners() == before
    failed: list = []

    def in_thread():
        try:
            run(base, out="c", steps=DEDUPE, blocksize="64KiB")
            run(base, out="d", blocksize="64KiB")
        except BaseException as err:         # noqa: BLE001 (reported below)
            failed.append(err)

    caller = threading.Thread(target=in_thread)
    caller.start()
    caller.join(60)
    assert not failed and not caller.is_alive()
    assert _manners() == before
    assert_same_bytes(base / "a", base / "d")
    assert_same_bytes(base / "b", base / "c")


@pytest.mark.slow
def test_a_caller_with_one_worker_thread_or_inside_a_dask_task_gets_the_same_bytes(base):
    run(base, scheduler="sync", out="ref", steps=DEDUPE, blocksize="64KiB")
    with dask.config.set(num_workers=1):
        run(base, out="one", steps=DEDUPE, blocksize="64KiB")

    def job():
        run(base, out="nested", steps=DEDUPE, blocksize="64KiB")
        return 1

    assert dask.compute(dask.delayed(job)(), scheduler="threads", num_workers=1) == (1,)
    assert_same_bytes(base / "ref", base / "one")
    assert_same_bytes(base / "ref", base / "nested")
    assert set(Callback.active) == set()


@pytest.mark.parametrize("kind", ["plain", pytest.param("dedupe", marks=pytest.mark.slow)])
def test_two_runs_at_once_each_report_only_their_own_task_threads(base, kind):
    """Executor.timed registers its callback in dask's process-wide Callback.active, and
    _ordered_threads / _ordered_shared hand every callback found there to their schedulers: two
    runs at once in one process each time the other's tasks too (the report's `workers`)."""
    BARRIER[0] = threading.Barrier(2)          # the runs meet in their first partition: both in flight
    failed: list = []

    def go(out):
        try:
            run(base, out=out, steps=[{"hostile_tp_meet": 1 if out == "x" else 2}, *STEPS_OF[kind]], blocksize="64KiB")
        except BaseException as err:         # noqa: BLE001 (reported below)
            failed.append(err)

    threads = [threading.Thread(target=go, args=(out,)) for out in ("x", "y")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failed
    workers = [set(json.loads((base / out / "_report.json").read_text())["workers"]) for out in ("x", "y")]
    assert workers[0] and workers[1]
    assert not workers[0] & workers[1], f"both reports time the same threads: {sorted(workers[0] & workers[1])}"
    assert all(len(w) <= local_threads() + 1 for w in workers), workers     # its pool, and this process


def test_a_callers_dask_compute_spanning_a_run_keeps_no_callback_of_it(base):
    """A caller's own dask computation in another thread (dask's threaded scheduler, global
    callbacks) starts while a run is under way and ends after it: dask's local_callbacks put back
    the set it found, which holds the run's timing callback (Executor.timed, a global
    Callback); from then on every dask computation in the process calls it, appending to the
    finished run's task times. The local cluster (the default for 32 MiB and more before) times
    from the task stream and leaves nothing."""
    BARRIER[0], THEN[0] = threading.Barrier(2), threading.Event()
    returned = threading.Event()
    before = set(Callback.active)

    def hold():
        THEN[0].set()                        # the caller's computation is under way: the run goes on
        returned.wait(20)
        return 1

    def caller():
        BARRIER[0].wait(10)                  # the run's first partition is under way
        dask.compute(dask.delayed(hold)(), scheduler="threads")

    thread = threading.Thread(target=caller)
    thread.start()
    try:
        run(base, steps=[{"hostile_tp_meet": 1}], blocksize="64KiB")
    finally:
        returned.set()
        thread.join(20)
    left = set(Callback.active) - before
    for cb in left:                          # not to disturb the tests after this one
        Callback.active.discard(cb)
    assert not left, f"the run's callback stayed in dask's Callback.active: {left}"


@pytest.mark.parametrize("kind", ["plain", "dedupe"])
def test_a_callers_dask_profiler_around_a_run_neither_breaks_it_nor_sees_its_tasks(base, kind):
    """`with dask.diagnostics.Profiler(): pipeline.run()` (a caller's global dask callbacks). The
    run's local schedulers get the run's own callbacks only, as a cluster's tasks never reach a
    caller's local callbacks: several partitions' schedulers at once would break the Profiler
    (one's finish clears the results another is extending). The caller's own work is still
    profiled, before and after the run."""
    from dask.diagnostics import Profiler

    with Profiler() as profiler:
        assert dask.compute(dask.delayed(sum, pure=False)([1, 2], dask_key_name="callers-before"),
                            scheduler="threads") == (3,)
        result = run(base, steps=STEPS_OF[kind], blocksize="32KiB")
        assert dask.compute(dask.delayed(sum, pure=False)([3, 4], dask_key_name="callers-after"),
                            scheduler="threads") == (7,)
    assert result.counts["rows_out"] > 0
    assert result.counts["rows_in"] == sum(result.counts[k] for k in ("rows_out", "filtered", "deduplicated", "quarantined"))
    assert {str(r.key) for r in profiler.results} == {"callers-before", "callers-after"}
