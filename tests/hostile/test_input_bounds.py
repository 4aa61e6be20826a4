"""Hostile inputs that hold one huge record (issue 27, item 3): a record longer than
`source.max_record_bytes` (a line; a CSV record) is quarantined as one record, by offset and
length, `_raw` holding its first 4 KiB, and is never read whole: not by the run, not by the
plan's samples, not by `preview`. Each case checks the accounting identity and that nothing
outside the dataset changed."""

from __future__ import annotations

import gzip
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.errors import SpecError
from gpuetl.sources import compressed, framing, ranges
from gpuetl.sources.long_records import HEAD_BYTES, LongRecords, long_lines

from peak_memory import gpuetl_peak, write_in_chunks

LONG = 400_000          # the long record's text: over the bound (64 KiB) and past the JSON sample's head (256 KiB) + the bound


def identity(counts) -> bool:
    return counts["rows_in"] == counts["rows_out"] + counts["filtered"] + counts["deduplicated"] + counts["quarantined"]


def quarantine(result) -> list[dict]:
    return [r for f in sorted((result.out_dir / "_quarantine").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def inputs(fmt: str) -> tuple[bytes, int, int, int]:
    """(file bytes, the long record's offset, its length, the other records' count): 2,000
    ordinary records with one of LONG bytes among them (for CSV a quoted field of 150,000 short
    lines: no line is long, the record is)."""
    if fmt == "csv":
        lines = [b"a"] + [b"%d" % i for i in range(2000)]
        long = b'"' + b"y\n" * (LONG // 2 - 1) + b'"'
    elif fmt == "jsonl":
        lines = [b'{"a": "%d"}' % i for i in range(2000)]
        long = b'{"a": "' + b"x" * (LONG - 9) + b'"}'
    else:
        lines = [b"line %d" % i for i in range(2000)]
        long = b"L" * LONG
    assert len(long) == LONG
    before = b"\n".join(lines[:700]) + b"\n"
    return before + long + b"\n" + b"\n".join(lines[700:]) + b"\n", len(before), len(long), 2000


def spec(path: str, fmt: str, **source) -> dict:
    return {"version": 1, "name": "t",
            "source": {"type": fmt, "path": path, "blocksize": "64KiB", "provenance": True,
                       "max_record_bytes": "64KiB", **source},
            "sink": {"path": "out", "mode": "overwrite"}}


@pytest.fixture
def largest_read(monkeypatch) -> list[int]:
    """The size of every read of records from a file: plain ranges, CSV ranges, decoded pieces."""
    sizes: list[int] = []

    def counting(real, size_of):
        def wrapper(*args, **kwargs):
            out = real(*args, **kwargs)
            sizes.append(size_of(out))
            return out
        return wrapper

    monkeypatch.setattr(ranges, "_read_plain", counting(ranges._read_plain, lambda got: len(got.data)))
    monkeypatch.setattr(framing, "_pread", counting(framing._pread, len))
    monkeypatch.setattr(compressed.Stream, "read", counting(compressed.Stream.read, len))
    return sizes


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("fmt", ["text", "jsonl", "csv"])
def test_a_record_over_max_record_bytes_is_quarantined_by_offset_and_length(tmp_path, surroundings, largest_read,
                                                                            fmt, gz):
    body, offset, length, others = inputs(fmt)
    name = f"in.{'log' if fmt == 'text' else fmt}" + (".gz" if gz else "")
    (tmp_path / name).write_bytes(gzip.compress(body) if gz else body)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = gpuetl.Pipeline.from_dict(spec(name, fmt), base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts == {"rows_in": others + 1, "rows_out": others, "filtered": 0, "deduplicated": 0,
                             "quarantined": 1}
    assert identity(result.counts)
    [bad] = quarantine(result)
    assert (bad["_file"], bad["_offset"]) == (name, offset)
    assert bad["_raw"] == body[offset:offset + HEAD_BYTES]          # its first 4 KiB, not the whole record
    assert f"a record of {length:,} bytes, over source.max_record_bytes (64.0 KiB)" in bad["_reason"]
    assert "first 4,096 bytes" in bad["_reason"] and name in bad["_reason"]
    kept = pq.read_table(result.out_dir / "part-00000.parquet").column("_offset").to_pylist()
    assert len(kept) == others and offset not in kept
    assert max(largest_read) < length                               # no read ever held it


def test_records_under_the_bound_are_read_as_ever(tmp_path, surroundings):
    body, offset, length, others = inputs("text")
    (tmp_path / "in.log").write_bytes(body)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = gpuetl.Pipeline.from_dict(spec("in.log", "text", max_record_bytes=length),
                                           base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts["rows_out"] == others + 1 and result.counts["quarantined"] == 0


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_the_bound_applies_to_lines_before_multiline_groups_them(tmp_path, surroundings, largest_read, gz):
    """A long continuation line is quarantined for its own length (multiline.max_bytes never
    sees it), and the continuation line after it, cut off from its start line, with a reason
    that says so; the records before it and from the next start line on are whole. (The line is
    longer than the 1 MiB the plan's look for the first start line reads at a time.)"""
    long = 10 * LONG
    lines = []
    for i in range(300):
        lines += [b"2026-01-01 record %d" % i, b"  continued %d" % i]
    body = b"\n".join(lines[:200]) + b"\n"
    offset = len(body)
    noise = b"%x" % random.Random(5).getrandbits(4 * long)          # (repeated bytes would gzip into a bomb)
    body += b" " + noise[:long - 1] + b"\n  cut off\n" + b"2026-01-02 after\n" + b"\n".join(lines[200:]) + b"\n"
    name = "in.log.gz" if gz else "in.log"
    (tmp_path / name).write_bytes(gzip.compress(body) if gz else body)
    s = spec(name, "text", multiline={"start": r"^\d{4}-", "max_bytes": "1MiB"})
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert identity(result.counts)
    bad, after = quarantine(result)
    assert bad["_offset"] == offset and f"a record of {long:,} bytes, over source.max_record_bytes" in bad["_reason"]
    assert after["_raw"] == b"  cut off" and after["_reason"].startswith(
        "multiline_overflow: a continuation line after a line over source.max_record_bytes")
    kept = pq.read_table(result.out_dir / "part-00000.parquet").column("line").to_pylist()
    assert len(kept) == 301 and "2026-01-02 after" in kept
    assert "2026-01-01 record 99\n  continued 99" in kept and "2026-01-01 record 100\n  continued 100" in kept
    assert max(largest_read) < long


def test_preview_is_bounded_by_max_record_bytes(tmp_path, surroundings, largest_read):
    body = b"L" * LONG + b"\n" + b"".join(b"line %d\n" % i for i in range(100))
    (tmp_path / "in.log").write_bytes(body)
    with surroundings(tmp_path):
        shown = gpuetl.Pipeline.from_dict(spec("in.log", "text"), base_dir=tmp_path).preview(n=5)
    first = shown.stages[0]
    assert (first.rows_in, first.rows_out, first.quarantined) == (101, 100, 1)
    [bad] = shown.quarantined.to_pylist()
    assert bad["offset"] == 0 and "over source.max_record_bytes" in bad["reason"]
    assert max(largest_read) < LONG


def test_json_schema_sample_skips_a_huge_first_line(tmp_path, surroundings, largest_read):
    """The plan's sample of a JSON file never reads a record over the bound (its first here)."""
    body = b'{"a": "' + b"x" * LONG + b'"}\n' + b"".join(b'{"a": "%d"}\n' % i for i in range(100))
    (tmp_path / "in.jsonl").write_bytes(body)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = gpuetl.Pipeline.from_dict(spec("in.jsonl", "jsonl"), base_dir=tmp_path).run(backend="cpu",
                                                                                             scheduler="sync")
    assert result.counts["rows_out"] == 100 and result.counts["quarantined"] == 1
    assert max(largest_read) < LONG


def test_long_records_are_found_exactly():
    """The stream tracker (fed 97 bytes at a time) agrees with a plain split on where the long
    lines are, at every bound around their lengths."""

    rng = random.Random(7)
    lines = [b"y" * rng.choice([0, 1, 5, 63, 64, 65, 130, 400]) for _ in range(400)]
    data = b"\n".join(lines) + (b"" if rng.random() < 0.5 else b"\n")
    for limit in (1, 2, 63, 64, 65, 129, 300):
        expected, at = [], 0
        for line in data.split(b"\n"):
            stop = min(at + len(line) + 1, len(data))
            if len(line) > limit:
                expected.append((at, stop))
            at += len(line) + 1
        tracker = LongRecords(limit)
        for k in range(0, len(data), 97):
            tracker.feed(data[k:k + 97], k)
        assert tracker.finish(len(data)) == expected, limit


@pytest.mark.parametrize("probe", [True, False], ids=["probed", "scanned"])
def test_long_lines_probe_matches(tmp_path, monkeypatch, probe):
    """The plain file probe (a few bytes every limit // 2), and the scan small bounds take
    instead, find exactly the lines a split finds."""
    from gpuetl.sources import long_records

    monkeypatch.setattr(long_records, "SCAN_BELOW", 0 if probe else 1 << 30)
    monkeypatch.setattr(long_records, "PROBE", 7)
    monkeypatch.setattr(long_records, "SCAN_CHUNK", 1000)
    rng = random.Random(3)
    lines = [b"z" * rng.choice([0, 3, 100, 1000, 5000]) for _ in range(300)]
    data = b"\n".join(lines)
    (tmp_path / "f").write_bytes(data)
    for limit in (10, 999, 1000, 1001, 4999, 6000):
        expected, at = [], 0
        for line in data.split(b"\n"):
            if len(line) > limit:
                expected.append((at, min(at + len(line) + 1, len(data))))
            at += len(line) + 1
        assert long_lines(str(tmp_path / "f"), len(data), limit) == expected, limit


@pytest.mark.parametrize("value", [0, "-1", "2GiB", "lots", True])
def test_bad_max_record_bytes_is_a_pipeline_error(tmp_path, surroundings, value):
    (tmp_path / "x.log").write_text("a\n")
    with surroundings(tmp_path), pytest.raises(SpecError) as info:
        gpuetl.Pipeline.from_dict(spec("x.log", "text", max_record_bytes=value), base_dir=tmp_path)
    assert "max_record_bytes" in str(info.value) and info.value.exit_code == 2


def test_max_record_bytes_is_for_record_formats(tmp_path, surroundings):
    (tmp_path / "x.parquet").write_bytes(b"")
    with surroundings(tmp_path), pytest.raises(SpecError) as info:
        gpuetl.Pipeline.from_dict(spec("x.parquet", "parquet"), base_dir=tmp_path)
    assert "max_record_bytes: not read by parquet sources" in str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "preview"])
def test_a_huge_line_costs_no_more_memory_than_a_short_one(tmp_path, command):
    """Under the default settings (max_record_bytes 64 MiB), a 160 MiB line is skipped in bounded
    chunks: the command's peak RSS is within 48 MiB of the same input with that line 1 byte long
    (before the bound, a 200 MiB line peaked at 1.57 GB)."""
    peaks = {}
    for n in (1, 160 << 20):
        folder = tmp_path / str(n)
        folder.mkdir()
        with open(folder / "in.log", "wb") as fh:
            fh.write(b"".join(b"line %d\n" % i for i in range(1000)))
            write_in_chunks(fh, b"L", n)
            fh.write(b"\n" + b"".join(b"after %d\n" % i for i in range(1000)))
        (folder / "p.yaml").write_text("version: 1\nname: t\nsource: {type: text, path: in.log}\nsink: {path: out}\n")
        got = gpuetl_peak(command, str(folder / "p.yaml"), "--backend", "cpu")
        assert got["rc"] == 0, got["err"]
        peaks[n] = got["peak_mib"]
        if n > 1:
            assert "a record of 167,772,160 bytes" in got["out"] + got["err"]
    assert peaks[160 << 20] < peaks[1] + 48, peaks


# -- item 4: a long-window zstd frame; a GNU sparse tar member --------------------------------

def _long_window_zstd(data: bytes) -> bytes:
    """`data` as one zstd frame with a 2 GiB window (what `zstd --long=31` writes for a large
    input: the frame header asks for the window, past zstd's default limit of 128 MiB)."""
    import io

    import zstandard

    params = zstandard.ZstdCompressionParameters(window_log=31, enable_ldm=True, compression_level=3)
    buf = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(buf, closefd=False) as w:
        w.write(data)
    frame = buf.getvalue()
    assert zstandard.get_frame_parameters(frame).window_size == 1 << 31
    return frame


def test_a_long_window_zstd_file_names_max_window_bytes_and_raising_it_reads_it(tmp_path, surroundings):
    body = b"".join(b"line %d\n" % i for i in range(1334))
    (tmp_path / "in.log.zst").write_bytes(_long_window_zstd(body))
    (tmp_path / "ok.log").write_bytes(b"plain\n")
    s = spec("*.log*", "text")
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts == {"rows_in": 2, "rows_out": 1, "filtered": 0, "deduplicated": 0, "quarantined": 1}
    [bad] = quarantine(result)
    assert bad["_file"] == "in.log.zst" and bad["_offset"] == 0
    assert "needs a window of 2.0 GiB, over source.max_window_bytes (128.0 MiB)" in bad["_reason"]
    assert "truncated or corrupt" not in bad["_reason"]
    s["source"]["max_window_bytes"] = "2GiB"
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts == {"rows_in": 1335, "rows_out": 1335, "filtered": 0, "deduplicated": 0, "quarantined": 0}


@pytest.mark.parametrize("value", ["512", "4GiB", "wide"])
def test_bad_max_window_bytes_is_a_pipeline_error(tmp_path, surroundings, value):
    (tmp_path / "x.log").write_text("a\n")
    with surroundings(tmp_path), pytest.raises(SpecError) as info:
        gpuetl.Pipeline.from_dict(spec("x.log", "text", max_window_bytes=value), base_dir=tmp_path)
    assert "max_window_bytes" in str(info.value) and info.value.exit_code == 2


@pytest.mark.skipif(not __import__("shutil").which("tar"), reason="needs GNU tar to write a sparse member")
def test_a_gnu_sparse_tar_member_is_quarantined_and_the_members_after_it_are_read(tmp_path, surroundings):
    import subprocess

    from imagedata import jpeg_bytes, quarantine_of, rows_of, run_images

    src = tmp_path / "src"
    src.mkdir()
    (src / "0001.jpg").write_bytes(jpeg_bytes(seed=1))
    with open(src / "0002.jpg", "wb") as fh:           # a file with a hole: 4 MiB, 2 bytes of data
        fh.seek(4 << 20)
        fh.write(b"\xff\xd9")
    (src / "0003.jpg").write_bytes(jpeg_bytes(seed=3))
    (tmp_path / "shards").mkdir()
    version = subprocess.run(["tar", "--version"], capture_output=True, text=True).stdout
    if "GNU tar" not in version:
        pytest.skip("needs GNU tar")
    subprocess.run(["tar", "--sparse", "--format=gnu", "-cf", str(tmp_path / "shards" / "s.tar"), "-C", str(src),
                    "0001.jpg", "0002.jpg", "0003.jpg"], check=True)
    import tarfile

    with tarfile.open(tmp_path / "shards" / "s.tar") as tar:
        assert [m.issparse() for m in tar.getmembers()] == [False, True, False]
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = run_images(tmp_path, path="shards/*.tar")
    c = result.counts
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    assert (c["rows_out"], c["quarantined"]) == (2, 1)
    assert sorted(r["key"] for r in rows_of(out)) == ["0001", "0003"]
    [bad] = quarantine_of(out)
    assert "'0002.jpg'" in bad["_reason"] and "sparse member" in bad["_reason"] and "cut short" not in bad["_reason"]


# -- item 2: Parquet row groups that decode past the bounds ------------------------------------

def _dictionary_column(values: list[str], counts: list[int]) -> pa.Array:
    """A dictionary<int32, string> column: values[k] repeated counts[k] times (only the indices are held)."""
    import numpy as np

    indices = np.repeat(np.arange(len(values), dtype=np.int32), counts)
    return pa.DictionaryArray.from_arrays(pa.array(indices), pa.array(values))


def _write_groups(path, groups: list[pa.Array], name: str = "s") -> None:
    import pyarrow.parquet as pq_

    with pq_.ParquetWriter(path, pa.schema([(name, groups[0].type)]), compression="zstd") as w:
        for column in groups:
            w.write_table(pa.table({name: column}), row_group_size=len(column))


def test_a_parquet_row_group_that_expands_past_the_bound_is_one_quarantined_record(tmp_path, surroundings):
    """Row group 1 of a.parquet holds one 500-byte string 100,000 times (50 MB decoded, a few KB
    stored): found when its dictionary is read, before a value is expanded. b.parquet's second
    row group is 1,000,000 equal int64s (8 MB decoded, a few KB stored): refused from its footer,
    never read. The row groups around them are read."""
    big = "x" * 500
    _write_groups(tmp_path / "a.parquet", [_dictionary_column(["a", "b"], [50, 50]),
                                           _dictionary_column([big], [100_000]),
                                           _dictionary_column(["c"], [25])])
    import numpy as np

    _write_groups(tmp_path / "b.parquet", [pa.array(np.arange(10, dtype=np.int64)),
                                           pa.array(np.zeros(1_000_000, dtype=np.int64))], name="s")
    s = {"version": 1, "name": "t",
         "source": {"type": "parquet", "path": "a.parquet", "provenance": True, "blocksize": "1MiB"},
         "sink": {"path": "out", "mode": "overwrite"}}
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts == {"rows_in": 126, "rows_out": 125, "filtered": 0, "deduplicated": 0, "quarantined": 1}
    [bad] = quarantine(result)
    assert (bad["_file"], bad["_offset"]) == ("a.parquet", 100)              # the row group's first row
    assert bad["_reason"].startswith("a.parquet: row group 1 (100,000 rows) decodes to 50,400,000 bytes")
    assert "past source.max_expand_ratio (200 times its" in bad["_reason"]
    assert sorted(set(pq.read_table(result.out_dir / "part-00000.parquet").column("s").to_pylist())) == ["a", "b", "c"]

    s["source"]["path"] = "b.parquet"
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts == {"rows_in": 11, "rows_out": 10, "filtered": 0, "deduplicated": 0, "quarantined": 1}
    [bad] = quarantine(result)
    assert bad["_offset"] == 10 and "b.parquet: row group 1 (1,000,000 rows) decodes to at least 8,000,000 bytes " \
                                    "by its footer" in bad["_reason"]

    s["source"].update(path="a.parquet", max_expand_ratio=1e9)                 # the bound raised: read whole
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts["rows_out"] == 100_125 and result.counts["quarantined"] == 0


def test_a_dictionary_bomb_inside_a_list_column_is_found_before_it_is_expanded(tmp_path, surroundings, monkeypatch):
    """A list<string> column whose items are one 500-byte entry, 100,000 times over: the items
    are read as their dictionary too (the check sees list<dictionary>), and the row group is
    refused before they are expanded."""
    import pyarrow.parquet as pq_

    from gpuetl.sources import parquet

    checked: list[str] = []
    real = parquet.expanded_bytes

    def spying(table):
        checked.extend(str(t) for t in table.schema.types)
        return real(table)

    monkeypatch.setattr(parquet, "expanded_bytes", spying)

    items = pa.ListArray.from_arrays(pa.array([0, 0, 100_000], pa.int32()), _dictionary_column(["x" * 500], [100_000]))
    pq_.write_table(pa.table({"tags": items.cast(pa.list_(pa.string()))}), tmp_path / "a.parquet",
                    compression="zstd")
    small = pa.array([["a", "b"], []], pa.list_(pa.string()))
    with pq_.ParquetWriter(tmp_path / "b.parquet", pa.schema([("tags", small.type)]), compression="zstd") as w:
        w.write_table(pa.table({"tags": small}))
    s = {"version": 1, "name": "t", "source": {"type": "parquet", "path": "*.parquet", "blocksize": "1MiB"},
         "sink": {"path": "out", "mode": "overwrite"}}
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts == {"rows_in": 3, "rows_out": 2, "filtered": 0, "deduplicated": 0, "quarantined": 1}
    [bad] = quarantine(result)
    assert "a.parquet: row group 0 (2 rows) decodes to 50," in bad["_reason"] and "dictionary entries" in bad["_reason"]
    assert pq.read_table(result.out_dir / "part-00000.parquet").column("tags").to_pylist() == [["a", "b"], []]
    assert checked and all("dictionary<values=string" in t for t in checked), checked


def test_max_uncompressed_bytes_bounds_a_parquet_row_group(tmp_path, surroundings):
    _write_groups(tmp_path / "a.parquet", [_dictionary_column([f"value {i:06d}" for i in range(1000)], [100] * 1000)])
    s = {"version": 1, "name": "t", "source": {"type": "parquet", "path": "a.parquet"},
         "sink": {"path": "out", "mode": "overwrite"}}
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts["rows_out"] == 100_000 and result.counts["quarantined"] == 0    # an ordinary file
    s["source"]["max_uncompressed_bytes"] = "1MiB"
    s["allow_empty_output"] = True           # the one row group refused: nothing else to keep
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts == {"rows_in": 1, "rows_out": 0, "filtered": 0, "deduplicated": 0, "quarantined": 1}
    [bad] = quarantine(result)
    assert "a.parquet: row group 0" in bad["_reason"] and "source.max_uncompressed_bytes (1.0 MiB)" in bad["_reason"]


@pytest.mark.slow
def test_a_parquet_dictionary_bomb_costs_no_more_memory_than_a_small_file(tmp_path):
    """Three row groups of one 500-byte string repeated 1,000,000 times (1.5 GB decoded, a few
    hundred KB stored) after 10 ordinary rows, under the default settings: `gpuetl run` peaks
    within 64 MiB of a run on the 10 rows alone."""
    peaks = {}
    for name, counts in (("small", [10]), ("bomb", [10] + [1_000_000] * 3)):
        folder = tmp_path / name
        folder.mkdir()
        _write_groups(folder / "in.parquet", [_dictionary_column(["x" * 500], [n]) for n in counts])
        (folder / "p.yaml").write_text("version: 1\nname: t\nsource: {type: parquet, path: in.parquet}\n"
                                       "sink: {path: out}\n")
        got = gpuetl_peak("run", str(folder / "p.yaml"), "--backend", "cpu")
        assert got["rc"] == 0, got["err"]
        peaks[name] = got["peak_mib"]
        if name == "bomb":
            assert "quarantined 3" in got["out"] + got["err"], got
    assert peaks["bomb"] < peaks["small"] + 64, peaks


# -- item 1: an images task holds a piece's decoded pixels, not its partition's ----------------

def test_images_run_through_their_steps_in_pieces_bounded_by_decoded_pixels(tmp_path, surroundings, monkeypatch):
    """With pieces of about two 64x48 images' pixels, no step sees more than two images at once,
    and the shards are byte-identical to those of one piece a partition."""
    from imagedata import photo_folder, run_images

    from gpuetl.runtime import partition as runtime_partition
    from gpuetl.sources import images

    photo_folder(tmp_path / "photos", n=10)
    whole = run_images(tmp_path, sink="whole")
    seen: list[int] = []
    real = runtime_partition._row_steps

    def counting(frame, segment, backend):
        seen.append(len(frame))
        return real(frame, segment, backend)

    monkeypatch.setattr(runtime_partition, "_row_steps", counting)
    monkeypatch.setattr(images, "PIECE_PIXEL_BYTES", 2 * 64 * 48 * 4)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run_images(tmp_path)
    assert sum(seen) == 10 and max(seen) == 2
    assert result.counts == whole.counts and result.counts["rows_out"] == 10
    for shard in sorted((tmp_path / "whole").glob("**/part-*.parquet")):
        assert (tmp_path / "out" / shard.relative_to(tmp_path / "whole")).read_bytes() == shard.read_bytes()


def test_pixel_budget_lets_pieces_in_while_they_fit_and_a_huge_one_alone():
    import threading
    import time

    from gpuetl.sources.images import PixelBudget

    budget = PixelBudget(100)
    order: list[str] = []
    first = budget.hold(60)
    first.__enter__()

    def take(name, size):
        with budget.hold(size):
            order.append(name)

    small = threading.Thread(target=take, args=("small", 40))
    small.start()
    small.join(5)
    assert order == ["small"]                      # 60 + 40 fit
    big = threading.Thread(target=take, args=("big", 500))
    big.start()
    time.sleep(0.2)
    assert order == ["small"] and budget.held == 60          # waits until it is alone
    first.__exit__(None, None, None)
    big.join(5)
    assert order == ["small", "big"] and budget.held == 0


def _png_folder(folder, n: int, side: int) -> None:
    """n copies of one side x side PNG (made in a child process: this one stays small)."""
    import subprocess
    import sys

    code = ("import sys, os\nfrom PIL import Image, ImageDraw\n"
            "folder, n, side = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
            "os.makedirs(folder + '/photos/a', exist_ok=True)\n"
            "img = Image.new('RGB', (side, side), (200, 100, 50))\nd = ImageDraw.Draw(img)\n"
            "for k in range(0, side, 97): d.line([(k, 0), (side - k, side)], fill=(k % 255, 20, 90), width=3)\n"
            "img.save(folder + '/photos/a/000.png', compress_level=1)\n"
            "data = open(folder + '/photos/a/000.png', 'rb').read()\n"
            "for i in range(1, n): open(folder + '/photos/a/%03d.png' % i, 'wb').write(data)\n")
    subprocess.run([sys.executable, "-c", code, str(folder), str(n), str(side)], check=True)


@pytest.mark.slow
def test_peak_memory_of_large_images_does_not_grow_with_their_count(tmp_path):
    """6 and 12 PNGs of 3000x3000 (34 MiB of pixels each decoded), decode then encode (no resize:
    every image's full pixels pass through), default settings: the peak RSS of 12 is within 64
    MiB of 6's. Before pieces and the pixel budget a task decoded its whole partition at once,
    so the peak grew by about 80 MiB an image."""
    peaks = {}
    for n in (6, 12):
        folder = tmp_path / str(n)
        _png_folder(folder, n, 3000)
        (folder / "p.yaml").write_text("version: 1\nname: t\nsource: {type: images, path: 'photos/**/*.png'}\n"
                                       "steps: [{decode: {}}, {encode: {format: jpeg}}]\nsink: {path: out}\n")
        got = gpuetl_peak("run", str(folder / "p.yaml"), "--backend", "cpu")
        assert got["rc"] == 0, got["err"]
        peaks[n] = got["peak_mib"]
    assert peaks[12] < peaks[6] + 64, peaks


def test_a_long_line_in_an_object_read_in_ranges_is_quarantined_not_fetched_whole(s3, tmp_path, monkeypatch):
    """An uncompressed text object on a store is read in ranged GETs (never copied): a line that
    runs on more than max_record_bytes past its range is reported by the range it starts in,
    with its first 4 KiB, and no GET fetches it whole."""
    from gpuetl import storage

    body, offset, length, others = inputs("text")
    s3.put("raw/in.log", body)
    spans: list[int] = []
    real = storage.read_span

    def counting(url, etag, version_id, a, b, options):
        spans.append(b - a)
        return real(url, etag, version_id, a, b, options)

    monkeypatch.setattr(storage, "read_span", counting)
    s = spec(s3.url("raw/in.log"), "text", blocksize="16KiB")
    result = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert spans, "the object was not read in ranges"
    assert identity(result.counts) and result.counts["rows_out"] == others and result.counts["quarantined"] == 1
    [bad] = quarantine(result)
    assert bad["_offset"] == offset and bad["_raw"] == body[offset:offset + HEAD_BYTES]
    assert "a record longer than source.max_record_bytes (64.0 KiB" in bad["_reason"]
    assert max(spans) < length
