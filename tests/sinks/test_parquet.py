"""The shard writer: dictionary encoding only where values repeat, decided from the rows alone."""

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpuetl.backends.shard_writer import ShardWriter, dictionary_columns
from gpuetl.sinks.parquet import ShardTask, WriteOptions, sha256_of


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
