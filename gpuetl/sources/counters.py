"""What a partition's reading counts beside its rows, declared: the extra JSON fields its parser
left out and the hash of each input range it read. A source stage fills a `PartitionCounters`
as it reads (sources/stage.py: `read`); the runtime carries it next to the partition's frame
through the partition's tasks (`CountedFrame`, runtime/graph.py) to the spill, which keeps it in
the partition's result (sinks/spill.py: `MapResult.counters`), recorded for resume and gathered
into the manifest. Nothing rides in the frame itself (`DataFrame.attrs`): a step that builds a
new frame cannot lose them, and a reader sees every field here.

After the run, the source stage sums its partitions' counters up in a `SourceSummary` (its
`summarize`: the JSON formats' dropped fields; nothing for the others), which the runtime puts
in the manifest without knowing the format (`summarize` here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

from .pins import RangePin


@dataclass
class PartitionCounters:
    # JSON field -> records it was left out of (`extra_fields: drop`); None: not counted (a
    # backend that does not count them, or a source whose parser drops nothing)
    dropped_fields: dict[str, int] | None = None
    read_pins: list[RangePin] = field(default_factory=list)   # each local input range read (sources/pins.py)
    uncounted: bool = False          # a piece of the partition was parsed without counting its dropped fields

    def add_dropped_fields(self, counts: dict[str, int] | None) -> None:
        """Add one piece's dropped fields ({field: records}, or None: the piece was not counted,
        and so neither is the partition)."""
        if counts is None or self.uncounted:
            self.uncounted, self.dropped_fields = True, None
            return
        total = {} if self.dropped_fields is None else self.dropped_fields
        for name, n in counts.items():
            total[name] = total.get(name, 0) + n
        self.dropped_fields = total


class CountedFrame(NamedTuple):
    """A partition's frame and its counters, as its tasks hand them on (runtime/graph.py). A
    tuple, so that what dask and dask-cuda ask of a task's result (its size, whether it holds
    device memory, and so whether a worker spills it to host) is asked of the frame inside."""

    frame: Any
    counters: PartitionCounters


@dataclass
class SourceSummary:
    """What a source stage says of the whole run, from its partitions' counters."""

    fields: dict = field(default_factory=dict)      # manifest entries (over the plan's metadata)
    notes: list[str] = field(default_factory=list)  # lines for the log and the manifest's notes
    # declared columns a record may leave without a value (a JSON field is looked up in each
    # record): the run checks that some row written has a value in each (strict: an error)
    filled: tuple[str, ...] = ()


@runtime_checkable
class Summarizing(Protocol):
    """A source stage (sources/registry.py: RecordStage) that sums up its run."""

    def summarize(self, spec: Any, counters: list[PartitionCounters], metadata: dict) -> SourceSummary:
        """The run's summary from every partition's counters, in partition order; `metadata`:
        what the format's plan() gave the manifest."""
        ...


def summarize(stage: Any, spec: Any, counters: list[PartitionCounters], metadata: dict) -> SourceSummary:
    """The stage's summary of the run; an empty one for a stage that makes none (a plugin's)."""
    if isinstance(stage, Summarizing):
        return stage.summarize(spec, counters, metadata)
    return SourceSummary()
