"""Where the graph runs: a distributed cluster (local, or a scheduler address), or dask's local
schedulers for small jobs and tests. The rest of gpuetl only calls compute()."""

from __future__ import annotations

import importlib.util
import itertools
import os
import threading
import time
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager

import dask

from ..errors import GpuetlError, SpecError


class Executor:
    def __init__(self, client=None, scheduler: str | None = None, dashboard: bool = True,
                 dashboard_host: str | None = None, own: bool = False):
        self.client = client
        self.own = own                  # gpuetl's own cluster, started for this run
        self.scheduler = scheduler
        self.dashboard = dashboard      # False: gpuetl's own cluster, started without one
        self.dashboard_host = dashboard_host    # the host gpuetl's own cluster serves its dashboard on
        self.pool: TaskPool | None = None       # the threaded scheduler's threads (settle waits for them)
        # dask callbacks (start, start_state, pretask, posttask, finish) for this run's local
        # schedulers, handed to each call: registered globally (dask.callbacks.Callback), they
        # would also see a caller's own dask work and other runs' tasks at the same time
        self.callbacks: list[tuple] = []

    @property
    def dashboard_link(self) -> str | None:
        """The dashboard's address, where there is one to see (bokeh draws its pages). dask names
        the machine's outward address whatever the dashboard listens on; a dashboard served on
        one host (loopback) is named by that host."""
        if self.client is None or not self.dashboard or importlib.util.find_spec("bokeh") is None:
            return None
        link = self.client.dashboard_link
        host = self.dashboard_host
        if host and host not in ("0.0.0.0", "::", "[::]"):
            from urllib.parse import urlsplit

            parts = urlsplit(link)
            if parts.port is not None:
                link = parts._replace(netloc=f"{host}:{parts.port}").geturl()
        return link

    def compute(self, tasks: list, on_result=None) -> list:
        """Run the tasks; on_result(result) is called for each as it finishes (in this process,
        in the order they finish), so progress counts what the tasks hand back."""
        if not tasks:
            return []
        with self._our_errors():           # a worker's error comes back wrapped: unwrap ours
            if self.client is None:
                callbacks = [*self.callbacks, *_results_of(tasks, on_result)]
                if self.scheduler != "threads":
                    return list(dask.compute(*tasks, scheduler=_local_scheduler(self.scheduler), callbacks=callbacks))
                return list(dask.compute(*tasks, scheduler=_local_scheduler(self.scheduler), pool=self._task_pool(),
                                         callbacks=callbacks))
            futures = self.client.compute(tasks)
            try:
                if on_result is not None:
                    from distributed import as_completed

                    # the client's own loop: a caller's Client(set_as_default=False) is no default
                    for future in as_completed(futures, loop=self.client.loop):
                        if future.status != "finished":
                            break              # gather raises its error
                        on_result(future.result())
                return self.client.gather(futures)
            except BaseException:
                _let_go(futures)               # a failure or Ctrl-C: start none of the rest
                raise

    @contextmanager
    def timed(self, progress):
        """Record where each task's time went into progress.task_times: dask's local scheduler
        tells a callback; a cluster's scheduler keeps its task stream, read once at the end."""
        from .progress import TaskTime, task_kind

        if self.client is None:
            begun: dict = {}

            def pretask(key, dsk, state):
                begun[key] = time.monotonic()

            def posttask(key, result, dsk, state, worker_id):
                start = begun.pop(key, None)
                if start is not None:
                    worker = "this process" if worker_id is None else f"thread {worker_id}"
                    progress.task_times.append(TaskTime(worker, task_kind(key), start, time.monotonic()))
                    progress.worker_threads.setdefault(worker, 1)

            timing = (None, None, pretask, posttask, None)
            self.callbacks.append(timing)
            try:
                yield
            finally:
                self.callbacks.remove(timing)
            return
        started, clock = time.time(), time.monotonic()
        try:
            self.client.get_task_stream(start=started)      # the scheduler keeps one from now on
        except Exception:
            pass
        try:
            yield
        finally:
            try:
                stream = self.client.get_task_stream(start=started)
                threads = self.client.nthreads()
            except Exception:          # the cluster went away: the split stays empty, the run's error shows
                stream, threads = [], {}
            offset = clock - started          # wall clock to the run's monotonic clock
            for record in stream:
                for span in record.get("startstops", []):
                    if span.get("action") == "compute":
                        progress.task_times.append(TaskTime(record.get("worker", "?"), task_kind(record["key"]),
                                                            span["start"] + offset, span["stop"] + offset))
            progress.worker_threads.update(threads)

    def ordered(self, tasks: list, independent: bool = True, ahead: int | None = None, on_result=None):
        """Yield results in task order. Tasks go to the cluster in order, one scheduler generation per
        submission (fifo_timeout=0), so earlier ones run first (one submission of all would run
        them in dask.order's order: for independent chains, partition 0 last). Independent tasks
        go one at a time, at most `ahead` (default: twice the worker threads) beyond the next
        one awaited, so results held for a slower consumer (the streaming writer) stay bounded
        in memory. Tasks that share work (a global step before them, or a compressed file's
        decoding) all go at once, a thread's worth per generation: submitted later, they would
        redo the shared work whose first users had already been released. Without a cluster
        ('threads': the CPU's default) the same, on this process's thread pool
        (_ordered_threads, _ordered_shared); 'sync' runs them all in one call."""
        if self.client is None:
            if self.scheduler != "threads":
                yield from self.compute(tasks, on_result=on_result)
            elif independent:
                yield from self._ordered_threads(tasks, ahead or 2 * self.threads)
            else:
                yield from self._ordered_shared(tasks, ahead or 2 * self.threads)
            return
        threads = self.threads
        pending: deque = deque()
        queue = iter(tasks)
        if not independent:
            held = self._shared_work(tasks)
            while batch := list(itertools.islice(queue, threads)):
                pending.extend(self.client.compute(batch, fifo_timeout=0))
            del held                   # every user of the shared work is known now: it is kept as long as needed
        yield from self._in_order(queue, pending, ahead or 2 * threads,
                                  start=lambda task: self.client.compute(task, fifo_timeout=0),
                                  cancel=_let_go)

    def _in_order(self, queue, pending: deque, ahead: int, start, cancel):
        """The futures of `pending`, then of the tasks left in `queue` (start(task) gives one),
        yielded as results in order, at most `ahead` started beyond the next one awaited; those
        still pending when the consumer stops are let go (cancel(list of futures): _let_go on a cluster)."""
        def submit(k: int) -> None:
            for task in itertools.islice(queue, k):
                pending.append(start(task))

        try:
            submit(ahead + 1)
            while pending:
                with self._our_errors():
                    result = pending.popleft().result()
                submit(1)
                yield result
        finally:
            cancel(list(pending))

    def _ordered_threads(self, tasks: list, ahead: int):
        """ordered() on this process's thread pool: each task runs whole on one of the pool's
        threads (dask's synchronous scheduler there, with this run's callbacks), in task order, at
        most `ahead` beyond the next one awaited."""
        pool, callbacks = self._task_pool(), list(self.callbacks)
        yield from self._in_order(iter(tasks), deque(), ahead,
                                  start=lambda task: pool.submit(_run_task, task, callbacks),
                                  cancel=lambda futures: [f.cancel() for f in futures])

    def _ordered_shared(self, tasks: list, ahead: int):
        """ordered() for tasks that share work, on this process's thread pool: dask's threaded
        scheduler runs them all in one call (the shared work once), on a thread of its own, and
        each result is handed over as soon as it and those before it are done. While more than
        `ahead` results wait and the next one is among them, the scheduler starts no task (it
        waits in its callback), so results held for a slower consumer stay bounded."""
        from dask.threaded import get

        pool = self._task_pool()
        index = {task.key: i for i, task in enumerate(tasks)}
        done: dict = {}
        taken = [0]                    # the index of the next result the consumer takes
        over: list = []                # the scheduler's end: [None] or [its error]
        closed = [False]               # the consumer is gone (an error, Ctrl-C): never wait for it
        changed = threading.Condition()

        def posttask(key, result, dsk, state, worker_id):
            i = index.get(key)
            if i is None:
                return
            with changed:
                done[i] = result
                changed.notify_all()
                changed.wait_for(lambda: closed[0] or len(done) <= ahead or taken[0] not in done)

        callbacks = [*self.callbacks, (None, None, None, posttask, None)]

        def schedule() -> None:
            error = None
            try:
                dask.compute(*tasks, scheduler=get, pool=pool, callbacks=callbacks)
            except BaseException as err:       # handed to the consumer, which raises it
                error = err
            with changed:
                over.append(error)
                changed.notify_all()

        threading.Thread(target=schedule, name="gpuetl-scheduler", daemon=True).start()
        try:
            for i in range(len(tasks)):
                with changed:
                    changed.wait_for(lambda: i in done or over)
                    found = i in done
                    result = done.pop(i, None)
                    taken[0] = i + 1
                    changed.notify_all()
                    error = None if found else over[0] or RuntimeError(f"dask's scheduler ended without task {i}")
                if error is not None:
                    with self._our_errors():
                        raise error
                yield result
        finally:
            with changed:
                closed[0] = True
                changed.notify_all()

    def _task_pool(self) -> TaskPool:
        """This run's thread pool, started on first use ('threads')."""
        if self.pool is None:
            self.pool = TaskPool(self.threads)
        return self.pool

    @contextmanager
    def _our_errors(self):
        """A task's error as the run raises it: gpuetl's own as it is, another unwrapped to the
        gpuetl error inside it (_raise_ours), else as it is."""
        try:
            yield
        except GpuetlError:
            raise
        except Exception as err:
            self._raise_ours(err)
            raise

    def _raise_ours(self, err: BaseException) -> None:
        """A worker's error comes back wrapped: raise ours. A worker process of gpuetl's own
        cluster that died (the scheduler gives up on its task at once: allowed_failures 0) is a
        clear error, not distributed's KilledWorker."""
        cause = _our_error(err)
        if cause is not None:
            raise cause from None
        if not self.own:
            return
        from distributed.scheduler import KilledWorker       # loaded already: this run has a cluster

        if isinstance(err, KilledWorker):
            raise GpuetlError(f"a worker process of this run died running task {getattr(err, 'task', '?')!r} "
                              "(killed, out of memory, an input file cut short while it was read, or a module the "
                              "pipeline needs, such as a plugin's, cannot be imported in it); nothing was committed",
                              hint="see the worker's last words above; make a plugin importable by the worker "
                                   "processes (install it, or put it on PYTHONPATH), or run with --scheduler "
                                   "threads") from None

    def settle(self, timeout: float = 30.0) -> None:
        """After a failure or Ctrl-C, wait (at most `timeout` seconds) until no task occupies a
        thread of gpuetl's own cluster (in this process or its worker processes): a task whose result is no longer wanted runs
        on, and would write into the run's temporary folder after the run removed it."""
        if self.client is None:
            if self.pool is not None:
                self.pool.wait_idle(timeout)
                self.pool = None
            return
        if not (self.in_process or self.own):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                busy = self.client.run(_running_tasks)
            except Exception:          # the cluster is gone: nothing runs
                return
            if not any(busy.values()):
                return
            time.sleep(0.02)

    def _shared_work(self, tasks: list) -> list:
        """Futures on the keys more than one task needs, held while the tasks are handed over:
        between two submissions the first ones may finish, and the scheduler would release the
        shared work they used and run it again for the next."""
        from dask.highlevelgraph import HighLevelGraph

        shared = shared_keys(tasks)
        if not shared:
            return []
        graphs = {id(graph): graph for graph in (task.__dask_graph__() for task in tasks)}
        return self.client.get(HighLevelGraph.merge(*graphs.values()), shared, sync=False, fifo_timeout=0)

    @property
    def threads(self) -> int:
        """How many tasks may run at once: the cluster's worker threads, the local thread pool's
        size, or 1 (sync)."""
        if self.client is not None:
            return max(1, sum(self.client.nthreads().values()))
        if self.scheduler == "threads":
            return max(1, dask.config.get("num_workers", None) or local_threads())
        return 1

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


