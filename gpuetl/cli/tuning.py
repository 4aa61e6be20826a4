"""Process-wide speed settings for the `gpuetl` command, and only for it.

Library code (`import gpuetl`, `Pipeline.run()`) changes nothing process-wide: a program that
imports gpuetl keeps its own thread pools, allocators, environment, GC and logging. The command
owns its process, so `gpuetl.cli.main` calls `apply()` once, first thing (before polars or
pyarrow is imported: some of these settings are read only at import), and `arrow_pool()` once
it knows how the run writes. The numbers behind each setting are in docs/design.md
("Measured choices").

The settings:

- `POLARS_MAX_THREADS=1`: the CPU backend's log-preset kernel runs on polars, inside dask
  tasks that already run one per core; a polars pool of its own per task oversubscribes the
  cores. polars reads the variable once, when it is imported.
- `_RJEM_MALLOC_CONF` (polars' bundled jemalloc): keep freed pages a few seconds and large
  blocks with the rest. The kernel exports a partition's columns in blocks of several MiB,
  which jemalloc otherwise returns to the kernel at once, so each is faulted in afresh.
- Arrow's default memory pool is the C library's allocator (not the bundled mimalloc) for runs
  whose rows stream to their shard in input order: they allocate and free partition-sized
  buffers all the time, and mimalloc's fresh pages cost more system time there. Shuffled or
  hash-ranged runs keep mimalloc.
- The garbage collector's frozen generation (`gc.freeze()`) for what the command has built when
  its run starts (the libraries' modules and the cluster) and again when it ends: the collector
  then walks neither in its full collections, nor at interpreter exit, where collecting the whole
  heap once more costs a fixed share of every run's CPU time.

Opting out: `GPUETL_NO_TUNING=1` skips all of them. Each one is also skipped where the
environment already says otherwise: `POLARS_MAX_THREADS`, `_RJEM_MALLOC_CONF`,
`ARROW_DEFAULT_MEMORY_POOL` set by the user are left as they are.
"""

from __future__ import annotations

import gc
import os
import sys

OPT_OUT = "GPUETL_NO_TUNING"
POLARS_THREADS = "1"
POLARS_JEMALLOC = "oversize_threshold:0,dirty_decay_ms:5000,muzzy_decay_ms:5000"


def enabled() -> bool:
    return os.environ.get(OPT_OUT, "").strip().lower() in ("", "0", "false", "no")


def apply() -> None:
    """The settings that must be in place before polars loads (the command's own process)."""
    if not enabled():
        return
    if "polars" not in sys.modules:        # read once, at import: later would do nothing
        os.environ.setdefault("POLARS_MAX_THREADS", POLARS_THREADS)
        os.environ.setdefault("_RJEM_MALLOC_CONF", POLARS_JEMALLOC)


def arrow_pool(streamed: bool) -> None:
    """Arrow's default pool for this run's shape: the system allocator when rows stream in
    input order (see the module docstring), mimalloc (Arrow's default) otherwise."""
    if not enabled() or not streamed or "ARROW_DEFAULT_MEMORY_POOL" in os.environ:
        return
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


def freeze_heap() -> None:
    """Move every object alive now out of the collector's way (the module docstring says why).
    Objects made later are collected as usual."""
    if enabled():
        gc.freeze()
