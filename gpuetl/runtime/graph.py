"""Build the dask graph of a Plan: one chain of tasks per partition, joined only where a global
step decides across partitions. Each stage has its own label, so the dashboard shows
read-parse-…, keys-dedupe, decide-dedupe, mark-dedupe, dedupe, spill. No dask DataFrame is built:
the run consumes partitions one by one (the streaming writer, the spill), and importing
dask.dataframe would delay the first task (docs/design.md, "The graph").

The tasks go into one dict in dask's task spec (TaskGraph), not through dask.delayed: a delayed
object carries a copy of every layer it depends on, which along a global step's chain across n
partitions is n² in time and memory, and dask.delayed walks each argument's dataclasses (a
Segment: hundreds of steps a task)."""

from __future__ import annotations

import operator
import os
import uuid

from dask.delayed import Delayed
from dask.task_spec import List, Task, TaskRef

from ..sources.counters import CountedFrame
from ..steps.base import GlobalStep, InOrderGlobalStep
from ..sources.ranges import CompressedRange, decode_range
from .partition import read_partition, run_steps


class TaskGraph:
    """One build's tasks in one dict that grows as they are made; each task's handle is a dask
    Delayed over that dict (so dask.compute, the executor and a cluster take it as they take
    any delayed object). Adding a task costs the same whatever came before. A handle (or a list
    of handles) in a task's arguments becomes a reference to its task; any other argument is
    handed to the function whole. Keys are (f"{label}-{token}", *index): a label per stage, for
    the dashboard, and a token of the build's own, so two runs on one cluster never share a key."""

    def __init__(self):
        self.tasks: dict = {}
        self.token = uuid.uuid4().hex

    def add(self, func, label: str, index, *args, nout: int | None = None):
        """The handle of func(*args) under (label, index); with nout, a tuple of nout handles,
        one per item of the tuple func returns."""
        key = (f"{label}-{self.token}", *(index if isinstance(index, tuple) else (index,)))
        if key in self.tasks:
            raise ValueError(f"task {key} made twice")
        self.tasks[key] = Task(key, func, *(self._argument(a) for a in args))
        if nout is None:
            return Delayed(key, self.tasks)
        items = []
        for k in range(nout):
            item = (*key, "item", k)
            self.tasks[item] = Task(item, operator.getitem, TaskRef(key), k)
            items.append(Delayed(item, self.tasks))
        return tuple(items)

    def alone(self, handle):
        """The handle over only the tasks it needs. A handle computed by itself over the whole
        dict has dask go through every task of the build, n² over a run's independent
        partitions (each computed alone: Executor.ordered, see independent_partitions)."""
        return Delayed(handle.key, needed(self.tasks, [handle.key]))

    def _argument(self, value):
        if isinstance(value, Delayed):
            if value.dask is not self.tasks:            # another graph's task (a caller's)
                self.tasks.update(dict(value.__dask_graph__()))
            return TaskRef(value.key)
        if type(value) is list and any(isinstance(v, Delayed) for v in value):
            return List(*(self._argument(v) for v in value))
        if isinstance(value, (tuple, set, frozenset, dict)) and any(
                isinstance(v, Delayed) for v in (value.values() if isinstance(value, dict) else value)):
            raise TypeError("a task handle inside a tuple, set or dict would reach the function unrun: "
                            "pass it alone or in a list")
        return value


