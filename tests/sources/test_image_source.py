"""The images source: files and WebDataset tars, labels, partitions, determinism, the example."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from gpuetl.api import Pipeline
from gpuetl.backends import get_backend
from gpuetl.sources.counters import PartitionCounters
from gpuetl.columns import REASON
from gpuetl.errors import SpecError
from gpuetl.samples import write_images
from imagedata import (balanced, image_spec, jpeg_bytes, manifest_of, photo_folder, pixels, quarantine_of,
                       rows_of, run_images, write)

REPO = Path(__file__).resolve().parents[2]


def test_parent_folder_labels_and_label_ids(tmp_path):
    photo_folder(tmp_path / "photos", n=6, classes=("dog", "cat", "eel"))
    result = run_images(tmp_path)
    assert balanced(result) and result.counts["rows_out"] == 6
    rows = rows_of(tmp_path / "out")
    assert {r["key"] for r in rows} == {f"{c}/{i:03d}.jpg" for i, c in zip(range(6), ["dog", "cat", "eel"] * 2)}
    assert manifest_of(tmp_path / "out")["labels"] == ["cat", "dog", "eel"]
    assert all(r["label_id"] == ["cat", "dog", "eel"].index(r["label"]) for r in rows)
    for r in rows:
        assert (r["width"], r["height"], r["channels"], r["format"]) == (32, 32, 3, "jpeg")
        assert pixels(r).shape == (32, 32, 3)
        assert (r["orig_width"], r["orig_height"], r["orig_format"]) == (64, 48, "jpeg")
        src = (tmp_path / "photos" / r["key"]).read_bytes()
        assert r["content_hash"] == hashlib.sha256(src).hexdigest() and r["orig_bytes"] == len(src)


def test_regex_labels_and_unmatched_keys_are_quarantined(tmp_path):
    write(tmp_path / "photos" / "a" / "n01_x.jpg", jpeg_bytes(seed=1))
    write(tmp_path / "photos" / "a" / "n02_y.jpg", jpeg_bytes(seed=2))
    write(tmp_path / "photos" / "a" / "nolabel.jpg", jpeg_bytes(seed=3))
    result = run_images(tmp_path, source={"label": "regex", "label_regex": r"/(?P<label>n\d+)_"})
    assert balanced(result) and result.counts["quarantined"] == 1
    assert sorted(r["label"] for r in rows_of(tmp_path / "out")) == ["n01", "n02"]
    (bad,) = quarantine_of(tmp_path / "out")
    assert "does not match label_regex" in bad["_reason"] and bad["_file"].endswith("nolabel.jpg")


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_side_file_labels_and_fields(tmp_path, kind):
    photo_folder(tmp_path / "photos", n=3, classes=("x",))
    keys = ["x/000.jpg", "x/001", "x/002.jpg"]           # a key may leave out the suffix
    if kind == "csv":
        (tmp_path / "labels.csv").write_text("key,label,caption\n" + "".join(f"{k},L{i},cap {i}\n" for i, k in enumerate(keys[:2])))
    else:
        (tmp_path / "labels.jsonl").write_text("".join(json.dumps({"key": k, "label": f"L{i}", "caption": f"cap {i}"}) + "\n"
                                                       for i, k in enumerate(keys[:2])))
    result = run_images(tmp_path, source={"label": "file", "side_file": f"labels.{kind}"})
    assert balanced(result) and result.counts["quarantined"] == 1
    rows = sorted(rows_of(tmp_path / "out"), key=lambda r: r["key"])
    assert [(r["label"], r["caption"], r["label_id"]) for r in rows] == [("L0", "cap 0", 0), ("L1", "cap 1", 1)]
    assert "not in the side file" in quarantine_of(tmp_path / "out")[0]["_reason"]


def _tar(path: Path, members: list[tuple[str, bytes]]):
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))


def test_webdataset_tar_members_grouped_by_key(tmp_path):
    _tar(tmp_path / "shards" / "shard-000.tar", [
        ("a/0001.jpg", jpeg_bytes(seed=1)), ("a/0001.cls", b"3"), ("a/0001.txt", b"a cat"),
        ("b/0002.jpg", jpeg_bytes(seed=2)), ("b/0002.cls", b"5"), ("b/0002.txt", b"a dog"),
    ])
    result = run_images(tmp_path, path="shards/*.tar")
    assert balanced(result) and result.counts["rows_out"] == 2
    rows = sorted(rows_of(tmp_path / "out"), key=lambda r: r["key"])
    assert [(r["key"], r["label"], r["cls"], r["txt"]) for r in rows] == [("a/0001", "a", "3", "a cat"),
                                                                          ("b/0002", "b", "5", "a dog")]


def test_provenance_and_no_image_files_and_columns(tmp_path):
    photo_folder(tmp_path / "photos", n=2, classes=("x",))
    result = run_images(tmp_path, source={"provenance": True}, steps=[])
    assert balanced(result)
    assert sorted((r["_file"], r["_offset"]) for r in rows_of(tmp_path / "out")) == [
        ("photos/x/000.jpg", 0), ("photos/x/001.jpg", 0)]
    write(tmp_path / "notes" / "a.txt", b"hello")
    from gpuetl.errors import InputsNotFound
    with pytest.raises(InputsNotFound, match="image suffix"):
        run_images(tmp_path, path="notes/*")
    with pytest.raises(SpecError, match="types its own columns"):
        run_images(tmp_path, columns={"label": "string"})


def test_many_files_per_task_partitions_sized_in_bytes(tmp_path):
    photo_folder(tmp_path / "photos", n=12)
    size = sum(p.stat().st_size for p in (tmp_path / "photos").rglob("*.jpg"))
    plan = Pipeline.from_dict(image_spec(source={"blocksize": size // 3 + 1}), base_dir=tmp_path).plan()
    assert 3 <= len(plan.partitions) <= 4
    assert sum(len(p.ranges) for p in plan.partitions) == 12


def test_same_shard_bytes_across_blocksizes_and_workers(tmp_path, monkeypatch):
    """Through the scaled JPEG decode (simplejpeg, 64x48 at 6/8 for a 32x32 fill) and encode."""
    import simplejpeg

    decodes, real = [], simplejpeg.decode_jpeg
    monkeypatch.setattr(simplejpeg, "decode_jpeg", lambda *a, **k: decodes.append(1) or real(*a, **k))
    photo_folder(tmp_path / "photos", n=10)
    shard = {"count": 2, "shuffle": True, "seed": 3, "splits": {"train": 0.7, "val": 0.3}}
    digests = []
    for blocksize, scheduler in [(1 << 30, "sync"), (3000, "sync"), (5000, "threads")]:
        out = f"out-{blocksize}"
        result = run_images(tmp_path, scheduler=scheduler, sink=out, shard=shard, source={"blocksize": blocksize})
        assert balanced(result)
        digests.append({s["path"]: s["sha256"] for s in manifest_of(tmp_path / out)["shards"]})
    assert digests[0] == digests[1] == digests[2] and len(digests[0]) >= 2
    assert len(decodes) == 30


def test_splits_hash_the_key_not_the_pixels(tmp_path):
    """Re-encoding every picture (new pixels, new bytes) moves no row between splits."""
    photo_folder(tmp_path / "photos", n=12)
    shard = {"splits": {"train": 0.5, "val": 0.5}, "seed": 1}
    run_images(tmp_path, shard=shard, sink="a")
    for p in (tmp_path / "photos").rglob("*.jpg"):
        p.write_bytes(jpeg_bytes(seed=99, quality=50))
    run_images(tmp_path, shard=shard, sink="b")
    split_of = lambda out: {r["key"]: s for s in ("train", "val") for r in rows_of(tmp_path / out, s)}  # noqa: E731
    assert split_of("a") == split_of("b") and set(split_of("a").values()) == {"train", "val"}


def test_dedupe_on_phash_and_content_hash(tmp_path):
    photo_folder(tmp_path / "photos", n=4, classes=("x",))
    shutil.copy(tmp_path / "photos/x/000.jpg", tmp_path / "photos/x/copy.jpg")           # exact copy
    (tmp_path / "photos/x/requal.jpg").write_bytes(jpeg_bytes(seed=1, quality=70))      # same picture, new bytes
    steps = [{"decode": {}}, {"phash": {}}, {"dedupe": {"on": ["content_hash"]}}]
    result = run_images(tmp_path, steps=steps)
    assert balanced(result) and result.counts["deduplicated"] == 1
    steps[2] = {"dedupe": {"on": ["phash"]}}
    result = run_images(tmp_path, steps=steps, sink="out2")
    assert balanced(result) and result.counts["deduplicated"] == 2


def test_generated_photos_are_deterministic_and_photo_sized(tmp_path):
    a = write_images(tmp_path / "a", 3, seed=4)
    b = write_images(tmp_path / "b", 3, seed=4)
    assert [p.read_bytes() for p, _ in a] == [p.read_bytes() for p, _ in b]
    assert all(40_000 < n < 200_000 for _, n in a)       # 500x375 at q90: photo-like, not flat


@pytest.mark.slow
def test_example_pipeline_on_200_generated_images(tmp_path):
    """pipelines/images.yaml as shipped, on the sample generator's photos (smaller pictures)."""
    write_images(tmp_path / "photos", 200, size=(96, 72), seed=7)
    spec = Pipeline.from_file(REPO / "pipelines" / "images.yaml",
                              overrides=[f"source.path={tmp_path}/photos/**/*.jpg", f"sink.path={tmp_path}/out"])
    result = spec.run(backend="cpu", scheduler="sync")
    assert balanced(result) and result.counts["rows_out"] == 200
    rows = rows_of(tmp_path / "out", "train") + rows_of(tmp_path / "out", "val")
    assert len(rows) == 200 and len(rows_of(tmp_path / "out", "val")) > 0
    assert {(r["width"], r["height"], r["format"]) for r in rows} == {(224, 224, "jpeg")}
    assert manifest_of(tmp_path / "out")["labels"] == sorted({r["label"] for r in rows})


