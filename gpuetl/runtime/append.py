"""The run's side of dataset versions (sinks/versions.py) and of the Delta log (sinks/delta.py):
under the output folder's lock, settle what an append reads; once the run's manifest is final,
make it the next version's and stage the version's files for the commit."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import OutputError
from ..plan.compile import Plan, compile_plan
from ..sinks import versions
from ..sinks.commit import MANIFEST, SUCCESS, listed_files, success_bytes


def settle(plan: Plan, backend, folder, digests) -> Plan:
    """Under the lock, after the survey (which finished any interrupted commit): the plan an
    append runs, compiled again when the dataset moved on since it was compiled (a commit
    finished just now, another append); the refusals that come before any data is read.
    digests(plan): the pipeline fingerprints the dataset's manifest may carry (resume.append_digests)."""
    inv = folder.inventory
    if inv.ours and not inv.complete:
        raise OutputError(f"sink.path: {folder.out} holds an incomplete dataset (no _SUCCESS); an append adds to "
                          "a complete one", hint=f"run `gpuetl verify --repair {folder.out}`, or rewrite it with "
                                                 "sink.mode: overwrite")
    manifest = inv.manifest if inv.complete else None
    if versions.version_of(manifest) != plan.held.version or (manifest is None) != (plan.held.manifest is None):
        plan = compile_plan(plan.loaded, backend)
        if versions.version_of(manifest) != plan.held.version:
            raise OutputError(f"sink.path: {folder.out} changed while this run looked at it",
                              hint="run again")
    versions.check_base(folder.out, manifest, digests(plan), plan.output_schema)
    if manifest is not None:
        missing = sorted(listed_files(manifest) - set(inv.ours))
        if missing:
            raise OutputError(f"sink.path: {folder.out} lacks {missing[0]}, a file its manifest lists; an append "
                              "adds to a whole dataset", hint=f"run `gpuetl verify {folder.out}`")
        if isinstance(folder.out, Path):
            _check_sizes(folder.out, manifest)
        plan.held.raw = _check_latest_copy(folder, manifest)
    return plan


def _check_latest_copy(folder, manifest: dict) -> bytes:
    """`_manifest.json`'s bytes, which `_SUCCESS` vouches for and the latest version's copy under
    _versions/ holds: the next version records their sha256 as that version's, so a damaged copy
    accepted here would leave the version unreadable for good."""
    read = folder.read                              # local or in a store: None when missing
    raw = read(MANIFEST)
    if raw is None or read(SUCCESS) != success_bytes(raw):
        raise OutputError(f"sink.path: {folder.out}/{SUCCESS} does not hold the sha256 of its {MANIFEST} (edited "
                          "after its commit?); an append adds to a whole dataset",
                          hint=f"run `gpuetl verify {folder.out}`")
    entry = versions.own_entry(manifest)
    if entry is not None and read(entry["path"]) != raw:
        raise OutputError(f"sink.path: {folder.out}/{entry['path']} does not hold the bytes of {MANIFEST} (dataset "
                          f"version {entry['version']}'s manifest; damaged?); an append adds to a whole dataset",
                          hint=f"run `gpuetl verify --repair {folder.out}`: it writes the copy again from "
                               f"{MANIFEST}, which {SUCCESS} vouches for")
    return raw


def _check_sizes(out: Path, manifest: dict) -> None:
    """Every shard and quarantine file of the earlier versions has the size its manifest lists
    (a stat each: no old shard is read), and every earlier version's manifest the sha256 the
    latest lists (small files): an append adds to a whole dataset, not to a truncated or edited one."""
    import hashlib

    for entry in list(manifest.get("shards") or []) + list(manifest.get("quarantine") or []):
        size = os.stat(out / entry["path"], follow_symlinks=False).st_size
        if isinstance(entry.get("bytes"), int) and size != entry["bytes"]:
            raise OutputError(f"sink.path: {out}/{entry['path']} holds {size} bytes, its manifest lists "
                              f"{entry['bytes']}; an append adds to a whole dataset", hint=f"run `gpuetl verify {out}`")
    for entry in manifest.get("versions") or []:
        if isinstance(entry, dict) and isinstance(entry.get("sha256"), str):
            raw = (out / entry["path"]).read_bytes()
            if hashlib.sha256(raw).hexdigest() != entry["sha256"]:
                raise OutputError(f"sink.path: {out}/{entry['path']} does not hold the sha256 the latest manifest "
                                  f"lists for dataset version {entry.get('version')} (edited?); an append adds to a "
                                  "whole dataset", hint=f"run `gpuetl verify {out}`")


def before_commit(plan: Plan, manifest: dict, run_tmp: Path) -> dict:
    """The run's final manifest as the dataset's next version (append), with its Delta commit
    (sink.delta_log); the version's own files staged in the run's data folder."""
    own_shards = list(manifest["shards"])
    if plan.held is not None:
        manifest = versions.merge(plan.held.manifest, manifest, plan.held.raw)
    if plan.spec.sink.delta_log:
        from ..sinks.delta import log_entry

        manifest["delta_log"] = log_entry(manifest, own_shards)
    if plan.held is not None:
        versions.stage_files(run_tmp / "data", manifest)
    return manifest
