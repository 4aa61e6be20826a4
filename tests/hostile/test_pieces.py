"""A partition is parsed and run through its row steps a piece at a time (runtime/partition.py:
read_partition; `Backend.piece_bytes`). No parser is handed more than a piece (or one record,
where a record alone is longer), and the dataset, its quarantine (line numbers and byte
offsets) and its counts are byte for byte the same whatever the piece size, down to pieces of
one byte: records longer than a piece, a partition of one huge line, CRLF line endings whose
\\r and \\n straddle a cut, quoted CSV newlines and multi-line records across a cut."""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gpuetl.backends.cpu import CpuBackend
from gpuetl.samples import write_access_logs

from .test_sources import quarantine, run, spec

PIECES = [1, 7, 100, 16 << 20]


def _text_bytes(text) -> int:
    return int(pc.sum(pc.binary_length(pa.chunked_array(pa.array(text.array)))).as_py() or 0)


@pytest.fixture
def handed(monkeypatch):
    """Every parser call's text: [(records, bytes)], through the CPU backend's kernels."""
    calls: list[tuple[int, int]] = []
    for name in ("extract_fields", "parse_csv", "parse_json"):
        kernel = getattr(CpuBackend, name)

        def spy(self, text, *args, _kernel=kernel, **kwargs):
            calls.append((len(text), _text_bytes(text)))
            return _kernel(self, text, *args, **kwargs)

        monkeypatch.setattr(CpuBackend, name, spy)
    return calls


def _dataset(result) -> dict:
    """Every file of the dataset (name -> sha256) but the manifest's timings, the quarantine's
    rows in file order, the counts and the stages."""
    files = {}
    for path in sorted(result.out_dir.rglob("*.parquet")):
        files[str(path.relative_to(result.out_dir))] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest = json.loads((result.out_dir / "_manifest.json").read_text())
    return {"files": files, "shards": manifest["shards"], "quarantine": quarantine(result),
            "counts": result.counts, "stages": result.stages}


def _by_piece_size(tmp_path, monkeypatch, surroundings, source: dict, pieces=PIECES, **over) -> dict:
    """The dataset of the same run at each piece size (all equal, or the assertion says which)."""
    got = {}
    for piece in pieces:
        monkeypatch.setattr(CpuBackend, "piece_bytes", piece)
        out = tmp_path / f"out-{piece}"
        with surroundings(tmp_path, dataset=out):
            result = run(tmp_path, {**spec(source, **over), "sink": {"path": out.name, "mode": "overwrite"}})
        got[piece] = _dataset(result)
    first = got[pieces[-1]]
    for piece, data in got.items():
        assert data == first, f"piece size {piece} changed the dataset"
    return first


LOGS = {"parse": {"preset": "apache_combined"}, "columns": {"status": "int16", "size": "int64"},
        "steps": [{"filter": "status < 500"}, {"derive": {"big": "size > 1000"}}, {"dedupe": {"on": ["ip"]}}]}


def test_no_parser_is_handed_more_than_a_piece(tmp_path, monkeypatch, handed):
    write_access_logs(tmp_path / "a.log", lines=600, seed=4, bad_every=40)
    monkeypatch.setattr(CpuBackend, "piece_bytes", 4000)
    result = run(tmp_path, spec({"type": "text", "path": "a.log", "blocksize": 1 << 20}, **LOGS))
    assert result.counts["rows_in"] == 600 and result.counts["quarantined"] >= 10
    assert len(handed) > 10 and sum(n for n, _ in handed) == 600
    assert max(size for _, size in handed) <= 4000


def test_no_csv_parse_is_handed_more_than_a_piece(tmp_path, monkeypatch, handed):
    (tmp_path / "a.csv").write_bytes(b"x,y\n" + b"".join(b'%d,"v\n%d"\n' % (i, i) for i in range(500)))
    monkeypatch.setattr(CpuBackend, "piece_bytes", 300)
    result = run(tmp_path, spec({"type": "csv", "path": "a.csv"}))
    assert result.counts["rows_out"] == 500
    assert len(handed) > 10 and sum(n for n, _ in handed) == 500
    assert max(size for _, size in handed) <= 300


