"""The accounting phase (Mapped → Accounts): every input record counted in exactly one place,
rows_in = rows_out + filtered + deduplicated + quarantined, overall and per stage; then the
checks that stop a run before any shard is written (max_error_ratio, a run that kept no row)."""

from __future__ import annotations

from ...columns import STATUS_DEDUPLICATED, STATUS_FILTERED, STATUS_QUARANTINED
from ...errors import DataError
from ...plan.compile import Plan
from ...sinks.layout import MIN_SHARD_ROWS, Layout
from ...sinks.spill import MapResult
from ..reasons import group_reasons
from .context import Accounts, Mapped, RunContext

BAD_SHARE_WARNING = 0.1        # a run that quarantines more than this share of its records warns
TOP_KINDS = 3                  # bad-record kinds named in that warning and in a run that kept nothing


def account(ctx: RunContext, mapped: Mapped) -> Accounts:
    """The counts of every partition summed and checked (a DataError where the data fails the
    pipeline's bounds); a shard.count past the rows is said before the shards are written."""
    plan, results = ctx.plan, mapped.results
    counts, stages = count_rows(plan, results)
    reasons = merge(r.reasons for r in results)
    bad = dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:50])
    kinds = group_reasons(reasons)        # from every reason, not the top 50 alone
    check_errors(plan, counts, bad, kinds)
    thin = _thin_shards(plan.layout, counts["rows_out"])
    if thin:
        ctx.log(f"warning: {thin}")       # before the shards are written: it says why that takes long
    return Accounts(counts, stages, bad, kinds, [thin] * bool(thin))


def merge(dicts) -> dict:
    """The dicts' values summed key by key."""
    out: dict = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def count_rows(plan: Plan, results: list[MapResult]):
    """rows_in = rows_out + filtered + deduplicated + quarantined, overall and per stage."""
    tallies = merge(r.tallies for r in results)
    rows_out = sum(sum(r.rows.values()) for r in results)
    by_status = {st: sum(n for (_, s), n in tallies.items() if s == st)
                 for st in (STATUS_FILTERED, STATUS_DEDUPLICATED, STATUS_QUARANTINED)}
    counts = {
        "rows_in": rows_out + sum(tallies.values()),
        "rows_out": rows_out,
        "filtered": by_status[STATUS_FILTERED],
        "deduplicated": by_status[STATUS_DEDUPLICATED],
        "quarantined": by_status[STATUS_QUARANTINED],
    }
    stages = []
    remaining = counts["rows_in"]
    for info in plan.stages:
        dropped = {name: tallies.get((info.index, st), 0) for name, st in
                   (("filtered", STATUS_FILTERED), ("deduplicated", STATUS_DEDUPLICATED),
                    ("quarantined", STATUS_QUARANTINED))}
        out = remaining - sum(dropped.values())
        stages.append({"stage": info.index, "name": info.name, "rows_in": remaining, "rows_out": out, **dropped})
        remaining = out
    assert remaining == rows_out, "accounting identity broken: a record was lost or counted twice"
    return counts, stages


def _top_kinds(kinds: dict) -> str:
    return "; ".join(f"{entry['count']:,} × {kind}" for kind, entry in list(kinds.items())[:TOP_KINDS])


def bad_share_warnings(counts: dict, kinds: dict) -> list[str]:
    """A run that quarantined (or dropped as bad) more than BAD_SHARE_WARNING of its records
    says so, with the most common kinds: a parse rule that fits only part of the input is
    likelier than that much bad data."""
    bad, total = counts["quarantined"], counts["rows_in"]
    if not total or bad <= BAD_SHARE_WARNING * total:
        return []
    return [f"{bad:,} of {total:,} records ({bad / total:.1%}) are bad; most common: {_top_kinds(kinds)}"]


def check_errors(plan: Plan, counts: dict, bad: dict, kinds: dict) -> None:
    """A DataError, before anything is written, where the run kept no record for bad ones
    (unless allow_empty_output) or its bad records pass max_error_ratio."""
    if counts["rows_out"] == 0 and counts["quarantined"] and not plan.spec.allow_empty_output:
        bad_n, rest = counts["quarantined"], counts["rows_in"] - counts["quarantined"]
        what = (f"all {bad_n:,} records are bad" if not rest else
                f"{bad_n:,} records are bad and the other {rest:,} were filtered or deduplicated")
        raise DataError(
            f"no record was kept: {what}; nothing was committed to {plan.out_dir}\n"
            f"  most common: {_top_kinds(kinds)}",
            hint="fix the input, the parse rule or `columns`; `allow_empty_output: true` commits the empty "
                 "dataset all the same")
    limit = plan.spec.max_error_ratio
    if limit is None or counts["rows_in"] == 0:
        return
    ratio = counts["quarantined"] / counts["rows_in"]
    if ratio > limit:
        top = "; ".join(f"{n} × {reason}" for reason, n in list(bad.items())[:3])
        raise DataError(
            f"{counts['quarantined']} of {counts['rows_in']} records are bad ({ratio:.2%}), over max_error_ratio "
            f"{limit:g}; nothing was written to {plan.out_dir}\n  most common: {top}",
            hint="fix the input or the parse rule, or raise max_error_ratio",
        )


def _thin_shards(layout: Layout, rows_out: int) -> str | None:
    """shard.count past the rows: each shard is a file, a footer and a task, whatever it holds
    (10,000 shards of 2,000 rows took 28 s to write)."""
    shards = sum(layout.shard_counts())
    if not layout.count or shards <= len(layout.split_names) or rows_out >= MIN_SHARD_ROWS * shards:
        return None
    return (f"shard.count: {shards:,} shards for {rows_out:,} rows, about {rows_out / shards:,.1f} rows a shard "
            f"(fewer than {MIN_SHARD_ROWS} rows a shard: each is a file, a footer and a task of its own); "
            f"a smaller shard.count, or shard.target_bytes, gives fewer, fuller shards")
