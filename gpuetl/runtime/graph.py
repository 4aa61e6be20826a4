"""Build the dask graph of a Plan with dask's public API (dask.delayed): one chain of tasks per
partition, joined only where a global step decides across partitions. Each stage has its own
label, so the dashboard shows read-parse-…, keys-dedupe, decide-dedupe, mark-dedupe, dedupe,
spill. No dask DataFrame is built: the run consumes partitions one by one (the streaming writer,
the spill), and importing dask.dataframe would delay the first task (docs/design.md, "The
graph")."""

from __future__ import annotations

import functools
import os

import dask

from ..sources.counters import CountedFrame
from ..steps.base import GlobalStep, InOrderGlobalStep
from ..sources.ranges import CompressedRange, decode_range
from .partition import read_partition, run_steps


def build_partitions(plan, backend, in_order: bool = False, scratch: str | None = None,
                     ahead: int | None = None, finish=None) -> list:
    """One delayed object per partition of the plan's final stage (live rows, rows that left and
    tallies, in input order), or what finish(i, part) makes of it (the spill; None for a
    partition that needs none). in_order: settle global steps that can be, partition by
    partition in input order (the run holds their state in its process: the in-process
    cluster); else all at once. scratch: a folder of the run's where that state may set data
    aside. ahead: when every global step is settled in order, partition i is read only once
    partition i - ahead is finished, so neither the parsing nor the in-order chain can run far
    ahead of the partitions' last tasks, and the frames waiting between them stay bounded
    (None: no gate; partitions without a global step are submitted in order instead, see
    Executor.ordered)."""
    finish = finish or (lambda i, part: part)
    done: list | None = [] if ahead is not None and in_order and _all_in_order(plan) else None
    parts = partition_tasks(plan, backend, after=_gate(done, ahead) if done is not None else None)
    for segment in plan.segments[1:]:
        step = segment.steps[0].step
        steps = frame_task(run_steps, segment.label)
        if in_order and isinstance(step, InOrderGlobalStep):
            where = os.path.join(scratch, f"{step.name}-{segment.steps[0].index}") if scratch else None
            parts = resolve_in_order(parts, segment, backend, where)
        else:
            parts = resolve_in_place(list(parts), segment, backend)
        parts = (_task(steps)(part, segment, backend) for part in parts)
    out = []
    for i, part in enumerate(parts):       # lazily: partition i is built after i - 1 is finished
        out.append(finish(i, part))
        if done is not None:
            done.append(out[-1] if out[-1] is not None else part)
    return out


def _all_in_order(plan) -> bool:
    """Whether the plan has global steps and every one is settled in order (one decided across
    all partitions at once needs every partition read first: no gate before it)."""
    steps = [segment.steps[0].step for segment in plan.segments[1:]]
    return bool(steps) and all(isinstance(step, InOrderGlobalStep) for step in steps)


def _gate(done: list, ahead: int):
    """after(i): the task partition i's read waits for (partition i - ahead's last), or None.
    Read lazily: build_partitions appends each partition's last task before it builds the
    next partition."""
    return lambda i: done[i - ahead] if i >= ahead else None


def partition_tasks(plan, backend, after=None):
    """One task per partition, yielded in input order: read, parse and run the first segment's
    steps. Each has its own small graph, so that a plan of one segment can be submitted in input
    order (the streaming sink writes partition i before i + 1; one submission of them all runs
    them in dask.order's order, which for independent chains is reverse key order, partition 0
    last). after(i): a task that partition i's read and decompression wait for (see
    build_partitions), asked for just before the partition's tasks are made; or None."""
    first = plan.segments[0]
    token = dask.base.tokenize(plan.loaded.sha256, [f.display for f in plan.files], len(plan.partitions))
    read = dask.delayed(named(_read_after, first.label), pure=False)
    decode = dask.delayed(named(_decode_after, "decompress"), pure=False, nout=2)
    streams: dict = {}        # file index -> its open stream, as the last decompress task left it
    for p in plan.partitions:
        gate = after(p.index) if after is not None else None
        decoded = []
        for j, rng in enumerate(p.ranges):
            if isinstance(rng, CompressedRange):   # a compressed file is decoded once, in order:
                got, streams[rng.file_index] = decode(   # each piece's task hands the stream on
                    streams.get(rng.file_index), plan.files[rng.file_index], rng, gate,
                    dask_key_name=(f"decompress-{token}", p.index, j))
                decoded.append(got)
        yield read(p, first.for_partition(p), backend, decoded, gate, dask_key_name=(f"{first.label}-{token}", p.index))