def build_partitions(plan, backend, in_order: bool = False, scratch: str | None = None,
                     ahead: int | None = None, finish=None) -> list:
    """One task handle per partition of the plan's final stage (live rows, rows that left and
    tallies, in input order), or what finish(graph, i, part) makes of it with graph.add (the
    spill; None for a partition that needs none). in_order: settle global steps that can be,
    partition by partition in input order (the run holds their state in its process: the
    in-process cluster); else all at once. scratch: a folder of the run's where that state may
    set data aside. ahead: where partitions share tasks (a global step, every one settled in
    order, or a compressed file's decoding) partition i is read and decoded only once partition
    i - ahead is finished, so neither the parsing, the in-order chain nor the decoding can run
    far ahead of the partitions' last tasks, and the frames and bytes waiting between them stay
    bounded (None: no gate; independent partitions are submitted in order instead, see
    Executor.ordered)."""
    graph = TaskGraph()
    finish = finish or (lambda graph, i, part: part)
    gated = ahead is not None and in_order and _all_in_order(plan) and not independent_partitions(plan)
    done: list | None = [] if gated else None
    parts = partition_tasks(graph, plan, backend, after=_gate(done, ahead) if done is not None else None)
    for n, segment in enumerate(plan.segments[1:], start=1):
        step = segment.steps[0].step
        if in_order and isinstance(step, InOrderGlobalStep):
            where = os.path.join(scratch, f"{step.name}-{segment.steps[0].index}") if scratch else None
            parts = resolve_in_order(graph, parts, segment, backend, where, n)
        else:
            parts = resolve_in_place(graph, list(parts), segment, backend, n)
        parts = _segment_steps(graph, parts, segment, backend, n)
    out = []
    for i, part in enumerate(parts):       # lazily: partition i is built after i - 1 is finished
        out.append(finish(graph, i, part))
        if done is not None:
            done.append(out[-1] if out[-1] is not None else part)
    if independent_partitions(plan):    # each computed alone
        out = [graph.alone(task) if task is not None else None for task in out]
    return out


def independent_partitions(plan) -> bool:
    """Whether no task is shared between partitions: no global step, and no compressed file,
    whose partitions are decoded by one chain of tasks, front to back. Shared tasks must be
    computed in one call (Executor.ordered, independent=False): partition k computed alone
    would run the whole chain before it again."""
    return len(plan.segments) == 1 and not any(isinstance(rng, CompressedRange)
                                               for p in plan.partitions for rng in p.ranges)


def _segment_steps(graph: TaskGraph, parts, segment, backend, n: int):
    """The segment's row-local steps after its global step, on each partition (as lazily as the
    partitions come)."""
    steps = frame_task(run_steps)
    for i, part in enumerate(parts):
        yield graph.add(steps, segment.label, (i, n), part, segment, backend)


def _all_in_order(plan) -> bool:
    """Whether every global step of the plan (if any) is settled in order (one decided across
    all partitions at once needs every partition read first: no gate before it)."""
    return all(isinstance(segment.steps[0].step, InOrderGlobalStep) for segment in plan.segments[1:])


def _gate(done: list, ahead: int):
    """after(i): the task partition i's read waits for (partition i - ahead's last), or None.
    Read lazily: build_partitions appends each partition's last task before it builds the
    next partition."""
    return lambda i: done[i - ahead] if i >= ahead else None


def partition_tasks(graph: TaskGraph, plan, backend, after=None):
    """One task per partition, yielded in input order: read, parse and run the first segment's
    steps. A plan of one segment is submitted in input order (the streaming sink writes
    partition i before i + 1; one submission of them all runs them in dask.order's order, which
    for independent chains is reverse key order, partition 0 last). after(i): a task that
    partition i's read and decompression wait for (see build_partitions), asked for just before
    the partition's tasks are made; or None."""
    first = plan.segments[0]
    streams: dict = {}        # file index -> its open stream, as the last decompress task left it
    for p in plan.partitions:
        gate = after(p.index) if after is not None else None
        decoded = []
        for j, rng in enumerate(p.ranges):
            if isinstance(rng, CompressedRange):   # a compressed file is decoded once, in order:
                got, streams[rng.file_index] = graph.add(   # each piece's task hands the stream on
                    _decode_after, "decompress", (p.index, j),
                    streams.get(rng.file_index), plan.files[rng.file_index], rng, gate, nout=2)
                decoded.append(got)
        yield graph.add(_read_after, first.label, p.index, p, first.for_partition(p), backend, decoded, gate)


def _read_after(partition, segment, backend, decoded, gate):
    """read_partition, run once `gate` (an earlier partition's decision, or None) is done."""
    return read_partition(partition, segment, backend, decoded)


def _decode_after(stream, f, rng, gate):
    """decode_range, run once `gate` is done: decoded bytes wait no longer than their read."""
    return decode_range(stream, f, rng)