class TaskPool(ThreadPoolExecutor):
    """The threads of dask's threaded scheduler for one run, counting the tasks handed to them:
    after a failure or Ctrl-C the scheduler returns while a task still runs (and writes into the
    run's folder); settle() waits for it here, as on a cluster."""

    def __init__(self, threads: int):
        super().__init__(threads, thread_name_prefix="gpuetl-task")
        self.outstanding = 0
        self.idle = threading.Condition()

    def submit(self, fn, /, *args, **kwargs):
        with self.idle:
            self.outstanding += 1
        try:
            future = super().submit(fn, *args, **kwargs)
        except BaseException:
            self._done(None)
            raise
        future.add_done_callback(self._done)
        return future

    def _done(self, _future) -> None:
        with self.idle:
            self.outstanding -= 1
            self.idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Start no task not yet started, and wait (at most `timeout` s) for the running ones."""
        self.shutdown(wait=False, cancel_futures=True)
        with self.idle:
            return self.idle.wait_for(lambda: self.outstanding == 0, timeout)


def shared_keys(tasks: list) -> list:
    """The keys that more than one of the tasks needs. Each task's graph is walked from its key
    once: a key a second task reaches is shared, and so is all it needs, walked once more. The
    tasks of one build share one dict (runtime/graph.py), so counting the keys of each task's
    graph would cost tasks × keys."""
    graphs: dict = {}
    owner: dict = {}                   # key -> the first task that reached it
    shared: dict = {}                  # a dict: its keys in the order found
    for i, task in enumerate(tasks):
        graph = task.__dask_graph__()
        graph = graphs.setdefault(id(graph), graph if isinstance(graph, dict) else dict(graph))
        stack = [(task.key, False)]
        while stack:
            key, below_shared = stack.pop()
            if key in shared or key not in graph:
                continue
            if key not in owner:
                owner[key] = i
                if below_shared:       # needed by every task that needs the shared key above
                    shared[key] = None
            elif owner[key] == i and not below_shared:
                continue               # this task's own, reached again by another path
            else:                      # another task's, or below a shared key
                shared[key] = None
                below_shared = True
            stack.extend((dep, below_shared) for dep in graph[key].dependencies)
    return list(shared)


def _run_task(task, callbacks: list):
    """One task's graph, computed in the calling pool thread (a worker id per thread, as dask's
    threaded scheduler gives, for the run's task times)."""
    from dask.local import get_sync

    (result,) = dask.compute(task, scheduler=get_sync, get_id=threading.get_ident, callbacks=callbacks)
    return result


