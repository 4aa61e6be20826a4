"""Inputs changed behind gpuetl's back (issue 26, item 4): a file edited in place with its size
kept and its mtime set back, touched, copied back with the same bytes. A resumed run and
`verify --inputs` go by the bytes (each range's xxh3-128 as read), not by size and mtime:
the edit is refused or reported naming the file; the same bytes under a new identity are
re-hashed and accepted. Nothing outside the dataset changes."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil

import pytest
import yaml

import gpuetl
from gpuetl.cli import main
from gpuetl.errors import OutputError
from gpuetl.runtime.phases import mapping
from gpuetl.samples import write_access_logs
from hostile.conftest import snapshot
from imagedata import manifest_of, photo_folder, run_images

LINES = 1500          # ~0.3 MB: six partitions of 64 KiB


def balanced(counts) -> bool:
    return counts["rows_in"] == counts["rows_out"] + counts["filtered"] + counts["deduplicated"] + counts["quarantined"]


def pipeline(tmp_path, path="in/*.log", mode="resume", sink="out", **source):
    spec = {"version": 1, "name": "pins", "source": {"type": "text", "path": path, "blocksize": "64KiB", **source},
            "parse": {"preset": "apache_combined"}, "sink": {"path": sink, "mode": mode}}
    file = tmp_path / f"{sink}.yaml"
    file.write_text(yaml.safe_dump(spec))
    return file


def edit_in_place(path, at: int = 0, old: bytes = b"GET", new: bytes = b"PUT") -> None:
    """Change bytes without changing the size, then set atime and mtime back to the nanosecond:
    only ctime (which utime cannot set) tells."""
    st = os.stat(path)
    data = bytearray(path.read_bytes())
    i = data.index(old, at)
    data[i:i + len(old)] = new
    with open(path, "r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def interrupted(monkeypatch, file, after: int = 2):
    """A resume-mode run that stops after `after` partitions were set aside (their work kept)."""
    real, calls = mapping.spill_partition, []

    def failing(*args, **kwargs):
        calls.append(args[1])
        if len(calls) > after:
            raise OSError("injected failure")
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(mapping, "spill_partition", failing)
        with pytest.raises(OSError, match="injected failure"):
            gpuetl.Pipeline.from_file(file).run(backend="cpu", scheduler="sync")


def finished_offset(file, out) -> int:
    """A byte offset inside the range the interrupted run's first finished partition read."""
    from gpuetl.backends import get_backend

    done = sorted(out.glob("_tmp/*/maps/p*.json"))
    assert done, "no partition finished"
    plan = gpuetl.Pipeline.from_file(file).plan(get_backend("cpu"))
    rng = plan.partitions[int(done[0].name[1:7])].ranges[0]
    return rng.offset


def reported_range(message: str, at: int) -> str:
    """The range named in `message` that holds byte `at` (the one whose bytes differ)."""
    found = [(int(a), int(b)) for a, b in re.findall(r"bytes (\d+)-(\d+)", message)]
    assert any(a <= at < b for a, b in found), (at, message)
    return message


def resume(file, logs=None):
    return gpuetl.Pipeline.from_file(file).run(backend="cpu", scheduler="sync",
                                              log=(logs.append if logs is not None else lambda *_: None))


def shards(result):
    return [(s["path"], s["rows"], s["sha256"]) for s in result.manifest["shards"]], result.counts


@pytest.fixture
def logs_in(tmp_path):
    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "a.log", lines=LINES, seed=1, bad_every=500)
    return tmp_path


