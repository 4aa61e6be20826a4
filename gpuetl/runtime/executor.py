"""Where the graph runs: a distributed cluster (local, or a scheduler address), or dask's local
schedulers for small jobs and tests. The rest of gpuetl only calls compute()."""

from __future__ import annotations

import importlib.util
import itertools
import os
from collections import deque
from contextlib import contextmanager

import dask

from ..errors import GpuetlError, SpecError


class Executor:
    def __init__(self, client=None, scheduler: str | None = None):
        self.client = client
        self.scheduler = scheduler

    @property
    def dashboard_link(self) -> str | None:
        """The dashboard's address, where there is one to see (bokeh draws its pages)."""
        if self.client is None or importlib.util.find_spec("bokeh") is None:
            return None
        return getattr(self.client, "dashboard_link", None)

    def compute(self, tasks: list, progress: bool = False) -> list:
        if not tasks:
            return []
        try:
            if self.client is None:
                return list(dask.compute(*tasks, scheduler=self.scheduler or "threads"))
            futures = self.client.compute(tasks)
            if progress:
                from distributed import progress as show_progress

                show_progress(futures)
                print()
            return self.client.gather(futures)
        except GpuetlError:
            raise
        except Exception as err:       # a worker's error comes back wrapped: unwrap ours
            cause = _our_error(err)
            if cause is not None:
                raise cause from None
            raise


    def ordered(self, tasks: list, independent: bool = True, ahead: int | None = None):
        """Yield results in task order. Tasks go to the cluster in order, one scheduler
        generation per submission (fifo_timeout=0), so earlier ones run first (one submission of
        all would run them in dask.order's order: for independent chains, partition 0 last).
        Independent tasks go one at a time, at most `ahead` (default: twice the worker threads)
        beyond the one being consumed, so results held for a slower consumer (the streaming
        writer) stay bounded in memory. Tasks that share work (a global step before them) all go
        at once, a thread's worth per generation: submitted later, they would redo the shared
        work whose first users had already been released."""
        if self.client is None:        # dask's local schedulers: one call, shared work done once
            yield from self.compute(tasks)
            return
        threads = max(1, sum(self.client.nthreads().values()))
        ahead = ahead or 2 * threads
        pending: deque = deque()
        queue = iter(tasks)

        def submit(k: int) -> None:
            for task in itertools.islice(queue, k):
                pending.append(self.client.compute(task, fifo_timeout=0))

        if not independent:
            while batch := list(itertools.islice(queue, threads)):
                pending.extend(self.client.compute(batch, fifo_timeout=0))
        try:
            submit(ahead + 1)
            while pending:
                future = pending.popleft()
                try:
                    result = future.result()
                except GpuetlError:
                    raise
                except Exception as err:
                    cause = _our_error(err)
                    if cause is not None:
                        raise cause from None
                    raise
                submit(1)
                yield result
        finally:
            self.client.cancel(list(pending))

    @property
    def in_process(self) -> bool:
        """Whether tasks run in this process (results are handed over, never copied)."""
        if self.client is None:
            return True
        address = getattr(getattr(self.client, "scheduler", None), "address", "") or ""
        return address.startswith("inproc://")

    @property
    def shares_files(self) -> bool:
        """Whether this process sees the workers' files (a cluster on this machine)."""
        if self.client is None:
            return True
        addresses = self.client.scheduler_info().get("workers", {})
        return all(a.startswith(("tcp://127.", "inproc://", "tcp://localhost")) for a in addresses)


def _our_error(err: BaseException) -> GpuetlError | None:
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, GpuetlError):
            return err
        err = err.__cause__ or err.__context__
    return None


@contextmanager
def open_executor(scheduler: str | None, backend, client=None, quiet: bool = False):
    """scheduler: None/'local' (a LocalCluster sized to the machine), 'sync' or 'threads'
    (no cluster), or a scheduler address such as tcp://10.0.0.5:8786."""
    if client is not None:
        yield Executor(client)
        return
    if scheduler in ("sync", "threads", "synchronous"):
        yield Executor(None, "sync" if scheduler != "threads" else "threads")
        return
    from distributed import Client

    if scheduler and scheduler != "local":
        try:
            with Client(scheduler, timeout="10s") as c:
                yield Executor(c)
        except OSError as err:
            raise SpecError(f"--scheduler {scheduler}: cannot reach the scheduler ({err})") from None
        return
    with backend_cluster(backend, quiet) as cluster, Client(cluster) as c:
        yield Executor(c)


