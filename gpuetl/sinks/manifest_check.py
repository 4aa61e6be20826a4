"""What verify checks wherever a dataset lies (a local folder: sinks/dataset.py; an object store:
sinks/objectstore.py): the manifest well formed and consistent with itself, and each file it
lists present, of its size and sha256."""

from __future__ import annotations

from dataclasses import dataclass

from .commit import MANIFEST, SUCCESS


@dataclass
class Problem:
    path: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


def _consistency(manifest: dict) -> list[Problem]:
    """The manifest against itself: the accounting identity, per stage and overall; the shards'
    rows against rows_out; the quarantine files' rows against quarantined."""
    problems = []
    c = manifest.get("counts") or {}
    keys = ("rows_in", "rows_out", "filtered", "deduplicated", "quarantined")
    if not all(isinstance(c.get(k), int) for k in keys):
        return [Problem(MANIFEST, f"counts must hold the integers {', '.join(keys)}")]
    if c["rows_in"] != c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]:
        problems.append(Problem(MANIFEST, f"counts do not add up: rows_in {c['rows_in']} != rows_out + filtered + "
                                          "deduplicated + quarantined"))
    shard_rows = sum(s["rows"] for s in manifest["shards"])
    if shard_rows != c["rows_out"]:
        problems.append(Problem(MANIFEST, f"the shards hold {shard_rows} rows, counts.rows_out says {c['rows_out']}"))
    quarantine_rows = sum(q["rows"] for q in manifest["quarantine"])
    if manifest.get("on_error") == "quarantine" and quarantine_rows != c["quarantined"]:
        problems.append(Problem(MANIFEST, f"the quarantine files hold {quarantine_rows} rows, counts.quarantined "
                                          f"says {c['quarantined']}"))
    stages = manifest.get("stages") or []
    remaining = c["rows_in"]
    for s in stages:
        try:
            dropped = s["filtered"] + s["deduplicated"] + s["quarantined"]
            if s["rows_in"] != remaining or s["rows_out"] != s["rows_in"] - dropped:
                problems.append(Problem(MANIFEST, f"stage {s['stage']} ({s['name']}) does not add up"))
                break
            remaining = s["rows_out"]
        except (KeyError, TypeError):
            problems.append(Problem(MANIFEST, "a stage entry lacks its counts"))
            break
    else:
        if stages and remaining != c["rows_out"]:
            problems.append(Problem(MANIFEST, f"the last stage leaves {remaining} rows, counts.rows_out says "
                                              f"{c['rows_out']}"))
    for kind in ("filtered", "deduplicated", "quarantined"):
        total = sum(s.get(kind, 0) for s in stages if isinstance(s, dict))
        if stages and total != c[kind]:
            problems.append(Problem(MANIFEST, f"the stages' {kind} add up to {total}, counts.{kind} says {c[kind]}"))
    return problems


def entries_problem(manifest: dict) -> str | None:
    for key in ("shards", "quarantine"):
        entries = manifest.get(key)
        if not isinstance(entries, list):
            return f"{key} must be a list"
        for e in entries:
            if not (isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("rows"), int)
                    and isinstance(e.get("bytes"), int) and isinstance(e.get("sha256"), str)):
                return f"an entry of {key} lacks path, rows, bytes or sha256"
    reports = manifest.get("reports", [])          # the run report's files (runtime/report.py)
    if not isinstance(reports, list) or not all(
            isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("bytes"), int)
            and isinstance(e.get("sha256"), str) for e in reports):
        return "reports must be a list of entries with path, bytes and sha256"
    return None


COUNT_KEYS = ("rows_in", "rows_out", "filtered", "deduplicated", "quarantined")