def _running_tasks(dask_worker) -> int:
    """Tasks holding one of this worker's threads, cancelled ones included (run on the worker)."""
    return len(dask_worker.state.all_running_tasks)


def _let_go(futures) -> None:
    """Start none of these futures' tasks that have not started (a failure, Ctrl-C, a consumer
    that stopped): each is released, and the scheduler forgets the tasks no one holds any more.
    Not Client.cancel: distributed's scheduler asserts when a cancelled task's dependents are
    tasks no client holds (a dedupe's or a shuffle's inner tasks) and the traceback of that
    AssertionError is printed on the user's terminal, twice, before the run's own error."""
    for future in futures:
        future.release()


def _results_of(tasks: list, on_result) -> list[tuple]:
    """The dask callback that hands each of these tasks' results to on_result as dask's local
    scheduler finishes it (none without on_result)."""
    if on_result is None:
        return []
    wanted = {t.key for t in tasks}

    def posttask(key, result, dsk, state, worker_id):
        if key in wanted:
            on_result(result)

    return [(None, None, None, posttask, None)]


def _local_scheduler(name: str | None):
    """dask's local scheduler as the function itself: named by a string, dask.compute imports
    `distributed` to look for a client first, a cost a run without a cluster need not pay."""
    if name in ("sync", "synchronous"):
        from dask.local import get_sync

        return get_sync
    from dask.threaded import get

    return get