def test_a_record_longer_than_a_piece_is_a_piece_of_its_own(tmp_path, monkeypatch, handed):
    write_access_logs(tmp_path / "a.log", lines=50, seed=1)
    lines = (tmp_path / "a.log").read_bytes().splitlines(keepends=True)
    huge = b"x" * 5000 + b"\n"
    (tmp_path / "a.log").write_bytes(b"".join(lines[:20]) + huge + b"".join(lines[20:]))
    monkeypatch.setattr(CpuBackend, "piece_bytes", 1000)
    result = run(tmp_path, spec({"type": "text", "path": "a.log"}, parse={"preset": "apache_combined"}))
    assert (1, 5000) in handed and max(size for n, size in handed if n > 1) <= 1000
    [bad] = quarantine(result)
    assert bad["_offset"] == sum(map(len, lines[:20])) and bad["_raw"] == huge[:-1]


@pytest.mark.parametrize("final_newline", [True, False])
def test_a_partition_of_one_huge_line(tmp_path, monkeypatch, surroundings, final_newline):
    (tmp_path / "a.txt").write_bytes(b"y" * 20_000 + (b"\n" if final_newline else b""))
    data = _by_piece_size(tmp_path, monkeypatch, surroundings, {"type": "text", "path": "a.txt"})
    assert data["counts"]["rows_out"] == 1


@pytest.mark.slow          # the pipeline run three times, at 100-byte pieces too
def test_logs_with_filter_derive_dedupe_and_shards_do_not_depend_on_the_piece_size(tmp_path, monkeypatch,
                                                                                   surroundings):
    write_access_logs(tmp_path / "a.log", lines=40, seed=2, bad_every=9)
    write_access_logs(tmp_path / "b.log", lines=30, seed=3, bad_every=7)
    data = _by_piece_size(tmp_path, monkeypatch, surroundings,
                          {"type": "text", "path": "*.log", "blocksize": 4000}, pieces=[100, 2000, 16 << 20], **LOGS,
                          shard={"count": 3, "shuffle": True, "seed": 1})
    c = data["counts"]
    assert c["quarantined"] >= 5 and c["filtered"] and c["deduplicated"] and len(data["files"]) >= 4


def test_crlf_split_across_a_piece_cut(tmp_path, monkeypatch, surroundings):
    """Every cut position is tried by the piece sizes 1 and 7; bad lines keep their offsets."""
    lines = [b"line %d\r\n" % i if i % 5 else b"\xff bad %d\r\n" % i for i in range(40)]
    (tmp_path / "a.txt").write_bytes(b"".join(lines) + b"\r\n\r\nlast")
    data = _by_piece_size(tmp_path, monkeypatch, surroundings, {"type": "text", "path": "a.txt"})
    assert data["counts"]["rows_out"] == 33
    assert [q["_offset"] for q in data["quarantine"]] == [sum(map(len, lines[:i])) for i in range(0, 40, 5)]
    assert all(not q["_raw"].endswith(b"\r") for q in data["quarantine"])


def test_quoted_csv_newlines_across_piece_cuts(tmp_path, monkeypatch, surroundings):
    body = b"".join(b'%d,"a\r\nb%d"\r\n' % (i, i) if i % 7 else b'%d,"open\n' % i + b"x,y\n" for i in range(60))
    (tmp_path / "a.csv").write_bytes(b"x,y\r\n" + body)
    data = _by_piece_size(tmp_path, monkeypatch, surroundings, {"type": "csv", "path": "a.csv", "blocksize": 500})
    assert data["counts"]["rows_out"] > 25 and data["counts"]["quarantined"] > 0
    # an `x,y` line that ends up a record of its own repeats the header: quarantined as such
    assert any(q["_raw"] == b"x,y" and "repeats the header" in q["_reason"] for q in data["quarantine"])


def test_multiline_records_across_piece_cuts(tmp_path, monkeypatch, surroundings):
    records = [b"START %d\n  more %d\n  and more\n" % (i, i) for i in range(50)]
    (tmp_path / "a.txt").write_bytes(b"orphan line\n" + b"".join(records))
    data = _by_piece_size(tmp_path, monkeypatch, surroundings,
                          {"type": "text", "path": "a.txt", "blocksize": 400, "multiline": {"start": "^START"}})
    assert data["counts"]["rows_out"] == 50 and data["counts"]["quarantined"] == 1
