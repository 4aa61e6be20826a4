"""The Python API: gpuetl.load(path) and gpuetl.Pipeline.from_dict(...)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .backends import get_backend
from .errors import SpecError
from .spec.loader import LoadedSpec, build_spec, load_spec


class Pipeline:
    """A validated pipeline file. `plan()` checks it against the inputs; `run()` runs it."""

    def __init__(self, loaded: LoadedSpec):
        self.loaded = loaded

    @classmethod
    def from_file(cls, path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> "Pipeline":
        return cls(load_spec(path, overrides))

    @classmethod
    def from_dict(cls, data: dict[str, Any], base_dir: str | Path = ".", overrides=()) -> "Pipeline":
        """Relative paths in `data` are relative to base_dir (the current folder by default)."""
        return cls(build_spec(data, "<dict>", Path(base_dir).resolve(), overrides))

    @property
    def spec(self):
        return self.loaded.spec

    @property
    def name(self) -> str:
        return self.spec.name

    def plan(self, backend=None):
        """Check the pipeline against its inputs; with a backend (object or name), also what that
        backend will hand to the CPU."""
        from .plan.compile import compile_plan

        if isinstance(backend, str):
            backend = get_backend(backend, for_planning=True)
        return compile_plan(self.loaded, backend)

    def run(self, backend="auto", client=None, scheduler: str | None = None, progress: bool = False,
            log=None, report: bool = True):
        """Run and commit the dataset; returns a RunResult (counts, shards, out_dir, manifest).

        client: an existing distributed.Client; scheduler: a scheduler address, 'local' (a
        LocalCluster for this run), or 'sync'/'threads' (no cluster); the default is 'threads'
        on the CPU (this process's thread pool: no cluster, no port opened), 'local' on the GPU.
        progress: show each stage's progress on stderr. report: write the run report
        (_report.json, _report.html) next to the dataset (docs/observing.md). backend: a name, or
        a backend object from gpuetl.backends.get_backend (with its switches, docs/gpu.md)."""
        from .runtime.executor import open_executor
        from .runtime.run import run_plan

        chosen = get_backend(backend) if isinstance(backend, str) else backend
        plan = self.plan(chosen)
        with open_executor(scheduler, chosen, client=client, quiet=not progress,
                           input_bytes=plan.input_bytes) as executor:
            return run_plan(plan, chosen, executor, progress=progress, log=log or (lambda *_: None), report=report)

    def preview(self, n: int = 20, backend: str = "cpu"):
        """Run the pipeline on the first records of the first partition (about 1 MiB of text) and
        keep everything in memory: a Preview with each stage's first n rows as pyarrow Tables
        (`.frames()` for pandas) and the quarantined records with their reasons. Writes nothing.
        Global steps (dedupe, near_dedupe) see the previewed rows alone."""
        from .runtime.preview import preview_plan

        chosen = get_backend(backend)
        plan = self.plan(chosen)
        if plan.nothing_to_append:
            raise SpecError(f"nothing to preview: every input of source.path is held by dataset version "
                            f"{plan.held.version} of {plan.out_dir} (sink.mode append previews the inputs a run "
                            "would read)", hint="--set sink.mode=overwrite previews the first inputs")
        return preview_plan(plan, chosen, n)


def load(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Pipeline:
    """Load and validate a pipeline file (SpecError with file:line on any problem)."""
    return Pipeline.from_file(path, overrides)