def test_resume_refuses_an_input_edited_in_place_with_its_size_and_mtime_set_back(logs_in, monkeypatch,
                                                                                    surroundings):
    """The edit lies in a range a finished partition read: resuming would mix old and new bytes
    in one dataset. It is refused, naming the file and what was compared; the work is kept."""
    file = pipeline(logs_in)
    interrupted(monkeypatch, file)
    path = logs_in / "in" / "a.log"
    at = path.read_bytes().index(b"GET", finished_offset(file, logs_in / "out"))
    kept = sorted(p.name for p in (logs_in / "out").glob("_tmp/*/maps/*"))
    edit_in_place(path, at=at)                             # in bytes a finished partition read
    with surroundings(logs_in, dataset=logs_in / "out"):
        with pytest.raises(OutputError) as info:
            resume(file)
    said = str(info.value)
    assert "in/a.log" in said and "identity changed (ctime)" in said and "xxh3_128" in said, said
    reported_range(said, at)                               # the range whose bytes differ
    assert sorted(p.name for p in (logs_in / "out").glob("_tmp/*/maps/*")) == kept    # the work is kept
    assert not (logs_in / "out" / "_SUCCESS").exists()


@pytest.mark.parametrize("how", ["touch", "copied back"])
def test_resume_rehashes_an_input_whose_identity_changed_and_continues_when_its_bytes_did_not(
        logs_in, monkeypatch, surroundings, how):
    clean = resume(pipeline(logs_in, mode="overwrite", sink="clean"))
    file = pipeline(logs_in)
    interrupted(monkeypatch, file)
    path = logs_in / "in" / "a.log"
    if how == "touch":
        os.utime(path)
    else:                                    # another inode, the same bytes
        shutil.copyfile(path, logs_in / "a.copy")
        os.replace(logs_in / "a.copy", path)
    logs: list[str] = []
    with surroundings(logs_in, dataset=logs_in / "out"):
        again = resume(file, logs)
    rehashed = [line for line in logs if "in/a.log" in line and "re-hashed" in line]
    assert rehashed and "the same bytes" in rehashed[0], logs
    assert ("mtime" if how == "touch" else "inode") in rehashed[0]
    assert shards(again) == shards(clean) and balanced(again.counts)


def test_resume_trusts_an_unchanged_identity_without_reading_the_skipped_ranges_again(logs_in, monkeypatch):
    clean = resume(pipeline(logs_in, mode="overwrite", sink="clean"))
    file = pipeline(logs_in)
    interrupted(monkeypatch, file)

    from gpuetl.sources import pins as pins_module

    def no_rehash(*args):
        raise AssertionError("a range was hashed again though the file's identity is unchanged")

    monkeypatch.setattr(pins_module, "_hash_ranges", no_rehash)
    logs: list[str] = []
    again = resume(file, logs)
    assert any("2 of" in line and "already done" in line for line in logs), logs
    assert shards(again) == shards(clean)


