"""Text sources: line endings, final newlines, and results that do not depend on the blocksize."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.samples import write_access_logs, write_syslog


def run(tmp_path, path, parse=None, blocksize=4096, provenance=False, columns=None, out="out"):
    s = {"version": 1, "name": "t",
         "source": {"type": "text", "path": path, "blocksize": blocksize, "provenance": provenance},
         "sink": {"path": out, "mode": "overwrite"}}
    if parse:
        s["parse"] = parse
    if columns:
        s["columns"] = columns
    result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    c = result.counts
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    return result, pq.read_table(result.out_dir / "part-00000.parquet")


def quarantine(result):
    files = sorted((result.out_dir / "_quarantine").glob("part-*.parquet"))
    return [r for f in files for r in pq.read_table(f).to_pylist()]


@pytest.fixture(scope="module")
def access_lf(tmp_path_factory) -> bytes:
    d = tmp_path_factory.mktemp("access")
    write_access_logs(d / "x.log", lines=400, bad_every=40)
    return (d / "x.log").read_bytes()


PARSES = {
    "preset": {"preset": "apache_combined"},
    "regex": {"regex": r'^(?P<ip>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] "(?P<request>[^"]*)" (?P<status>\d+) (?P<rest>.*)$'},
    "template": {"template": '<ip> <ident> <user> \\[<time>\\] "<request>" <status> <size> <rest>'},
    "none": None,
}


@pytest.mark.parametrize("kind", sorted(PARSES))
def test_crlf_gives_the_same_rows_as_lf(tmp_path, access_lf, kind):
    (tmp_path / "lf").mkdir()
    (tmp_path / "crlf").mkdir()
    (tmp_path / "lf" / "x.log").write_bytes(access_lf)
    (tmp_path / "crlf" / "x.log").write_bytes(access_lf.replace(b"\n", b"\r\n"))
    lf, lf_table = run(tmp_path, "lf/x.log", PARSES[kind], out="out-lf")
    crlf, crlf_table = run(tmp_path, "crlf/x.log", PARSES[kind], out="out-crlf")
    assert lf.counts == crlf.counts
    assert lf.counts["rows_in"] == 400
    if kind != "none":
        assert lf.counts["quarantined"] == 10
    assert crlf_table.equals(lf_table)
    assert not any("\r" in str(v) for col in crlf_table.columns for v in col.to_pylist())
    # quarantined raws carry no '\r' either
    assert [q["_raw"] for q in quarantine(crlf)] == [q["_raw"] for q in quarantine(lf)]


def test_crlf_offsets_count_the_carriage_returns(tmp_path):
    (tmp_path / "x.log").write_bytes(b"1 a\r\n2 bb\r\n\r\n3 ccc\r\n")
    _, table = run(tmp_path, "x.log", {"regex": r"^(?P<n>\d) (?P<s>\w+)$"}, provenance=True,
                   columns={"n": "int8"}, blocksize=3)
    assert table.to_pylist() == [
        {"n": 1, "s": "a", "_file": "x.log", "_offset": 0},
        {"n": 2, "s": "bb", "_file": "x.log", "_offset": 5},
        {"n": 3, "s": "ccc", "_file": "x.log", "_offset": 13},
    ]


@pytest.mark.parametrize("blocksize", [1, 5, 4096])
def test_last_line_without_newline_is_kept(tmp_path, blocksize):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.log").write_bytes(b"10 first\n20 last")
    (tmp_path / "in" / "b.log").write_bytes(b"30 only")
    (tmp_path / "in" / "c.log").write_bytes(b"40 cr\r")
    result, table = run(tmp_path, "in/*.log", {"regex": r"^(?P<n>\d+) (?P<s>.*)$"}, blocksize=blocksize,
                        provenance=True, columns={"n": "int32"})
    assert [(r["n"], r["s"], r["_file"], r["_offset"]) for r in table.to_pylist()] == [
        (10, "first", "in/a.log", 0), (20, "last", "in/a.log", 9), (30, "only", "in/b.log", 0),
        (40, "cr\r", "in/c.log", 0)]          # no newline: nothing is a line ending, the \r is the record's
    assert result.counts["quarantined"] == 0


def test_old_mac_line_endings_are_not_line_breaks(tmp_path):
    """A lone '\\r' is not a record separator (only '\\n' is, as in cudf.read_text)."""
    (tmp_path / "x.log").write_bytes(b"a\rb\rc\n")
    _, table = run(tmp_path, "x.log")
    assert table.column("line").to_pylist() == ["a\rb\rc"]


def test_whitespace_is_kept_except_line_endings(tmp_path):
    (tmp_path / "x.log").write_bytes(b"  lead\ntrail  \r\n\t\n")
    _, table = run(tmp_path, "x.log")
    assert table.column("line").to_pylist() == ["  lead", "trail  ", "\t"]


def test_unicode_lines(tmp_path):
    lines = ["héllo wörld", "中文日志 ERROR", "emoji 😀🚀", "ℝ∑∫ math", "\u200bzero width"]
    (tmp_path / "x.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _, table = run(tmp_path, "x.log", blocksize=3, provenance=True)
    raw = (tmp_path / "x.log").read_bytes()
    assert table.column("line").to_pylist() == lines
    offsets = table.column("_offset").to_pylist()
    assert [raw[o:].split(b"\n")[0].decode() for o in offsets] == lines


@pytest.mark.parametrize("blocksize", [2999, 1 << 20])
def test_result_does_not_depend_on_blocksize(tmp_path, access_lf, blocksize):
    (tmp_path / "x.log").write_bytes(access_lf)
    result, table = run(tmp_path, "x.log", {"preset": "apache_combined"}, blocksize=blocksize, provenance=True)
    ref, ref_table = run(tmp_path, "x.log", {"preset": "apache_combined"}, blocksize=1 << 30, provenance=True,
                         out="ref")
    assert result.counts == ref.counts
    assert table.equals(ref_table)
    assert result.shards[0]["sha256"] == ref.shards[0]["sha256"]


def test_syslog_sample_with_template(tmp_path):
    write_syslog(tmp_path / "sys.log", lines=200)
    result, table = run(tmp_path, "sys.log", {"preset": "syslog_rfc3164"}, blocksize=500)
    assert result.counts["rows_in"] == 200
    assert table.num_rows + result.counts["quarantined"] == 200
