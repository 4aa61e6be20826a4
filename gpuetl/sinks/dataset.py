"""Reading a dataset back: what it holds (inspect) and whether it is intact (verify)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from ..errors import DataError, SpecError
from . import commit as commit_protocol
from .parquet import sha256_of


def read_manifest(out: str | Path) -> tuple[Path, dict]:
    out = Path(out)
    if not out.is_dir():
        raise SpecError(f"{out}: no such dataset folder")
    commit_protocol.recover(out)
    path = out / commit_protocol.MANIFEST
    if not path.exists():
        raise DataError(f"{out}: no {commit_protocol.MANIFEST}; this is not a complete gpuetl dataset "
                        f"({'a run may have been interrupted' if (out / commit_protocol.TMP).exists() else 'nothing was committed here'})")
    try:
        return out, json.loads(path.read_text())
    except ValueError as err:
        raise DataError(f"{path}: the manifest is not valid JSON ({err})") from None


@dataclass
class Problem:
    path: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


def verify_dataset(out: str | Path) -> tuple[dict, list[Problem]]:
    """Re-hash every shard and quarantine file against the manifest; list what is wrong."""
    out, manifest = read_manifest(out)
    problems: list[Problem] = []
    if not (out / commit_protocol.SUCCESS).exists():
        problems.append(Problem(commit_protocol.SUCCESS, "missing: the dataset was not committed completely"))
    listed = set()
    for entry in manifest.get("shards", []) + manifest.get("quarantine", []):
        rel = entry["path"]
        listed.add(rel)
        path = out / rel
        if not path.exists():
            problems.append(Problem(rel, "missing"))
            continue
        size = path.stat().st_size
        if size != entry["bytes"]:
            problems.append(Problem(rel, f"size {size} bytes, the manifest says {entry['bytes']}"))
            continue
        digest = sha256_of(str(path))
        if digest != entry["sha256"]:
            problems.append(Problem(rel, f"sha256 {digest[:12]}…, the manifest says {entry['sha256'][:12]}…"))
    for path in sorted(out.rglob("*.parquet")):
        rel = str(path.relative_to(out))
        if rel not in listed and not rel.startswith(commit_protocol.TMP):
            problems.append(Problem(rel, "not in the manifest (a stray file readers would pick up)"))
    return manifest, problems


def inspect_dataset(out: str | Path, sample_rows: int = 3) -> dict:
    out, manifest = read_manifest(out)
    splits: dict[str, dict] = {}
    for shard in manifest.get("shards", []):
        s = splits.setdefault(shard["split"] or "(no split)", {"shards": 0, "rows": 0, "bytes": 0})
        s["shards"] += 1
        s["rows"] += shard["rows"]
        s["bytes"] += shard["bytes"]
    sample = []
    for shard in manifest.get("shards", []):
        if shard["rows"]:
            table = pq.ParquetFile(out / shard["path"]).read_row_group(0).slice(0, sample_rows)
            sample = table.to_pylist()
            break
    return {"path": str(out), "complete": (out / commit_protocol.SUCCESS).exists(), "manifest": manifest,
            "splits": splits, "sample": sample}
