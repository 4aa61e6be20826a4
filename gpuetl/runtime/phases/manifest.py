"""The last phase before the commit (Mapped, Accounts, Written → RunResult): what the run warns
about once its shards are written (empty shards, uneven splits, declared columns never filled:
from the statistics the shards' writers sent back), the source stage's summary of its reading
(`summarize`, whatever the format), the inputs checked unchanged against the bytes the run read
(sources/pins.py), and the manifest the commit writes next to the shards."""

from __future__ import annotations

import math
import time

from ...errors import DataError, SourceError
from ...sinks import commit as commit_protocol
from ...sinks.layout import Layout
from ...sinks.spill import MapResult
from ...sinks.column_stats import null_in_every_row, profile
from ...sources.counters import summarize
from ...sources.pins import FilePin, Identity
from ...types import is_nested
from ..versions import recorded_versions
from .accounting import bad_share_warnings
from .context import Accounts, Mapped, RunContext, RunResult, Written
from .resume import fingerprint

MANIFEST_FORMAT = commit_protocol.MANIFEST_FORMAT


def build_result(ctx: RunContext, mapped: Mapped, accounts: Accounts, written: Written) -> RunResult:
    """The run's RunResult, its manifest complete but for the run's time and report."""
    plan, backend, executor, log = ctx.plan, ctx.backend, ctx.executor, ctx.log
    spec, counts, shards = plan.spec, accounts.counts, written.shards
    warnings = [*accounts.warnings, *balance_warnings(plan.layout, shards, counts["rows_out"],
                                                      keyed=bool(spec.shard.key))]
    summary = summarize(plan.segments[0].source if plan.segments else None, spec,
                        [r.counters for r in mapped.results], plan.metadata)
    empty = empty_declared_columns(plan, summary.filled, written)
    if empty:
        message = (f"declared column(s) {', '.join(map(repr, empty))} are null in every row: no record written "
                   "has a value there (a misspelt name, a path that does not reach it, or only in records "
                   "quarantined or filtered out?)")
        if spec.strict:
            raise DataError(message, hint="strict: true makes this an error; fix `columns` or set strict: false")
        warnings.append(message)
    for warning in warnings:
        log(f"warning: {warning}")
    pins = input_pins(plan.files, mapped.results)
    check_files_unchanged(plan.files, pins)
    manifest = _manifest(ctx, accounts, written, pins)
    manifest["bad_record_kinds"] = accounts.kinds
    manifest["empty_columns"] = empty
    manifest["fallbacks"] = backend.fallbacks(executor.client)
    manifest["host_transfer"] = backend.host_transfer(executor.client, plan.input_bytes)
    if (syncs := manifest["host_transfer"].get("syncs")) is not None:     # the GPU's sync budget (docs/gpu.md)
        manifest["host_transfer"]["syncs_per_partition"] = round(syncs["total"] / max(1, len(plan.partitions)), 2)
    bad_share = bad_share_warnings(counts, accounts.kinds)     # printed in the summary (cli), not logged
    manifest["notes"] = [*plan.notes, *warnings, *bad_share]
    manifest["warnings"] = [*warnings, *bad_share]
    manifest["bad_records_warning"] = bad_share[0] if bad_share else None
    manifest.update(plan.metadata)
    manifest.update(summary.fields)           # the source's own account of the run (sources/counters.py)
    for note in summary.notes:
        log(f"note: {note}")
        manifest["notes"].append(note)
    return RunResult(plan.out_dir, counts, accounts.stages, shards, written.quarantine, accounts.bad, backend.name,
                     0.0, plan.input_bytes, manifest,
                     columns=profile([s.columns for s in written.shard_results]))


def empty_declared_columns(plan, filled: tuple[str, ...], written: Written) -> list[str]:
    """Of the declared columns the source says a record may leave unfilled (`filled`: a JSON
    field is looked up in each record), those null in every row written: the field never
    appeared (or was always null), which the run reports rather than leave a column of nulls
    unremarked. From the null counts the shards' writers read off their footers."""
    schema = plan.output_schema
    declared = [name for name in filled if name in schema and not is_nested(schema[name])]
    return null_in_every_row(declared, written.shard_results)


