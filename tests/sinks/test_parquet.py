"""The shard writer (sinks/shard_writer.py with the host's encoder) and the sink's Parquet policy
(sinks/parquet_policy.py): dictionary encoding only where values repeat, decided from the rows
alone; row groups sized from the shard's first rows."""

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpuetl.backends.host_parquet import HostShardEncoder
from gpuetl.sinks import shard_writer
from gpuetl.sinks.parquet import ShardTask, WriteOptions, sha256_of
from gpuetl.sinks.parquet_policy import dictionary_columns


def ShardWriter(path, schema, options, task):
    return shard_writer.ShardWriter(path, schema, options, task, HostShardEncoder(schema, options.compression))


def _table(n):
    return pa.table({
        "status": pa.array([200, 404, 500] * (n // 3), pa.int16()),
        "time": pa.array(range(n * 1_000_000, n * 1_000_000 + 3 * (n // 3)), pa.timestamp("us", tz="UTC")),
        "path": pa.array([f"/p/{i}" for i in range(3 * (n // 3))], pa.string()),
        "method": pa.array(["GET", "POST", "GET"] * (n // 3), pa.string()),
    })


def test_repeating_columns_get_a_dictionary_unique_ones_do_not():
    assert dictionary_columns(_table(3000)) == ["status", "method"]
    assert dictionary_columns(_table(0)) == ["status", "time", "path", "method"]    # nothing to judge


def test_values_that_repeat_across_the_row_group_get_a_dictionary():
    """Client IPs: mostly new within the first few thousand rows, few over a row group."""
    n = 60_000
    clients = pa.array([f"10.0.{i % 20}.{i % 7}" if i >= 9000 else f"192.168.{i // 250}.{i % 250}"
                        for i in range(n)])
    table = pa.table({"ip": clients, "id": pa.array(range(n), pa.int64())})
    assert pc.count_distinct(clients.slice(0, 8192)).as_py() == 8192          # unique in a small sample
    assert dictionary_columns(table) == ["ip"]


def test_wide_text_and_binary_values_are_not_judged_even_when_they_repeat():
    """Images and documents: counting their distinct values would hash every byte of them."""
    n = 300
    photos = [bytes([i]) * 20_000 for i in range(2)]
    table = pa.table({"image": pa.array([photos[i % 2] for i in range(n)], pa.binary()),
                      "text": pa.array([("x" * 2000 if i % 2 else "y" * 2000) for i in range(n)], pa.string()),
                      "label": pa.array(["cat", "dog", None] * (n // 3), pa.string()),
                      "short": pa.array([b"ab", b"cd"] * (n // 2), pa.binary())})
    assert dictionary_columns(table) == ["label", "short"]
    # at the limit: a value of exactly WIDE_VALUE_BYTES on average is still judged
    from gpuetl.sinks.parquet_policy import WIDE_VALUE_BYTES
    edge = pa.table({"v": pa.array([b"a" * WIDE_VALUE_BYTES, b"b" * WIDE_VALUE_BYTES] * 50, pa.binary())})
    assert dictionary_columns(edge) == ["v"]


def test_the_file_follows_the_choice_and_reads_back(tmp_path):
    table = _table(30_000)
    writer = ShardWriter(str(tmp_path / "s.parquet"), {"status": "int16", "time": "timestamp", "path": "string",
                                                       "method": "string"},
                         WriteOptions("zstd", 10_000, None), ShardTask(0, "", 0, 0, 0, "s.parquet"))
    writer.write(table)
    result = writer.close()
    meta = pq.ParquetFile(tmp_path / "s.parquet").metadata
    assert meta.num_row_groups == 3 and result.rows == 30_000
    encodings = {meta.schema.column(i).name: meta.row_group(0).column(i).encodings for i in range(4)}
    assert any("DICTIONARY" in e for e in encodings["status"]) and any("DICTIONARY" in e for e in encodings["method"])
    assert not any("DICTIONARY" in e for e in encodings["time"] + encodings["path"])
    assert pq.read_table(tmp_path / "s.parquet").equals(table)


def test_the_digest_hashed_while_writing_is_the_files(tmp_path):
    table = _table(30_000)
    writer = ShardWriter(str(tmp_path / "s.parquet"), {"status": "int16", "time": "timestamp", "path": "string",
                                                       "method": "string"},
                         WriteOptions("zstd", 4_000, None), ShardTask(0, "", 0, 0, 0, "s.parquet"))
    for start in range(0, 30_000, 7_000):           # row groups cut across the pieces written
        writer.write(table.slice(start, 7_000))
    result = writer.close()
    assert result.sha256 == sha256_of(str(tmp_path / "s.parquet")) and result.rows == 30_000


def _write(path, table, options, pieces):
    writer = ShardWriter(str(path), {"id": "int64", "image": "binary"}, options, ShardTask(0, "", 0, 0, 0, path.name))
    groups_before_close = []
    for start in range(0, table.num_rows, pieces):
        writer.write(table.slice(start, pieces))
        groups_before_close.append(writer.rows)
    return writer.close(), groups_before_close


def _wide_table(n, width):
    return pa.table({"id": pa.array(range(n), pa.int64()),
                     "image": pa.array([i.to_bytes(4, "big") * (width // 4) for i in range(n)], pa.binary())})


def test_without_options_wide_rows_get_row_groups_of_about_the_default_bytes(tmp_path, monkeypatch):
    """Images: 131,072 rows a group would be gigabytes held before the first write. With no
    sink option the group is kept to about DEFAULT_ROW_GROUP_BYTES, judged on the first 1,024
    rows; written while later rows arrive, and the same bytes however the rows arrive."""
    from gpuetl.sinks import parquet_policy

    monkeypatch.setattr(parquet_policy, "DEFAULT_ROW_GROUP_BYTES", 1 << 20)      # 1 MiB: a small test
    table = _wide_table(3_000, 10_000)
    result, written = _write(tmp_path / "a.parquet", table, WriteOptions("none", None, None), 250)
    meta = pq.ParquetFile(tmp_path / "a.parquet").metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    per_row = table.slice(0, 1024).nbytes / 1024
    assert sizes[0] == int((1 << 20) // per_row) == 104 and all(s == sizes[0] for s in sizes[:-1])
    assert sum(sizes) == 3_000 and sizes[-1] <= sizes[0]
    assert written[4] >= 1_000 - sizes[0]         # groups were written long before close
    again, _ = _write(tmp_path / "b.parquet", table, WriteOptions("none", None, None), 1_333)
    assert again.sha256 == result.sha256
    assert pq.read_table(tmp_path / "a.parquet").equals(table)


def test_without_options_narrow_rows_keep_the_default_row_count(tmp_path):
    table = pa.table({"id": pa.array(range(140_000), pa.int64()),
                      "image": pa.array([b"x"] * 140_000, pa.binary())})
    _write(tmp_path / "n.parquet", table, WriteOptions("none", None, None), 50_000)
    meta = pq.ParquetFile(tmp_path / "n.parquet").metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [131_072, 140_000 - 131_072]


def test_a_shard_shorter_than_the_sample_is_judged_on_its_rows(tmp_path, monkeypatch):
    from gpuetl.sinks import parquet_policy

    monkeypatch.setattr(parquet_policy, "DEFAULT_ROW_GROUP_BYTES", 1 << 20)
    table = _wide_table(300, 10_000)
    result, written = _write(tmp_path / "s.parquet", table, WriteOptions("none", None, None), 100)
    assert written == [0, 0, 0]                   # not judged before close: fewer than 1,024 rows
    meta = pq.ParquetFile(tmp_path / "s.parquet").metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [104, 104, 92]
    assert result.rows == 300
