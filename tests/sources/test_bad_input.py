"""Bad input: every bad record lands in the quarantine (or a tally, or a clear error), and
rows_in = rows_out + filtered + deduplicated + quarantined holds in every case."""

from __future__ import annotations

import builtins
import json
import os

import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.errors import DataError, GpuetlError, SourceError, SpecError
from gpuetl.sources import files as files_mod
from gpuetl.sources import compressed as compressed_mod
from gpuetl.sources import ranges as ranges_mod

REGEX = r"^(?P<a>\d+) (?P<b>.*)$"
ZERO = {"rows_in": 0, "rows_out": 0, "filtered": 0, "deduplicated": 0, "quarantined": 0}


def spec(path="in/*.log", **over):
    s = {"version": 1, "name": "t",
         "source": {"type": "text", "path": path, "blocksize": 64, "provenance": True},
         "parse": {"regex": REGEX}, "columns": {"a": "int32"},
         "sink": {"path": "out", "mode": "overwrite"}}
    s["source"].update(over.pop("source", {}))
    s.update(over)
    return s


def run(tmp_path, s):
    return gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")


def write(tmp_path, name, data: bytes | str):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


def rows(result):
    return pq.read_table(result.out_dir / "part-00000.parquet").to_pylist()


def quarantine(result):
    files = sorted((result.out_dir / "_quarantine").glob("part-*.parquet"))
    return sorted((r for f in files for r in pq.read_table(f).to_pylist()), key=lambda r: (r["_file"], r["_offset"]))


def assert_identity(result):
    c = result.counts
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    for st in result.stages:
        assert st["rows_in"] == st["rows_out"] + st["filtered"] + st["deduplicated"] + st["quarantined"]
    manifest = json.loads((result.out_dir / "_manifest.json").read_text())
    assert manifest["counts"] == c
    assert sum(s["rows"] for s in result.shards) == c["rows_out"]
    if result.quarantine:
        assert sum(q["rows"] for q in result.quarantine) == c["quarantined"]


def assert_nothing_committed(out):
    assert not (out / "_SUCCESS").exists()
    assert not (out / "_manifest.json").exists()
    assert not list(out.glob("*.parquet")) if out.exists() else True
    assert not (out / "_quarantine").exists()
    tmp = out / "_tmp"                # nothing but a failed run's report (docs/observing.md)
    left = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*")) if tmp.exists() else []
    assert all(p.split("/")[0].endswith("-report") for p in left), left
    assert {p.split("/", 1)[1] for p in left if "/" in p} <= {"_owner.json", "_report.json", "_report.html"}, left


# -- records that cannot be parsed or typed ---------------------------------------------------------

def test_unparseable_lines_are_quarantined_with_location(tmp_path):
    write(tmp_path, "in/a.log", "1 one\nnot a record\n2 two\n")
    write(tmp_path, "in/b.log", "garbage\r\n3 three\n")
    result = run(tmp_path, spec())
    assert [(r["a"], r["b"], r["_file"], r["_offset"]) for r in rows(result)] == [
        (1, "one", "in/a.log", 0), (2, "two", "in/a.log", 19), (3, "three", "in/b.log", 9)]
    assert quarantine(result) == [
        {"_file": "in/a.log", "_offset": 6, "_raw": b"not a record", "_reason": "line does not match the regex",
         "_stage": "0:read-parse"},
        {"_file": "in/b.log", "_offset": 0, "_raw": b"garbage", "_reason": "line does not match the regex",
         "_stage": "0:read-parse"},
    ]
    assert result.counts == {**ZERO, "rows_in": 5, "rows_out": 3, "quarantined": 2}
    assert result.bad_records == {"line does not match the regex": 2}
    assert_identity(result)


def test_values_that_do_not_cast_are_quarantined(tmp_path):
    write(tmp_path, "in/a.log", "1 ok\n99999999999 too big\n5 five\n")
    result = run(tmp_path, spec())
    assert [r["a"] for r in rows(result)] == [1, 5]
    q = quarantine(result)
    assert [(r["_offset"], r["_raw"]) for r in q] == [(5, b"99999999999 too big")]
    assert "'a'" in q[0]["_reason"] and "int32" in q[0]["_reason"]
    assert_identity(result)