def _our_error(err: BaseException) -> GpuetlError | None:
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, GpuetlError):
            return err
        err = err.__cause__ or err.__context__
    return None


# dask's usual port, on loopback: the pages show quarantine reasons, which quote record values
# (`gpuetl run --dashboard-address HOST:PORT` opens it wider); when it is taken dask picks a free one
DASHBOARD_ADDRESS = "127.0.0.1:8787"


def dashboard_address(text: str) -> str:
    """`--dashboard-address HOST:PORT` checked: a ValueError says what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535 or any(c.isspace() for c in text):
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:8787, or 0.0.0.0:8787 for every interface), got {text!r}")
    return text


def dashboard_is_local(address: str) -> bool:
    """Whether a dashboard at `address` (HOST:PORT) is reachable from this machine only."""
    import ipaddress

    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:          # a host name, or '' (every interface)
        return False


# With no scheduler named, the CPU backend runs in this process without a cluster: dask's
# schedulers on a pool of a thread per core, results handed over in order (Executor.ordered).
# A cluster adds only its start (importing distributed, a scheduler and a worker: ~0.3-1 s, more
# on a busy machine) and its event loop; what it brings is the dashboard. A person at a terminal
# is offered one for an input of at least this size, where a run lasts long enough to watch.
DASHBOARD_WORTH_BYTES = 32 << 20


def chosen_scheduler(scheduler: str | None, backend, input_bytes: int | None,
                     dashboard_address: str | None = None, watched: bool = False) -> str | None:
    """The scheduler a run uses: the one named; else the local cluster (None) where a dashboard
    is wanted (one asked for, or `watched`, a person at a terminal, with an input of at least
    DASHBOARD_WORTH_BYTES or of unknown size) or the backend brings its own cluster (GPUs);
    else 'threads', this process's thread pool."""
    if scheduler is not None or dashboard_address is not None:
        return scheduler
    if watched and (input_bytes is None or input_bytes >= DASHBOARD_WORTH_BYTES):
        return scheduler
    # a backend with a cluster of its own (GPUs: a worker per device) keeps it; the call only
    # makes the context manager, it starts nothing
    return "threads" if backend.local_cluster(quiet=True) is None else scheduler


