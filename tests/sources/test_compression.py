"""Compressed inputs: pieces of about `blocksize` uncompressed bytes, the same rows and offsets as
the uncompressed file at any blocksize; explicit `compression` settings; truncated and corrupt
streams."""

from __future__ import annotations

import bz2
import gzip
import math

import pyarrow.parquet as pq
import pytest
import zstandard

import gpuetl
from gpuetl.errors import DataError
from gpuetl.samples import write_access_logs
from gpuetl.sources.files import resolve_inputs
from gpuetl.sources.ranges import CompressedRange, read_range

LINES = 300

COMPRESSORS = {
    "gz": gzip.compress,
    "bz2": lambda b: bz2.compress(b, 1),           # 100 kB blocks: a cut file still has whole blocks
    "zst": lambda b: zstandard.ZstdCompressor().compress(b),
}


def spec(path, **over):
    s = {"version": 1, "name": "t",
         "source": {"type": "text", "path": path, "blocksize": 4096, "provenance": True},
         "parse": {"preset": "apache_combined"},
         "sink": {"path": over.pop("out", "out"), "mode": "overwrite"}}
    s["source"].update(over.pop("source", {}))
    s.update(over)
    return s


def run(tmp_path, s):
    return gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")


def rows(result, drop=("_file",)):
    table = pq.read_table(result.out_dir / "part-00000.parquet")
    return [{k: v for k, v in r.items() if k not in drop} for r in table.to_pylist()]


def quarantine(result):
    files = sorted((result.out_dir / "_quarantine").glob("part-*.parquet"))
    return [r for f in files for r in pq.read_table(f).to_pylist()]


def identity(counts):
    return counts["rows_in"] == counts["rows_out"] + counts["filtered"] + counts["deduplicated"] + counts["quarantined"]


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> bytes:
    d = tmp_path_factory.mktemp("plain")
    write_access_logs(d / "x.log", lines=LINES, bad_every=50)
    return (d / "x.log").read_bytes()


@pytest.fixture(scope="module")
def plain_result(plain, tmp_path_factory):
    d = tmp_path_factory.mktemp("plainrun")
    (d / "in").mkdir()
    (d / "in" / "x.log").write_bytes(plain)
    result = run(d, spec("in/x.log"))
    return result, rows(result), [{k: v for k, v in q.items() if k != "_file"} for q in quarantine(result)]


def test_plain_baseline(plain, plain_result):
    result, got, bad = plain_result
    assert len(plain) > 4 * 4096                   # several ranges
    assert result.counts["rows_in"] == LINES
    assert result.counts["quarantined"] == LINES // 50 == len(bad)
    assert result.counts["rows_out"] == LINES - LINES // 50 == len(got)
    assert identity(result.counts)


def shard_bytes(result) -> bytes:
    return (result.out_dir / "part-00000.parquet").read_bytes()


@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
def test_compressed_file_reads_the_same_in_pieces_of_blocksize(tmp_path, plain, plain_result, suffix):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / f"x.log.{suffix}").write_bytes(COMPRESSORS[suffix](plain))
    pipeline = gpuetl.Pipeline.from_dict(spec(f"in/*.{suffix}"), base_dir=tmp_path)
    plan = pipeline.plan()
    pieces = [r for p in plan.partitions for r in p.ranges]
    assert all(isinstance(r, CompressedRange) for r in pieces)
    assert len(plan.partitions) == len(pieces) == math.ceil(len(plain) / 4096)
    # each piece: about blocksize uncompressed bytes (a record that crosses the end included)
    longest = max(len(line) + 1 for line in plain.split(b"\n"))
    assert max(r.stop - r.offset for r in pieces) <= 4096 + longest
    assert plan.files[0].compression == {"gz": "gzip", "bz2": "bz2", "zst": "zstd"}[suffix]
    result = pipeline.run(backend="cpu", scheduler="sync")
    base_result, base_rows, base_bad = plain_result
    assert result.counts == base_result.counts
    assert rows(result) == base_rows             # _offset: offsets in the uncompressed text
    assert [{k: v for k, v in q.items() if k != "_file"} for q in quarantine(result)] == base_bad
    assert {q["_file"] for q in quarantine(result)} == {f"in/x.log.{suffix}"}