def test_invalid_utf8_is_quarantined(tmp_path):
    write(tmp_path, "in/a.log", b"1 good\n2 bad \xff\xfe bytes\n3 caf\xc3\xa9\n4 lone \xc3\n")
    result = run(tmp_path, spec())
    assert [(r["a"], r["b"]) for r in rows(result)] == [(1, "good"), (3, "café")]
    q = quarantine(result)
    assert [(r["_offset"], r["_raw"]) for r in q] == [(7, b"2 bad \xff\xfe bytes"), (30, b"4 lone \xc3")]   # exact bytes
    assert all("UTF-8" in r["_reason"] for r in q)
    assert result.counts == {**ZERO, "rows_in": 4, "rows_out": 2, "quarantined": 2}
    assert_identity(result)


def test_invalid_utf8_without_parse(tmp_path):
    write(tmp_path, "in/a.log", b"fine\n\x80\x81\n")
    result = run(tmp_path, spec(parse=None, columns={}))
    assert [r["line"] for r in rows(result)] == ["fine"]
    assert [(r["_offset"], r["_reason"]) for r in quarantine(result)] == [(5, "invalid UTF-8")]
    assert_identity(result)


def test_nul_bytes_and_control_characters_do_not_break_lines(tmp_path):
    write(tmp_path, "in/a.log", b"1 a\x00b\n2 \x1b[31mred\x1b[0m\n3 form\x0cfeed\n")
    result = run(tmp_path, spec())
    assert [(r["a"], r["b"], r["_offset"]) for r in rows(result)] == [
        (1, "a\x00b", 0), (2, "\x1b[31mred\x1b[0m", 6), (3, "form\x0cfeed", 21)]
    assert_identity(result)


# -- empty, missing and unreadable inputs ----------------------------------------------------------

def test_empty_file(tmp_path):
    write(tmp_path, "in/a.log", b"")
    result = run(tmp_path, spec())
    assert result.counts == ZERO
    assert rows(result) == []
    assert (result.out_dir / "_SUCCESS").exists()
    assert_identity(result)


def test_file_of_blank_lines(tmp_path):
    write(tmp_path, "in/a.log", "\n\r\n\n\n")
    result = run(tmp_path, spec())
    assert result.counts == ZERO
    assert (result.out_dir / "_SUCCESS").exists()


def test_empty_file_among_others(tmp_path):
    write(tmp_path, "in/a.log", "1 x\n")
    write(tmp_path, "in/b.log", b"")
    write(tmp_path, "in/c.log", "2 y")
    result = run(tmp_path, spec())
    assert [(r["_file"], r["a"]) for r in rows(result)] == [("in/a.log", 1), ("in/c.log", 2)]
    assert_identity(result)


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(SpecError) as info:
        run(tmp_path, spec("in/nope.log"))
    assert str(tmp_path / "in" / "nope.log") in str(info.value)
    assert info.value.exit_code == 2
    assert not (tmp_path / "out").exists()


def test_glob_matching_nothing_names_the_pattern(tmp_path):
    write(tmp_path, "in/a.txt", "1 x\n")
    with pytest.raises(SpecError) as info:
        run(tmp_path, spec("in/*.log"))
    assert "'in/*.log'" in str(info.value) and "matches no file" in str(info.value)
    assert not (tmp_path / "out").exists()


def test_second_glob_matching_nothing_is_still_an_error(tmp_path):
    write(tmp_path, "in/a.log", "1 x\n")
    with pytest.raises(SpecError, match=r"'other/\*\*/\*\.log' matches no file"):
        run(tmp_path, spec(["in/*.log", "other/**/*.log"]))


def test_folder_instead_of_file(tmp_path):
    (tmp_path / "in").mkdir()
    with pytest.raises(SpecError) as info:
        run(tmp_path, spec("in"))
    assert "is a folder" in str(info.value) and str(tmp_path / "in") in str(info.value)


