"""A program that uses gpuetl as a library keeps its process as it was: `import gpuetl` and
`Pipeline.run()` leave the environment, polars' thread pool, Arrow's default memory pool, the
GC, logging levels, warning filters, signal handlers, atexit handlers and dask's settings alone,
and no worker process outlives the run. Process-wide speed settings belong to the `gpuetl`
command (gpuetl/cli/tuning.py). Each check runs in a fresh interpreter, as a caller's program would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUNING_VARS = ("POLARS_MAX_THREADS", "_RJEM_MALLOC_CONF", "ARROW_DEFAULT_MEMORY_POOL", "GPUETL_NO_TUNING")

CALLER = textwrap.dedent("""
    import atexit, gc, json, logging, os, signal, sys, warnings

    registered = []                 # who registers an exit handler from here on (the module of each)
    _register = atexit.register
    def register(func, *args, **kwargs):
        registered.append(getattr(func, "__module__", None) or repr(func))
        return _register(func, *args, **kwargs)
    atexit.register = register

    def children():                 # any thread's; a thread that ended since the listing started none
        pids = []
        for t in os.listdir(f"/proc/{os.getpid()}/task"):
            try:
                pids += [int(p) for p in open(f"/proc/{os.getpid()}/task/{t}/children").read().split()]
            except FileNotFoundError:
                pass
        return sorted(pids)

    def state():
        import pyarrow as pa
        loggers = {name: logger.level for name, logger in logging.Logger.manager.loggerDict.items()
                   if isinstance(logger, logging.Logger)}
        loggers["<root>"] = logging.getLogger().level
        # distributed keeps a log buffer (DequeHandler) on its loggers for each scheduler and worker
        # it has started, as with any LocalCluster; every other handler counts
        handlers = {name: [(type(h).__name__, h.level) for h in logging.getLogger(name).handlers
                           if type(h).__name__ != "DequeHandler"] for name in loggers if name != "<root>"}
        return {"env": dict(os.environ), "arrow_pool": pa.default_memory_pool().backend_name,
                "gc": [gc.isenabled(), gc.get_freeze_count(), list(gc.get_threshold())],
                "loggers": loggers, "handlers": handlers,
                "root_handlers": [type(h).__name__ for h in logging.getLogger().handlers],
                "warnings": [repr(f) for f in warnings.filters],
                "atexit": [m for m in registered if m.startswith("gpuetl")],
                "signals": {name: repr(signal.getsignal(getattr(signal, name)))
                            for name in ("SIGINT", "SIGTERM", "SIGCHLD", "SIGHUP", "SIGPIPE")},
                "children": children(),
                "dask_config": json.dumps(sys.modules["dask"].config.config, sort_keys=True, default=repr)
                               if "distributed" in sys.modules else None}

    libraries_first = sys.argv[1] == "libraries-first"
    if libraries_first:                       # a caller that uses polars and dask itself
        import polars, distributed            # noqa: F401
    before = state()
    import gpuetl
    after_import = state()
    spec = json.loads(sys.argv[2])
    result = gpuetl.Pipeline.from_dict(spec, base_dir=sys.argv[3]).run(backend="cpu", scheduler=sys.argv[4])
    assert result.counts["deduplicated"] == 1, result.counts
    after_run = state()
    import polars
    print(json.dumps({"before": before, "after_import": after_import, "after_run": after_run,
                      "polars_threads": polars.thread_pool_size()}))
""")


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in TUNING_VARS}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _python(args: list[str], env: dict) -> str:
    out = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.fixture(scope="module")
def polars_default_threads() -> int:
    return int(_python(["-c", "import polars; print(polars.thread_pool_size())"], _clean_env()))


@pytest.fixture(scope="module")
def libraries_own_env() -> dict:
    """What importing gpuetl's libraries does to the environment by itself (polars writes its
    jemalloc defaults into _RJEM_MALLOC_CONF): theirs, not gpuetl's."""
    code = ("import json, os; before = dict(os.environ); import polars, pyarrow, pandas, distributed; "
            "print(json.dumps({k: v for k, v in os.environ.items() if before.get(k) != v}))")
    return json.loads(_python(["-c", code], _clean_env()))


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["sync", "local", "processes"])
@pytest.mark.parametrize("order", ["gpuetl-first", "libraries-first"])
def test_import_and_run_leave_the_callers_process_as_it_was(tmp_path, scheduler, order, polars_default_threads,
                                                            libraries_own_env):
    log = tmp_path / "access.log"
    line = '10.0.0.{i} - - [10/Oct/2000:13:55:36 -0700] "GET /a{i} HTTP/1.0" 200 2326 "-" "curl"\n'
    log.write_text("".join(line.format(i=i) for i in range(6)) + line.format(i=0))
    spec = {"version": 1, "name": "manners", "source": {"type": "text", "path": "access.log"},
            "parse": {"preset": "apache_combined"}, "steps": [{"filter": "status < 400"}, {"dedupe": {}}],
            "sink": {"type": "parquet", "path": "out"}}
    got = json.loads(_python(["-c", CALLER, order, json.dumps(spec), str(tmp_path), scheduler], _clean_env()))
    before = got["before"]
    for moment in ("after_import", "after_run"):
        now = got[moment]
        assert now["env"] in (before["env"], {**before["env"], **libraries_own_env}), moment
        assert now["arrow_pool"] == before["arrow_pool"], moment
        assert now["gc"] == before["gc"], moment
        assert now["warnings"] == before["warnings"], moment
        assert now["root_handlers"] == before["root_handlers"], moment
        assert now["signals"] == before["signals"], moment
        assert now["children"] == before["children"] == [], moment     # worker processes ended with the run
        assert now["atexit"] == [], moment          # (libraries register their own when imported)
        if order == "libraries-first":      # dask's settings (distributed adds its own when imported)
            assert now["dask_config"] == before["dask_config"], moment
        # loggers the caller had keep their levels and handlers; loggers that libraries created
        # meanwhile are left at their defaults by gpuetl
        assert {n: now["loggers"][n] for n in before["loggers"]} == before["loggers"], moment
        assert {n: now["handlers"][n] for n in before["handlers"]} == before["handlers"], moment
    assert got["polars_threads"] == polars_default_threads
    assert (tmp_path / "out" / "_SUCCESS").exists()


