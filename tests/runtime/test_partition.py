"""The source stage splits, parses and runs the row steps on a partition piece by piece: the
result never depends on the piece size, and no kernel is handed more than a piece."""

from __future__ import annotations

import gzip
import mmap

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

import gpuetl
from gpuetl.backends.cpu import CpuBackend
from gpuetl.samples import write_access_logs
from gpuetl.sources import ranges


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=60),
       piece_bytes=st.integers(1, 64), final_newline=st.booleans())
def test_batches_cover_the_block_and_cut_after_newlines(lines, piece_bytes, final_newline):
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    backend = CpuBackend()
    backend.piece_bytes = piece_bytes
    batches = backend.batches(data)
    assert b"".join(bytes(view) for _, view in batches) == data
    position = 0
    for start, view in batches:
        assert start == position
        position += len(view)
    for _, view in batches[:-1]:
        assert bytes(view).endswith(b"\n")
    for _, view in batches:     # at most a piece, or a single line longer than one
        assert len(view) <= piece_bytes or b"\n" not in bytes(view)[:-1]
    assert len(batches) == 1 or len(batches[-1][1]) > 0


def _inputs(folder):
    """A few hundred lines: the batched run hands the parser one line per piece (piece_bytes=100),
    so its cost grows with the lines; an 8 KiB blocksize still cuts each log into partitions."""
    folder.mkdir()
    write_access_logs(folder / "a.log", lines=200, seed=1, bad_every=10)
    write_access_logs(folder / "b.log", lines=60, seed=2, bad_every=6)
    whole = gzip.compress((folder / "a.log").read_bytes())
    (folder / "c.log.gz").write_bytes(whole[: len(whole) * 2 // 3])          # truncated: one record lost
    (folder / "d.csv").write_bytes(b"x,y\n" + b"".join(b"%d,v%d\n" % (i, i) for i in range(400)) + b"1,2,3\n")
    (folder / "e.csv").write_bytes(b"\nx,y\n" + b"".join(b"%d,w%d\n" % (i, i) for i in range(50)))


SPECS = {
    "logs": {"source": {"type": "text", "path": "in/*.log*", "blocksize": "8KiB", "provenance": True},
             "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
             "steps": [{"filter": "status < 500"}]},
    "csv": {"source": {"type": "csv", "path": "in/*.csv", "provenance": True}, "columns": {"x": "int32"}},
}


def _run(tmp_path, name, out):
    spec = {"version": 1, "name": "t", **SPECS[name], "sink": {"path": out, "mode": "overwrite"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    data = pq.read_table(result.out_dir / "part-00000.parquet")
    quarantine = [pq.read_table(f) for f in sorted((result.out_dir / "_quarantine").glob("*.parquet"))]
    return result.counts, result.stages, data, [q.to_pylist() for q in quarantine]


@pytest.mark.parametrize("name", ["csv", pytest.param("logs", marks=pytest.mark.slow)])   # logs: ~6 s, a piece a line
def test_result_does_not_depend_on_the_batch_size(tmp_path, monkeypatch, name):
    """Nor on whether ranges are read or memory-mapped (the batched run maps every plain range)."""
    _inputs(tmp_path / "in")
    whole = _run(tmp_path, name, "whole")
    monkeypatch.setattr(CpuBackend, "piece_bytes", 100)
    monkeypatch.setattr(ranges, "MAP_MIN_BYTES", 1)
    batched = _run(tmp_path, name, "batched")
    counts, stages, data, quarantine = batched
    assert counts == whole[0] and stages == whole[1]
    assert data.equals(whole[2])
    assert quarantine == whole[3]
    assert counts["rows_in"] == counts["rows_out"] + counts["filtered"] + counts["quarantined"]
    if name == "csv":       # each file's header is skipped once, not once per batch
        assert data.num_rows == 450 and counts["quarantined"] == 1
        assert data.column("x").to_pylist() == list(range(400)) + list(range(50))
    else:
        assert counts["quarantined"] >= 20 and counts["filtered"] > 0
        assert any("truncated" in r["_reason"] for q in quarantine for r in q)


def test_on_error_fail_names_the_first_bad_record_across_batches(tmp_path, monkeypatch):
    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "a.log", lines=500, seed=1)
    lines = (tmp_path / "in" / "a.log").read_bytes().splitlines(keepends=True)
    lines[300:300] = [b"garbage one\n"]
    lines[420:420] = [b"garbage two\n"]
    (tmp_path / "in" / "a.log").write_bytes(b"".join(lines))
    monkeypatch.setattr(CpuBackend, "piece_bytes", 1000)
    spec = {"version": 1, "name": "t", "source": {"type": "text", "path": "in/a.log"},
            "parse": {"preset": "apache_combined"}, "on_error": "fail", "sink": {"path": "out"}}
    with pytest.raises(gpuetl.DataError, match=f"byte offset {sum(map(len, lines[:300]))}: (?s:.*)record: garbage one"):
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")


def test_a_segment_ends_with_its_live_rows_and_tallies_for_the_rest(tmp_path, monkeypatch):
    """A partition of many batches accounts for every record once: its live rows come first,
    then the quarantined ones (raw record kept), then one tally row for what the filter dropped;
    the dropped rows themselves are not held past the segment."""
    from gpuetl.backends.base import COUNT, RAW, STAGE, STATUS, STATUS_FILTERED, STATUS_LIVE, STATUS_QUARANTINED
    from gpuetl.plan.compile import compile_plan
    from gpuetl.runtime.partition import read_partition

    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "a.log", lines=400, seed=3, bad_every=25)
    monkeypatch.setattr(CpuBackend, "piece_bytes", 2000)
    spec = {"version": 1, "name": "t", "source": {"type": "text", "path": "in/a.log"},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
            "steps": [{"filter": "status < 400"}], "sink": {"path": "out"}}
    backend = CpuBackend()
    plan = compile_plan(gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).loaded, backend)
    df = read_partition(plan.partitions[0], plan.segments[0], backend).frame
    status = df[STATUS].to_numpy(dtype=int)
    live = int((status == STATUS_LIVE).sum())
    assert live and (status[:live] == STATUS_LIVE).all()
    assert (df["status"][:live] < 400).all()
    quarantined = status == STATUS_QUARANTINED
    assert quarantined.sum() >= 10 and df[RAW][quarantined].notna().all()
    tallies = df[status == STATUS_FILTERED]
    assert len(tallies) == 1 and int(tallies[STAGE].iloc[0]) == plan.segments[0].steps[0].index
    assert live + int(quarantined.sum()) + int(tallies[COUNT].iloc[0]) == 400


def test_a_step_after_a_filter_never_sees_the_rows_it_dropped(tmp_path):
    """A cast after a filter runs on the filter's live rows only: the filtered 'bad' values are
    counted as filtered, never also as quarantined."""
    (tmp_path / "in.csv").write_text("x,y\n" + "".join(f"{i},{'bad' if i % 3 == 0 else i}\n" for i in range(30)))
    spec = {"version": 1, "name": "t", "source": {"type": "csv", "path": "in.csv"}, "columns": {"x": "int32"},
            "steps": [{"filter": "y != 'bad'"}, {"cast": {"y": "int32"}}, {"dedupe": {"on": ["x"]}}],
            "sink": {"path": "out"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts["filtered"] == 10 and result.counts["quarantined"] == 0
    assert result.counts["rows_out"] == 20
    data = pq.read_table(result.out_dir / "part-00000.parquet")
    assert data.column("y").to_pylist() == [i for i in range(30) if i % 3]


def test_a_mapped_input_let_go_piece_by_piece_gives_the_bytes_of_one_read_whole(tmp_path, monkeypatch):
    """A mapped partition is hashed and its pages let go as its pieces are parsed
    (sources/ranges.py: Block.pin_piece, Block.release); the rows, the quarantine, the shard's bytes and the
    manifest's input pins are those of a run that reads the same input into memory whole."""
    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "a.log", lines=30_000, seed=3, bad_every=997)    # ~6 MiB: mapped
    spec = {"version": 1, "name": "mapped", "source": {"type": "text", "path": "in/a.log"},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"}}
    released = []
    real_release = ranges.Block.release

    def release(block, position, length):
        released.append(isinstance(getattr(block.data, "obj", None), mmap.mmap))
        real_release(block, position, length)

    def run(out):
        result = gpuetl.Pipeline.from_dict({**spec, "sink": {"path": out}}, base_dir=tmp_path).run(
            backend="cpu", scheduler="sync")
        pins = [f["content"] for f in result.manifest["inputs"]]
        return {p.relative_to(result.out_dir).as_posix(): p.read_bytes()
                for p in sorted(result.out_dir.rglob("*.parquet"))}, result.counts, pins

    monkeypatch.setattr(ranges.Block, "release", release)
    monkeypatch.setattr(CpuBackend, "piece_bytes", 1 << 20)
    mapped = run("mapped")
    assert sum(released) >= 6                                       # each piece's pages, once read
    monkeypatch.setattr(ranges, "MAP_MIN_BYTES", 1 << 40)           # read into memory: nothing to let go
    released.clear()
    whole = run("whole")
    assert mapped == whole and mapped[1]["quarantined"] >= 30
    assert [len(pin["ranges"]) for pin in mapped[2]] == [1]               # the range's hash, taken in pieces


def test_a_write_into_a_mapped_input_after_its_records_are_copied_is_refused(tmp_path, monkeypatch):
    """A writer that changes a mapped input between a piece's hash and the end of the run: the
    run parsed the bytes its pin holds, the file no longer does, and the check before the commit
    refuses (the pin of each piece is taken before its records are copied out)."""
    from gpuetl.sources import stage

    (tmp_path / "in").mkdir()
    path = tmp_path / "in" / "a.log"
    write_access_logs(path, lines=30_000, seed=3)                                      # ~6 MiB: mapped
    status_at = path.read_bytes().index(b'" 200 ') + 2
    real_split = stage.split_batch
    written = []

    def split_then_write(block, position, data, backend):
        records = real_split(block, position, data, backend)
        if not written:                                         # once the first piece is copied out
            with open(path, "r+b") as f:
                f.seek(status_at)
                f.write(b"599")
            written.append(True)
        return records

    monkeypatch.setattr(stage, "split_batch", split_then_write)
    spec = {"version": 1, "name": "raced", "source": {"type": "text", "path": "in/a.log"},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"}, "sink": {"path": "out"}}
    with pytest.raises(gpuetl.errors.SourceError, match="changed during the run"):
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert written and not (tmp_path / "out" / "_SUCCESS").exists()
