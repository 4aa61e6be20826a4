"""The commit protocol: a killed run leaves nothing visible, sink.mode is honoured, a half-done
commit is rolled forward by the next command that opens the dataset."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

import gpuetl
from gpuetl import OutputError, samples
from gpuetl.cli import main
from gpuetl.sinks import commit

PIPELINE = """\
version: 1
name: commit-test
source:
  type: text
  path: {source}
  blocksize: {blocksize}
parse:
  preset: apache_combined
columns:
  status: int16
shard:
  count: 2
sink:
  path: out
"""


def spec_dict(shard=None, **sink) -> dict:
    return {"version": 1, "name": "commit-test", "source": {"type": "text", "path": "small.log"},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
            "shard": shard if shard is not None else {"count": 2}, "sink": {"path": "out", **sink}}


def run_dict(base: Path, shard=None, **sink):
    return gpuetl.Pipeline.from_dict(spec_dict(shard, **sink), base_dir=base).run(backend="cpu", scheduler="sync")


def visible(out: Path) -> list[str]:
    """Every file and folder a reader could see: all but the hidden temporary folder."""
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.relative_to(out).parts[0] != commit.TMP)


def parquet_files(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet") if not str(p.relative_to(out)).startswith("_"))


@pytest.fixture
def base(tmp_path) -> Path:
    samples.write_access_logs(tmp_path / "small.log", lines=1000, bad_every=50)
    return tmp_path


# --------------------------------------------------------------------------- a run killed mid-way


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    """A `gpuetl run` killed with SIGKILL while it spills partitions; returns the folder."""
    folder = tmp_path_factory.mktemp("killed")
    samples.write_access_logs(folder / "big.log", lines=100_000)           # 20 MB, ~80 partitions
    samples.write_access_logs(folder / "small.log", lines=1000, bad_every=50)
    pipe = folder / "pipe.yaml"
    pipe.write_text(PIPELINE.format(source="big.log", blocksize="256KiB"))
    proc = subprocess.Popen([sys.executable, "-m", "gpuetl", "run", str(pipe), "--scheduler", "sync"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = folder / "out"
    deadline = time.monotonic() + 60
    try:
        while not list(out.glob(f"{commit.TMP}/*/spill")):
            assert proc.poll() is None, f"the run ended before it could be killed: {proc.communicate()}"
            assert time.monotonic() < deadline, "no spill folder after 60 s"
            time.sleep(0.01)
        time.sleep(0.2)                           # let it get some partitions written
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return folder


def test_killed_run_leaves_nothing_visible(killed):
    out = killed / "out"
    assert (out / commit.TMP).is_dir()                              # its leftovers are there, hidden
    assert list((out / commit.TMP).glob("*/spill/*/*.arrow"))      # ... and it was killed mid-map
    assert visible(out) == []
    assert not (out / commit.SUCCESS).exists()
    dataset = ds.dataset(out, format="parquet")
    assert dataset.files == []
    assert dataset.count_rows() == 0


def test_killed_run_verify_says_interrupted(killed, capsys):
    snapshot = killed / "snapshot"
    shutil.copytree(killed / "out", snapshot)
    assert main(["verify", str(snapshot)]) == 1
    err = capsys.readouterr().err
    assert "no _manifest.json" in err and "a run may have been interrupted" in err
    assert (snapshot / commit.TMP).is_dir()        # verify does not remove another run's temporary files


@pytest.mark.parametrize("mode", ["error", "overwrite"])
def test_rerun_after_kill_succeeds_and_cleans_up(killed, mode, capsys):
    """Only _tmp/ is there: nothing a reader sees, so even mode: error goes ahead (prepare() looks at
    visible files only) and the stale temporary folder is removed."""
    folder = killed / f"rerun-{mode}"
    folder.mkdir()
    shutil.copytree(killed / "out", folder / "out")
    shutil.copy(killed / "small.log", folder / "small.log")
    pipe = folder / "pipe.yaml"
    pipe.write_text(PIPELINE.format(source="small.log", blocksize="64KiB"))
    stale = [p.name for p in (folder / "out" / commit.TMP).iterdir() if p.is_dir()]   # not the lock file
    argv = ["run", str(pipe), "--scheduler", "sync"] + (["--set", f"sink.mode={mode}"] if mode != "error" else [])
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"removing the temporary files of an earlier run that did not finish: {stale[0]}" in err
    out = folder / "out"
    assert not (out / commit.TMP).exists()
    assert (out / commit.SUCCESS).exists()
    assert main(["verify", str(out)]) == 0


# --------------------------------------------------------------------------- sink.mode


def test_mode_error_refuses_complete_dataset(base, capsys):
    first = run_dict(base)
    before = {p: p.stat().st_mtime_ns for p in (base / "out").rglob("*")}
    pipe = base / "pipe.yaml"
    pipe.write_text(PIPELINE.format(source="small.log", blocksize="64KiB"))
    assert main(["run", str(pipe), "--scheduler", "sync"]) == 2
    err = capsys.readouterr().err
    assert "already holds a complete dataset" in err and "sink.mode=overwrite" in err
    assert {p: p.stat().st_mtime_ns for p in (base / "out").rglob("*")} == before
    with pytest.raises(OutputError, match="sink.mode: error"):
        run_dict(base)
    assert main(["verify", str(first.out_dir)]) == 0


def test_mode_error_refuses_foreign_files(base):
    (base / "out").mkdir()
    (base / "out" / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"holds 1 path gpuetl did not write \(notes.txt\)(?s:.*)move them"):
        run_dict(base)
    assert (base / "out" / "notes.txt").read_text() == "mine"


def test_mode_error_accepts_empty_folder(base):
    (base / "out").mkdir()
    assert run_dict(base).counts["rows_in"] == 1000


def test_overwrite_refuses_folder_gpuetl_did_not_write(base):
    (base / "out").mkdir()
    (base / "out" / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="did not write"):
        run_dict(base, mode="overwrite")
    assert (base / "out" / "notes.txt").read_text() == "mine"


def test_sink_path_is_a_file(base):
    (base / "out").write_text("x")
    with pytest.raises(OutputError, match="not a folder"):
        run_dict(base)


def test_overwrite_replaces_dataset_with_other_file_names(base):
    old = run_dict(base, shard={"count": 4, "splits": {"train": 0.75, "val": 0.25}})
    out = old.out_dir
    assert (out / "train").is_dir() and (out / "val").is_dir()
    new = run_dict(base, shard={"count": 3}, mode="overwrite")
    assert not (out / "train").exists() and not (out / "val").exists()
    assert parquet_files(out) == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert [s["path"] for s in new.manifest["shards"]] == parquet_files(out)
    assert json.loads((out / commit.MANIFEST).read_text())["run"]["id"] == new.manifest["run"]["id"]
    assert ds.dataset(out, format="parquet").count_rows() == new.counts["rows_out"]
    assert not (out / commit.TMP).exists()
    assert main(["verify", str(out)]) == 0


def test_overwrite_same_names_is_byte_identical(base):
    first = run_dict(base)
    second = run_dict(base, mode="overwrite")
    assert [s["sha256"] for s in first.shards] == [s["sha256"] for s in second.shards]


# --------------------------------------------------------------------------- an interrupted commit


def _failing_move(monkeypatch, after: int = 1, err=None):
    """Make the commit's moves into place fail after `after` of them (a crash or a full disk)."""
    real = commit._Tree.move_in
    moved = []

    def move_in(self, source, rel, replaceable):
        if len(moved) >= after:
            raise err or OSError(5, "simulated crash after the first move")
        moved.append(rel)
        return real(self, source, rel, replaceable)

    monkeypatch.setattr(commit._Tree, "move_in", move_in)
    return moved


