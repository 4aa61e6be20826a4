"""Dataset versions (`sink.mode: append`): a dataset that grows by the inputs no earlier version
holds, each run a new version committed whole under the commit protocol (sinks/commit.py).

Version N's new shards are `<split>/part-vNNNNN-MMMMM.parquet` and its quarantine files
`_quarantine/part-vNNNNN-MMMMM.parquet`; `_manifest.json` describes the latest version, and every
version's manifest is kept as `_versions/NNNNN.json` (the latest one's bytes are those of
`_manifest.json`; every earlier one is listed with its sha256 in the latest). A version's
manifest lists every shard of the versions up to it: version N is the set of shards its manifest
lists. `counts` and `stages` are cumulative; `version_counts` and `version_stages` are the
version's own. `inputs` lists every input any version read, each with the `dataset_version`
that read it: an append reads only inputs not listed there (identified by their pins,
sources/pins.py)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DataError, GpuetlError, OutputError, SpecError, SourceError
from ..sources.pins import FilePin
from ..storage import same_store_url
from .commit import MANIFEST, SUCCESS, manifest_bytes, success_bytes, unsafe_reason

VERSIONS = "_versions"
VERSION_KEY = "dataset_version"


def version_file(version: int) -> str:
    return f"{VERSIONS}/{version:05d}.json"


def version_report(version: int) -> str:
    return f"{VERSIONS}/{version:05d}.report.json"


def versioned_name(version: int, index: int) -> str:
    return f"part-v{version:05d}-{index:05d}"


class VersionedSink:
    """A sink whose shards and quarantine files carry the version's number in their names (the
    rest is the sink's own). Picklable: it travels to the workers with the shard tasks."""

    def __init__(self, sink, version: int):
        self.sink, self.version = sink, version

    def __getattr__(self, name):                       # everything but the names: the sink's
        if name in ("sink", "version"):
            raise AttributeError(name)
        return getattr(self.sink, name)

    def shard_path(self, split_name: str, index: int) -> str:
        name = versioned_name(self.version, index) + self.sink.suffix
        return f"{split_name}/{name}" if split_name else name

    def write_quarantine(self, pieces, tmp_dir, options) -> list:
        results = self.sink.write_quarantine(pieces, tmp_dir, options)
        for n, result in enumerate(results):
            folder, name = os.path.split(result.path)
            rel = f"{folder}/{versioned_name(self.version, n)}{os.path.splitext(name)[1]}"
            os.replace(os.path.join(tmp_dir, "data", result.path), os.path.join(tmp_dir, "data", rel))
            result.path = rel
        return results


# -- before the run: what earlier versions hold ------------------------------------------------

def version_of(manifest: dict | None) -> int:
    """The dataset version a manifest describes (0: no dataset)."""
    if manifest is None:
        return 0
    version = manifest.get(VERSION_KEY)
    return version if isinstance(version, int) and version > 0 else 0


