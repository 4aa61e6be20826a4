"""Hostile compressed inputs: decompression bombs (quarantined as one record, the run goes on,
never inflated fully), cut-off streams, files too big to hold, a run killed part-way through a
compressed file. Each case checks the accounting identity and that nothing outside the dataset
changed."""

from __future__ import annotations

import bz2
import gzip
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import yaml
import zstandard

import gpuetl
from gpuetl.errors import SpecError
from gpuetl.runtime import graph as graph_module
from gpuetl.samples import write_access_logs
from gpuetl.sources import compressed

ZEROS = 50 * 10**6          # the bomb: 50 MB of zeros, ~50 KB of gzip (a ratio of ~1000)
COMPRESS = {"gz": lambda b: gzip.compress(b, 9), "bz2": lambda b: bz2.compress(b, 1),   # 100 kB blocks
            "zst": lambda b: zstandard.ZstdCompressor().compress(b)}


def spec(path, **source):
    return {"version": 1, "name": "t",
            "source": {"type": "text", "path": path, "blocksize": "64KiB", "provenance": True, **source},
            "sink": {"path": "out", "mode": "overwrite"}}


def run(tmp_path, s):
    return gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")


def identity(counts) -> bool:
    return counts["rows_in"] == counts["rows_out"] + counts["filtered"] + counts["deduplicated"] + counts["quarantined"]


def quarantine(result) -> list[dict]:
    return [r for f in sorted((result.out_dir / "_quarantine").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def raw_text(value) -> str:
    """`_raw` as text, whether the column holds strings or the exact bytes."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    zeros = bytes(ZEROS)
    return {suffix: make(zeros) for suffix, make in COMPRESS.items()}


@pytest.fixture
def decoded_bytes(monkeypatch) -> list[int]:
    """Every decoded chunk's size, over the whole run (the plan's scan and the reads)."""
    sizes: list[int] = []
    real = compressed.Stream.chunk

    def counting(self):
        out = real(self)
        sizes.append(len(out))
        return out

    monkeypatch.setattr(compressed.Stream, "chunk", counting)
    return sizes


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_bomb_is_one_quarantined_record_and_is_never_inflated(tmp_path, surroundings, bombs, decoded_bytes, suffix):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / f"bomb.log.{suffix}").write_bytes(bombs[suffix])
    write_access_logs(tmp_path / "in" / "good.log.gz", lines=200, gzip=True)
    assert ZEROS / len(bombs[suffix]) > 200
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec("in/*"))
    assert result.counts["rows_out"] == 200                      # the run went on
    assert result.counts["quarantined"] == 1
    assert identity(result.counts)
    [bad] = quarantine(result)
    assert bad["_file"] == f"in/bomb.log.{suffix}"
    assert f"in/bomb.log.{suffix}" in bad["_reason"] and "source.max_expand_ratio (200 times" in bad["_reason"]
    assert raw_text(bad["_raw"]) == ""
    # it stopped where the bound was passed: far before the end, and the reads never touched it
    assert 200 * len(bombs[suffix]) < bad["_offset"] < ZEROS // 2
    assert sum(decoded_bytes) < ZEROS // 2


def test_max_uncompressed_bytes(tmp_path, surroundings, decoded_bytes):
    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "big.log", lines=30_000)
    plain = (tmp_path / "in" / "big.log").read_bytes()
    (tmp_path / "in" / "big.log").unlink()
    (tmp_path / "in" / "big.log.gz").write_bytes(gzip.compress(plain))
    (tmp_path / "in" / "small.log.gz").write_bytes(gzip.compress(b"a\nb\n"))
    assert len(plain) > 4 * 2**20
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec("in/*", max_uncompressed_bytes="2MiB"))
    assert result.counts == {"rows_in": 3, "rows_out": 2, "filtered": 0, "deduplicated": 0, "quarantined": 1}
    [bad] = quarantine(result)
    assert bad["_file"] == "in/big.log.gz"
    assert "source.max_uncompressed_bytes (2.0 MiB)" in bad["_reason"] and "in/big.log.gz" in bad["_reason"]
    assert 2 * 2**20 < bad["_offset"] < len(plain)
    assert sum(decoded_bytes) < len(plain)            # the scan stopped; no read decoded it


def test_bounds_are_off_for_files_within_them(tmp_path, surroundings):
    """A small file of one repeated line compresses far past 200x: too small to be refused."""
    (tmp_path / "x.log.gz").write_bytes(gzip.compress(b"same line\n" * 50_000))
    assert 500_000 / len((tmp_path / "x.log.gz").read_bytes()) > 200
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec("x.log.gz"))
    assert result.counts["rows_out"] == 50_000 and result.counts["quarantined"] == 0


@pytest.mark.parametrize("value, field", [
    ({"max_expand_ratio": 0}, "max_expand_ratio"),
    ({"max_expand_ratio": "lots"}, "max_expand_ratio"),
    ({"max_uncompressed_bytes": "10 parsecs"}, "max_uncompressed_bytes"),
    ({"max_uncompressed_bytes": -5}, "max_uncompressed_bytes"),
])
def test_bad_bounds_are_pipeline_errors(tmp_path, surroundings, value, field):
    (tmp_path / "x.log").write_text("a\n")
    with surroundings(tmp_path), pytest.raises(SpecError) as info:
        gpuetl.Pipeline.from_dict(spec("x.log", **value), base_dir=tmp_path)
    assert field in str(info.value)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_truncated_file_in_many_pieces(tmp_path, surroundings, suffix):
    """Cut off in its last piece: every whole record before the cut, one record for the cut."""
    write_access_logs(tmp_path / "x.log", lines=3000)
    plain = (tmp_path / "x.log").read_bytes()
    (tmp_path / "x.log").unlink()
    packed = COMPRESS[suffix](plain)
    (tmp_path / f"x.log.{suffix}").write_bytes(packed[: len(packed) * 3 // 4])
    pipeline = gpuetl.Pipeline.from_dict(spec(f"x.log.{suffix}", blocksize="16KiB"), base_dir=tmp_path)
    assert len(pipeline.plan().partitions) > 3
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = pipeline.run(backend="cpu", scheduler="sync")
    assert identity(result.counts)
    [cut] = quarantine(result)
    assert "truncated" in cut["_reason"] and f"x.log.{suffix}" in cut["_reason"]
    kept = pq.read_table(result.out_dir / "part-00000.parquet").to_pylist()
    assert len(kept) == result.counts["rows_out"] > 1000
    assert all(plain[r["_offset"]:].startswith(r["line"].encode() + b"\n") for r in kept)
    assert plain[cut["_offset"]:].startswith(raw_text(cut["_raw"]).encode())


def test_compressed_file_is_read_in_pieces_and_decoded_once(tmp_path, surroundings, monkeypatch):
    """Memory: a 1.2 MB file with blocksize 64 KiB reaches the source stage ~64 KiB at a time,
    and is decoded twice in all (the plan's scan, then the reads: no piece starts over)."""
    write_access_logs(tmp_path / "x.log", lines=6000)
    plain = (tmp_path / "x.log").read_bytes()
    (tmp_path / "x.log").unlink()
    (tmp_path / "x.log.gz").write_bytes(gzip.compress(plain))
    pieces: list[int] = []
    opened: list[str] = []
    real_decode, real_init = graph_module.decode_range, compressed.Stream.__init__

    def decode(*args):
        got, stream = real_decode(*args)
        pieces.append(len(got.data))
        return got, stream

    def init(self, *args):
        opened.append(args[0])
        real_init(self, *args)

    monkeypatch.setattr(graph_module, "decode_range", decode)
    monkeypatch.setattr(compressed.Stream, "__init__", init)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec("x.log.gz"))
    longest = max(len(line) + 1 for line in plain.split(b"\n"))
    assert len(pieces) >= len(plain) // (64 << 10)
    assert max(pieces) <= (64 << 10) + longest
    assert sum(pieces) == len(plain)
    assert len(opened) == 2
    assert result.counts["rows_in"] == 6000 and identity(result.counts)


def test_multi_member_gzip_with_padding_across_pieces(tmp_path, surroundings):
    lines = [b"member %d line %d" % (m, i) for m in range(6) for i in range(40)]
    members = [gzip.compress(b"\n".join(lines[m * 40:(m + 1) * 40]) + b"\n") + b"\0" * (m % 2) * 7 for m in range(6)]
    (tmp_path / "m.log.gz").write_bytes(b"".join(members))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec("m.log.gz", blocksize=300))
    got = pq.read_table(result.out_dir / "part-00000.parquet").to_pylist()
    text = b"\n".join(lines) + b"\n"
    assert [r["line"].encode() for r in got] == lines
    assert [r["_offset"] for r in got] == [text.index(line + b"\n") for line in lines]
    assert result.counts["quarantined"] == 0 and identity(result.counts)