def _half_committed(base: Path, monkeypatch) -> Path:
    """An old split dataset in base/out, then a new one's commit that stops after its first move."""
    old = run_dict(base, shard={"count": 2, "splits": {"train": 0.5, "val": 0.5}})
    new = run_dict(base, shard={"count": 3}, path="staged")
    out = old.out_dir
    with commit.OutputFolder(out) as folder:
        folder.survey("overwrite")
        run_tmp = folder.new_run(commit.new_run_id())
        for rel in [s["path"] for s in new.manifest["shards"] + new.manifest["quarantine"] + new.manifest["reports"]]:
            (run_tmp / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(new.out_dir / rel, run_tmp / "data" / rel)
        moved = _failing_move(monkeypatch)
        with pytest.raises(OutputError, match="simulated crash"):
            folder.commit(run_tmp, new.manifest)
        monkeypatch.undo()

    assert len(moved) == 1
    assert (run_tmp / commit.JOURNAL).exists()
    assert not (out / commit.SUCCESS).exists()
    assert not (out / "train").exists()                  # the old dataset is already gone
    return out


def _assert_rolled_forward(out: Path) -> None:
    manifest = json.loads((out / commit.MANIFEST).read_text())
    assert (out / commit.SUCCESS).exists()
    assert not (out / commit.TMP).exists()
    assert parquet_files(out) == [s["path"] for s in manifest["shards"]] == [
        "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert ds.dataset(out, format="parquet").count_rows() == manifest["counts"]["rows_out"]


@pytest.mark.parametrize("command", ["verify --repair", "run"])
def test_interrupted_commit_is_rolled_forward(base, monkeypatch, command, capsys):
    out = _half_committed(base, monkeypatch)
    if command == "run":
        pipe = base / "pipe.yaml"
        pipe.write_text(PIPELINE.format(source="small.log", blocksize="64KiB"))
        # The roll-forward happens first; the dataset it finishes is complete, so mode: error refuses.
        assert main(["run", str(pipe), "--scheduler", "sync"]) == 2
        assert "already holds a complete dataset" in capsys.readouterr().err
    else:
        assert main(["verify", "--repair", str(out)]) == 0
        assert "finished the interrupted commit" in capsys.readouterr().out
    _assert_rolled_forward(out)
    assert main(["verify", str(out)]) == 0


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_verify_and_inspect_only_read_an_interrupted_commit(base, monkeypatch, command, capsys):
    out = _half_committed(base, monkeypatch)
    before = sorted((str(p), p.stat().st_mtime_ns) for p in out.rglob("*"))
    assert main([command, str(out)]) == (1 if command == "verify" else 0)
    captured = capsys.readouterr()
    assert "verify --repair" in captured.out + captured.err
    if command == "inspect":
        assert "INCOMPLETE" in captured.out
    assert sorted((str(p), p.stat().st_mtime_ns) for p in out.rglob("*")) == before


def test_recover_is_idempotent(base, monkeypatch):
    out = _half_committed(base, monkeypatch)
    with commit.OutputFolder(out) as folder:
        assert len(folder.recover()) == 1
    with commit.OutputFolder(out) as folder:
        assert folder.recover() == []
    _assert_rolled_forward(out)


def test_failed_commit_in_a_run_can_be_recovered(base, monkeypatch, capsys):
    run_dict(base, shard={"count": 2, "splits": {"train": 0.5, "val": 0.5}})
    _failing_move(monkeypatch, err=OSError(28, "No space left on device", str(base / "out" / "part-00001.parquet")))
    with pytest.raises(OutputError, match="failed part-way") as info:
        run_dict(base, shard={"count": 3}, mode="overwrite")
    assert f"gpuetl verify --repair {base / 'out'}" in str(info.value)
    assert "No space left on device" in str(info.value) and "part-00001.parquet" in str(info.value)
    assert info.value.exit_code == 1
    assert not (base / "out" / commit.SUCCESS).exists()
    monkeypatch.undo()
    assert main(["verify", str(base / "out")]) == 1           # verify alone only reads
    assert main(["verify", "--repair", str(base / "out")]) == 0


def test_full_disk_before_the_journal_changes_nothing(base, monkeypatch):
    first = run_dict(base)
    before = {str(p): p.read_bytes() for p in first.out_dir.rglob("*") if p.is_file()}
    real = commit._Tree.write_file

    def write_file(self, rel, data, **kw):
        if rel == commit.JOURNAL:
            raise OSError(28, "No space left on device", str(self.path / rel))
        return real(self, rel, data, **kw)

    monkeypatch.setattr(commit._Tree, "write_file", write_file)
    with pytest.raises(OutputError, match="writing the commit journal .*_commit.json failed .*nothing in .* was "
                                          "changed") as info:
        run_dict(base, mode="overwrite")
    assert info.value.exit_code == 1
    monkeypatch.undo()
    assert {str(p): p.read_bytes() for p in first.out_dir.rglob("*") if p.is_file()} == before
    assert main(["verify", str(first.out_dir)]) == 0


def test_sink_path_may_be_a_link_to_a_folder(base):
    """The dataset folder itself may be reached through a link (a mount, /tmp on macOS); nothing
    inside it is followed."""
    (base / "real").mkdir()
    os.symlink(base / "real", base / "out")
    result = run_dict(base)
    assert (base / "real" / commit.SUCCESS).exists()
    assert main(["verify", str(result.out_dir)]) == 0
    again = run_dict(base, mode="overwrite")
    assert again.counts == result.counts


def test_commit_moves_what_the_manifest_lists_not_leftovers(base):
    """A killed writer's partial file in the run's data/ (a resumed run) stays out of the dataset."""
    staged = run_dict(base, path="staged")
    out = base / "out"
    with commit.OutputFolder(out) as folder:
        folder.survey("error")
        run_tmp = folder.new_run(commit.new_run_id())
        for entry in staged.manifest["shards"] + staged.manifest["quarantine"] + staged.manifest["reports"]:
            (run_tmp / "data" / entry["path"]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(staged.out_dir / entry["path"], run_tmp / "data" / entry["path"])
        (run_tmp / "data" / "part-00001.parquet.partial").write_bytes(b"half a shard")
        folder.commit(run_tmp, staged.manifest)
    assert not (out / "part-00001.parquet.partial").exists()
    assert not (out / commit.TMP).exists()
    assert main(["verify", str(out)]) == 0


def test_commit_journal_bytes_read_back_as_the_journal():
    """The journal is compact JSON; what `validate_journal` reads back is the journal itself,
    names outside ASCII and odd characters included."""
    journal = {"format": commit.JOURNAL_FORMAT, "run": "r1", "previous": ["part-0.parquet"],
               "moves": ["train/données 1.parquet", 'a"b\\c.parquet'],
               "manifest": {"inputs": [{"path": "ü/x.jpg", "bytes": 3, "mtime_ns": 1}], "counts": {"rows_in": 1}}}
    raw = commit.journal_bytes(journal)
    assert json.loads(raw) == journal
    assert b"\n" not in raw and b", " not in raw


def test_the_inputs_real_paths_match_realpath_with_links_anywhere(tmp_path):
    """Each folder is resolved once (a million images sit in a few thousand folders), with the
    answer os.path.realpath gives: links as folders, as files, chained, `..`, relative paths;
    and an input reached through a link into the sink is still refused."""
    real = tmp_path / "real"
    (real / "a").mkdir(parents=True)
    (real / "a" / "1.jpg").write_bytes(b"x")
    (real / "a" / "2.jpg").write_bytes(b"y")
    (tmp_path / "via").symlink_to(real / "a")                      # a folder link
    (tmp_path / "via2").symlink_to(tmp_path / "via")               # a chain of them
    (real / "a" / "link.jpg").symlink_to(real / "a" / "2.jpg")     # a file link
    (real / "b").mkdir()
    paths = [str(real / "a" / "1.jpg"), str(tmp_path / "via" / "1.jpg"), str(tmp_path / "via2" / "2.jpg"),
             str(real / "a" / "link.jpg"), str(real / "b" / ".." / "a" / "1.jpg"), os.path.relpath(real / "a" / "2.jpg"),
             str(tmp_path / "gone" / "x.jpg")]
    assert list(commit._real_paths(paths)) == [os.path.realpath(p) for p in paths]

    sink = tmp_path / "out"
    sink.mkdir()
    (sink / "old.jpg").write_bytes(b"z")
    (tmp_path / "into_sink").symlink_to(sink)
    with pytest.raises(OutputError, match="holds the input file"):
        commit.check_apart_from_inputs(sink, [str(tmp_path / "into_sink" / "old.jpg")], [], tmp_path)
    (real / "a" / "to_sink.jpg").symlink_to(sink / "old.jpg")
    with pytest.raises(OutputError, match="holds the input file"):
        commit.check_apart_from_inputs(sink, [str(real / "a" / "to_sink.jpg")], [], tmp_path)
