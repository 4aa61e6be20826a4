"""A second hostile pass over issue 12, with cases the other galleries lack: crafted resume
state, links swapped in mid-run, odd names in refusals, gpuetl's own folders as the sink, and
inputs in the wrong encoding or compression. Each case checks the clear error or quarantine,
that nothing outside the dataset changed, and the accounting identity where a run completes."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import gpuetl
from gpuetl import OutputError, SpecError
from gpuetl.cli import main

from .gallery import Gallery

LINES = 60
GALLERY = Gallery("adversary", lines=LINES, bad_every=10)
spec, run, write_pipe, assert_identity = GALLERY.spec, GALLERY.run, GALLERY.write_pipe, GALLERY.assert_identity


@pytest.fixture
def base(tmp_path) -> Path:
    return GALLERY.inputs(tmp_path)


def interrupted_resume(base: Path, monkeypatch) -> Path:
    """A resume run stopped after its map tasks, before the commit: its folder under _tmp."""
    from gpuetl.runtime.phases import accounting

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(accounting, "check_errors", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(base, mode="resume")
    monkeypatch.undo()
    [run_tmp] = [p for p in (base / "out" / "_tmp").iterdir() if p.is_dir()]
    return run_tmp


# --------------------------------------------------------------------------- resume state and commit


def test_crafted_spill_state_never_makes_resume_read_a_file_outside(base, surroundings, monkeypatch):
    """maps/*.json names its pieces; a crafted one pointing at a file outside (or through a link)
    is not trusted: the partition is run again, the outside rows never reach the dataset."""
    run_tmp = interrupted_resume(base, monkeypatch)
    state_path = run_tmp / "maps" / "p000000.json"
    state = json.loads(state_path.read_text())
    piece = Path(next(iter(state["pieces"].values())))
    leak = base / "leak.arrow"
    table = pa.ipc.open_file(pa.memory_map(str(piece))).read_all()
    leaked = table.set_column(table.schema.get_field_index("path"), "path",
                              pa.array(["/LEAKED"] * table.num_rows, table.schema.field("path").type))
    with pa.OSFile(str(leak), "wb") as sink, pa.ipc.new_file(sink, leaked.schema) as writer:
        writer.write_table(leaked)
    state["pieces"] = {k: str(leak) for k in state["pieces"]}
    state_path.write_text(json.dumps(state))
    with surroundings(base, dataset=base / "out"):
        result = run(base, mode="resume")
    assert_identity(result)
    rows = pa.concat_tables([pq.read_table(result.out_dir / s["path"]) for s in result.shards])
    assert "/LEAKED" not in rows.column("path").to_pylist()


@pytest.mark.parametrize("state", ["[1, 2]", '{"pieces": {}, "tallies": "x"}', '{"pieces": {"x": 1}}', "[" * 10_000])
def test_malformed_spill_state_reruns_the_partition(base, surroundings, monkeypatch, state):
    run_tmp = interrupted_resume(base, monkeypatch)
    (run_tmp / "maps" / "p000000.json").write_text(state)
    with surroundings(base, dataset=base / "out"):
        assert_identity(run(base, mode="resume"))


def test_spill_piece_reached_through_a_link_is_not_trusted(base, surroundings, monkeypatch, tmp_path):
    from gpuetl.sinks.spill import load_result

    run_tmp = interrupted_resume(base, monkeypatch)
    assert load_result(str(run_tmp), 0) is not None
    spill = run_tmp / "spill"
    moved = base / "moved-spill"
    spill.rename(moved)
    os.symlink(moved, spill)
    assert load_result(str(run_tmp), 0) is None
    path = write_pipe(base, mode="resume")
    with surroundings(base, dataset=base / "out"):
        assert main(["run", str(path), "--scheduler", "sync"]) == 2


def test_link_swapped_in_between_the_check_and_the_commit(base, surroundings, monkeypatch, capsys):
    """overwrite checked the folder; then, before the commit, a shard becomes a link to a file
    outside. The commit must not write through it."""
    from gpuetl.runtime.phases import accounting

    out = run(base).out_dir
    victim = base / "victim.parquet"
    victim.write_bytes(b"do not touch")
    real = accounting.check_errors

    def swap(*a, **k):
        (out / "part-00000.parquet").unlink()
        os.symlink(victim, out / "part-00000.parquet")
        return real(*a, **k)
    monkeypatch.setattr(accounting, "check_errors", swap)
    with surroundings(base, dataset=out):
        with pytest.raises(OutputError, match="part-00000.parquet is a symbolic link"):
            run(base, mode="overwrite")
    assert victim.read_bytes() == b"do not touch"
    monkeypatch.undo()
    assert main(["verify", str(out)]) == 1        # the link, and no half-done commit left behind
    printed = capsys.readouterr().out
    assert "part-00000.parquet is a symbolic link" in printed and "interrupted commit" not in printed


def test_resume_after_an_edit_that_does_not_change_the_output(base, surroundings, monkeypatch, capsys):
    """A comment and reordered keys leave the pipeline the same: resume finishes the earlier run."""
    run_tmp = interrupted_resume(base, monkeypatch)
    path = write_pipe(base, mode="resume")
    data = yaml.safe_load(path.read_text())
    path.write_text("# a comment\n" + yaml.safe_dump(dict(reversed(list(data.items()))), sort_keys=False))
    capsys.readouterr()
    with surroundings(base, dataset=base / "out"):
        assert main(["run", str(path), "--scheduler", "sync"]) == 0
    assert f"resuming {run_tmp.name}: 1 of 1 partitions already done" in capsys.readouterr().err
    assert main(["verify", str(base / "out")]) == 0


# --------------------------------------------------------------------------- where the sink may be


def test_sink_at_the_filesystem_root_is_refused(base, surroundings):
    with surroundings(base):
        with pytest.raises(OutputError, match="holds the input file"):
            run(base, sink_path="/")


@pytest.mark.parametrize("inside", ["_tmp/x", "_tmp/_lock/x", "_quarantine/x"])
def test_sink_inside_a_folder_another_dataset_keeps_for_itself_is_refused(base, surroundings, capsys, inside):
    run(base, sink_path="ds")
    (base / "ds" / "_tmp").mkdir(exist_ok=True)
    path = write_pipe(base, sink_path=f"ds/{inside}")
    with surroundings(base):
        assert main(["run", str(path), "--scheduler", "sync"]) == 2
    err = capsys.readouterr().err
    assert "a folder the gpuetl dataset" in err and "internal error" not in err


@pytest.mark.parametrize("sink, expected", [
    ("out\x00x", "holds a NUL byte"),
    ("o" * 300, "File name too long"),
    ("/".join(["d" * 200] * 30), "File name too long"),
])
def test_sink_names_no_file_system_takes_are_pipeline_errors(base, surroundings, capsys, sink, expected):
    path = write_pipe(base, sink_path=sink)
    with surroundings(base):
        assert main(["run", str(path), "--scheduler", "sync"]) == 2
    err = capsys.readouterr().err
    assert expected in err and "internal error" not in err and "\x00" not in err and len(err) < 2000


def test_plan_prints_the_sink_path_the_run_writes(base, capsys):
    assert main(["plan", str(write_pipe(base, sink_path="out/new/../x/./"))]) == 0
    printed = capsys.readouterr().out
    assert f"sink: {base / 'out' / 'x'} (mode" in printed


def test_refusal_quotes_control_characters_and_cuts_long_names(base, surroundings, capsys):
    out = base / "out"
    out.mkdir()
    (out / "é\nfake: ok\x1b[31m").write_text("x")
    (out / ("L" * 250)).write_text("x")
    path = write_pipe(base, mode="overwrite")
    with surroundings(base):
        assert main(["run", str(path), "--scheduler", "sync"]) == 2
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if "did not write" in line)
    assert "é\\nfake: ok\\x1b[31m" in line and "\x1b" not in err
    assert "L" * 60 + "…" + "L" * 60 in line and "L" * 121 not in line


def _lock_record(pid) -> str:
    import socket

    return json.dumps({"format": "gpuetl-lock/1", "host": socket.gethostname(), "pid": pid, "start": "x"})


@pytest.mark.parametrize("content", ["[" * 100_000, "PID0", "PID-1", "PID2**70", "PIDtext", "PIDtrue"])
def test_lock_file_gpuetl_cannot_have_written_is_refused_by_name(base, surroundings, capsys, content):
    """pid 0 or -1 would make the liveness check ask about a process group or every process."""
    if content.startswith("PID"):
        content = _lock_record({"0": 0, "-1": -1, "2**70": 2 ** 70, "text": "1; rm", "true": True}[content[3:]])
    lock = base / "out" / "_tmp" / "_lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(content)
    path = write_pipe(base, mode="overwrite")
    with surroundings(base):
        assert main(["run", str(path), "--scheduler", "sync"]) == 2
    err = capsys.readouterr().err
    assert "_tmp/_lock is not a lock file gpuetl can read" in err and "internal error" not in err


# --------------------------------------------------------------------------- odd things in the output folder


def test_success_that_is_a_folder(base, surroundings, capsys):
    out = run(base).out_dir
    (out / "_SUCCESS").unlink()
    (out / "_SUCCESS").mkdir()
    (out / "_SUCCESS" / "keep").write_text("mine")
    path = write_pipe(base, mode="overwrite")
    with surroundings(base):
        assert main(["verify", str(out)]) == 1
        assert "_SUCCESS: not a file" in capsys.readouterr().out
        assert main(["run", str(path), "--scheduler", "sync"]) == 2
        assert "_SUCCESS/keep" in capsys.readouterr().err


def test_manifest_that_is_a_link(base, surroundings, capsys):
    out = run(base).out_dir
    elsewhere = base / "manifest-copy.json"
    elsewhere.write_bytes((out / "_manifest.json").read_bytes())
    (out / "_manifest.json").unlink()
    os.symlink(elsewhere, out / "_manifest.json")
    path = write_pipe(base, mode="overwrite")
    with surroundings(base):
        assert main(["verify", str(out)]) == 1
        assert "_manifest.json: not a regular file" in capsys.readouterr().err
        assert main(["run", str(path), "--scheduler", "sync"]) == 2
        err = capsys.readouterr().err
        assert "_manifest.json (_manifest.json is not a file)" in err and err.count("_manifest.json (") == 1


def test_manifest_nested_past_pythons_recursion_limit(base, surroundings, capsys):
    out = run(base).out_dir
    (out / "_manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    path = write_pipe(base, mode="overwrite")
    with surroundings(base):
        assert main(["verify", str(out)]) == 1
        assert main(["inspect", str(out)]) == 1
        assert main(["run", str(path), "--scheduler", "sync"]) == 2
    err = capsys.readouterr().err
    assert err.count("is not valid JSON") == 3 and "internal error" not in err


@pytest.mark.parametrize("listed", ["ABSOLUTE", "./part-00000.parquet", "part-00000.parquet/../../victim"])
def test_manifest_listing_an_absolute_or_dotted_path_is_not_trusted(base, surroundings, capsys, listed):
    out = run(base).out_dir
    victim = base / "victim"
    victim.write_text("do not delete")
    listed = str(victim) if listed == "ABSOLUTE" else listed
    manifest = json.loads((out / "_manifest.json").read_text())
    manifest["shards"][0]["path"] = listed
    (out / "_manifest.json").write_text(json.dumps(manifest))
    path = write_pipe(base, mode="overwrite")
    with surroundings(base):
        assert main(["verify", str(out)]) == 1
        assert f"{listed}: not a path inside the dataset" in capsys.readouterr().out
        assert main(["inspect", str(out)]) == 0
        assert main(["run", str(path), "--scheduler", "sync"]) == 2
        assert "refusing to overwrite" in capsys.readouterr().err


@pytest.mark.parametrize("deep", [["_owner.json"], ["_commit.json"], ["_owner.json", "_commit.json"]])
def test_run_records_nested_past_pythons_recursion_limit(base, surroundings, capsys, deep):
    out = run(base).out_dir
    crafted = out / "_tmp" / "x"
    crafted.mkdir(parents=True)
    (crafted / "_owner.json").write_text(json.dumps({"format": "gpuetl-run/1", "run": "x", "host": "h", "pid": 1}))
    for name in deep:
        (crafted / name).write_text("[" * 100_000)
    path = write_pipe(base, mode="overwrite")
    with surroundings(base, dataset=out):
        codes = [main([*command, str(out)]) for command in (["verify"], ["verify", "--repair"], ["inspect"])]
        codes.append(main(["run", str(path), "--scheduler", "sync"]))
    err = capsys.readouterr().err
    assert "internal error" not in err
    # verify names a journal it cannot use; with our owner record --repair and run refuse it (exit
    # 2); an unreadable owner record makes the folder not ours: left alone
    expected = {("_owner.json",): [0, 0, 0, 0], ("_commit.json",): [1, 2, 0, 2],
                ("_owner.json", "_commit.json"): [1, 1, 0, 0]}[tuple(deep)]
    assert codes == expected, (codes, err)
    assert sorted(p.name for p in crafted.iterdir()) == sorted({"_owner.json", *deep})   # let be: not ours


def test_hard_link_to_a_file_outside_is_replaced_not_written_through(base, surroundings):
    out = run(base).out_dir
    outside = base / "outside.parquet"
    outside.write_bytes((out / "part-00000.parquet").read_bytes())
    before = outside.read_bytes()
    (out / "part-00000.parquet").unlink()
    os.link(outside, out / "part-00000.parquet")
    with surroundings(base, dataset=out):
        result = run(base, mode="overwrite")
    assert_identity(result)
    assert outside.read_bytes() == before


def test_verify_and_inspect_on_a_folder_of_fifos_end(tmp_path, surroundings, capsys):
    """Nothing opens a FIFO (that would wait for a writer forever)."""
    folder = tmp_path / "f"
    folder.mkdir()
    for name in ("_manifest.json", "_SUCCESS", "part-00000.parquet"):
        os.mkfifo(folder / name)
    with surroundings(tmp_path):
        for command in (["verify"], ["verify", "--repair"], ["inspect"]):
            assert main([*command, str(folder)]) == 1
            assert "_manifest.json: not a regular file" in capsys.readouterr().err


# --------------------------------------------------------------------------- inputs


def write_source(tmp_path, kind, name, data: bytes, **over):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / name).write_bytes(data)
    spec = {"version": 1, "name": "adversary", "source": {"type": kind, "path": "in/*"}, "sink": {"path": "out"},
            **over}
    return gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path)


@pytest.mark.parametrize("kind, name, data, rows_in, quarantined", [
    ("jsonl", "f.jsonl", b'{"a":1}\n{"a":\x002}\n\x00\n{"a":3}\n', 4, 2),          # NUL bytes
    ("jsonl", "f.jsonl", b'\xef\xbb\xbf{"a":1}\n{"a":2}\n', 2, 0),                   # a BOM: not part of the record (#15)
    ("csv", "f.csv", b"a,b\n", 0, 0),                                                # a header only
    ("csv", "f.csv", b"a,b\r\n1,x\r\n2,y\r3,z\n4,w\r\n", 3, 1),                      # \r\n mixed with \r
    ("text", "f.log.gz", b"", 0, 0),                                                 # a 0-byte .gz
    ("text", "f.log.gz", gzip.compress(b"a\nb\n", mtime=0) + b"GARBAGE\n", 3, 1),    # trailing garbage
    ("text", "f.log.zst", b"hello\nworld\n", 1, 1),                                  # a .zst that is plain text
])
def test_odd_inputs_are_counted(tmp_path, surroundings, kind, name, data, rows_in, quarantined):
    # the counts are what is tested: an input whose only records are bad is committed all the same
    pipeline = write_source(tmp_path, kind, name, data, allow_empty_output=True)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = pipeline.run(backend="cpu", scheduler="sync")
    assert_identity(result, rows_in)
    assert result.counts["quarantined"] == quarantined
    reason = {"jsonl": "invalid JSON", "csv": "carriage return", "text": "stream is truncated or corrupt"}[kind]
    assert (quarantined > 0) == any(reason in r for r in result.bad_records), result.bad_records


@pytest.mark.parametrize("data", ["a,b\n1,2\n".encode("utf-16"), "a,b\n1,2\n".encode("utf-16-le")])
def test_csv_in_utf16_is_a_clear_error_not_garbled_columns(tmp_path, surroundings, data):
    pipeline = write_source(tmp_path, "csv", "f.csv", data)
    with surroundings(tmp_path):
        with pytest.raises(SpecError, match="is not UTF-8 text"):
            pipeline.run(backend="cpu", scheduler="sync")


@pytest.mark.parametrize("item, code, expected", [
    ("sink.path=&x out2", 0, "valid"),
    ("sink={a: &a [*a]}", 2, "nested more than 32 levels"),
    ("source.a.b.c.d.e.f.g.h=1", 2, "source.a: unknown key"),
])
def test_set_with_anchors_and_deep_paths(base, capsys, item, code, expected):
    assert main(["validate", str(write_pipe(base)), "--set", item]) == code
    captured = capsys.readouterr()
    assert expected in captured.out + captured.err


def test_a_compressed_file_without_a_compression_suffix_is_named_in_a_note(tmp_path, surroundings):
    """A gzip file named .log (or an xz file) is read as it is, never silently: the plan says so."""
    pipeline = write_source(tmp_path, "text", "a.log", gzip.compress(b"a\nb\n"))
    (tmp_path / "in" / "b.log").write_bytes(b"BZh9 a plain line that merely starts like bz2\n")
    (tmp_path / "in" / "c.log").write_bytes(b"\xfd7zXZ\x00" + bytes(range(256)))
    [note] = [n for n in pipeline.plan().notes if "look compressed" in n]
    assert "in/a.log (gzip), in/c.log (xz)" in note and "b.log" not in note
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = pipeline.run(backend="cpu", scheduler="sync")
    assert_identity(result, result.counts["rows_in"])
    assert result.counts["quarantined"] > 0         # the compressed bytes: not text, quarantined


def test_a_utf16_text_file_is_named_in_a_note(tmp_path, surroundings):
    """A UTF-16 file read as UTF-8 gives lines with NUL bytes between the characters: the plan
    says so rather than the run writing them without a word."""
    pipeline = write_source(tmp_path, "text", "a.log", "alpha one\nbeta two\n".encode("utf-16"))
    (tmp_path / "in" / "b.log").write_bytes("gamma three\n".encode("utf-16-be").join([b"\xfe\xff", b""]))
    (tmp_path / "in" / "c.log").write_bytes(b"plain\n")
    [note] = [n for n in pipeline.plan().notes if "UTF-16" in n]
    assert "in/a.log" in note and "in/b.log" in note and "c.log" not in note

def test_set_compression_reads_a_mislabelled_file(tmp_path, surroundings):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.log").write_bytes(gzip.compress(b"a\nb\n"))
    spec = {"version": 1, "name": "adversary", "source": {"type": "text", "path": "in/*", "compression": "gzip"},
            "sink": {"path": "out"}}
    pipeline = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path)
    assert not [n for n in pipeline.plan().notes if "look compressed" in n]
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = pipeline.run(backend="cpu", scheduler="sync")
    assert_identity(result, 2)
    assert result.counts["rows_out"] == 2