@dataclass
class Held:
    """The inputs the versions of a dataset hold, by path, and the decision for each input an
    append lists: read it (new), skip it (held, the same bytes) or refuse (held, other bytes)."""

    manifest: dict | None
    notes: list[str] = field(default_factory=list)
    raw: bytes | None = None         # _manifest.json's bytes, read under the lock (runtime/append.py)

    def __post_init__(self):
        self.version = version_of(self.manifest)
        inputs = (self.manifest or {}).get("inputs") or []
        # an object by its store's one spelling: s3a:// and S3:// name the s3:// objects a version read
        self.by_path = {same_store_url(i["path"]): i for i in inputs
                        if isinstance(i, dict) and isinstance(i.get("path"), str)}
        self.by_identity = {}            # a held file under another name (the pipeline file moved)
        self.by_inode = {}               # a held file renamed (which moves its ctime): re-hashed
        for entry in self.by_path.values():
            pin = FilePin.from_json(entry)
            if pin is not None and pin.identity is not None:
                self.by_identity[pin.identity.key()] = entry
                self.by_inode[pin.identity.key()[:3]] = entry

    def keep(self, f) -> bool:
        """Whether the listed input f is read by this append: True when no version holds it."""
        entry = self.by_path.get(same_store_url(f.display))
        if entry is None and f.identity is not None and f.identity.key() in self.by_identity:
            held = self.by_identity[f.identity.key()]
            self.notes.append(f"append: {f.display} is {held['path']} (the same file, not written since), held by "
                              f"dataset version {held.get(VERSION_KEY, '?')}: not read again")
            return False
        if entry is None and f.identity is not None and f.identity.key()[:3] in self.by_inode:
            return self._renamed(f, self.by_inode[f.identity.key()[:3]])
        if entry is None:
            return True
        which = f"dataset version {entry.get(VERSION_KEY, '?')}"
        if f.url is not None or "etag" in entry:
            same = (entry.get("etag"), entry.get("version_id"), entry.get("bytes")) == (f.etag, f.version_id, f.size)
            if not same:
                raise SourceError(f"source.path: {f.display} changed since {which} read it (ETag {entry.get('etag')} "
                                  f"-> {f.etag}, {entry.get('bytes')} -> {f.size} bytes); an append reads only new "
                                  "inputs and never mixes two versions of one", hint=_CHANGED_HINT)
            return False
        if entry.get("bytes") != f.size:
            raise SourceError(f"source.path: {f.display} changed since {which} read it ({entry.get('bytes')} -> "
                              f"{f.size} bytes); an append reads only new inputs and never mixes two versions of one",
                              hint=_CHANGED_HINT)
        pin = FilePin.from_json(entry)
        if pin is None:
            raise SourceError(f"source.path: {f.display}: {which} holds no pin of it to compare with",
                              hint=_CHANGED_HINT)
        if pin.identity is not None and f.identity is not None and pin.identity.key() == f.identity.key():
            return False                          # the same file, not written since: not read again
        check = pin.check(f.path, always=True)
        if not check.same:
            raise SourceError(f"source.path: {f.display} changed since {which} read it ({check.compared()}; "
                              + "; ".join(map(str, check.mismatches[:3])) + ")", hint=_CHANGED_HINT)
        self.notes.append(f"append: {f.display}: {check.compared()}: the same bytes as {which} read, not read again")
        return False


    def _renamed(self, f, held: dict) -> bool:
        """f is the file (device, inode, size) a version read under another name, its identity
        changed since (a rename moves the ctime): not read again when it holds the same bytes,
        refused when it does not (its old bytes are in that version)."""
        which = f"dataset version {held.get(VERSION_KEY, '?')}"
        check = FilePin.from_json(held).check(f.path, always=True)
        if not check.same:
            raise SourceError(f"source.path: {f.display} is the file {which} read as {held['path']} (the same file, "
                              f"renamed or linked), changed since ({check.compared()}; "
                              + "; ".join(map(str, check.mismatches[:3])) + ")", hint=_CHANGED_HINT)
        self.notes.append(f"append: {f.display} is {held['path']} (the same file, renamed; {check.compared()}: the "
                          f"same bytes), held by {which}: not read again")
        return False


_CHANGED_HINT = ("name the changed data as a new file, restore the old one, or rewrite the dataset with "
                 "sink.mode: overwrite")


