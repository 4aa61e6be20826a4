"""The run's temporary folder (OutputFolder → run folder, the partitions already finished).

Under `sink.mode: resume` an interrupted run's folder is continued when its fingerprint matches
(the pipeline but sink.mode, every input, the partition count, the backend, gpuetl's version),
and the partitions it finished are skipped once the bytes they read are shown to be still there
(sources/pins.py); every other earlier run's folder is removed. A complete dataset of this very
pipeline and these inputs is the run's result as it stands."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

from ...errors import OutputError
from ...plan.compile import Plan
from ...sinks import commit as commit_protocol
from ...sinks.spill import MapResult, load_result
from ...sources.pins import FilePin, Identity
from ...spec.sizes import format_size
from ..versions import __version__
from .context import RunContext, RunResult

STATE = "_state.json"


def pipeline_digest(plan: Plan, blocksize: int | None = None) -> str:
    """What decides the output, from the validated pipeline: everything but sink.mode (and, in
    append mode, source.path, whose inputs are tracked by their pins, sink.path, where the
    dataset lies, and source.blocksize: each version cuts its own partitions, and the backends'
    defaults differ while the shards do not: sinks/versions.py). `blocksize`: the digest with that
    source.blocksize in, in any mode."""
    spec = plan.spec.model_dump(mode="json")
    source = spec.get("source", {})
    if spec.get("sink", {}).pop("mode", None) == "append":
        source.pop("path", None)
        spec["sink"].pop("path", None)
        source.pop("blocksize", None)
    if blocksize is not None:
        source["blocksize"] = blocksize
    spec.pop("cache", None)               # where inputs are cached does not change the output
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def append_digests(plan: Plan) -> tuple[str, ...]:
    """The digests an append to an earlier version of this pipeline accepts in its manifest: the
    pipeline's own (pipeline_digest), then the same with source.blocksize kept in, as this
    run's and as the pipeline file's default: the digest manifests carry where a version's
    blocksize was part of it."""
    return (pipeline_digest(plan), *dict.fromkeys(pipeline_digest(plan, b)
                                                  for b in (plan.spec.source.blocksize, _files_default(plan))))


def _files_default(plan: Plan) -> int:
    """source.blocksize where a pipeline file sets none and no backend sizes it."""
    return type(plan.spec.source).model_fields["blocksize"].default


def _other_blocksize(digest, plan: Plan, recorded=None) -> int | None:
    """The blocksize that, in place of this plan's, gives `digest` (the one recorded with it, or
    the file's default: what a backend's own default replaces); None when none does."""
    for size in dict.fromkeys((recorded, _files_default(plan))):
        if isinstance(size, int) and size != plan.spec.source.blocksize and pipeline_digest(plan, size) == digest:
            return size
    return None


def fingerprint(plan: Plan, backend=None) -> dict:
    """What must not change for finished work to be reused: the pipeline (but sink.mode), every
    input, the backend and gpuetl's version; and the blocksize the partitions were cut at, so a
    later run cut otherwise can be told what it was (the digest may hold it, but not readably)."""
    return {"pipeline": pipeline_digest(plan), "partitions": len(plan.partitions),
            "blocksize": plan.spec.source.blocksize,
            "backend": backend.name if backend is not None else None, "gpuetl": __version__,
            "inputs": [f.pin() for f in plan.files]}


def write_state(plan: Plan, backend, run_tmp: Path) -> None:
    """A new run's fingerprint, in its folder: what a later resume compares."""
    (run_tmp / STATE).write_text(json.dumps(fingerprint(plan, backend)))


def _input_changes(old: list[dict], new: list[dict]) -> tuple[list[str], dict[str, dict]]:
    """(what changed for certain: inputs gone or new, another size, another object; the earlier
    pins of the local files whose identity changed, by path: whether their bytes did is for their
    content hashes to say, sources/pins.py)."""
    before = {i["path"]: i for i in old if isinstance(i, dict) and "path" in i}
    after = {i["path"]: i for i in new}
    changes = [f"{p}: no longer an input" for p in before if p not in after]
    changes += [f"{p}: new input" for p in after if p not in before]
    recheck = {}
    for p in before.keys() & after.keys():
        a, b = before[p], after[p]
        if a.get("bytes") != b["bytes"]:
            changes.append(f"{p}: size {a.get('bytes')} -> {b['bytes']} bytes")
        elif "etag" in a or "etag" in b:
            if (a.get("etag"), a.get("version_id")) != (b.get("etag"), b.get("version_id")):
                changes.append(f"{p}: the object changed since the earlier run (ETag or version id)")
        elif a.get("identity") != b.get("identity") and not (      # pinned by an older gpuetl: its mtime
                a.get("identity") is None and a.get("mtime_ns") == b.get("mtime_ns")):
            recheck[p] = a
    return sorted(changes), recheck