def count_tasks(parts: list) -> int:
    """Tasks in the graph behind these handles (shared ones counted once): each dict walked once
    from all its handles."""
    by_graph: dict = {}
    for part in parts:
        by_graph.setdefault(id(part.dask), (part.dask, []))[1].append(part.key)
    seen: set = set()
    for tasks, keys in by_graph.values():
        seen.update(needed(tasks, keys))
    return len(seen)


def needed(tasks: dict, keys: list) -> dict:
    """The tasks of `tasks` that `keys` need, themselves included."""
    found: dict = {}
    work = list(keys)
    while work:
        key = work.pop()
        if key not in found:
            found[key] = tasks[key]
            work.extend(found[key].dependencies)
    return found


def resolve_in_place(graph: TaskGraph, parts: list, segment, backend, n: int = 1) -> list:
    """A global step (steps/base.py's protocol) decided without moving rows: each partition
    sends its keys, one task finds the keys that repeat, each partition sends the rows that
    carry one, one task decides, each partition marks its own rows. Partitions keep their rows
    and their order; only keys and candidates travel. parts: task handles, or frames (the
    preview's CountedFrame)."""
    step, parts = _prepared(graph, parts, segment, backend, n)
    parts = list(parts)
    name, add = step.name, graph.add
    keys = [add(on_frame(step.row_keys), f"keys-{name}", (i, n), p, backend) for i, p in enumerate(parts)]
    repeated = add(step.repeated_keys, f"repeats-{name}", n, keys, backend)
    candidates = [add(on_frame(step.candidates), f"candidates-{name}", (i, n), p, k, repeated, i, backend)
                  for i, (p, k) in enumerate(zip(parts, keys))]
    decided = add(step.decide, f"decide-{name}", n, candidates, backend)
    return [add(frame_task(step.mark), f"mark-{name}", (i, n), p, i, decided, backend) for i, p in enumerate(parts)]


def resolve_in_order(graph: TaskGraph, parts, segment, backend, scratch: str | None = None, n: int = 1):
    """A global step settled partition by partition in input order: each partition's decision
    needs only the partitions before it (steps/base.py: start, advance), so the first ones are
    marked, and written, while later ones are still being parsed. The state runs through a chain
    of tasks and refers to earlier partitions' frames: for a cluster in this process only.
    parts: the partitions in order; taken, and the marked ones yielded, one at a time."""
    step, parts = _prepared(graph, parts, segment, backend, n)
    name, add = step.name, graph.add
    state = add(step.start, f"start-{name}", n, backend, scratch)
    for i, part in enumerate(parts):
        keys = add(on_frame(step.row_keys), f"keys-{name}", (i, n), part, backend)
        state, decided = add(on_frame(step.advance, at=1), f"decide-{name}", (i, n), state, part, keys, i, backend,
                             nout=2)
        yield add(frame_task(step.mark), f"mark-{name}", (i, n), part, i, decided, backend)


def _prepared(graph: TaskGraph, parts, segment, backend, n: int):
    """(the segment's global step, its partitions, prepared if the step prepares; as lazily as
    they were given)."""
    step = segment.steps[0].step
    if type(step).prepare is not GlobalStep.prepare:
        prepare = frame_task(step.prepare)
        parts = (graph.add(prepare, f"prepare-{step.name}", (i, n), p, backend) for i, p in enumerate(parts))
    return step, parts


class frame_task:
    """A task that takes a partition's frame and gives its frame back, as a step does: it is
    handed the partition's CountedFrame and hands one on, with the same counters (what the
    source counted: sources/counters.py), whatever frame the step built."""

    def __init__(self, func):
        self.func = func

    def __call__(self, part: CountedFrame, *args):
        return CountedFrame(self.func(part.frame, *args), part.counters)


class on_frame:
    """A task that reads a partition's frame (its argument `at`, a CountedFrame) and gives
    something else back (keys, candidates, a decision)."""

    def __init__(self, func, at: int = 0):
        self.func, self.at = func, at

    def __call__(self, *args):
        args = list(args)
        args[self.at] = args[self.at].frame
        return self.func(*args)
