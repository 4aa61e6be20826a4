"""Executor.ordered: results in task order, tasks started in order, a bounded number ahead."""

import threading
import time

import dask
import pytest

from gpuetl.runtime.executor import Executor

started: list[int] = []
lock = threading.Lock()


def work(i):
    with lock:
        started.append(i)
    time.sleep(0.05 if i else 0.3)      # task 0 is the slowest: it must still come first
    return i


@pytest.fixture
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        yield c


def test_results_come_in_order_and_tasks_start_in_order(client):
    started.clear()
    tasks = [dask.delayed(work, pure=False)(i) for i in range(12)]
    results = Executor(client).ordered(tasks, ahead=3)
    assert next(results) == 0
    assert sorted(started[:2]) == [0, 1]                   # the first submitted run first
    assert len(started) <= 1 + 3 + 1                       # nothing beyond the window was sent
    assert list(results) == list(range(1, 12))
    assert sorted(started) == list(range(12))             # each task ran once


def test_local_schedulers_compute_everything_once():
    started.clear()
    tasks = [dask.delayed(work, pure=False)(i) for i in range(4)]
    assert list(Executor(None, "sync").ordered(tasks)) == [0, 1, 2, 3]
    assert sorted(started) == [0, 1, 2, 3]                 # once each, in one call


calls: list[str] = []


def shared():
    calls.append("shared")
    return 10


def use(base, i):
    time.sleep(0.02)
    return base + i


def test_tasks_sharing_work_run_it_once(client):
    calls.clear()
    base = dask.delayed(shared, pure=False)()
    tasks = [dask.delayed(use, pure=False)(base, i) for i in range(8)]
    assert list(Executor(client).ordered(tasks, independent=False, ahead=1)) == [10 + i for i in range(8)]
    assert calls == ["shared"]


def test_local_cluster_profiles_from_the_first_dashboard_visit_every_100ms_unless_configured():
    """The dashboard profiler's 10 ms default cost ~10% of a run on two cores, and sampling at
    all ~2% of an unwatched one (docs/design.md): it starts when the dashboard is first opened,
    every 100 ms; an interval or a switch the user set is theirs."""
    import urllib.request

    from distributed import Client

    from gpuetl.backends.cpu import CpuBackend
    from gpuetl.runtime.executor import Executor, backend_cluster

    def profiler(cluster):
        worker = next(iter(cluster.workers.values()))
        timer = worker.periodic_callbacks.get("profile")
        return timer and (timer.callback_time, timer.is_running())

    with backend_cluster(CpuBackend(), quiet=True) as cluster, Client(cluster) as client:
        assert profiler(cluster) is None
        with urllib.request.urlopen(Executor(client).dashboard_link, timeout=30) as page:
            assert page.status == 200
        assert profiler(cluster) == (100, True)
        worker = next(iter(cluster.workers.values()))
        assert worker.periodic_callbacks["profile-cycle"].is_running()
    with dask.config.set({"distributed.worker.profile.interval": "20ms"}), \
            backend_cluster(CpuBackend(), quiet=True) as cluster, Client(cluster) as client:
        with urllib.request.urlopen(Executor(client).dashboard_link, timeout=30) as page:
            assert page.status == 200
        assert profiler(cluster) == (20, True)
    with dask.config.set({"distributed.worker.profile.enabled": False}), \
            backend_cluster(CpuBackend(), quiet=True) as cluster, Client(cluster) as client:
        with urllib.request.urlopen(Executor(client).dashboard_link, timeout=30) as page:
            assert page.status == 200
        assert profiler(cluster) is None


def test_local_cluster_serves_the_dashboard_from_the_first_visit():
    """bokeh is imported only when someone opens the dashboard (executor._dashboard_on_first_visit);
    then every page is served. In a fresh process, so that no other test has imported bokeh."""
    import subprocess
    import sys

    code = """if True:
        import sys, urllib.request
        from distributed import Client
        from gpuetl.backends.cpu import CpuBackend
        from gpuetl.runtime.executor import Executor, backend_cluster

        with backend_cluster(CpuBackend(), quiet=True) as cluster, Client(cluster) as client:
            assert client.submit(sum, [1, 2]).result() == 3
            before = "bokeh" in sys.modules
            link = Executor(client).dashboard_link
            with urllib.request.urlopen(link, timeout=30) as page:
                status = (page.status, page.geturl(), b"bokeh" in page.read().lower())
            with urllib.request.urlopen(link.replace("/status", "/individual-task-stream"), timeout=30) as page:
                other = (page.status, b"bokeh" in page.read().lower())
            with urllib.request.urlopen(link.replace("/status", "/health"), timeout=30) as page:
                health = page.read()
            print(before, link, status, other, health)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    before, link, *rest = out.stdout.split(" ", 2)
    assert before == "False" and link.endswith("/status")
    assert rest[0].strip() == f"(200, '{link}', True) (200, True) b'ok'"