@pytest.mark.slow
def test_the_command_sets_its_tunings_before_polars_loads_and_the_users_settings_win(polars_default_threads):
    """tuning.apply(), called first by cli.main: polars one thread a task, its allocator's
    settings in the environment (polars reads both once, at import); the user's own values stay;
    GPUETL_NO_TUNING=1 sets nothing."""
    from gpuetl.cli.tuning import POLARS_JEMALLOC

    code = ("import os, sys; from gpuetl.cli import tuning; tuning.apply(); import polars; "
            "print(polars.thread_pool_size(), os.environ.get('_RJEM_MALLOC_CONF', '-'))")
    # polars puts its own jemalloc defaults first; the later settings win
    threads, conf = _python(["-c", code], _clean_env()).split()
    assert threads == "1" and conf.endswith("," + POLARS_JEMALLOC)
    mine = {**_clean_env(), "POLARS_MAX_THREADS": "2", "_RJEM_MALLOC_CONF": "narenas:2"}
    threads, conf = _python(["-c", code], mine).split()
    assert threads == "2" and conf.endswith(",narenas:2") and POLARS_JEMALLOC not in conf
    off = {**_clean_env(), "GPUETL_NO_TUNING": "1"}
    threads, conf = _python(["-c", code], off).split()
    assert POLARS_JEMALLOC not in conf and int(threads) == polars_default_threads


@pytest.mark.slow
def test_the_command_picks_arrows_pool_by_the_runs_shape(monkeypatch):
    """The system allocator for streamed runs; mimalloc (Arrow's default) kept otherwise, when
    the user chose a pool, and with GPUETL_NO_TUNING=1."""
    code = textwrap.dedent("""
        import sys, pyarrow as pa
        from gpuetl.cli import tuning
        tuning.arrow_pool(streamed=sys.argv[1] == "streamed")
        print(pa.default_memory_pool().backend_name)
    """)
    default = _python(["-c", "import pyarrow as pa; print(pa.default_memory_pool().backend_name)"],
                      _clean_env()).strip()
    assert _python(["-c", code, "streamed"], _clean_env()).strip() == "system"
    assert _python(["-c", code, "shuffled"], _clean_env()).strip() == default
    assert _python(["-c", code, "streamed"], {**_clean_env(), "GPUETL_NO_TUNING": "1"}).strip() == default
    chosen = {**_clean_env(), "ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}
    assert _python(["-c", code, "streamed"], chosen).strip() == _python(
        ["-c", "import pyarrow as pa; print(pa.default_memory_pool().backend_name)"], chosen).strip()


def test_cli_main_applies_the_tunings_first_thing():
    """`gpuetl` (cli.main) tunes its own process before anything imports polars."""
    code = ("import os, sys; from gpuetl.cli import main\n"
            "try:\n    main(['schema'])\nexcept SystemExit:\n    pass\n"
            "print(os.environ.get('POLARS_MAX_THREADS'), 'polars' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr.split()[-2:] == ["1", "False"]


@pytest.mark.slow
def test_the_command_freezes_the_heap_it_built_unless_told_not_to(tmp_path):
    """`gpuetl run` moves what it built into the collector's frozen generation (no full
    collection walks it, nor the exit's); GPUETL_NO_TUNING=1 leaves the GC alone."""
    (tmp_path / "a.log").write_text("1 x\n2 y\n")
    (tmp_path / "p.yaml").write_text("version: 1\nname: f\nsource: {type: text, path: a.log}\n"
                                     "parse: {regex: '^(?P<n>\\d+) (?P<w>\\w+)$'}\nsink: {path: out}\n")
    code = textwrap.dedent(f"""
        import gc, sys
        from gpuetl.cli import main
        assert gc.get_freeze_count() == 0
        code = main(["run", {str(tmp_path / "p.yaml")!r}, "--scheduler", "sync", "-q",
                     "--set", "sink.mode=overwrite"])
        print(code, gc.get_freeze_count())
    """)
    code_on, frozen_on = map(int, _python(["-c", code], _clean_env()).split())
    assert code_on == 0 and frozen_on > 10_000           # the libraries' modules at least
    code_off, frozen_off = map(int, _python(["-c", code], {**_clean_env(), "GPUETL_NO_TUNING": "1"}).split())
    assert code_off == 0 and frozen_off == 0