@contextmanager
def open_executor(scheduler: str | None, backend, client=None, quiet: bool = False,
                  dashboard_address: str | None = None, input_bytes: int | None = None):
    """scheduler: None (chosen_scheduler: on the CPU, this process's thread pool; else as
    'local'), 'local' (a LocalCluster sized to the machine), 'processes'
    (on the CPU: a worker process per core, runtime/worker.py), 'sync' or 'threads' (no
    cluster), or a scheduler address such as tcp://10.0.0.5:8786.
    dashboard_address: where the local cluster serves its dashboard (DASHBOARD_ADDRESS, ":0" for
    any free port); None, the default, serves none (a library call opens no port, and drawing
    the pages means importing bokeh before the first task)."""
    if client is not None:
        yield Executor(client)
        return
    scheduler = chosen_scheduler(scheduler, backend, input_bytes, dashboard_address)
    if scheduler in ("sync", "threads", "synchronous"):
        executor = Executor(None, "sync" if scheduler != "threads" else "threads")
        try:
            yield executor
        finally:
            if executor.pool is not None:          # a run that ended well: its threads are idle
                executor.pool.shutdown(wait=True)
        return
    from distributed import Client

    if scheduler == "processes":
        with backend_cluster(backend, quiet, dashboard_address, processes=True) as cluster, Client(cluster) as c:
            c.wait_for_workers(len(cluster.worker_spec), timeout=WORKER_START_TIMEOUT)
            yield Executor(c, dashboard=dashboard_address is not None, own=True,
                           dashboard_host=dashboard_address.rpartition(":")[0] if dashboard_address else None)
        return

    if scheduler and scheduler != "local":
        try:
            client = Client(scheduler, timeout="10s")
        except OSError as err:         # only connecting: an OSError of the run itself is its own
            raise SpecError(f"--scheduler {scheduler}: cannot reach the scheduler ({err})") from None
        with client as c:
            yield Executor(c)
        return
    with backend_cluster(backend, quiet, dashboard_address) as cluster, Client(cluster) as c:
        yield Executor(c, dashboard=dashboard_address is not None, own=True,
                       dashboard_host=dashboard_address.rpartition(":")[0] if dashboard_address else None)