def test_options_for_images_only_and_bad_label_options(tmp_path):
    with pytest.raises(SpecError, match="for images sources only"):
        Pipeline.from_dict({"version": 1, "name": "x", "source": {"type": "text", "path": "a", "label": "parent"},
                            "sink": {"path": "o"}}, base_dir=tmp_path)
    with pytest.raises(SpecError, match="label_regex"):
        Pipeline.from_dict(image_spec(source={"label": "regex"}), base_dir=tmp_path)
    photo_folder(tmp_path / "photos", n=1)
    with pytest.raises(SpecError, match="needs the column"):
        Pipeline.from_dict(image_spec(steps=[{"resize": {"size": 8}}]), base_dir=tmp_path).plan()


def test_the_gpu_backend_is_refused_with_a_clear_message(tmp_path):
    """cuDF has no binary column: until gpu.py holds one, images say so at plan time."""
    photo_folder(tmp_path / "photos", n=1)

    class NotCpu:
        name = "gpu"
        images_on_gpu = False
        runs_images = False

    with pytest.raises(SpecError, match="--backend cpu|CPU backend"):
        Pipeline.from_dict(image_spec(), base_dir=tmp_path).plan(NotCpu())


def test_graph_building_does_not_walk_every_file_per_task(tmp_path, monkeypatch):
    """Every task's arguments name all inputs (each image is a file): they must be handed over
    whole, not walked by dask.delayed, or building the graph costs files x tasks steps
    (runtime/graph.py: TaskGraph)."""
    import importlib

    delayed = importlib.import_module("dask.delayed")
    walk = delayed.unpack_collections
    calls = {}

    def counted(expr, *args, **kwargs):
        calls[folder] = calls.get(folder, 0) + 1
        return walk(expr, *args, **kwargs)

    monkeypatch.setattr(delayed, "unpack_collections", counted)
    for folder, n in (("few", 3), ("many", 30)):
        photo_folder(tmp_path / folder, n=n, w=8, h=8)
        spec = image_spec(path=f"{folder}/**/*.jpg", steps=[], sink=f"out-{folder}",
                          source={"blocksize": "64MiB"})            # one partition each
        result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
        assert balanced(result) and result.counts["rows_out"] == n
    assert calls.get("few", 0) == calls.get("many", 0)