def shown_problem(manifest: dict) -> str | None:
    """What inspect shows, malformed (it said "internal error" on a manifest without counts, with
    counts: null or schema: 12): the entries, counts (and an append's version_counts) and schema."""
    malformed = entries_problem(manifest)
    if malformed:
        return malformed
    for key in ("counts", "version_counts"):
        c = manifest.get(key)
        if (key == "counts" or c is not None) and not (isinstance(c, dict) and all(
                isinstance(c.get(k), int) and not isinstance(c.get(k), bool) for k in COUNT_KEYS)):
            return f"{key} must hold the integers {', '.join(COUNT_KEYS)}"
    schema = manifest.get("schema")
    if not isinstance(schema, list) or not all(
            isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("type"), str) for f in schema):
        return "schema must be a list of fields with a name and a type"
    return None


def check_listed_files(manifest: dict, size_of, sha256_of, *, own_sha256: str | None = None,
                       reports: bool = True) -> tuple[set[str] | None, list[Problem]]:
    """What verify checks wherever the dataset lies: the manifest well formed and consistent, and
    each file it lists present, of its size and sha256. size_of(rel): the size, None when missing,
    or why it is not a file of the dataset; sha256_of(rel): its digest. Returns the paths the
    manifest accounts for (None when it is malformed) and the problems. An append dataset's
    version manifests are checked against the sha256 listed (the manifest's own entry against
    `own_sha256`, the digest of the manifest's bytes); its Delta log files are there. `reports`:
    check the run report's files (an earlier version's were replaced by later runs)."""
    malformed = entries_problem(manifest)
    if malformed:
        return None, [Problem(MANIFEST, malformed)]
    problems = _consistency(manifest)
    listed = {MANIFEST, SUCCESS}
    versions = manifest.get("versions") if isinstance(manifest.get("versions"), list) else []
    entries = manifest["shards"] + manifest["quarantine"] + (manifest.get("reports", []) if reports else [])
    for v in versions:
        if not isinstance(v, dict) or not isinstance(v.get("path"), str):
            return None, [Problem(MANIFEST, "an entry of versions lacks its path")]
        if v.get("sha256") is None:            # the manifest's own: the same bytes
            listed.add(v["path"])
            if own_sha256 is not None:
                size = size_of(v["path"])
                if size is None or isinstance(size, str):
                    problems.append(Problem(v["path"], size or "missing"))
                elif sha256_of(v["path"]) != own_sha256:
                    problems.append(Problem(v["path"], "does not hold the bytes of the manifest of its version "
                                                         "(`gpuetl verify --repair` writes it again from "
                                                         f"{MANIFEST} when {SUCCESS} vouches for that)"))
        else:
            entries.append(v)
        if isinstance(v.get("report"), dict):
            entries.append(v["report"])
    delta = manifest.get("delta_log") if isinstance(manifest.get("delta_log"), dict) else {}
    for entry in delta.get("files") or []:
        rel = entry.get("path") if isinstance(entry, dict) else None
        if isinstance(rel, str):
            listed.add(rel)
            size = size_of(rel)
            if size is None or isinstance(size, str):
                problems.append(Problem(rel, size or "missing (an entry of the Delta log)"))
    for entry in entries:
        rel = entry["path"]
        listed.add(rel)
        size = size_of(rel)
        if size is None:
            problems.append(Problem(rel, "missing"))
        elif isinstance(size, str):
            problems.append(Problem(rel, size))
        elif size != entry["bytes"]:
            problems.append(Problem(rel, f"size {size} bytes, the manifest says {entry['bytes']}"))
        elif (digest := sha256_of(rel)) != entry["sha256"]:
            problems.append(Problem(rel, f"sha256 {digest[:12]}…, the manifest says {entry['sha256'][:12]}…"))
    return listed, problems


def success_state(success: bytes | None, vouched: bool) -> str:
    """What _SUCCESS says of the manifest, in inspect's words."""
    if success is None:
        return "no _SUCCESS: the dataset was not committed completely"
    if not vouched:
        return ("_SUCCESS does not hold the manifest's sha256: the manifest was edited after the commit; run "
                "`gpuetl verify`")
    return "_SUCCESS holds the manifest's sha256"