@contextmanager
def backend_cluster(backend, quiet: bool, dashboard_address: str | None = None, processes: bool = False):
    """gpuetl's own cluster. Its scheduler serves the gpuetl page (runtime/dashboard.py): the
    route is set for the cluster's start only, and a taken dashboard port raises no warning
    there (the command prints the address it got instead)."""
    import logging

    import distributed  # noqa: F401  (its defaults join dask's configuration before any is set here)

    from .dashboard import MODULE

    levels = {"distributed": logging.ERROR if quiet else logging.WARNING}
    # A task's error reaches the user once, from the client, as gpuetl's own message (the
    # worker would also log it with a traceback; GPUETL_DEBUG=1 shows that one).
    if not os.environ.get("GPUETL_DEBUG"):
        levels["distributed.worker"] = logging.CRITICAL
    routes = [*dask.config.get("distributed.scheduler.http.routes", []), MODULE]
    with _logger_levels(levels), dask.config.set(profile_settings(dashboard_address is not None)), \
            ExitStack() as stack:
        with dask.config.set({"distributed.scheduler.http.routes": routes, **timer_settings(dashboard_address is not None)}), \
                warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Port \d+ is already in use", category=UserWarning)
            own = backend.local_cluster(quiet=quiet, dashboard_address=dashboard_address)
            if own is None:
                own = (_process_cluster(dashboard_address, quiet=levels.get("distributed.worker") is not None)
                       if processes else _cpu_cluster(dashboard_address))
            cluster = stack.enter_context(own)
        yield cluster


def _cpu_cluster(dashboard_address: str | None):
    """One in-process worker with a thread per core: the heavy kernels (pyarrow, numpy) release
    the GIL, nothing is pickled between processes, and it starts in milliseconds instead of the
    seconds that spawning worker processes (each importing pandas and pyarrow) takes. GPU
    backends bring their own cluster (one process per GPU)."""
    import logging

    from distributed import LocalCluster

    threads = local_threads()
    stealing = {_STEALING: False} if _is_default(_STEALING, True) else {}     # one worker: nothing to steal
    with dask.config.set(stealing):
        return LocalCluster(n_workers=1, threads_per_worker=threads, processes=False,
                            dashboard_address=dashboard_address, silence_logs=logging.ERROR,
                            # without a dashboard the scheduler still serves /health and the like:
                            # on a free local port, not dask's usual 8787
                            scheduler_kwargs={} if dashboard_address else {"dashboard_address": "127.0.0.1:0"})


WORKER_START_TIMEOUT = 120      # seconds for the worker processes to start and connect


def _process_cluster(dashboard_address: str | None, quiet: bool):
    """A worker process per core (one task thread each), each its own program (runtime/worker.py),
    around a scheduler in this process: the Python between kernels runs on every core at once,
    where the in-process cluster's threads take turns holding one GIL. Each worker pays its
    interpreter's start and imports (~1 CPU-s), and a partition's rows reach the client's
    writer through its spill file, not in memory."""
    import logging

    from distributed import Scheduler, SpecCluster
    from distributed.worker_memory import parse_memory_limit

    from .worker import worker_class

    n = local_threads()
    settings = {"dask": {key: dask.config.get(key) for key in _WORKER_SETTINGS if dask.config.get(key, None) is not None},
                "nthreads": 1, "memory_limit": parse_memory_limit("auto", 1, n, logger=logging.getLogger("distributed")), "quiet_worker_log": quiet}
    worker = {"cls": worker_class(), "options": {"settings": settings}}
    # allowed_failures 0: a task whose worker process dies fails the run at once (KilledWorker,
    # Executor.compute) rather than waiting for a worker that nobody starts again
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "port": 0, "allowed_failures": 0,
                                                "dashboard": dashboard_address is not None,
                                                "dashboard_address": dashboard_address or "127.0.0.1:0"}}
    return SpecCluster(workers={i: worker for i in range(n)}, scheduler=scheduler, worker=worker,
                       silence_logs=logging.ERROR, name="gpuetl-processes")