def check_base(out, manifest: dict | None, digests: tuple[str, ...], schema: dict) -> None:
    """Refusals before an append reads anything: the dataset is an append dataset of this
    pipeline (its fingerprint, one of `digests`, leaves out source.path, sink.mode, sink.path and
    source.blocksize) with this output schema."""
    if manifest is None:
        return
    if not version_of(manifest):
        raise OutputError(f"sink.path: {out} holds a dataset written in another sink.mode; sink.mode: append adds "
                          "versions to a dataset that append wrote",
                          hint="choose another sink.path, or rewrite it once with sink.mode: append into an empty "
                               "folder")
    if (manifest.get("fingerprint") or {}).get("pipeline") not in digests:
        raise OutputError(f"sink.mode append: the pipeline file changed since dataset version {version_of(manifest)} "
                          f"of {out} (only source.path, sink.mode and sink.path may change between versions, and "
                          "source.blocksize where the version's fingerprint leaves it out)",
                          hint="undo the change, or write the changed pipeline's output to another sink.path "
                               "(or rewrite this one with sink.mode: overwrite); a version whose fingerprint holds "
                               "its source.blocksize takes that blocksize (or none, where its file set none)")
    before = [(c.get("name"), c.get("type")) for c in manifest.get("schema") or [] if isinstance(c, dict)]
    if before != list(schema.items()):
        now = dict(schema)
        diff = [f"{n}: {t} -> {now.get(n, '(none)')}" for n, t in before if now.get(n) != t]
        diff += [f"{n}: (none) -> {t}" for n, t in schema.items() if n not in dict(before)]
        raise OutputError(f"sink.mode append: the new inputs give another output schema than dataset version "
                          f"{version_of(manifest)} ({'; '.join(diff[:5]) or 'another column order'})",
                          hint="declare the columns' types in `columns` so every version has the same schema")


# -- after the run: the version's manifest -----------------------------------------------------

def _sum_counts(a: dict, b: dict) -> dict:
    return {k: a.get(k, 0) + b.get(k, 0) for k in ("rows_in", "rows_out", "filtered", "deduplicated", "quarantined")}


def _sum_stages(a: list[dict], b: list[dict]) -> list[dict]:
    keys = ("rows_in", "rows_out", "filtered", "deduplicated", "quarantined")
    if len(a) != len(b):
        return b
    return [{**y, **{k: x.get(k, 0) + y.get(k, 0) for k in keys}} for x, y in zip(a, b)]


def merge(previous: dict | None, manifest: dict, previous_raw: bytes | None = None) -> dict:
    """The manifest of the next version: this run's (its new shards, quarantine, inputs and
    counts) joined to the previous version's. Its own entry in `versions` has no sha256: its bytes
    are those of `_manifest.json` (whose sha256 `_SUCCESS` holds). previous_raw: the previous
    version's bytes as they lie in its `_versions/` copy (its sha256 is recorded, not that of
    the parsed manifest written out again)."""
    version = version_of(previous) + 1
    own_shards = list(manifest["shards"])
    manifest[VERSION_KEY] = version
    manifest["version_counts"] = dict(manifest["counts"])
    manifest["version_stages"] = [dict(s) for s in manifest["stages"]]
    manifest["inputs"] = [{**i, VERSION_KEY: version} for i in manifest["inputs"]]
    entries = []
    if previous is not None:
        manifest["counts"] = _sum_counts(previous.get("counts") or {}, manifest["counts"])
        manifest["stages"] = _sum_stages(previous.get("stages") or [], manifest["stages"])
        manifest["shards"] = list(previous.get("shards") or []) + own_shards
        manifest["quarantine"] = list(previous.get("quarantine") or []) + list(manifest["quarantine"])
        manifest["inputs"] = list(previous.get("inputs") or []) + manifest["inputs"]
        entries = [dict(e) for e in previous.get("versions") or []]
        raw = previous_raw if previous_raw is not None else manifest_bytes(previous)
        entries[-1]["sha256"] = hashlib.sha256(raw).hexdigest()
        entries[-1]["bytes"] = len(raw)
    entries.append({"version": version, "path": version_file(version), "sha256": None, "bytes": None,
                    "created_at": (manifest.get("run") or {}).get("created_at"),
                    "counts": manifest["version_counts"], "shards": [s["path"] for s in own_shards]})
    manifest["versions"] = entries
    return manifest


