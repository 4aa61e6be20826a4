"""What every phase of a run is given (RunContext), what the phases hand each other (Mapped,
Accounts, Written) and what a run hands back (RunResult)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ...plan.compile import Plan
from ...sinks.base import get_sink
from ...sinks.versions import VersionedSink
from ...sinks.runstore import RunStore, SinkThroughStore
from ...sinks.shard_writer import ShardResult
from ...sinks.spill import MapResult
from ...storage import bare
from ..progress import RunProgress


@dataclass
class RunResult:
    """What a run did: counts, where the dataset went, and the manifest written there."""

    out_dir: Path
    counts: dict
    stages: list[dict]
    shards: list[dict]
    quarantine: list[dict]
    bad_records: dict
    backend: str
    seconds: float
    input_bytes: int
    manifest: dict = field(repr=False, default_factory=dict)
    report: Path | str | None = None    # the run report's HTML file (a URL on an object store)
    nothing_to_append: bool = False     # sink.mode append found no new input: no new version
    # per output column: values, nulls, min and max over the shards (sinks/column_stats.py:
    # profile), from what each shard's writer read off its footer; the run report shows it
    columns: list[dict] = field(repr=False, default_factory=list)

    @property
    def rows_out(self) -> int:
        return self.counts["rows_out"]


@dataclass
class Mapped:
    """The map phase's output: every partition's MapResult, in partition order; the shards where
    they were streamed (None: the shard phase writes them from the spilled pieces)."""

    results: list[MapResult]
    streamed: list[ShardResult] | None = None


@dataclass
class Accounts:
    """The accounting phase's output: the counts overall and per stage (rows_in = rows_out +
    filtered + deduplicated + quarantined), the most common bad-record reasons and their kinds,
    and what the run warns about so far."""

    counts: dict
    stages: list[dict]
    bad: dict                  # reason -> records, the 50 most common
    kinds: dict                # reasons grouped into kinds (runtime/reasons.py), from every reason
    warnings: list[str] = field(default_factory=list)


@dataclass
class Written:
    """The shard phase's output: the shards and the quarantine files in the run's data/ folder
    (or in the store), as their manifest entries and as their writers' results (with what each
    footer says of the columns: sinks/column_stats.py)."""

    shards: list[dict]
    quarantine: list[dict]
    shard_results: list[ShardResult] = field(default_factory=list)
    quarantine_results: list[ShardResult] = field(default_factory=list)


@dataclass
class RunContext:
    """One run: its plan, backend and executor, its temporary folder, and where it reports.
    store: the run's folder in the object store, when the tasks share no disk with this process
    (sinks/runstore.py); else the run's files are under run_tmp."""

    plan: Plan
    backend: object
    executor: object
    run_tmp: Path
    watch: RunProgress
    log: object
    store: RunStore | None = None

    @cached_property
    def sink(self):
        """The pipeline's sink; through the store, its tasks upload what they write there."""
        sink = get_sink(self.plan.spec.sink.type)
        if self.plan.held is not None:        # sink.mode append: the new version's names
            sink = VersionedSink(sink, self.plan.held.version + 1)
        return SinkThroughStore(sink, self.store) if self.store is not None else sink

    @cached_property
    def options(self):
        return get_sink(self.plan.spec.sink.type).write_options(self.plan.spec.sink)

    def shards_at(self) -> dict:
        """Where the run's shards are before the commit: its data/ folder here, or in the store."""
        if self.store is None:
            return {"data_dir": self.run_tmp / "data"}
        return {"data_dir": Path(bare(self.store.join("data"))), "filesystem": self.store.fs}