def _resumable(plan: Plan, backend, run_tmp: Path) -> bool:
    """A stale run can be resumed when it ran this very pipeline on these very inputs, on the
    same backend and gpuetl version."""
    try:
        state = json.loads((run_tmp / STATE).read_text())
    except (OSError, ValueError, RecursionError):
        return False
    if not isinstance(state, dict):
        return False
    now = fingerprint(plan, backend)
    changes, _ = _input_changes(state.get("inputs", []), now["inputs"])     # the rest: _check_skipped
    if changes:
        raise OutputError(
            f"sink.mode resume: the inputs changed since the interrupted run {run_tmp.name}:\n    "
            + "\n    ".join(changes[:10]),
            hint="the finished work no longer matches the inputs; set sink.mode: overwrite to start again")
    if state.get("backend") != now["backend"]:
        raise OutputError(
            f"sink.mode resume: the interrupted run {run_tmp.name} ran on the {state.get('backend')} backend, "
            f"this one on {now['backend']}",
            hint=f"resume with --backend {state.get('backend')}, or set sink.mode: overwrite to start again")
    if state.get("gpuetl") != now["gpuetl"]:
        raise OutputError(
            f"sink.mode resume: the interrupted run {run_tmp.name} ran gpuetl {state.get('gpuetl')}, this is "
            f"{now['gpuetl']}", hint="set sink.mode: overwrite to start again")
    if state.get("pipeline") != now["pipeline"] and (then := _other_blocksize(state.get("pipeline"), plan,
                                                                               state.get("blocksize"))):
        raise OutputError(
            f"sink.mode resume: the interrupted run {run_tmp.name} cut its partitions at source.blocksize "
            f"{format_size(then)}, this run at {format_size(plan.spec.source.blocksize)}",
            hint=f"resume with --set source.blocksize={then}, or set sink.mode: overwrite to start again")
    if state.get("pipeline") != now["pipeline"] or state.get("partitions") != now["partitions"]:
        raise OutputError(
            f"sink.mode resume: the pipeline file changed since the interrupted run {run_tmp.name}",
            hint="resume continues the same pipeline; set sink.mode: overwrite to start again")
    return True


def earlier_runs(plan: Plan, backend, folder, log) -> Path | None:
    """Deal with the temporary folders earlier runs left: under resume, the one to continue;
    the others are removed (all of them gpuetl's: folder.runs() lists no other)."""
    resumed = None
    for stale in folder.runs(note=True):
        owner = folder.owner(stale)
        if owner and owner.get("pid") != os.getpid() and commit_protocol.is_alive(owner):
            raise OutputError(f"sink.path: another gpuetl run ({stale.name}, {commit_protocol.describe(owner)}) "
                              f"is writing to {folder.out} right now", hint="wait for it, or choose another sink.path")
        if plan.spec.sink.mode == "resume" and resumed is None and _resumable(plan, backend, stale):
            folder.refuse_links(stale)
            folder.claim(stale)
            resumed = stale
            continue
        log(f"removing the temporary files of an earlier run that did not finish: {stale.name}")
        folder.abandon(stale)
    return resumed