def stage_files(data: Path, manifest: dict) -> None:
    """Write the version's files into the run's data folder, to be moved in with its shards: the
    copy of its manifest under _versions/ and of its run report. Called once the manifest is final."""
    version = manifest[VERSION_KEY]
    entry = manifest["versions"][-1]
    report = data / "_report.json"
    if report.is_file() and any(r.get("path") == "_report.json" for r in manifest.get("reports") or []):
        raw = report.read_bytes()
        (data / VERSIONS).mkdir(parents=True, exist_ok=True)
        (data / version_report(version)).write_bytes(raw)
        entry["report"] = {"path": version_report(version), "bytes": len(raw),
                           "sha256": hashlib.sha256(raw).hexdigest()}
    (data / VERSIONS).mkdir(parents=True, exist_ok=True)
    (data / version_file(version)).write_bytes(manifest_bytes(manifest))


def own_entry(manifest: dict) -> dict | None:
    """The latest version's own entry in a manifest's `versions` (no sha256: its copy under
    _versions/ holds `_manifest.json`'s bytes), when it is the last one and names its copy."""
    entries = manifest.get("versions")
    version = version_of(manifest)
    if not version or not isinstance(entries, list) or not entries or not isinstance(entries[-1], dict):
        return None
    entry = entries[-1]
    if entry.get("sha256") is None and entry.get("version") == version and entry.get("path") == version_file(version):
        return entry
    return None


def restore_latest_copy(read, write, log=lambda *_: None) -> str | None:
    """verify --repair: the latest version's copy, _versions/NNNNN.json, written again from
    `_manifest.json` when it does not hold its bytes (truncated, edited, missing) and `_SUCCESS`
    holds the sha256 of `_manifest.json` (the bytes the commit wrote to both). read(rel): bytes or
    None when missing, raising OSError or GpuetlError where a link or a folder lies (left alone:
    verify names it); write(rel, data). The path written, or None."""
    try:
        raw = read(MANIFEST)
        if raw is None or read(SUCCESS) != success_bytes(raw):
            return None
        manifest = json.loads(raw)
        entry = own_entry(manifest) if isinstance(manifest, dict) else None
        if entry is None or read(entry["path"]) == raw:
            return None
    except (OSError, GpuetlError, ValueError, RecursionError):
        return None
    log(f"writing {entry['path']} (dataset version {entry['version']}'s manifest) again from {MANIFEST}, "
        f"which {SUCCESS} vouches for")
    write(entry["path"], raw)
    return entry["path"]


# -- reading a version back --------------------------------------------------------------------

def select_version(latest: dict, version: int | None, read, where: str) -> tuple[dict, bytes | None]:
    """(the manifest of dataset version `version`, its bytes) from the latest manifest; read(rel)
    gives a file's bytes (None when missing). The latest version is the latest manifest itself;
    an earlier one's file must hold the sha256 the latest lists."""
    if version is None or version == version_of(latest) or (version == 1 and not version_of(latest)):
        return latest, None
    entries = {e.get("version"): e for e in latest.get("versions") or [] if isinstance(e, dict)}
    if not isinstance(version, int) or version not in entries:
        have = sorted(v for v in entries if isinstance(v, int)) or [1]
        raise SpecError(f"{where}: no dataset version {version} (it has {_ranges(have)})")
    entry = entries[version]
    rel = entry.get("path")
    if unsafe_reason(rel) or not isinstance(entry.get("sha256"), str):
        raise DataError(f"{where}/{MANIFEST}: its entry of dataset version {version} is malformed")
    raw = read(rel)
    if raw is None:
        raise DataError(f"{where}/{rel}: missing; dataset version {version} cannot be read")
    if hashlib.sha256(raw).hexdigest() != entry["sha256"]:
        raise DataError(f"{where}/{rel}: does not hold the sha256 the latest manifest lists for dataset version "
                        f"{version} (edited?); run `gpuetl verify {where} --dataset-version {version}`")
    try:
        manifest = json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise DataError(f"{where}/{rel}: not valid JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get(VERSION_KEY) != version:
        raise DataError(f"{where}/{rel}: not the manifest of dataset version {version}")
    return manifest, raw


def _ranges(versions: list[int]) -> str:
    return f"version {versions[0]}" if len(versions) == 1 else f"versions {versions[0]}–{versions[-1]}"