def test_verify_inputs_rehashes_and_finds_a_same_size_same_mtime_edit(logs_in, capsys):
    result = resume(pipeline(logs_in, mode="overwrite"))
    [pin] = result.manifest["inputs"]
    ranges = pin["content"]["ranges"]
    assert pin["content"]["hash"] == "xxh3_128" and pin["content"]["stream"] == "file"
    assert ranges[0][0] == 0 and ranges[-1][1] == pin["bytes"]            # every byte of the file, once
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert {"device", "inode", "bytes", "mtime_ns", "ctime_ns"} <= set(pin["identity"])
    out = str(logs_in / "out")
    assert main(["verify", out, "--inputs"]) == 0
    said = capsys.readouterr().out
    assert "are the bytes the dataset was built from" in said and "re-hashed" in said, said
    at = (logs_in / "in" / "a.log").read_bytes().index(b"GET", pin["bytes"] * 2 // 3)
    edit_in_place(logs_in / "in" / "a.log", at=at)          # a later range
    assert main(["verify", out, "--inputs"]) == 1
    said = capsys.readouterr().out
    bad = [line for line in said.splitlines() if line.startswith("INPUT")]
    assert len(bad) == 1 and "in/a.log" in bad[0] and "xxh3_128" in bad[0], said
    reported_range(bad[0], at)
    assert main(["verify", out]) == 0                    # the dataset itself is intact


def test_resume_on_a_complete_dataset_rehashes_a_touched_input_and_refuses_an_edited_one(logs_in, surroundings):
    file = pipeline(logs_in)
    first = resume(file)
    path = logs_in / "in" / "a.log"
    os.utime(path)
    logs: list[str] = []
    assert resume(file, logs).counts == first.counts and "nothing to do" in logs[0]
    edit_in_place(path)
    with surroundings(logs_in, dataset=logs_in / "out"):
        with pytest.raises(OutputError, match=r"(?s)complete dataset of other inputs.*in/a\.log.*bytes 0-"):
            resume(file)


def padded_gzip(text: bytes, size: int) -> bytes:
    """A gzip stream padded with zeros to `size` bytes (gzip allows zeros after a member)."""
    data = gzip.compress(text, mtime=0)
    assert len(data) <= size
    return data + b"\0" * (size - len(data))


def test_a_compressed_input_is_pinned_by_its_decompressed_bytes(logs_in, monkeypatch, surroundings, capsys):
    """A .gz rewritten to the same size with other content and its mtime set back: verify
    --inputs and resume both decompress and compare; a touch alone is re-hashed and accepted."""
    text = (logs_in / "in" / "a.log").read_bytes()
    (logs_in / "in" / "a.log").unlink()
    path = logs_in / "in" / "a.log.gz"
    size = len(gzip.compress(text, mtime=0)) + 64
    path.write_bytes(padded_gzip(text, size))
    file = pipeline(logs_in, path="in/*.gz", blocksize="64KiB")
    interrupted(monkeypatch, file)
    os.utime(path)
    logs: list[str] = []
    done = resume(file, logs)                           # touched: decompressed, re-hashed, the same
    assert any("in/a.log.gz" in line and "re-hashed" in line and "the same bytes" in line for line in logs), logs
    [pin] = done.manifest["inputs"]
    assert pin["content"]["stream"] == "decompressed" and pin["content"]["compression"] == "gzip"
    assert pin["content"]["ranges"][-1][1] == len(text)
    st = os.stat(path)
    i = text.index(b"GET")
    path.write_bytes(padded_gzip(text[:i] + b"PUT" + text[i + 3:], size))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert main(["verify", str(logs_in / "out"), "--inputs"]) == 1
    said = capsys.readouterr().out
    assert "INPUT in/a.log.gz" in said and "bytes 0-" in said, said
    path.write_bytes(padded_gzip(text, size))           # and a resumed run that skips the edited piece
    file = pipeline(logs_in, path="in/*.gz", blocksize="64KiB", sink="out2")
    interrupted(monkeypatch, file)
    i = text.index(b"GET", finished_offset(file, logs_in / "out2"))
    path.write_bytes(padded_gzip(text[:i] + b"PUT" + text[i + 3:], size))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with surroundings(logs_in, dataset=logs_in / "out2"):
        with pytest.raises(OutputError, match=r"in/a\.log\.gz") as info:
            resume(file)
    reported_range(str(info.value), i)


@pytest.mark.parametrize("fmt", ["csv", "multiline"])
def test_framed_sources_pin_what_they_read(tmp_path, capsys, fmt):
    """CSV and multi-line records are framed on the host from their own reads: those are pinned."""
    (tmp_path / "in").mkdir()
    if fmt == "csv":
        rows = "".join(f"{i},GET item {i}\n" for i in range(20_000))
        (tmp_path / "in" / "a.csv").write_text("id,what\n" + rows)
        source = {"type": "csv", "path": "in/*.csv", "blocksize": "64KiB"}
        extra = {"columns": {"id": "int64", "what": "string"}}
    else:
        rows = "".join(f"start {i}\n  GET more {i}\n" for i in range(10_000))
        (tmp_path / "in" / "a.log").write_text(rows)
        source = {"type": "text", "path": "in/*.log", "blocksize": "64KiB",
                  "multiline": {"start": "^start"}}
        extra = {"parse": {"regex": r"^start (?P<n>\d+)"}}
    spec = {"version": 1, "name": "framed", "source": source, **extra, "sink": {"path": "out", "mode": "overwrite"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    [pin] = result.manifest["inputs"]
    covered = sorted((a, b) for a, b, _ in pin["content"]["ranges"])
    assert covered[0][0] == 0 and max(b for _, b in covered) == pin["bytes"]
    assert all(a <= prev_end for (a, _), prev_end in zip(covered[1:], [b for _, b in covered]))   # no gap
    path = next((tmp_path / "in").iterdir())
    edit_in_place(path, at=pin["bytes"] // 2)
    assert main(["verify", str(tmp_path / "out"), "--inputs"]) == 1
    assert f"INPUT in/{path.name}" in capsys.readouterr().out


def test_images_are_pinned_and_an_edited_photo_is_found(tmp_path, capsys):
    photo_folder(tmp_path / "photos", n=4)
    run_images(tmp_path)
    manifest = manifest_of(tmp_path / "out")
    for pin in manifest["inputs"]:
        assert [r[:2] for r in pin["content"]["ranges"]] == [[0, pin["bytes"]]]
    assert main(["verify", str(tmp_path / "out"), "--inputs"]) == 0
    capsys.readouterr()
    photo = tmp_path / "photos" / "dog" / "001.jpg"
    st = os.stat(photo)
    data = bytearray(photo.read_bytes())
    data[len(data) // 2] ^= 0xFF                   # one byte of the picture
    photo.write_bytes(data)
    os.utime(photo, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert main(["verify", str(tmp_path / "out"), "--inputs"]) == 1
    said = capsys.readouterr().out
    assert [line.split(":")[0] for line in said.splitlines() if line.startswith("INPUT")] == \
        ["INPUT photos/dog/001.jpg"], said


def test_a_parquet_input_is_pinned_by_its_identity_and_refused_on_resume_once_that_changes(tmp_path, monkeypatch):
    """pyarrow reads the columns it needs straight from the file, so there are no bytes in hand
    to hash: the file's identity alone vouches for it, and a changed identity is a refusal."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "in").mkdir()
    for k in range(3):
        pq.write_table(pa.table({"x": list(range(k * 100, k * 100 + 100))}), tmp_path / "in" / f"{k}.parquet")
    spec = {"version": 1, "name": "pq", "source": {"type": "parquet", "path": "in/*.parquet", "blocksize": "1KiB"},
            "sink": {"path": "out", "mode": "resume"}}
    file = tmp_path / "p.yaml"
    file.write_text(yaml.safe_dump(spec))
    interrupted(monkeypatch, file, after=1)
    for k in range(3):
        os.utime(tmp_path / "in" / f"{k}.parquet")
    with pytest.raises(OutputError, match=r"(?s)in/\d\.parquet: identity changed.*not hashed when read"):
        resume(file)


def test_range_pins_in_the_map_state_are_checked_when_read_back(tmp_path):
    """A finished partition's state with pins that are not this code's is not trusted (the
    partition is run again), like any malformed state."""
    from gpuetl.sinks.spill import MapResult, load_result, save_result
    from gpuetl.sources.counters import PartitionCounters
    from gpuetl.sources.pins import RangePin

    save_result(MapResult(0, counters=PartitionCounters(read_pins=[RangePin(0, 0, 10, "ab")])), str(tmp_path))
    assert load_result(str(tmp_path), 0).read_pins == (RangePin(0, 0, 10, "ab"),)
    state = tmp_path / "maps" / "p000000.json"
    for bad in ([[0, 10, 5, "ab"]], [["0", 0, 10, "ab"]], [[0, 0, 10]], "x"):
        state.write_text(json.dumps({**json.loads(state.read_text()), "read_pins": bad}))
        assert load_result(str(tmp_path), 0) is None, bad


def test_an_input_edited_during_the_run_is_never_committed_half_old_half_new(logs_in, monkeypatch):
    """Edited after the first partition was read (same size, mtime set back): the commit is
    refused, naming the file; a file only touched during the run is re-hashed and committed."""
    from gpuetl.backends import get_backend

    path = logs_in / "in" / "a.log"
    file = pipeline(logs_in, mode="overwrite")
    plan = gpuetl.Pipeline.from_file(file).plan(get_backend("cpu"))
    real, calls, edited = mapping.spill_partition, [], []

    def after_the_first_partition(change):
        def spill(df, i, *args, **kwargs):
            result = real(df, i, *args, **kwargs)
            calls.append(i)
            if len(calls) == 1:
                change(plan.partitions[i].ranges[0].offset)
            return result
        return spill

    with monkeypatch.context() as m:
        m.setattr(mapping, "spill_partition", after_the_first_partition(lambda at: os.utime(path)))
        touched = resume(file)
    assert balanced(touched.counts) and (logs_in / "out" / "_SUCCESS").exists()
    before = (logs_in / "out" / "_manifest.json").read_bytes()

    def edit(at):
        edited.append(path.read_bytes().index(b"GET", at))
        edit_in_place(path, at=at)

    calls.clear()
    around = snapshot(logs_in, logs_in / "out")
    with monkeypatch.context() as m:
        m.setattr(mapping, "spill_partition", after_the_first_partition(edit))
        with pytest.raises(gpuetl.errors.SourceError, match=r"in/a\.log changed during the run") as info:
            resume(file)
    now = snapshot(logs_in, logs_in / "out")            # outside the dataset: only the test's own edit
    assert sorted(k for k in around.keys() | now.keys() if around.get(k) != now.get(k)) == ["in/a.log"]
    assert "identity changed (ctime)" in str(info.value) and "xxh3_128" in str(info.value)
    reported_range(str(info.value), edited[0])
    assert (logs_in / "out" / "_manifest.json").read_bytes() == before        # the old dataset stays


@pytest.mark.parametrize("steps, shard", [
    ([{"dedupe": {"on": ["ip"]}}], {}),                                # a global step settled in order
    ([{"dedupe": {"on": ["ip"]}}], {"count": 3, "shuffle": True}),     # spilled, shards written after
])
def test_the_pins_cross_global_steps_and_cover_every_byte_of_each_input_once(logs_in, steps, shard):
    write_access_logs(logs_in / "in" / "b.log", lines=1000, seed=2)
    spec = {"version": 1, "name": "pins", "source": {"type": "text", "path": "in/*.log", "blocksize": "64KiB"},
            "parse": {"preset": "apache_combined"}, "steps": steps, "shard": shard,
            "sink": {"path": "out", "mode": "overwrite"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=logs_in).run(backend="cpu", scheduler="sync")
    assert balanced(result.counts) and result.counts["deduplicated"] > 0
    for pin in result.manifest["inputs"]:
        ranges = pin["content"]["ranges"]
        assert ranges[0][0] == 0 and ranges[-1][1] == pin["bytes"], pin["path"]
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), pin["path"]


def test_a_tar_shard_is_pinned_headers_and_members_so_a_renamed_member_is_found(tmp_path, capsys):
    """A member renamed in its header (the same size, the same image bytes, mtime set back)
    changes the dataset's keys: verify --inputs names the tar; a touch alone passes."""
    import io
    import tarfile

    from imagedata import jpeg_bytes

    def tar_bytes(names):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for i, name in enumerate(names):
                data = jpeg_bytes(seed=i)
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(data), 0
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    before, after = tar_bytes(["0000.jpg", "0001.jpg"]), tar_bytes(["0000.jpg", "0007.jpg"])
    assert len(before) == len(after) and before != after
    path = tmp_path / "shards" / "s.tar"
    path.parent.mkdir()
    path.write_bytes(before)
    run_images(tmp_path, path="shards/*.tar")
    out = str(tmp_path / "out")
    os.utime(path)
    assert main(["verify", out, "--inputs"]) == 0
    capsys.readouterr()
    st = os.stat(path)
    path.write_bytes(after)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert main(["verify", out, "--inputs"]) == 1
    assert "INPUT shards/s.tar: other bytes than the run read" in capsys.readouterr().out