def already_complete(plan: Plan, inventory) -> RunResult | None:
    """Under resume, a folder that already holds this pipeline's complete dataset of these inputs:
    its RunResult, from its manifest. One cut at another blocksize (the one its manifest records,
    or the file's default for a manifest without) holds the same rows. A complete dataset of
    anything else is a refusal."""
    manifest, out = inventory.manifest, plan.out_dir
    if manifest is None or not inventory.complete:
        return None
    now = fingerprint(plan)
    changes, recheck = _input_changes(manifest.get("inputs", []), now["inputs"])
    for f in plan.files:
        if f.display in recheck:        # the identity changed: are the pinned bytes still there?
            pin = FilePin.from_json(recheck[f.display])
            check = pin.check(f.path) if pin is not None else None
            if check is None or not check.same:
                changes.append(f"{f.display}: " + (check.compared() + "; " + "; ".join(map(str, check.mismatches[:3]))
                                                   if check else "modified since the earlier run (mtime or ctime)"))
    recorded = manifest.get("fingerprint") or {}
    done = recorded.get("pipeline")
    version = manifest.get("dataset_version") if isinstance(manifest.get("dataset_version"), int) else 0
    if version:                        # an append dataset: its fingerprint is an append's (this plan as one)
        spec = plan.spec.model_copy(update={"sink": plan.spec.sink.model_copy(update={"mode": "append"})})
        same_pipeline = done in append_digests(SimpleNamespace(spec=spec))
    else:
        same_pipeline = done == now["pipeline"] or _other_blocksize(done, plan, recorded.get("blocksize")) is not None
    if changes or not same_pipeline:
        raise OutputError(f"sink.mode resume: {out} holds a complete dataset of "
                          + ("other inputs" if changes else "another pipeline file")
                          + (f" (dataset version {version} of an append dataset)" if version else "")
                          + (":\n    " + "\n    ".join(changes[:10]) if changes else ""),
                          hint=_append_dataset_hint(version, same_pipeline) if version
                          else "set sink.mode: overwrite to replace it")
    return RunResult(out, manifest["counts"], manifest["stages"], manifest["shards"], manifest["quarantine"],
                     manifest.get("bad_records", {}), manifest["backend"], 0.0, plan.input_bytes, manifest)


def _append_dataset_hint(version: int, same_pipeline: bool) -> str:
    """What to do with an append dataset resume met: append the new inputs with this pipeline
    file; with a changed one, append refuses too, so undo the change or write elsewhere (sink.mode:
    overwrite would replace every version)."""
    if same_pipeline:
        return (f"run it with sink.mode: append: it removes a killed append's files and reads the inputs no "
                f"version holds as version {version + 1} (sink.mode: overwrite would replace every version)")
    return (f"the pipeline file changed since dataset version {version}, and an append refuses it too: undo the "
            "change, or write the changed pipeline's output to another sink.path (sink.mode: overwrite would "
            "replace every version)")


def finished_maps(ctx: RunContext) -> dict[int, MapResult]:
    """The partitions an interrupted run finished (maps/p*.json), once the bytes they read are
    shown to be still there; each counted as done. A run through the store records no map work
    (its pieces are named by URL): resume redoes it."""
    plan, run_tmp = ctx.plan, ctx.run_tmp
    if ctx.store is not None:
        return {}
    finished = {i: r for i in range(len(plan.partitions)) if (r := load_result(str(run_tmp), i)) is not None}
    if finished:
        _check_skipped(plan, run_tmp, finished, ctx.log)
    for result in finished.values():
        ctx.watch.partition_done(result)
    if finished:
        ctx.log(f"resuming {run_tmp.name}: {len(finished)} of {len(plan.partitions)} partitions already done, skipped")
    return finished


def _check_skipped(plan: Plan, run_tmp: Path, finished: dict, log) -> None:
    """Before a resumed run skips the partitions an interrupted run finished: the bytes they read
    are still there. A file whose identity is unchanged is trusted; one whose identity changed
    (touched, copied back, edited in place with its mtime set back) has the ranges the skipped
    partitions read hashed again, and any other bytes are a refusal naming the file."""
    state = _load_json(run_tmp / STATE)
    _, recheck = _input_changes(state.get("inputs", []) if isinstance(state, dict) else [],
                                [f.pin() for f in plan.files])
    if not recheck:
        return
    read: dict[int, list] = {}
    for result in finished.values():
        for pin in result.read_pins:
            read.setdefault(pin.file_index, []).append(pin)
    problems = []
    for f in plan.files:
        if f.display not in recheck:
            continue
        earlier = Identity.from_json(recheck[f.display].get("identity"))
        check = FilePin.of_reads(earlier, read.get(f.index, ()), f.compression).check(f.path)
        if check.same:
            log(f"resuming {run_tmp.name}: {f.display}: {check.compared()}: the same bytes")
        else:
            problems.append(f"{f.display}: {check.compared()}; " + "; ".join(map(str, check.mismatches[:3])))
    if problems:
        raise OutputError(
            f"sink.mode resume: the inputs changed since the interrupted run {run_tmp.name}: the finished "
            "partitions read other bytes than these files hold now:\n    " + "\n    ".join(problems[:10]),
            hint="the finished work no longer matches the inputs; use --set sink.mode=overwrite to start again")


def _load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
