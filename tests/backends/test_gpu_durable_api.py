"""A GPU shard is written by the sinks' one shard-writer state machine (sinks/shard_writer.py)
with the GPU's encoder hooks (GpuShardEncoder), and so publishes as the CPU's does
(gpuetl/durable.py): libcudf writes and closes the partial file, then gpuetl flushes it (fsync),
renames it, and flushes its folder. Checked on a machine with RAPIDS but no GPU (`make
gpu-api`): libcudf's chunked writer is stood in for by one that writes the file's bytes when
closed, as libcudf does, and the empty frame by a placeholder; the rest is the real writer."""

from __future__ import annotations

import hashlib
import os

import pytest

pytestmark = pytest.mark.gpu_api

try:                                        # RAPIDS installed: import it without touching CUDA
    os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")
    from gpuetl.backends.gpu import GpuBackend, GpuShardEncoder
except Exception as err:                    # noqa: BLE001 (no RAPIDS, or a broken install)
    pytest.skip(f"RAPIDS does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

from gpuetl.backends.host_parquet import HostShardEncoder  # noqa: E402
from gpuetl.sinks.parquet import ParquetSink, ShardTask, WriteOptions  # noqa: E402
from gpuetl.sinks.shard_writer import ShardWriter  # noqa: E402

BYTES = b"PAR1 stand-in for the bytes libcudf wrote PAR1"


class ClosingWriter:
    """libcudf's ChunkedParquetWriter as the writer sees it: the file is complete once close() returns."""

    def __init__(self, path: str):
        self.path = path

    def close(self, _paths):
        with open(self.path, "wb") as fh:
            fh.write(BYTES)


def _writer(tmp_path, durable: bool, monkeypatch) -> ShardWriter:
    """The sink's writer for a GPU run, with libcudf's writer and the device's empty frame stood in."""
    path = str(tmp_path / "train" / "part-00000.parquet")
    writer = ParquetSink().shard_writer(GpuBackend.__new__(GpuBackend), path, {"k": "int64"},
                                        WriteOptions("zstd", 1000, None, durable),
                                        ShardTask(0, "train", 0, 0, 0, "train/part-00000.parquet"))
    encoder = writer.encoder

    def open_(partial, first, rows_per_group, dictionary):
        encoder.writer = ClosingWriter(partial)

    monkeypatch.setattr(encoder, "empty", lambda: "no rows")
    monkeypatch.setattr(encoder, "open", open_)
    monkeypatch.setattr(encoder, "write_group", lambda rows: None)
    monkeypatch.setattr(encoder, "metadata", lambda: None)      # the stand-in bytes have no footer
    return writer


def test_both_backends_shards_go_through_the_one_state_machine(tmp_path):
    """One shard writer: the sink gives a GPU run and a CPU run the same ShardWriter, which differ
    only in their encoder's hooks; no encoder has a state machine or publishing of its own."""
    from gpuetl.backends.cpu import CpuBackend

    task = ShardTask(0, "", 0, 0, 0, "part-00000.parquet")
    writers = {name: ParquetSink().shard_writer(backend, str(tmp_path / name / "part-00000.parquet"),
                                                {"k": "int64"}, WriteOptions("zstd", 1000, None), task)
               for name, backend in (("gpu", GpuBackend.__new__(GpuBackend)), ("cpu", CpuBackend()))}
    assert type(writers["gpu"]) is type(writers["cpu"]) is ShardWriter
    assert type(writers["gpu"].encoder) is GpuShardEncoder and type(writers["cpu"].encoder) is HostShardEncoder
    hooks = {"conform", "concat", "slice", "nbytes", "empty", "open", "write_group", "close", "metadata", "abort"}
    for encoder in (GpuShardEncoder, HostShardEncoder):
        assert hooks <= set(vars(encoder)), encoder
        assert not {"write", "_flush", "_size_groups", "_hash_written"} & set(vars(encoder)), encoder


def _trace(monkeypatch) -> list[tuple]:
    events: list[tuple] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.fstat(fd).st_ino))
        return real_fsync(fd)

    def replace(src, dst, **kw):
        events.append(("replace", os.stat(src).st_ino, os.fsdecode(dst)))
        return real_replace(src, dst, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_gpu_shard_is_flushed_after_libcudf_closes_it_before_it_is_renamed(tmp_path, monkeypatch):
    writer = _writer(tmp_path, True, monkeypatch)
    assert type(writer) is ShardWriter and type(writer.encoder) is GpuShardEncoder
    events = _trace(monkeypatch)
    result = writer.close()
    monkeypatch.undo()
    shard = tmp_path / "train" / "part-00000.parquet"
    inode = shard.stat().st_ino
    assert events == [("fsync", inode), ("replace", inode, str(shard)), ("fsync", shard.parent.stat().st_ino)]
    assert shard.read_bytes() == BYTES and result.sha256 == hashlib.sha256(BYTES).hexdigest()


def test_gpu_shard_of_a_scratch_sink_is_renamed_unflushed(tmp_path, monkeypatch):
    writer = _writer(tmp_path, False, monkeypatch)
    events = _trace(monkeypatch)
    writer.close()
    monkeypatch.undo()
    assert [e[0] for e in events] == ["replace"]


def test_the_gpu_encoder_reads_its_own_footer_back_on_the_worker_for_the_column_statistics(tmp_path):
    """libcudf's chunked writer hands no FileMetaData over at close (only with a column chunk
    path written into it), so GpuShardEncoder.metadata reads the footer of the file it wrote,
    where it wrote it; the shard's result then carries the same statistics a CPU shard does."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpuetl.sinks.column_stats import file_columns, footer_columns

    path = str(tmp_path / "part-00000.parquet.partial")
    pq.write_table(pa.table({"k": [3, None, 9]}), path)           # standing in for libcudf's file
    encoder = GpuShardEncoder({"k": "int64"}, "zstd")
    encoder.path = path                                            # what open() records
    assert file_columns(encoder.metadata()) == footer_columns(path)
    assert file_columns(encoder.metadata())[0]["nulls"] == 1