FAIL_AFTER_TWO_PIECES = """
import sys, yaml, gpuetl
from gpuetl.runtime.phases import mapping
real, calls = mapping.spill_partition, []
def failing(*args, **kwargs):
    calls.append(args[1])
    if len(calls) == 3:
        raise OSError("injected failure")
    return real(*args, **kwargs)
mapping.spill_partition = failing
gpuetl.Pipeline.from_file(sys.argv[1]).run(backend="cpu", scheduler="sync")
"""


@pytest.mark.slow          # a second interpreter and three runs
def test_resume_part_way_through_a_compressed_file(tmp_path, surroundings):
    """A run that fails after two pieces were set aside (in another process, which then ends),
    resumed, equals a clean run: the pieces already done are skipped, their bytes still decoded
    to reach the next one."""
    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "x.log.gz", lines=3000, gzip=True, bad_every=100)
    s = {**spec("in/*", blocksize="32KiB"), "parse": {"preset": "apache_combined"}}
    clean = run(tmp_path, s)
    expected = [(x["path"], x["rows"], x["sha256"]) for x in clean.manifest["shards"]], clean.counts
    resumable = tmp_path / "p.yaml"
    resumable.write_text(yaml.safe_dump({**s, "sink": {"path": "out2", "mode": "resume"}}))
    failed = subprocess.run([sys.executable, "-c", FAIL_AFTER_TWO_PIECES, str(resumable)], capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert failed.returncode != 0 and "injected failure" in failed.stderr
    logs: list[str] = []
    with surroundings(tmp_path, dataset=tmp_path / "out2"):
        again = gpuetl.Pipeline.from_file(resumable).run(backend="cpu", scheduler="sync", log=logs.append)
    assert any("2 of" in line and "already done, skipped" in line for line in logs), logs
    assert ([(x["path"], x["rows"], x["sha256"]) for x in again.manifest["shards"]], again.counts) == expected
    assert identity(again.counts) and again.counts["quarantined"] == 30