@contextmanager
def backend_cluster(backend, quiet: bool):
    make = getattr(backend, "local_cluster", None)
    if make is not None:
        with make() as cluster:
            yield cluster
        return
    import logging

    from distributed import LocalCluster

    # One in-process worker with a thread per core: the heavy kernels (pyarrow, numpy) release
    # the GIL, nothing is pickled between processes, and it starts in milliseconds instead of
    # the seconds that spawning worker processes (each importing pandas and pyarrow) takes.
    # GPU backends bring their own cluster (one process per GPU).
    threads = max(1, min(os.cpu_count() or 1, 64))
    logging.getLogger("distributed").setLevel(logging.ERROR if quiet else logging.WARNING)
    # A task's error reaches the user once, from the client, as gpuetl's own message (the
    # worker would also log it with a traceback; GPUETL_DEBUG=1 shows that one).
    if not os.environ.get("GPUETL_DEBUG"):
        logging.getLogger("distributed.worker").setLevel(logging.CRITICAL)
    # The dashboard's web server starts with the cluster; its pages on the first visit
    # (_dashboard_on_first_visit).
    settings, profile_later = _profile_settings()
    with dask.config.set(settings), \
            LocalCluster(n_workers=1, threads_per_worker=threads, processes=False, dashboard_address=":8787",
                         scheduler_kwargs={"dashboard": False}, silence_logs=logging.ERROR) as cluster:
        workers = list(cluster.workers.values()) if profile_later else []
        _dashboard_on_first_visit(cluster.scheduler, workers)
        yield cluster


def _dashboard_on_first_visit(scheduler, profiled_workers: list = ()) -> None:
    """Add the dashboard's pages (distributed's own: distributed.dashboard.scheduler.connect, as
    the scheduler does when it starts with a dashboard) when someone first opens one, and start
    the profilers of `profiled_workers` then (_start_profiling). Importing the pages (bokeh) takes
    ~0.45 s of a core, which dask spends before the cluster accepts its first task, in every run,
    watched or not. Until then a catch-all handler, consulted after the server's own routes, adds
    them, steps aside and sends the browser back to the same page."""
    from tornado import web

    router = scheduler.http_application

    class FirstVisit(web.RequestHandler):
        def get(self, *args):
            if waiting in router.applications:
                router.applications.remove(waiting)
                try:
                    from distributed.dashboard import scheduler as pages
                except ImportError:
                    self.set_status(404)
                    self.finish("the dashboard needs bokeh: pip install 'bokeh>=3.1'")
                    return
                pages.connect(router, scheduler.http_server, scheduler, prefix="/")
                _start_profiling(profiled_workers)
            self.redirect(self.request.uri)

    waiting = web.Application([(r"/.*", FirstVisit)])
    router.add_application(waiting)


PROFILE_INTERVAL = "100ms"
_PROFILE = "distributed.worker.profile."


def _profile_settings() -> tuple[dict, bool]:
    """(dask settings for the local cluster, whether its profilers start on the first dashboard
    visit). The dashboard's statistical profiler samples every task thread's stack, holding the
    GIL, every 10 ms by default: on a 2-core machine that cost ~10% of a run. Sampling every
    100 ms keeps the Profile page useful, and it starts when someone first opens the dashboard
    (~2% of an unwatched 1 GB run on two cores). An interval other than the default, or
    profiling switched off, is left alone."""
    settings = {}
    if dask.config.get(_PROFILE + "interval", "10ms") in ("10ms", "10 ms"):
        settings[_PROFILE + "interval"] = PROFILE_INTERVAL
    later = dask.config.get(_PROFILE + "enabled", True) is True
    if later:
        settings[_PROFILE + "enabled"] = False
    return settings, later


def _start_profiling(workers: list) -> None:
    """What distributed.Worker sets up at start when distributed.worker.profile.enabled: one
    callback samples the task threads' stacks, the other files the samples by time. Runs on the
    workers' event loop (the dashboard's request handler, the same loop on the local cluster)."""
    from dask.utils import parse_timedelta
    from tornado.ioloop import PeriodicCallback

    every = {"profile": parse_timedelta(dask.config.get(_PROFILE + "interval"), default="ms"),
             "profile-cycle": parse_timedelta(dask.config.get(_PROFILE + "cycle"), default="ms")}
    for worker in workers:
        if "profile" in worker.periodic_callbacks:
            continue
        for name, callback in (("profile", worker.trigger_profile), ("profile-cycle", worker.cycle_profile)):
            worker.periodic_callbacks[name] = timer = PeriodicCallback(callback, every[name] * 1000)
            timer.start()
