"""Executor.ordered: results in task order, tasks started in order, a bounded number ahead;
the local cluster's dashboard and profiler. Events, not sleeps, decide what runs when."""

import threading

import dask
import pytest

from gpuetl.runtime.executor import Executor

started: list[int] = []
lock = threading.Lock()
rest_done = threading.Event()


def work(i):
    with lock:
        started.append(i)
    if i == 0:                         # the first task is the slowest: it ends after 1..3
        assert rest_done.wait(60), "tasks 1..3 never ran while task 0 was running"
    if i == 3:
        rest_done.set()
    return i


class CountingClient:
    """The real client, counting the tasks handed to it."""

    def __init__(self, client):
        self.client, self.submitted = client, 0

    def compute(self, tasks, **kwargs):
        self.submitted += len(tasks) if isinstance(tasks, list) else 1
        return self.client.compute(tasks, **kwargs)

    def __getattr__(self, name):
        return getattr(self.client, name)


@pytest.fixture
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as c:
        yield c


def test_results_come_in_order_and_tasks_start_in_order(client):
    started.clear()
    rest_done.clear()
    counting = CountingClient(client)
    tasks = [dask.delayed(work, pure=False)(i) for i in range(12)]
    results = Executor(counting).ordered(tasks, ahead=3)
    assert next(results) == 0          # first, though 1..3 finished before it
    # nothing beyond the window: the one consumed, `ahead` more, and one sent on its consumption
    assert counting.submitted == 1 + 3 + 1
    assert sorted(started[:2]) == [0, 1]                   # the first submitted run first
    assert sorted(started[:4]) == [0, 1, 2, 3]             # 4 was sent only once 0 was done
    assert list(results) == list(range(1, 12))
    assert sorted(started) == list(range(12))             # each task ran once
    assert counting.submitted == 12


gate = threading.Event()


def one():
    return 1


def held(x):
    assert gate.wait(60), "the gate never opened"
    return x


def fail_after(x):
    raise ValueError("a task failed")


def test_a_failure_lets_the_other_tasks_go_without_an_error_in_the_scheduler(client):
    """A task fails while another's inner task (one no client holds) still runs: the rest are let
    go, and the scheduler logs no error (Client.cancel there made distributed's scheduler assert
    and print its traceback on the user's terminal before the run's own error)."""
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = records.append
    watched = [logging.getLogger(name) for name in ("distributed.core", "distributed.scheduler", "asyncio")]
    for logger in watched:
        logger.addHandler(handler)
    gate.clear()
    try:
        first = dask.delayed(one, pure=False)()
        inner = dask.delayed(held, pure=False)(first)              # no future holds it
        last = dask.delayed(lambda x: x, pure=False)(inner)
        failing = dask.delayed(fail_after, pure=False)(first)
        with pytest.raises(ValueError, match="a task failed"):
            Executor(client).compute([first, last, failing])
        gate.set()
        assert client.submit(one, pure=False).result(timeout=60) == 1     # after the scheduler took the release
    finally:
        gate.set()
        for logger in watched:
            logger.removeHandler(handler)
    assert [r.getMessage() for r in records] == []


def test_local_schedulers_compute_everything_once():
    started.clear()
    rest_done.set()
    tasks = [dask.delayed(work, pure=False)(i) for i in range(4)]
    assert list(Executor(None, "sync").ordered(tasks)) == [0, 1, 2, 3]
    assert sorted(started) == [0, 1, 2, 3]                 # once each, in one call


calls: list[str] = []


def shared():
    calls.append("shared")
    return 10


def use(base, i):
    return base + i


class SlowToSubmit(CountingClient):
    """The real client, each submission returning only once its tasks are done: the moment
    between two submissions in which the scheduler may release work the first ones shared."""

    def compute(self, tasks, **kwargs):
        from distributed import wait

        futures = super().compute(tasks, **kwargs)
        wait(futures)
        return futures