def test_pipeline_folder_with_glob_characters(tmp_path):
    """'[' in the pipeline's folder name is part of a place, not of the pattern."""
    base = tmp_path / "run[1]"
    write(base, "in/a.log", "1 x\n")
    write(tmp_path, "run1/in/b.log", "2 wrong folder\n")     # what '[1]' would match as a class
    result = run(base, spec())
    assert [(r["_file"], r["a"]) for r in rows(result)] == [("in/a.log", 1)]


def test_broken_symlink_in_glob(tmp_path):
    write(tmp_path, "in/a.log", "1 x\n")
    os.symlink(tmp_path / "in" / "gone.log", tmp_path / "in" / "b.log")
    with pytest.raises(GpuetlError) as info:
        run(tmp_path, spec())
    assert "in/b.log" in str(info.value)
    assert "No such file" in str(info.value)
    assert "Traceback" not in str(info.value)


def test_unreadable_file_at_plan_time(tmp_path, monkeypatch):
    write(tmp_path, "in/a.log", "1 x\n")
    bad = write(tmp_path, "in/b.log", "2 y\n")
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if os.fspath(path) == str(bad):
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(files_mod.os, "stat", stat)
    with pytest.raises(SpecError) as info:
        run(tmp_path, spec())
    assert str(bad) in str(info.value) and "Permission denied" in str(info.value)


@pytest.mark.parametrize("name", ["in/b.log", "in/b.log.gz"])
def test_unreadable_file_at_read_time(tmp_path, monkeypatch, name):
    import gzip

    write(tmp_path, "in/a.log", "1 x\n")
    bad = write(tmp_path, name, gzip.compress(b"2 y\n") if name.endswith(".gz") else b"2 y\n")
    real_open = builtins.open

    def fake_open(file, *args, **kwargs):
        if os.fspath(file) == str(bad):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(ranges_mod, "open", fake_open, raising=False)
    monkeypatch.setattr(compressed_mod, "open", fake_open, raising=False)   # (a compressed file's scan)
    with pytest.raises(SourceError) as info:
        run(tmp_path, spec("in/*"))
    assert name in str(info.value) and "Permission denied" in str(info.value)
    assert info.value.exit_code == 1
    assert_nothing_committed(tmp_path / "out")


def test_file_deleted_after_planning(tmp_path):
    write(tmp_path, "in/a.log", "1 x\n")
    gone = write(tmp_path, "in/b.log", "2 y\n")
    pipeline = gpuetl.Pipeline.from_dict(spec(), base_dir=tmp_path)
    plan = pipeline.plan()
    gone.unlink()
    from gpuetl.backends import get_backend
    from gpuetl.runtime.executor import open_executor
    from gpuetl.runtime.run import run_plan

    backend = get_backend("cpu")
    with open_executor("sync", backend, quiet=True) as ex, pytest.raises(SourceError, match=r"in/b\.log: cannot read"):
        run_plan(plan, backend, ex, log=lambda *_: None)
    assert_nothing_committed(tmp_path / "out")


# -- on_error and max_error_ratio ------------------------------------------------------------------

BAD_EVERY_3 = "".join(f"{i} ok\n" if i % 3 else f"bad line {i}\n" for i in range(1, 31))


def test_on_error_drop(tmp_path):
    write(tmp_path, "in/a.log", BAD_EVERY_3)
    result = run(tmp_path, spec(on_error="drop"))
    assert result.counts == {**ZERO, "rows_in": 30, "rows_out": 20, "quarantined": 10}
    assert not (result.out_dir / "_quarantine").exists()
    assert result.quarantine == []
    assert result.bad_records == {"line does not match the regex": 10}
    assert [r["a"] for r in rows(result)] == [i for i in range(1, 31) if i % 3]
    assert_identity(result)


def test_on_error_fail_names_file_and_offset(tmp_path):
    write(tmp_path, "in/a.log", "1 ok\n2 ok\nbroken\n4 ok\nbroken too\n")
    with pytest.raises(DataError) as info:
        run(tmp_path, spec(on_error="fail"))
    msg = str(info.value)
    assert "in/a.log, byte offset 10" in msg
    assert "broken" in msg and "line does not match the regex" in msg
    assert info.value.exit_code == 1
    assert_nothing_committed(tmp_path / "out")