def test_a_task_pickles_the_inputs_as_one_blob_not_file_by_file(tmp_path, monkeypatch):
    """Each task's arguments carry every input (an images source has one per image); a cluster
    pickles each task's graph, and thousands of InputFile objects pickled one by one held the
    GIL longer than the task's own Python. They travel as one blob, made once, and come back
    equal."""
    import pickle

    from gpuetl.backends import get_backend
    from gpuetl.sources.files import InputFile, InputFiles

    photo_folder(tmp_path / "photos", n=12, w=8, h=8)
    plan = Pipeline.from_dict(image_spec(), base_dir=tmp_path).plan(get_backend("cpu"))
    segment = plan.segments[0]
    assert isinstance(segment.files, InputFiles) and isinstance(segment.source.files, InputFiles)
    calls = []
    real = InputFile.__reduce_ex__
    monkeypatch.setattr(InputFile, "__reduce_ex__", lambda self, proto: calls.append(self) or real(self, proto))
    first, again = pickle.dumps(segment), pickle.dumps(segment)
    assert calls == [] and len(first) == len(again)
    back = pickle.loads(first)
    assert back.source.files == back.files and len(back.files) == len(plan.files) == 12
    assert list(back.files) == list(plan.files) and back.files == segment.files
    assert back.files[-1] == plan.files[-1] and back.files[2:4] == plan.files[2:4]
    assert pickle.dumps(back.files) == pickle.dumps(segment.files)       # handed on as it came
    assert [f.display for f in pickle.loads(pickle.dumps(InputFiles()))] == []