@pytest.mark.parametrize("submit", [CountingClient, SlowToSubmit])
def test_tasks_sharing_work_run_it_once(client, submit):
    calls.clear()
    base = dask.delayed(shared, pure=False)()
    tasks = [dask.delayed(use, pure=False)(base, i) for i in range(8)]
    assert list(Executor(submit(client)).ordered(tasks, independent=False, ahead=1)) == [10 + i for i in range(8)]
    assert calls == ["shared"]


def _profiler(cluster):
    worker = next(iter(cluster.workers.values()))
    timer = worker.periodic_callbacks.get("profile")
    return timer and (timer.callback_time, timer.is_running())


def test_local_cluster_with_a_dashboard_on_a_free_port_profiles_every_100ms_unless_configured():
    """The dashboard is served where asked (any free port here) and its pages draw; the
    profiler samples every 100 ms, not dask's 10 ms (it holds the GIL); the user's interval or
    switch stands."""
    import urllib.request

    from distributed import Client

    from gpuetl.backends.cpu import CpuBackend
    from gpuetl.runtime.executor import backend_cluster

    free = ":0"
    with backend_cluster(CpuBackend(), quiet=True, dashboard_address=free) as cluster, Client(cluster) as client:
        link = Executor(client).dashboard_link
        assert link and not link.endswith(":8787/status")
        with urllib.request.urlopen(link, timeout=30) as page:
            assert page.status == 200 and b"bokeh" in page.read().lower()
        assert _profiler(cluster) == (100, True)
    with dask.config.set({"distributed.worker.profile.interval": "20ms"}), \
            backend_cluster(CpuBackend(), quiet=True, dashboard_address=free) as cluster:
        assert _profiler(cluster) == (20, True)
    with dask.config.set({"distributed.worker.profile.enabled": False}), \
            backend_cluster(CpuBackend(), quiet=True, dashboard_address=free) as cluster:
        assert _profiler(cluster) is None


def test_local_cluster_without_a_dashboard_draws_nothing_and_samples_nothing():
    """The local cluster where nobody asked for a dashboard (`scheduler="local"` in a library
    call): no bokeh import and no profiler, whose samples only the dashboard shows. In a fresh
    process, so that no other test has imported bokeh."""
    import subprocess
    import sys

    code = """if True:
        import sys
        from gpuetl.backends.cpu import CpuBackend
        from gpuetl.runtime.executor import open_executor

        with open_executor("local", CpuBackend(), quiet=True) as executor:
            cluster = executor.client.cluster
            assert executor.client.submit(sum, [1, 2]).result() == 3
            worker = next(iter(cluster.workers.values()))
            print("bokeh" in sys.modules, executor.dashboard_link, "profile" in worker.periodic_callbacks,
                  cluster.scheduler.http_server.port != 8787)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "None", "False", "True"]


def test_local_cluster_wakes_its_event_loop_less_and_leaves_the_users_timers_and_dask_config_alone():
    """gpuetl's CPU cluster measures its loop's lag every second, its memory every 250 ms, the
    system every 2 s without a dashboard (500 ms with one, for its System page), and steals no
    work (one worker); an interval the user set stands, and dask's configuration is as it was."""
    import distributed  # noqa: F401  (its defaults in dask's configuration, as a user's program has them)

    from gpuetl.backends.cpu import CpuBackend
    from gpuetl.runtime.executor import backend_cluster

    def timers(cluster):
        worker = next(iter(cluster.workers.values()))
        calls = worker.periodic_callbacks
        return (calls["tick"].callback_time, calls["memory_monitor"].callback_time, calls["monitor"].callback_time,
                "stealing" in cluster.scheduler.extensions)

    before = dask.config.config.copy()
    with backend_cluster(CpuBackend(), quiet=True) as cluster:
        assert timers(cluster) == (1000, 250, 2000, False)
    with backend_cluster(CpuBackend(), quiet=True, dashboard_address=":0") as cluster:
        assert timers(cluster) == (1000, 250, 500, False)
    mine = {"distributed.admin.tick.interval": "50ms", "distributed.worker.memory.monitor-interval": "0.2s",
            "distributed.admin.system-monitor.interval": "300ms"}
    with dask.config.set(mine), backend_cluster(CpuBackend(), quiet=True) as cluster:
        assert timers(cluster) == (50, 200, 300, False)
    assert dask.config.config == before


