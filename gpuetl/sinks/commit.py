"""The commit protocol (DESIGN.md, "Output commit").

Shards are written under <out>/_tmp/<run-id>/data/. When all are written, a journal of the moves
is written first; then old output is removed, new files are renamed into place, _manifest.json
is written, and _SUCCESS last. A commit killed half-way is rolled forward by the next command
that opens the dataset, from the journal. Names starting with '_' are hidden from pyarrow,
Spark's and pyarrow.dataset's discovery, so _tmp/ and _quarantine/ are not read as data; glob
readers (DuckDB's read_parquet('out/**/*.parquet'), polars) must use 'out/*.parquet' or
'out/[!_]*/*.parquet' instead (docs/consuming.md).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path

from ..errors import OutputError

SUCCESS = "_SUCCESS"
MANIFEST = "_manifest.json"
TMP = "_tmp"
JOURNAL = "_commit.json"
OWNER = "_owner.json"


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def dataset_files(out: Path) -> list[Path]:
    """What a reader would see: everything but the hidden temporary folder."""
    if not out.exists():
        return []
    return [p for p in out.iterdir() if p.name != TMP]


def prepare(out: Path, mode: str) -> None:
    """Refuse or accept the output folder before any work is done."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"sink.path: {out} exists and is not a folder")
    recover(out)
    existing = dataset_files(out)
    if existing and mode == "error":
        what = "a complete dataset" if (out / SUCCESS).exists() else "files (an incomplete or foreign dataset)"
        raise OutputError(f"sink.path: {out} already holds {what}; refusing to touch it (sink.mode: error)",
                          hint="use --set sink.mode=overwrite to replace it, or choose another sink.path")
    if existing and mode == "overwrite" and not (out / MANIFEST).exists() and not (out / SUCCESS).exists():
        unknown = [p.name for p in existing if not (p.is_dir() or p.suffix == ".parquet")]
        if unknown:
            raise OutputError(f"sink.path: {out} holds files gpuetl did not write ({', '.join(sorted(unknown)[:5])}); "
                              "refusing to overwrite them", hint="choose an empty or gpuetl-made folder")


def tmp_dir(out: Path, run_id: str) -> Path:
    path = out / TMP / run_id
    path.mkdir(parents=True, exist_ok=False)
    claim(path)
    return path


def claim(run_tmp: Path) -> None:
    """Mark a run's folder as this process's (a new run, or resume taking over an interrupted one)."""
    (run_tmp / OWNER).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))


def is_running(run_tmp: Path) -> bool:
    """Whether the run that owns this temporary folder is still alive on this host."""
    try:
        owner = json.loads((run_tmp / OWNER).read_text())
    except (OSError, ValueError):
        return False
    if owner.get("host") != socket.gethostname():
        return False
    try:
        pid = int(owner["pid"])
        os.kill(pid, 0)
    except (OSError, ValueError, KeyError):
        return False
    try:                               # a killed process can linger as a zombie until reaped
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def commit(out: Path, run_tmp: Path, manifest: dict) -> None:
    data = run_tmp / "data"
    moves = sorted(str(p.relative_to(data)) for p in data.rglob("*") if p.is_file())
    journal = {"run": run_tmp.name, "moves": moves, "manifest": manifest}
    _write_json(run_tmp / JOURNAL, journal)
    _roll_forward(out, run_tmp, journal)


def recover(out: Path) -> list[str]:
    """Finish commits that were interrupted; drop temporary folders of runs that never committed."""
    finished = []
    root = out / TMP
    if not root.is_dir():
        return finished
    for run_tmp in sorted(root.iterdir()):
        journal_path = run_tmp / JOURNAL
        if journal_path.exists():
            try:
                journal = json.loads(journal_path.read_text())
            except (OSError, ValueError):
                journal = None
            if journal:
                _roll_forward(out, run_tmp, journal)
                finished.append(run_tmp.name)
                continue
    return finished


def abandon(run_tmp: Path) -> None:
    shutil.rmtree(run_tmp, ignore_errors=True)
    _remove_if_empty(run_tmp.parent)


def stale_runs(out: Path) -> list[Path]:
    root = out / TMP
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def _roll_forward(out: Path, run_tmp: Path, journal: dict) -> None:
    (out / SUCCESS).unlink(missing_ok=True)
    new = set(journal["moves"])
    for top in dataset_files(out):            # remove what the previous dataset had and this one has not
        for old in ([top] if top.is_file() else sorted(top.rglob("*"), reverse=True)):
            if old.is_file() and str(old.relative_to(out)) not in new:
                old.unlink()
            elif old.is_dir() and not any(old.iterdir()):
                old.rmdir()
        if top.is_dir() and not any(top.iterdir()):
            top.rmdir()
    data = run_tmp / "data"
    for rel in journal["moves"]:
        src, dst = data / rel, out / rel
        if src.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
    _write_json(out / MANIFEST, journal["manifest"])
    (out / SUCCESS).write_text("")
    shutil.rmtree(run_tmp, ignore_errors=True)
    _remove_if_empty(out / TMP)


def _remove_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _write_json(path: Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