@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
def test_shard_bytes_do_not_depend_on_blocksize_or_compression(tmp_path, plain, suffix):
    """The plain file at one blocksize and the compressed file at tiny and large ones (the same
    `_file` name: only `compression` tells them apart) write byte-identical shards."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.log").write_bytes(plain)
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / "x.log").write_bytes(COMPRESSORS[suffix](plain))
    compression = {"gz": "gzip", "bz2": "bz2", "zst": "zstd"}[suffix]
    base = shard_bytes(run(tmp_path, spec("in/x.log", out="o0", source={"blocksize": 1 << 20})))
    for i, blocksize in enumerate((1500, 1 << 20)):
        other = tmp_path / f"c{i}"
        other.mkdir()
        (other / "in").symlink_to(tmp_path / "z")
        got = run(other, spec("in/x.log", out="o", source={"blocksize": blocksize, "compression": compression}))
        assert shard_bytes(got) == base, blocksize


def test_samples_gzip_writer_round_trips(tmp_path, plain, plain_result):
    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "x.log.gz", lines=LINES, bad_every=50, gzip=True)
    result = run(tmp_path, spec("in/x.log.gz"))
    assert rows(result) == plain_result[1]


def test_mixed_plain_and_compressed_inputs(tmp_path, plain):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.log").write_bytes(plain)
    (tmp_path / "in" / "b.log.gz").write_bytes(gzip.compress(plain))
    (tmp_path / "in" / "c.log.zst").write_bytes(COMPRESSORS["zst"](plain))
    plan = gpuetl.Pipeline.from_dict(spec("in/*"), base_dir=tmp_path).plan()
    assert len(plan.partitions) == 3 * math.ceil(len(plain) / 4096)
    result = run(tmp_path, spec("in/*"))
    assert result.counts["rows_in"] == 3 * LINES
    assert result.counts["quarantined"] == 3 * (LINES // 50)
    assert identity(result.counts)
    got = pq.read_table(result.out_dir / "part-00000.parquet").to_pylist()
    by_file = {}
    for r in got:
        by_file.setdefault(r["_file"], []).append({k: v for k, v in r.items() if k != "_file"})
    assert by_file["in/a.log"] == by_file["in/b.log.gz"] == by_file["in/c.log.zst"]


def test_multi_member_gzip_and_multi_frame_zstd(tmp_path):
    (tmp_path / "m.gz").write_bytes(gzip.compress(b"a\nb") + gzip.compress(b"c\n"))
    zc = zstandard.ZstdCompressor()
    (tmp_path / "m.zst").write_bytes(zc.compress(b"a\nb") + zc.compress(b"c\n"))
    for name in ("m.gz", "m.zst"):
        f = resolve_inputs([name], tmp_path, "infer")[0]
        got = read_range(f, CompressedRange(0, 0, stop=5))
        assert (got.data, got.truncated) == (b"a\nbc\n", None)


def test_streamed_zstd_without_content_size(tmp_path, plain):
    obj = zstandard.ZstdCompressor().compressobj()
    (tmp_path / "s.zst").write_bytes(obj.compress(plain) + obj.flush())
    f = resolve_inputs(["s.zst"], tmp_path, "infer")[0]
    got = read_range(f, CompressedRange(0, 0, stop=len(plain)))
    assert (got.data, got.truncated) == (plain, None)


def test_explicit_compression_overrides_suffix(tmp_path, plain, plain_result):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.dat").write_bytes(gzip.compress(plain))
    result = run(tmp_path, spec("in/x.dat", source={"compression": "gzip"}))
    assert rows(result) == plain_result[1]


def test_compression_none_on_gzip_reads_raw_bytes(tmp_path, plain):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.log.gz").write_bytes(gzip.compress(plain))
    # every line is bad, which is what is tested: the empty dataset is committed all the same
    pipeline = gpuetl.Pipeline.from_dict(spec("in/x.log.gz", source={"compression": "none", "blocksize": 512},
                                              allow_empty_output=True), base_dir=tmp_path)
    plan = pipeline.plan()
    assert plan.files[0].compression is None
    assert len(plan.partitions) >= math.ceil(plan.files[0].size / 512)      # split like any plain file
    result = pipeline.run(backend="cpu", scheduler="sync")
    assert result.counts["rows_in"] > 0
    assert result.counts["rows_out"] == 0        # binary garbage never matches the preset
    assert result.counts["quarantined"] == result.counts["rows_in"]
    assert identity(result.counts)
    reasons = {q["_reason"] for q in quarantine(result)}
    assert reasons <= {"invalid UTF-8", "line does not match preset apache_combined"}
    assert "invalid UTF-8" in reasons


def test_compression_none_without_parse_keeps_valid_lines(tmp_path):
    (tmp_path / "x.gz").write_bytes(gzip.compress(b"hello\n" * 100))
    s = {"version": 1, "name": "t", "source": {"type": "text", "path": "x.gz", "compression": "none"},
         "sink": {"path": "out", "mode": "overwrite"}, "allow_empty_output": True}     # gzip's bytes may hold no valid line
    result = run(tmp_path, s)
    assert identity(result.counts)
    assert result.counts["rows_in"] == result.counts["rows_out"] + result.counts["quarantined"]


# -- truncated and corrupt streams ---------------------------------------------------------------

def _cut(data: bytes, keep: float) -> bytes:
    return data[: int(len(data) * keep)]


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> bytes:
    """Big enough for several bz2 (100 kB) and zstd (128 KiB) blocks: only whole blocks decode."""
    d = tmp_path_factory.mktemp("big")
    write_access_logs(d / "x.log", lines=3000)
    return (d / "x.log").read_bytes()


@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
def test_truncated_stream_keeps_rows_before_the_cut(tmp_path, big, suffix):
    plain = big
    good = [line for line in plain.split(b"\n") if line]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / f"x.log.{suffix}").write_bytes(_cut(COMPRESSORS[suffix](plain), 0.6))
    pipeline = gpuetl.Pipeline.from_dict(spec("in/*", parse=None, source={"blocksize": 64 << 10}),
                                         base_dir=tmp_path)
    assert len(pipeline.plan().partitions) > 1             # the cut lies in the last of several pieces
    result = pipeline.run(backend="cpu", scheduler="sync")
    q = quarantine(result)
    truncation = [r for r in q if "truncated" in r["_reason"]]
    assert len(truncation) == 1, q
    assert f"in/x.log.{suffix}" in truncation[0]["_reason"]
    assert truncation[0]["_file"] == f"in/x.log.{suffix}"
    kept = rows(result)
    assert 0 < len(kept) < len(good)
    # every kept row is a whole, correct line at its true offset
    for r in kept:
        assert plain[r["_offset"]:].split(b"\n", 1)[0].decode() == r["line"]
    assert kept == [{"line": g.decode(), "_offset": o} for g, o in
                    zip(good, [0] + [i + 1 for i, c in enumerate(plain) if c == 10])][: len(kept)]
    # the quarantine row sits where the readable text stops; its raw is the cut-off record's start
    tr = truncation[0]
    assert tr["_offset"] >= kept[-1]["_offset"] + len(kept[-1]["line"]) + 1
    assert plain[tr["_offset"]:].startswith(tr["_raw"])
    assert result.counts["rows_in"] == len(kept) + 1
    assert identity(result.counts)


@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
def test_truncated_stream_fails_with_on_error_fail(tmp_path, plain, suffix):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / f"x.log.{suffix}").write_bytes(_cut(COMPRESSORS[suffix](plain), 0.6))
    with pytest.raises(DataError) as info:
        run(tmp_path, spec("in/*", parse=None, on_error="fail"))
    assert f"in/x.log.{suffix}" in str(info.value)
    assert "truncated" in str(info.value)
    assert not (tmp_path / "out" / "_SUCCESS").exists()


def test_corrupt_gzip_body_is_reported(tmp_path, plain):
    data = bytearray(gzip.compress(plain))
    mid = len(data) // 2
    data[mid:mid + 64] = b"\x00" * 64
    (tmp_path / "x.log.gz").write_bytes(bytes(data))
    result = run(tmp_path, spec("x.log.gz", parse=None, allow_empty_output=True))     # the stream may end first
    q = quarantine(result)
    assert any("gzip stream is truncated or corrupt" in r["_reason"] for r in q)
    assert identity(result.counts)


def test_not_gzip_at_all(tmp_path):
    (tmp_path / "x.log.gz").write_bytes(b"plain text, not gzip\n")
    result = run(tmp_path, spec("x.log.gz", parse=None, allow_empty_output=True))     # one bad record, no other
    assert result.counts["rows_out"] == 0
    assert [(r["_offset"], r["_raw"]) for r in quarantine(result)] == [(0, b"")]
    assert "gzip stream is truncated or corrupt" in quarantine(result)[0]["_reason"]


def test_empty_compressed_files(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.gz").write_bytes(gzip.compress(b""))
    (tmp_path / "in" / "b.bz2").write_bytes(bz2.compress(b""))
    (tmp_path / "in" / "c.zst").write_bytes(zstandard.ZstdCompressor().compress(b""))
    result = run(tmp_path, spec("in/*", parse=None))
    assert result.counts == {"rows_in": 0, "rows_out": 0, "filtered": 0, "deduplicated": 0, "quarantined": 0}
    assert (result.out_dir / "_SUCCESS").exists()


@pytest.mark.parametrize("change", [b"short\n", None])
def test_file_changed_after_planning(tmp_path, plain, change):
    """Planned in pieces, then rewritten (shorter, or longer) before it is read: a clear error."""
    from gpuetl.backends import get_backend
    from gpuetl.errors import SourceError
    from gpuetl.runtime.executor import open_executor
    from gpuetl.runtime.run import run_plan

    (tmp_path / "x.log.gz").write_bytes(gzip.compress(plain))
    plan = gpuetl.Pipeline.from_dict(spec("x.log.gz", parse=None), base_dir=tmp_path).plan()
    assert len(plan.partitions) > 2
    (tmp_path / "x.log.gz").write_bytes(gzip.compress(change if change is not None else plain + plain))
    backend = get_backend("cpu")
    with open_executor("sync", backend, quiet=True) as ex, \
            pytest.raises(SourceError, match=r"x\.log\.gz: cannot read: the file changed while read"):
        run_plan(plan, backend, ex, log=lambda *_: None)
    assert not (tmp_path / "out" / "_SUCCESS").exists()


def test_sampling_reads_only_the_head_of_a_compressed_file(tmp_path, monkeypatch):
    """JSON fields are learned from the first records: a big compressed file is not decoded
    whole for that (nor for a CSV header)."""
    from gpuetl.sources import compressed

    body = b"".join(b'{"a": %d, "b": "x"}\n' % i for i in range(200_000))
    (tmp_path / "x.jsonl.gz").write_bytes(gzip.compress(body))
    decoded = []
    real = compressed.Stream.chunk

    def counting(self):
        out = real(self)
        decoded.append(len(out))
        return out

    monkeypatch.setattr(compressed.Stream, "chunk", counting)
    from gpuetl.plan.compile import _source_stage
    from gpuetl.sources.files import resolve_inputs as resolve

    loaded = gpuetl.Pipeline.from_dict({"version": 1, "name": "t", "source": {"type": "jsonl", "path": "x.jsonl.gz"},
                                        "sink": {"path": "out"}}, base_dir=tmp_path).loaded
    stage = _source_stage(loaded, resolve(["x.jsonl.gz"], tmp_path, "infer"), [])
    assert stage.schema == {"a": "int64", "b": "string"}
    assert sum(decoded) <= 2 << 20 < len(body)


def test_a_stream_sent_to_another_process_starts_over(tmp_path, plain):
    """Pickled (a piece's stream handed to a task in another process), the open decoder cannot
    travel: it arrives closed and the next piece decodes from the file's start, to the same bytes."""
    import pickle

    from gpuetl.sources.ranges import decode_range, plan_partitions

    (tmp_path / "x.log.gz").write_bytes(gzip.compress(plain))
    files = resolve_inputs(["x.log.gz"], tmp_path, "infer")
    pieces = [r for p in plan_partitions(files, 4096) for r in p.ranges]
    assert len(pieces) > 3
    got, stream = [], None
    for k, rng in enumerate(pieces):
        if k % 2:
            stream = pickle.loads(pickle.dumps(stream))
            assert stream.ended
        data, stream = decode_range(stream, files[0], rng)
        got.append(bytes(data.data))
    assert b"".join(got) == plain
