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

from ..steps.base import GlobalStep, InOrderGlobalStep
from ..sources.ranges import CompressedRange, decode_range
from .partition import read_partition, run_steps


def build_partitions(plan, backend, in_order: bool = False, scratch: str | None = None,
                     ahead: int | None = None) -> list:
    """One delayed object per partition of the plan's final stage (live rows, rows that left and
    tallies, in input order). in_order: settle global steps that can be, partition by partition
    in input order (the run holds their state in its process: the in-process cluster); else all
    at once. scratch: a folder of the run's where that state may set data aside. ahead: when the
    first global step is settled in order, partition i is read only once that step has settled
    partition i - ahead, so parsing cannot run far ahead of the chain and the frames waiting
    for it stay bounded (None: no gate)."""
    gated = ahead is not None and in_order and _first_in_order(plan)
    settled: list | None = [] if gated else None     # partition i's decision, as the chain makes it
    parts = partition_tasks(plan, backend, after=_gate(settled, ahead) if gated else None)
    for segment in plan.segments[1:]:
        step = segment.steps[0].step
        steps = named(run_steps, segment.label)
        if in_order and isinstance(step, InOrderGlobalStep):
            where = os.path.join(scratch, f"{step.name}-{segment.steps[0].index}") if scratch else None
            parts = resolve_in_order(parts, segment, backend, where, settled=settled)
            settled = None                 # only the first in-order step gates the reads
        else:
            parts = resolve_in_place(list(parts), segment, backend)
        parts = (_task(steps)(part, segment, backend) for part in parts)
    return list(parts)


def _first_in_order(plan) -> bool:
    """Whether the plan's first global step is settled in order (one decided across all
    partitions at once needs every partition read first: no gate before it)."""
    return len(plan.segments) > 1 and isinstance(plan.segments[1].steps[0].step, InOrderGlobalStep)


def _gate(settled: list, ahead: int):
    """after(i): the task partition i's read waits for (the decision on partition i - ahead), or
    None. Read lazily: resolve_in_order appends each decision before it takes the next
    partition."""
    return lambda i: settled[i - ahead] if i >= ahead else None


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
        yield read(p, first, backend, decoded, gate, dask_key_name=(f"{first.label}-{token}", p.index))


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
    keys = [task(named(step.row_keys, f"keys-{name}"))(p, backend) for p in parts]
    repeated = task(named(step.repeated_keys, f"repeats-{name}"))(keys, backend)
    candidates = [task(named(step.candidates, f"candidates-{name}"))(p, k, repeated, i, backend)
                  for i, (p, k) in enumerate(zip(parts, keys))]
    decided = task(named(step.decide, f"decide-{name}"))(candidates, backend)
    return [task(named(step.mark, f"mark-{name}"))(p, i, decided, backend) for i, p in enumerate(parts)]


def resolve_in_order(parts, segment, backend, scratch: str | None = None, settled: list | None = None) -> list:
    """A global step settled partition by partition in input order: each partition's decision
    needs only the partitions before it (steps/base.py: start, advance), so the first ones are
    marked, and written, while later ones are still being parsed. The state runs through a chain
    of tasks and refers to earlier partitions' frames: for a cluster in this process only.
    parts: the partitions in order, taken one at a time; settled: a list each decision is
    appended to before the next partition is taken (build_partitions' read gate), or None."""
    step, parts = _prepared(parts, segment, backend)
    name, task = step.name, _task
    state = task(named(step.start, f"start-{name}"))(backend, scratch)
    marked = []
    for i, part in enumerate(parts):
        keys = task(named(step.row_keys, f"keys-{name}"))(part, backend)
        state, decided = task(named(step.advance, f"decide-{name}"), nout=2)(state, part, keys, i, backend)
        if settled is not None:
            settled.append(decided)
        marked.append(task(named(step.mark, f"mark-{name}"))(part, i, decided, backend))
    return marked


_task = functools.partial(dask.delayed, pure=False)


def _prepared(parts: list, segment, backend):
    """(the segment's global step, its partitions, prepared if the step prepares; as lazily as
    they were given)."""
    step = segment.steps[0].step
    if type(step).prepare is not GlobalStep.prepare:
        parts = (_task(named(step.prepare, f"prepare-{step.name}"))(p, backend) for p in parts)
    return step, parts


class named:
    """A function under a stage's name: dask names tasks (and dashboard bars) after __name__."""

    def __init__(self, func, name: str):
        self.func = func
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        return self.func(*args, **kwargs)