def test_a_callers_client_that_is_not_the_default_runs_and_reports_each_result():
    """A library caller may hand gpuetl a Client made with set_as_default=False: results still
    come back through that client, each one told to on_result (no lookup of a default client)."""
    import distributed
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as own:
        with pytest.raises(ValueError):
            distributed.default_client()          # the test means something only without one
        seen = []
        tasks = [dask.delayed(int, pure=False)(i) for i in range(5)]
        assert Executor(own).compute(tasks, on_result=seen.append) == list(range(5))
        assert sorted(seen) == list(range(5))


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_the_local_cluster_has_a_thread_per_core_the_process_may_use():
    """`taskset -c 0 gpuetl run …` on a larger machine: one task thread, not one per core of the
    machine (os.cpu_count() counts them all)."""
    import os
    import subprocess
    import sys

    code = ("import os\nfrom gpuetl.runtime.executor import _cpu_cluster, local_threads\n"
            "with _cpu_cluster(None) as c:\n"
            "    print(os.cpu_count(), local_threads(), sum(w.nthreads for w in c.scheduler.workers.values()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
                         preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
    machine, usable, threads = map(int, out.stdout.split())
    assert (usable, threads) == (1, 1) and machine == os.cpu_count()


def test_settle_waits_for_a_task_the_threaded_scheduler_left_running(tmp_path):
    """Without a cluster (a light start), dask's threaded scheduler returns on the first error
    while another task still runs: settle() waits for it, so the run's folder is not removed
    under a task that writes into it (as a Ctrl-C in CI once showed: 'Directory not empty')."""
    import time

    marker = tmp_path / "written"
    started = threading.Event()

    def slow():
        started.set()
        time.sleep(0.4)
        marker.write_text("a task's late write")
        return 1

    def failing():
        started.wait(5)
        raise ValueError("the first task fails")

    ex = Executor(None, "threads")
    with pytest.raises(ValueError):
        ex.compute([dask.delayed(slow)(dask_key_name="slow"), dask.delayed(failing)(dask_key_name="failing")])
    ex.settle()
    assert marker.exists()                  # the running task ended before settle returned


def test_shared_keys_are_the_keys_more_than_one_task_needs():
    """Executor.shared_keys walks each task's graph once (the tasks of one build share one
    dict): on random graphs it finds exactly the keys two or more tasks reach, for handles of
    one TaskGraph and for dask.delayed objects alike."""
    import random
    from collections import Counter

    import dask

    from gpuetl.runtime.executor import shared_keys
    from gpuetl.runtime.graph import TaskGraph

    def needed(task):
        graph, seen, work = dict(task.__dask_graph__()), set(), [task.key]
        while work:
            key = work.pop()
            if key not in seen:
                seen.add(key)
                work.extend(graph[key].dependencies)
        return seen

    rng = random.Random(7)
    for _ in range(200):
        graph, nodes = TaskGraph(), []
        for j in range(rng.randint(1, 20)):
            nodes.append(graph.add(max, "n", j, 0, *rng.sample(nodes, min(len(nodes), rng.randint(0, 3)))))
        tasks = rng.sample(nodes, rng.randint(1, len(nodes)))
        users = Counter(key for task in tasks for key in needed(task))
        assert set(shared_keys(tasks)) == {key for key, n in users.items() if n > 1}
    one = dask.delayed(int)("1")
    a, b, c = dask.delayed(abs)(one), dask.delayed(abs)(one), dask.delayed(abs)(2)
    assert shared_keys([a, b, c]) == [one.key]