def _read_after(partition, segment, backend, decoded, gate):
    """read_partition, run once `gate` (an earlier partition's decision, or None) is done."""
    return read_partition(partition, segment, backend, decoded)


def _decode_after(stream, f, rng, gate):
    """decode_range, run once `gate` is done: decoded bytes wait no longer than their read."""
    return decode_range(stream, f, rng)


def count_tasks(parts: list) -> int:
    """Tasks in the graph behind these delayed objects (shared ones counted once)."""
    keys: set = set()
    for part in parts:
        keys.update(dict(part.__dask_graph__()))
    return len(keys)


def resolve_in_place(parts: list, segment, backend) -> list:
    """A global step (steps/base.py's protocol) decided without moving rows: each partition
    sends its keys, one task finds the keys that repeat, each partition sends the rows that
    carry one, one task decides, each partition marks its own rows. Partitions keep their rows
    and their order; only keys and candidates travel."""
    step, parts = _prepared(parts, segment, backend)
    parts = list(parts)
    name, task = step.name, _task
    keys = [task(on_frame(step.row_keys, f"keys-{name}"))(p, backend) for p in parts]
    repeated = task(named(step.repeated_keys, f"repeats-{name}"))(keys, backend)
    candidates = [task(on_frame(step.candidates, f"candidates-{name}"))(p, k, repeated, i, backend)
                  for i, (p, k) in enumerate(zip(parts, keys))]
    decided = task(named(step.decide, f"decide-{name}"))(candidates, backend)
    return [task(frame_task(step.mark, f"mark-{name}"))(p, i, decided, backend) for i, p in enumerate(parts)]


def resolve_in_order(parts, segment, backend, scratch: str | None = None):
    """A global step settled partition by partition in input order: each partition's decision
    needs only the partitions before it (steps/base.py: start, advance), so the first ones are
    marked, and written, while later ones are still being parsed. The state runs through a chain
    of tasks and refers to earlier partitions' frames: for a cluster in this process only.
    parts: the partitions in order; taken, and the marked ones yielded, one at a time."""
    step, parts = _prepared(parts, segment, backend)
    name, task = step.name, _task
    state = task(named(step.start, f"start-{name}"))(backend, scratch)
    for i, part in enumerate(parts):
        keys = task(on_frame(step.row_keys, f"keys-{name}"))(part, backend)
        state, decided = task(on_frame(step.advance, f"decide-{name}", at=1), nout=2)(state, part, keys, i, backend)
        yield task(frame_task(step.mark, f"mark-{name}"))(part, i, decided, backend)


_task = functools.partial(dask.delayed, pure=False)


def _prepared(parts: list, segment, backend):
    """(the segment's global step, its partitions, prepared if the step prepares; as lazily as
    they were given)."""
    step = segment.steps[0].step
    if type(step).prepare is not GlobalStep.prepare:
        parts = (_task(frame_task(step.prepare, f"prepare-{step.name}"))(p, backend) for p in parts)
    return step, parts


class named:
    """A function under a stage's name: dask names tasks (and dashboard bars) after __name__."""

    def __init__(self, func, name: str):
        self.func = func
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        return self.func(*args, **kwargs)


class frame_task(named):
    """A task that takes a partition's frame and gives its frame back, as a step does: it is
    handed the partition's CountedFrame and hands one on, with the same counters (what the
    source counted: sources/counters.py), whatever frame the step built."""

    def __call__(self, part: CountedFrame, *args, **kwargs):
        return CountedFrame(self.func(part.frame, *args, **kwargs), part.counters)


class on_frame(named):
    """A task that reads a partition's frame (its argument `at`, a CountedFrame) and gives
    something else back (keys, candidates, a decision)."""

    def __init__(self, func, name: str, at: int = 0):
        super().__init__(func, name)
        self.at = at

    def __call__(self, *args, **kwargs):
        args = list(args)
        args[self.at] = args[self.at].frame
        return self.func(*args, **kwargs)
