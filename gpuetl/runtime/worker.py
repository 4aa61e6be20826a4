"""Worker processes for gpuetl's own local cluster on the CPU (`--scheduler processes`).

Each worker is a program of its own, `python -m gpuetl.runtime.worker`, started with
asyncio's subprocess call: no `multiprocessing`, so a caller's script is never imported again in
a child and a library caller needs no `if __name__ == "__main__"` guard. The scheduler stays in
the calling process (its gpuetl page and settings as for the in-process cluster); the workers
connect to it over loopback TCP. They are started and stopped inside the run
(runtime/executor.py: open_executor); a worker whose parent is gone (its stdin closes) exits.

    python -m gpuetl.runtime.worker SCHEDULER_ADDRESS NAME SETTINGS_JSON

SETTINGS_JSON: {"dask": {...dask settings...}, "nthreads": 1, "memory_limit": bytes,
"quiet_worker_log": bool}. Only this module's own process is configured by it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading


def worker_env(environ: dict | None = None) -> dict:
    """The environment a worker process starts with: the caller's, plus where gpuetl is (a
    caller that put it on sys.path by hand is served too) and polars' pool at one thread per
    process unless the caller set one (a worker runs one task at a time; polars' own pool of a
    thread per core in each process would oversubscribe the cores). The caller's own environment
    is not touched: this is a copy."""
    import site
    from pathlib import Path

    env = dict(os.environ if environ is None else environ)
    root = str(Path(__file__).resolve().parents[2])          # the folder gpuetl/ is in
    installed = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if root not in installed:
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("POLARS_MAX_THREADS", "1")
    return env


_on_orphaned: list = []      # what to do when the parent is gone: close the worker, once it runs


def _exit_when_orphaned() -> None:
    """The parent holds our stdin open; when it closes (the run ended, or the parent died
    however), close the worker (which removes its scratch folder), and exit in any case soon."""
    import time

    def watch():
        try:
            while sys.stdin.buffer.read(1 << 16):
                pass
        except (OSError, ValueError):
            pass
        if _on_orphaned:
            _on_orphaned[0]()
            time.sleep(CLOSE_SECONDS)
        os._exit(0)

    threading.Thread(target=watch, name="gpuetl-parent-watch", daemon=True).start()


CLOSE_SECONDS = 10      # how long an orphaned worker may take to close before it just exits


async def _serve(address: str, name: str, settings: dict) -> None:
    from distributed import Worker

    loop = asyncio.get_running_loop()
    async with Worker(address, name=name, nthreads=settings.get("nthreads", 1),
                      memory_limit=settings.get("memory_limit", "auto"), host="127.0.0.1",
                      silence_logs=False) as worker:
        _on_orphaned.append(lambda: loop.call_soon_threadsafe(lambda: asyncio.ensure_future(worker.close())))
        await worker.finished()


def main(argv: list[str] | None = None) -> int:
    import logging

    address, name, raw = (sys.argv[1:] if argv is None else argv)[:3]
    settings = json.loads(raw)
    _exit_when_orphaned()
    import dask

    dask.config.set(settings.get("dask", {}))           # this worker process's own settings
    import distributed  # noqa: F401  (its logging set-up first, then the levels here)

    logging.getLogger("distributed").setLevel(logging.ERROR)
    if settings.get("quiet_worker_log", True):
        logging.getLogger("distributed.worker").setLevel(logging.CRITICAL)
    import gpuetl.backends.cpu  # noqa: F401  (pandas, pyarrow, polars: loaded while the worker connects)

    asyncio.run(_serve(address, name, settings))
    return 0


def worker_class():
    """distributed's process interface for one such worker, made here so that importing this
    module in a worker does not need it."""
    from distributed.deploy.spec import ProcessInterface

    class WorkerProcess(ProcessInterface):
        def __init__(self, scheduler: str, name=None, settings: dict | None = None):
            self.scheduler, self.name, self.settings = scheduler, name, settings or {}
            self.process = None
            super().__init__()

        async def start(self) -> None:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gpuetl.runtime.worker", self.scheduler, str(self.name),
                json.dumps(self.settings), stdin=asyncio.subprocess.PIPE, env=worker_env())
            await super().start()

        async def close(self) -> None:
            process, self.process = self.process, None
            if process is not None:
                if process.stdin is not None:
                    process.stdin.close()          # the worker closes (its scratch folder too) and exits
                try:
                    await asyncio.wait_for(process.wait(), 15)
                except asyncio.TimeoutError:
                    process.kill()
                    await process.wait()
            await super().close()

    return WorkerProcess


if __name__ == "__main__":
    sys.exit(main())