def test_a_task_asks_the_kernel_for_all_its_bytes_before_reading_them(tmp_path, monkeypatch):
    """Parallel reads without reader threads: every record's range (images and tar members) is
    advised WILLNEED before the first read; a file gone by then is left to the read, which
    quarantines it with the reason."""
    import os

    from gpuetl.sources import images

    photo_folder(tmp_path / "photos", n=4)
    _tar(tmp_path / "photos" / "shard.tar", [("k/0001.jpg", jpeg_bytes(seed=1)), ("k/0001.txt", b"a cat")])
    plan = Pipeline.from_dict(image_spec(source={"path": "photos/**/*"}), base_dir=tmp_path).plan()
    (partition,) = plan.partitions
    stage = plan.segments[0].source
    events, advised = [], []
    real_fadvise, real_pread = os.posix_fadvise, images._pread
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, off, n, how: (
        events.append("advise"), advised.append((off, n, how)), real_fadvise(fd, off, n, how))[-1])
    monkeypatch.setattr(images, "_pread", lambda path, off, n: (events.append("read"), real_pread(path, off, n))[-1])
    counters = PartitionCounters()
    (frame,) = stage.read(partition, plan.segments[0], get_backend("cpu"), counters)   # one piece: a few small images
    want = sorted([r.image for r in partition.ranges] + [(o, n) for r in partition.ranges for _, o, n in r.extras])
    assert len(want) == 6 and sorted((o, n) for o, n, _ in advised) == want
    assert {h for *_, h in advised} == {os.POSIX_FADV_WILLNEED}
    # every advice comes first; then each image and member is read once, and the tar record's
    # headers once more for its pin (sources/pins.py: they are what the plan's keys came from)
    tar_records = sum(1 for r in partition.ranges if r.image[0] > r.offset)
    assert tar_records == 1
    assert events == ["advise"] * 6 + ["read"] * (6 + tar_records) and len(frame) == 5
    assert len(counters.read_pins) == 6 + tar_records          # every span read is pinned, in the counters

    gone = next(r for r in partition.ranges if not r.extras)
    os.remove(stage.files[gone.file_index].path)
    advised.clear()
    (frame,) = stage.read(partition, plan.segments[0], get_backend("cpu"), PartitionCounters())
    assert len(advised) == 5                                 # the others still advised
    reasons = frame[REASON].dropna().tolist()
    assert len(reasons) == 1 and "cannot read" in reasons[0] and "No such file" in reasons[0]


def test_a_task_carries_its_partitions_inputs_not_every_input(tmp_path):
    """A photo is an input: a million of them made every task's arguments 430 MB. A task's
    segment carries its own partition's inputs, looked up by the same indices; its size follows
    the partition, not the plan; the run's shards are the same bytes."""
    import pickle

    from gpuetl.sources.files import PartitionInputs

    one = jpeg_bytes(seed=3)
    sizes = {}
    for n in (40, 800):
        folder = tmp_path / f"p{n}" / "photos" / "cat"
        folder.mkdir(parents=True)
        for i in range(n):
            (folder / f"{i:04d}.jpg").write_bytes(one)
        plan = Pipeline.from_dict(image_spec(source={"blocksize": 10 * len(one)}), base_dir=tmp_path / f"p{n}").plan()
        whole = plan.segments[0]
        tasks = [whole.for_partition(p) for p in plan.partitions]
        for p, seg in zip(plan.partitions, tasks):
            assert isinstance(seg.files, PartitionInputs) and isinstance(seg.source.files, PartitionInputs)
            for rec in p.ranges:
                assert seg.files[rec.file_index] == whole.files[rec.file_index] == seg.source.files[rec.file_index]
            outside = next(i for i in range(len(whole.files)) if i not in {r.file_index for r in p.ranges})
            with pytest.raises(IndexError, match="not one of this task's"):
                seg.files[outside]
            with pytest.raises(TypeError):
                list(seg.files)
        sizes[n] = (max(len(pickle.dumps(t)) for t in tasks), len(pickle.dumps(whole)))
    assert sizes[800][0] < 1.2 * sizes[40][0]            # a task's arguments do not grow with the plan
    assert sizes[800][1] > 10 * sizes[800][0]            # the whole segment would
    # the shards are the same bytes as a run without partitions (one task, every input)
    runs = {}
    for blocksize in (10 * len(one), 1 << 30):
        out = f"out-{blocksize}"
        result = Pipeline.from_dict(image_spec(source={"blocksize": blocksize}, sink=out),
                                    base_dir=tmp_path / "p40").run(scheduler="sync")
        assert balanced(result)
        runs[blocksize] = sorted((p.name, p.read_bytes()) for p in (tmp_path / "p40" / out).rglob("*.parquet"))
    assert runs[10 * len(one)] == runs[1 << 30]