# what a worker process takes from this process's dask settings (runtime/worker.py)
_WORKER_SETTINGS = ("distributed.worker.profile.enabled", "distributed.worker.profile.interval",
                    "distributed.admin.tick.interval", "distributed.worker.memory.monitor-interval",
                    "distributed.admin.system-monitor.interval")


def local_threads() -> int:
    """A task thread per core this process may use: dask's count takes the CPU affinity
    (`taskset`, a container's cpuset) and a cgroup CPU quota into account, where
    `os.cpu_count()` gives the whole machine's, and threads beyond the cores only contend."""
    import dask.system

    return max(1, min(dask.system.cpu_count(), 64))


@contextmanager
def _logger_levels(levels: dict):
    """Set these loggers' levels for the cluster's lifetime, then give the caller theirs back."""
    import logging

    loggers = {logging.getLogger(name): level for name, level in levels.items()}
    before = {logger: logger.level for logger in loggers}
    try:
        for logger, level in loggers.items():
            logger.setLevel(level)
        yield
    finally:
        for logger, level in before.items():
            logger.setLevel(level)


PROFILE_INTERVAL = "100ms"
_PROFILE = "distributed.worker.profile."


def profile_settings(dashboard: bool) -> dict:
    """dask settings for gpuetl's local cluster. The workers' statistical profiler samples every
    task thread's stack, holding the GIL, every 10 ms by default, which slows the tasks on a
    small machine. Its samples are shown only on the dashboard: without one it is off; with
    one it samples every 100 ms, which still fills the Profile page. The user's own interval or
    switch is left alone."""
    settings = {}
    if not dashboard and dask.config.get(_PROFILE + "enabled", True) is True:
        settings[_PROFILE + "enabled"] = False
    if dask.config.get(_PROFILE + "interval", "10ms") in ("10ms", "10 ms"):
        settings[_PROFILE + "interval"] = PROFILE_INTERVAL
    return settings



_STEALING = "distributed.scheduler.work-stealing"
# distributed's timers that wake the cluster's event loop most often: (setting, distributed's
# default in seconds, gpuetl's interval). Only a default is replaced: the user's own value stands.
TICK = ("distributed.admin.tick.interval", 0.02, "1s")
MEMORY_MONITOR = ("distributed.worker.memory.monitor-interval", 0.1, "250ms")
SYSTEM_MONITOR = ("distributed.admin.system-monitor.interval", 0.5, "2s")


def timer_settings(dashboard: bool) -> dict:
    """dask settings read when gpuetl's local cluster starts (set for its start only). The
    scheduler and each worker measure their event loop's lag every 20 ms (for a warning when it
    stalls for seconds), check the worker's memory every 100 ms, and sample the process's CPU,
    memory and network every 500 ms (for the dashboard's System page and the heartbeats): on a
    small machine those wake-ups take a share of a core from the tasks. The lag is measured
    every second, the memory every 250 ms (a pause a quarter of a second later is as safe at a
    partition's tens of MiB), the system every 2 s unless a dashboard draws it."""
    timers = [TICK, MEMORY_MONITOR] + ([] if dashboard else [SYSTEM_MONITOR])
    return {key: ours for key, default, ours in timers if _is_default(key, default)}


def _is_default(key: str, default) -> bool:
    """Whether dask's configuration holds distributed's default for key (an interval compared
    in seconds, whichever way it is written)."""
    from dask.utils import parse_timedelta

    value = dask.config.get(key, default)
    if isinstance(default, float):
        try:
            return parse_timedelta(value) == default
        except (TypeError, ValueError):
            return False
    return value == default