def balance_warnings(layout: Layout, shards: list[dict], rows_out: int, keyed: bool = False) -> list[str]:
    """Keys place rows, so a key with few distinct values cannot fill shards or splits evenly:
    say so rather than leave a user to find empty shards. `keyed`: the pipeline file set
    shard.key (else the key is the source's default, or the whole row, and is not blamed)."""
    if not rows_out:
        return []
    out = []
    empty = [s["path"] for s in shards if s["rows"] == 0]
    if empty and len(empty) < len(shards):
        out.append(f"{len(empty)} of {len(shards)} shards are empty ({', '.join(empty[:3])}"
                   f"{'…' if len(empty) > 3 else ''})" + (f": shard.key {list(layout.key)} has too few distinct "
                                                          "values, or one value holds most rows" if keyed else ""))
    for name, share in layout.splits:
        got = sum(s["rows"] for s in shards if s["split"] == name) / rows_out
        if abs(got - share) > max(0.05, share / 2):
            chance = abs(got - share) * rows_out <= 3 * math.sqrt(rows_out * share * (1 - share)) + 1
            why = (f" (shard.key {list(layout.key)} has few distinct values)" if keyed else
                   f" (each row's split is drawn from its hash, and {rows_out:,} row{'s are' if rows_out != 1 else ' is'} "
                   "too few for the shares to even out)" if chance else
                   f" (rows are placed by a hash of {', '.join(layout.key) if layout.key else 'the whole row'}, "
                   "and equal values land in the same split)")
            out.append(f"split {name!r} holds {got:.1%} of the rows, not {share:.0%}{why}")
    return out


def input_pins(files, results: list[MapResult]) -> dict[int, FilePin]:
    """Each local input's pin (sources/pins.py): its identity when listed, and the hash of every
    range the partitions read."""
    read: dict[int, list] = {}
    for result in results:
        for pin in result.read_pins:
            read.setdefault(pin.file_index, []).append(pin)
    return {f.index: FilePin.of_reads(f.identity, read.get(f.index, ()), f.compression)
            for f in files if f.url is None}


def check_files_unchanged(files, pins: dict[int, FilePin]) -> None:
    """Before a commit: every local input still is the file that was listed (its identity), or,
    where its identity changed during the run, still holds the bytes the run read (its ranges
    hashed again); else an error naming it: a dataset never mixes two versions of a file."""
    for f in files:
        pin = pins.get(f.index)
        if pin is None or f.identity is None or Identity.at(f.path) == f.identity:
            continue
        check = pin.check(f.path)
        if not check.same:
            raise SourceError(f"source.path: {f.display} changed during the run ({check.compared()}; "
                              + "; ".join(map(str, check.mismatches[:3])) + "); nothing was committed",
                              hint="run again once the data stops changing")


def _manifest(ctx: RunContext, accounts: Accounts, written: Written, pins: dict) -> dict:
    plan, backend = ctx.plan, ctx.backend
    spec, layout = plan.spec, plan.layout
    return {
        "format": MANIFEST_FORMAT,
        "name": spec.name,
        "pipeline_sha256": plan.loaded.sha256,
        "fingerprint": {k: v for k, v in fingerprint(plan, backend).items() if k != "inputs"},
        "seed": spec.shard.seed,
        "backend": backend.name,
        "io": backend.io_path(),
        "versions": recorded_versions(backend),
        "inputs": [{**f.pin(located=True), **(pins[f.index].to_json() if f.index in pins else {})}
                   for f in plan.files],
        "counts": accounts.counts,
        "stages": accounts.stages,
        "bad_records": accounts.bad,
        "on_error": spec.on_error,
        "schema": [{"name": n, "type": t} for n, t in plan.output_schema.items()],
        "layout": {"splits": dict(layout.splits) or None, "key": list(layout.key) or None,
                   "shuffle": layout.shuffle, "count": layout.count, "target_bytes": layout.target_bytes},
        "shards": written.shards,
        "quarantine": written.quarantine,
        "run": {"id": ctx.run_tmp.name, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    }
