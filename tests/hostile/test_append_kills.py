"""A killed append (sink.mode: append) under the commit protocol: the commit of version 3 is
killed after each step that changes the dataset folder in turn (tests/hostile/test_commit_kills.py's
instrumented layer). After every kill a reader that follows docs/consuming.md sees version 2 or
version 3 whole, or is told the dataset is incomplete; without a journal, version 2 is intact; and
the next run completes version 3, the same shards a clean append writes. With sink.delta_log the
Delta log never holds a version `_SUCCESS` does not cover once that run is done."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import gpuetl
from gpuetl.cli import main
from gpuetl.samples import write_access_logs
from gpuetl.sinks import commit

from .test_commit_kills import Killed, Steps, as_dead_process, pending, read_as_documented


def spec(out: Path, delta: bool) -> dict:
    return {"version": 1, "name": "days", "source": {"type": "text", "path": "in/*.log", "blocksize": "32KiB"},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
            "shard": {"count": 2, "splits": {"train": 0.8, "val": 0.2}},
            "sink": {"path": str(out), "mode": "append", "row_group_rows": 500, "delta_log": delta}}


def append(base: Path, out: Path, delta: bool = False):
    return gpuetl.Pipeline.from_dict(spec(out, delta), base_dir=base).run(backend="cpu", scheduler="sync")


def build(base: Path, delta: bool) -> tuple[Path, Path]:
    """base/in: days 1 and 2, appended into base/v2 (version 2), then day 3 → (base/v2, base/v3:
    a clean append of day 3 to a copy of v2)."""
    (base / "in").mkdir()
    for n in (1, 2):
        write_access_logs(base / "in" / f"day{n}.log", lines=300, seed=n, bad_every=50)
        append(base, base / "v2", delta)
    write_access_logs(base / "in" / "day3.log", lines=300, seed=3, bad_every=50)
    shutil.copytree(base / "v2", base / "v3")
    assert append(base, base / "v3", delta).manifest["dataset_version"] == 3
    return base / "v2", base / "v3"


def killed_append(base: Path, out: Path, delta: bool, steps: Steps, monkeypatch, kill_after: int | None) -> int:
    """Append day 3 to out as a process that dies after `kill_after` steps of its commit (None:
    never) → the steps the commit made."""
    real = commit.OutputFolder.commit

    def commit_then_die(self, run_tmp, manifest):
        steps.count, steps.log, steps.kill_after = 0, [], (1 << 60) if kill_after is None else kill_after
        return real(self, run_tmp, manifest)

    with monkeypatch.context() as m, as_dead_process(monkeypatch):
        m.setattr(commit.OutputFolder, "commit", commit_then_die)
        with steps.armed(None):        # counted from the commit on; before it, nothing is killed
            try:
                append(base, out, delta)
            except Killed:
                pass
            made = steps.count
    return made


def shard_digests(out: Path) -> list[tuple[str, str]]:
    manifest = json.loads((out / "_manifest.json").read_bytes())
    return [(s["path"], s["sha256"]) for s in manifest["shards"] + manifest["quarantine"]]


def seen_data(out: Path):
    """What a reader per docs/consuming.md sees, less the run report's files (each run writes its own)."""
    seen = read_as_documented(out)
    return seen if seen == "incomplete" else {k: v for k, v in seen.items() if not k.startswith("_report.")}


def check_after_kill(base: Path, out: Path, v2: Path, v3: Path, delta: bool, capsys) -> str:
    seen = seen_data(out)
    v2_files = seen_data(v2)
    v3_files = seen_data(v3)
    if seen != "incomplete":
        assert seen in (v2_files, v3_files), "a reader saw files of neither version"
    if not pending(out):
        assert seen == v2_files or seen == v3_files, "no journal to finish, and not a whole version"
    outcome = "v2" if seen == v2_files else "v3" if seen == v3_files else "incomplete"
    again = append(base, out, delta)         # the next run: finishes the commit, then appends what is new
    manifest = json.loads((out / "_manifest.json").read_bytes())
    assert manifest["dataset_version"] == 3 and again.manifest["dataset_version"] == 3
    assert shard_digests(out) == shard_digests(v3)
    capsys.readouterr()
    for version in (None, 1, 2, 3):
        args = ["verify", str(out)] + (["--dataset-version", str(version)] if version else [])
        assert main(args) == 0, capsys.readouterr()
    if delta:
        from deltalake import DeltaTable

        assert DeltaTable(str(out)).version() == 2
        for k, entry in enumerate(manifest["versions"]):
            rows = sum(s["rows"] for s in manifest["shards"] if s["path"] in
                       {p for e in manifest["versions"][:k + 1] for p in e["shards"]})
            assert DeltaTable(str(out), version=k).to_pyarrow_table().num_rows == rows
    return outcome


@pytest.fixture(scope="module", params=[False, True], ids=["parquet", "delta"])
def built(request, tmp_path_factory):
    """Version 2, a clean append of version 3, and the steps that clean commit made, once per
    module for each kind (the tests copy them) → (base, v2, v3, delta, the commit's steps)."""
    delta = request.param
    if delta:
        pytest.importorskip("deltalake")
    base = tmp_path_factory.mktemp("append-kills")
    v2, v3 = build(base, delta)
    with pytest.MonkeyPatch.context() as monkeypatch:
        steps = Steps(monkeypatch)
        clean = base / "clean"
        shutil.copytree(v2, clean)
        total = killed_append(base, clean, delta, steps, monkeypatch, None)
        log = list(steps.log)
    assert shard_digests(clean) == shard_digests(v3) and total == len(log) > 10, log
    return base, v2, v3, delta, log


def test_an_append_killed_in_its_commit_leaves_version_2_or_a_commit_the_next_run_finishes(
        built, tmp_path, monkeypatch, capsys, surroundings):
    base, v2, v3, delta, log = built
    steps = Steps(monkeypatch)
    out = tmp_path / "case"
    shutil.copytree(v2, out)
    before = seen_data(out)
    with surroundings(base):           # the inputs and the versions the test compares with
        journal_written = next(i for i, step in enumerate(log) if commit.JOURNAL in step and "replace" in step)
        assert killed_append(base, out, delta, steps, monkeypatch, journal_written - 1) == journal_written - 1
        assert not pending(out) and seen_data(out) == before, "killed before its journal: version 2 intact"
        assert killed_append(base, out, delta, steps, monkeypatch, journal_written + 3) == journal_written + 3
        assert pending(out), "killed after the journal: a commit to finish"
        assert check_after_kill(base, out, v2, v3, delta, capsys) == "incomplete"


@pytest.mark.slow
def test_an_append_killed_after_any_step_of_its_commit_is_completed_by_the_next_run(
        built, tmp_path, monkeypatch, capsys, surroundings):
    base, v2, v3, delta, log = built
    steps = Steps(monkeypatch)
    outcomes = []
    with surroundings(base):
        for k in range(len(log)):
            out = tmp_path / f"k{k:03d}"
            shutil.copytree(v2, out)
            assert killed_append(base, out, delta, steps, monkeypatch, k) == k
            outcomes.append(check_after_kill(base, out, v2, v3, delta, capsys))
    assert outcomes[0] == "v2" and "incomplete" in outcomes, outcomes