def test_on_error_fail_on_cast_error(tmp_path):
    write(tmp_path, "in/a.log", "1 ok\n77777777777 x\n")
    with pytest.raises(DataError, match=r"in/a\.log, byte offset 5: column 'a'"):
        run(tmp_path, spec(on_error="fail"))


def test_on_error_fail_on_invalid_utf8(tmp_path):
    write(tmp_path, "in/a.log", b"1 ok\n2 \xff\n")
    with pytest.raises(DataError, match=r"in/a\.log, byte offset 5: invalid UTF-8"):
        run(tmp_path, spec(on_error="fail"))


def test_on_error_fail_passes_on_clean_input(tmp_path):
    write(tmp_path, "in/a.log", "1 ok\n2 ok\n")
    result = run(tmp_path, spec(on_error="fail"))
    assert result.counts == {**ZERO, "rows_in": 2, "rows_out": 2}


def test_max_error_ratio_exceeded_commits_nothing(tmp_path):
    write(tmp_path, "in/a.log", BAD_EVERY_3)
    with pytest.raises(DataError) as info:
        run(tmp_path, spec(max_error_ratio=0.2))
    msg = str(info.value)
    assert "10 of 30 records are bad" in msg and "max_error_ratio 0.2" in msg
    assert "line does not match the regex" in msg
    assert_nothing_committed(tmp_path / "out")


def test_max_error_ratio_failure_keeps_the_previous_dataset(tmp_path):
    write(tmp_path, "in/a.log", "1 ok\n2 ok\n")
    first = run(tmp_path, spec(max_error_ratio=0.2))
    before = (first.out_dir / "part-00000.parquet").read_bytes()
    write(tmp_path, "in/a.log", BAD_EVERY_3)
    with pytest.raises(DataError):
        run(tmp_path, spec(max_error_ratio=0.2))
    assert (first.out_dir / "_SUCCESS").exists()
    assert (first.out_dir / "part-00000.parquet").read_bytes() == before
    assert json.loads((first.out_dir / "_manifest.json").read_text())["counts"]["rows_in"] == 2


def test_max_error_ratio_within_limit(tmp_path):
    write(tmp_path, "in/a.log", BAD_EVERY_3)
    result = run(tmp_path, spec(max_error_ratio=0.34))
    assert result.counts["quarantined"] == 10
    assert (result.out_dir / "_SUCCESS").exists()
    assert_identity(result)


def test_accounting_with_steps_and_bad_input(tmp_path):
    write(tmp_path, "in/a.log", BAD_EVERY_3 + "1 ok\n2 ok\n")
    s = spec(steps=[{"filter": "a > 5"}, {"dedupe": {"on": ["a", "b"]}}])
    result = run(tmp_path, s)
    good = [i for i in range(1, 31) if i % 3]
    assert result.counts == {"rows_in": 32, "rows_out": len([i for i in good if i > 5]),
                             "filtered": len([i for i in good if i <= 5]) + 2, "deduplicated": 0,
                             "quarantined": 10}
    assert_identity(result)


@pytest.mark.parametrize("blocksize", [0, -1, "0MiB"])
def test_non_positive_blocksize_is_a_spec_error(tmp_path, blocksize):
    write(tmp_path, "in/a.log", "1 x\n")
    with pytest.raises(SpecError, match="source.blocksize: a size must be positive"):
        gpuetl.Pipeline.from_dict(spec(source={"blocksize": blocksize}), base_dir=tmp_path).plan()


def test_paths_with_spaces_and_unicode(tmp_path):
    write(tmp_path, "in put/jour été.log", "1 x\n")
    write(tmp_path, "in put/日志.log", "2 y\n")
    result = run(tmp_path, spec("in put/*.log"))
    assert sorted((r["_file"], r["a"]) for r in rows(result)) == [("in put/jour été.log", 1), ("in put/日志.log", 2)]


def test_absolute_pattern_outside_the_pipeline_folder(tmp_path):
    write(tmp_path, "data/a.log", "1 x\n")
    (tmp_path / "pipe").mkdir()
    result = run(tmp_path / "pipe", spec(str(tmp_path / "data" / "*.log")))
    assert [r["_file"] for r in rows(result)] == [os.path.join("..", "data", "a.log")]   # relative, as documented
