"""mode: resume — an interrupted run, re-run, ends with exactly the output of a clean run."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gpuetl import Pipeline
from gpuetl.errors import OutputError
from gpuetl.samples import write_access_logs


def pipeline(tmp_path, mode, shard=None, steps=None, blocksize="128KiB"):
    spec = {
        "version": 1, "name": "r",
        "source": {"type": "text", "path": "in/*.log", **({"blocksize": blocksize} if blocksize else {})},
        "parse": {"preset": "apache_combined"},
        "steps": steps or [],
        "shard": shard or {},
        "sink": {"path": "out", "mode": mode, "row_group_rows": 4096},
    }
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def write_inputs(tmp_path, lines):
    (tmp_path / "in").mkdir()
    for i in range(3):
        write_access_logs(tmp_path / "in" / f"{i}.log", lines=lines, seed=i, bad_every=1000)
    return tmp_path


@pytest.fixture
def inputs(tmp_path):
    """Three logs of ~0.8 MB, ~20 partitions: a run killed after one or two is far from done."""
    return write_inputs(tmp_path, 4_000)


def shards_of(out: Path):
    manifest = json.loads((out / "_manifest.json").read_text())
    return [(s["path"], s["rows"], s["sha256"]) for s in manifest["shards"]], manifest["counts"]


def kill_during_run(tmp_path, file: Path, stop_when):
    proc = subprocess.Popen([sys.executable, "-m", "gpuetl", "run", str(file), "--scheduler", "sync"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None and not stop_when():
        time.sleep(0.005)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def maps_done(tmp_path, n):
    return lambda: len(list((tmp_path / "out" / "_tmp").glob("*/maps/p*.json"))) >= n


@pytest.mark.slow
@pytest.mark.parametrize("shard, point", [
    ({}, 1),                                             # in-order stream, killed after one partition
    ({"count": 3, "shuffle": True, "seed": 5}, 2),       # ranged shards, killed mid-map
    ({"count": 3, "key": ["ip"]}, 100),                  # killed during the shard writes (or after)
])
def test_resume_after_sigkill_equals_a_clean_run(inputs, shard, point):
    tmp_path = inputs
    clean = pipeline(tmp_path, "overwrite", shard)
    Pipeline.from_file(clean).run(backend="cpu", scheduler="sync")
    expected = shards_of(tmp_path / "out")
    (tmp_path / "out" / "_SUCCESS").unlink()
    for p in (tmp_path / "out").iterdir():
        if p.is_file():
            p.unlink()
    import shutil
    shutil.rmtree(tmp_path / "out")

    file = pipeline(tmp_path, "resume", shard)
    stop = maps_done(tmp_path, point) if point < 100 else (lambda: any((tmp_path / "out" / "_tmp").glob("*/shards/*.json")))
    kill_during_run(tmp_path, file, stop)
    assert not (tmp_path / "out" / "_SUCCESS").exists() or shards_of(tmp_path / "out") == expected
    logs = []
    result = Pipeline.from_file(file).run(backend="cpu", scheduler="sync", log=logs.append)
    assert shards_of(tmp_path / "out") == expected
    assert result.counts == expected[1]
    assert not (tmp_path / "out" / "_tmp").exists()
    if point < 100:
        assert any("already done, skipped" in line for line in logs), logs


def test_resume_on_a_complete_dataset_does_nothing(inputs):
    file = pipeline(inputs, "resume")
    first = Pipeline.from_file(file).run(backend="cpu", scheduler="sync")
    logs = []
    again = Pipeline.from_file(file).run(backend="cpu", scheduler="sync", log=logs.append)
    assert again.counts == first.counts and "nothing to do" in logs[0]


def test_resume_refuses_changed_inputs(inputs):
    file = pipeline(inputs, "resume")
    kill_during_run(inputs, file, maps_done(inputs, 1))
    with open(inputs / "in" / "1.log", "a") as fh:
        fh.write('1.2.3.4 - - [10/Oct/2026:13:55:36 -0700] "GET / HTTP/1.1" 200 1 "-" "-"\n')
    with pytest.raises(OutputError, match=r"(?s)inputs changed.*1\.log: size"):
        Pipeline.from_file(file).run(backend="cpu", scheduler="sync")
    overwrite = Pipeline.from_file(file, ["sink.mode=overwrite"]).run(backend="cpu", scheduler="sync")
    assert overwrite.counts["rows_in"] == 12_001


def test_resume_refuses_a_complete_dataset_of_other_inputs(inputs):
    file = pipeline(inputs, "resume")
    Pipeline.from_file(file).run(backend="cpu", scheduler="sync")
    write_access_logs(inputs / "in" / "3.log", lines=10, seed=9)
    with pytest.raises(OutputError, match="complete dataset of other inputs"):
        Pipeline.from_file(file).run(backend="cpu", scheduler="sync")


def test_resume_on_an_append_dataset_points_to_append_not_overwrite(tmp_path):
    """resume on an append dataset (what verify once advised after a killed append): its hint was
    sink.mode: overwrite, which drops every version; it names sink.mode: append. With no new
    input it does nothing (the append fingerprint, not the resume one, is compared)."""
    write_inputs(tmp_path, 300)
    Pipeline.from_file(pipeline(tmp_path, "append")).run(backend="cpu", scheduler="sync")
    resume = pipeline(tmp_path, "resume")
    logs = []
    Pipeline.from_file(resume).run(backend="cpu", scheduler="sync", log=logs.append)
    assert "nothing to do" in logs[0]
    write_access_logs(tmp_path / "in" / "3.log", lines=10, seed=9)
    with pytest.raises(OutputError, match=r"(?s)other inputs \(dataset version 1 of an append dataset\).*3\.log: "
                                          r"new input") as err:
        Pipeline.from_file(resume).run(backend="cpu", scheduler="sync")
    assert "sink.mode: append" in err.value.hint and "would replace every version" in err.value.hint
    (tmp_path / "in" / "3.log").unlink()
    with pytest.raises(OutputError, match=r"another pipeline file \(dataset version 1") as err:
        Pipeline.from_file(resume, ["shard.seed=9"]).run(backend="cpu", scheduler="sync")
    assert "an append refuses it too: undo the change" in err.value.hint     # not "run it with sink.mode: append"


@pytest.mark.slow
def test_target_bytes_shards_are_within_ten_percent(tmp_path):
    inputs = write_inputs(tmp_path, 12_000)                     # ~0.9 MB of Parquet: four train shards
    file = pipeline(inputs, "overwrite", {"target_bytes": "200KiB", "splits": {"train": 0.8, "val": 0.2}},
                    blocksize="128KiB")
    result = Pipeline.from_file(file).run(backend="cpu", scheduler="sync")
    target = 200 * 1024
    for split in ("train", "val"):
        sizes = [s["bytes"] for s in result.shards if s["split"] == split]
        assert len(sizes) >= 2 if split == "train" else len(sizes) >= 1
        for size in sizes[:-1]:
            assert 0.9 * target <= size <= 1.1 * target, (split, sizes)
    again = Pipeline.from_file(file, ["source.blocksize=1MiB"]).run(backend="cpu", scheduler="threads")
    assert again.shards == result.shards


def test_fingerprint_leaves_sink_mode_out(tmp_path):
    from gpuetl.backends import get_backend
    from gpuetl.runtime.phases.resume import fingerprint

    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "0.log", lines=10)
    inputs = tmp_path
    cpu = get_backend("cpu")
    prints = [fingerprint(Pipeline.from_file(pipeline(inputs, mode)).plan(cpu), cpu)
              for mode in ("error", "overwrite", "resume")]
    assert prints[0] == prints[1] == prints[2]
    other = fingerprint(Pipeline.from_file(pipeline(inputs, "error"), ["shard.seed=9"]).plan(cpu), cpu)
    assert other["pipeline"] != prints[0]["pipeline"]


@pytest.mark.slow          # a run killed in its own process, then resumed
def test_killed_under_mode_error_then_resume(inputs):
    """The fingerprint leaves sink.mode out: `--set sink.mode=resume` picks the work up; another
    backend or gpuetl version is refused with a hint, the work kept for the right one."""
    mode = "error"
    shard = {"count": 3, "shuffle": True, "seed": 5}
    clean = Pipeline.from_file(pipeline(inputs, "overwrite", shard), ["sink.path=clean"]).run(
        backend="cpu", scheduler="sync")
    file = pipeline(inputs, mode, shard)
    kill_during_run(inputs, file, maps_done(inputs, 2))
    [state_path] = (inputs / "out" / "_tmp").glob("*/_state.json")
    state = json.loads(state_path.read_text())
    assert "mode" not in json.dumps(state) and state["backend"] == "cpu"
    for key, value, hint in (("backend", "gpu", "--backend gpu"), ("gpuetl", "0.0.1", "sink.mode: overwrite")):
        state_path.write_text(json.dumps({**state, key: value}))
        with pytest.raises(OutputError, match="sink.mode resume: the interrupted run") as info:
            Pipeline.from_file(file, ["sink.mode=resume"]).run(backend="cpu", scheduler="sync")
        assert hint in str(info.value)
        assert state_path.exists()                        # refused: the finished work is kept
    state_path.write_text(json.dumps(state))
    logs = []
    result = Pipeline.from_file(file, ["sink.mode=resume"]).run(backend="cpu", scheduler="sync", log=logs.append)
    assert any("already done, skipped" in line for line in logs), logs
    assert shards_of(inputs / "out") == shards_of(inputs / "clean")
    assert result.counts == clean.counts


def test_resume_on_a_complete_dataset_cut_at_another_blocksize_does_nothing(inputs):
    """The blocksize changes how a run is cut, not its rows: a complete dataset whose pipeline
    fingerprint holds the file's default blocksize (64 MiB) is this pipeline's on the CPU, whose
    own default is 32 MiB."""
    file = pipeline(inputs, "resume", blocksize=None)
    first = Pipeline.from_file(file, ["source.blocksize=64MiB"]).run(backend="cpu", scheduler="sync")
    logs = []
    again = Pipeline.from_file(file).run(backend="cpu", scheduler="sync", log=logs.append)
    assert again.counts == first.counts and "nothing to do" in logs[0]
    with pytest.raises(OutputError, match="complete dataset of another pipeline file"):
        Pipeline.from_file(file, ["shard.seed=9"]).run(backend="cpu", scheduler="sync")


def test_resume_on_a_complete_dataset_cut_at_a_set_blocksize_does_nothing(inputs):
    """A dataset cut at a blocksize a --set chose, resumed without it: its manifest records the
    blocksize its partitions were cut at, so the same pipeline is recognised and nothing runs;
    a manifest without that record (an older gpuetl's) is another pipeline file, as it was."""
    file = pipeline(inputs, "resume", blocksize=None)
    first = Pipeline.from_file(file, ["source.blocksize=256KiB"]).run(backend="cpu", scheduler="sync")
    manifest_path = inputs / "out" / "_manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["fingerprint"]["blocksize"] == 256 * 1024
    logs = []
    again = Pipeline.from_file(file).run(backend="cpu", scheduler="sync", log=logs.append)
    assert again.counts == first.counts and "nothing to do" in logs[0]
    del manifest["fingerprint"]["blocksize"]
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(OutputError, match="complete dataset of another pipeline file"):
        Pipeline.from_file(file).run(backend="cpu", scheduler="sync")


@pytest.mark.slow          # a run killed in its own process, then resumed
def test_a_run_interrupted_at_another_blocksize_is_refused_naming_it_and_resumes_with_it(inputs):
    """Partitions cut at one blocksize are not another's: resume refuses, naming the blocksize the
    interrupted run took (recorded in its state, or the file's default for a state without it)
    and the --set that resumes it; with it, the run resumes to a clean run's shards."""
    from gpuetl.backends import get_backend
    from gpuetl.runtime.phases.resume import pipeline_digest

    shard = {"count": 3, "shuffle": True, "seed": 5}
    clean = Pipeline.from_file(pipeline(inputs, "overwrite", shard), ["sink.path=clean"]).run(backend="cpu",
                                                                                             scheduler="sync")
    file = pipeline(inputs, "error", shard)
    kill_during_run(inputs, file, maps_done(inputs, 2))
    [state_path] = (inputs / "out" / "_tmp").glob("*/_state.json")
    state = json.loads(state_path.read_text())
    assert state["blocksize"] == 128 * 1024
    with pytest.raises(OutputError, match=r"cut its partitions at source.blocksize 128.0 KiB, this run at 256.0 KiB") \
            as info:
        Pipeline.from_file(file, ["sink.mode=resume", "source.blocksize=256KiB"]).run(backend="cpu", scheduler="sync")
    assert "--set source.blocksize=131072" in info.value.hint and state_path.exists()
    plan = Pipeline.from_file(file, ["source.blocksize=256KiB"]).plan(get_backend("cpu"))
    state_path.write_text(json.dumps({k: v for k, v in state.items() if k != "blocksize"}
                                     | {"pipeline": pipeline_digest(plan, 64 << 20)}))
    with pytest.raises(OutputError, match=r"at source.blocksize 64.0 MiB, this run at 256.0 KiB"):
        Pipeline.from_file(file, ["sink.mode=resume", "source.blocksize=256KiB"]).run(backend="cpu", scheduler="sync")
    state_path.write_text(json.dumps(state))
    logs = []
    Pipeline.from_file(file, ["sink.mode=resume", "source.blocksize=131072"]).run(backend="cpu", scheduler="sync",
                                                                                  log=logs.append)
    assert any("already done, skipped" in line for line in logs), logs
    assert shards_of(inputs / "out") == shards_of(inputs / "clean")
