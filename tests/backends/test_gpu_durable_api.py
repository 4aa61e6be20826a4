"""The GPU shard writer publishes as the CPU's does (gpuetl/durable.py): libcudf writes and closes
the partial file, then gpuetl flushes it (fsync), renames it, and flushes its folder. Checked on a
machine with RAPIDS but no GPU (`make gpu-api`): libcudf's chunked writer is stood in for by one
that writes the file's bytes when closed, as libcudf does; the rest is the real GpuShardWriter."""

from __future__ import annotations

import hashlib
import os

import pytest

pytestmark = pytest.mark.gpu_api

try:                                        # RAPIDS installed: import it without touching CUDA
    os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")
    from gpuetl.backends.gpu import GpuShardWriter
except Exception as err:                    # noqa: BLE001 (no RAPIDS, or a broken install)
    pytest.skip(f"RAPIDS does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

from gpuetl.sinks.parquet import ShardTask, WriteOptions  # noqa: E402

BYTES = b"PAR1 stand-in for the bytes libcudf wrote PAR1"


class ClosingWriter:
    """libcudf's ChunkedParquetWriter as the writer sees it: the file is complete once close() returns."""

    def __init__(self, path: str):
        self.path = path

    def close(self, _paths):
        with open(self.path, "wb") as fh:
            fh.write(BYTES)


def _writer(tmp_path, durable: bool) -> GpuShardWriter:
    path = str(tmp_path / "train" / "part-00000.parquet")
    writer = GpuShardWriter(path, {"k": "int64"}, WriteOptions("zstd", 1000, None, durable),
                            ShardTask(0, "train", 0, 0, 0, "train/part-00000.parquet"))
    writer.writer = ClosingWriter(path + ".partial")
    return writer


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
    writer = _writer(tmp_path, durable=True)
    events = _trace(monkeypatch)
    result = writer.close()
    monkeypatch.undo()
    shard = tmp_path / "train" / "part-00000.parquet"
    inode = shard.stat().st_ino
    assert events == [("fsync", inode), ("replace", inode, str(shard)), ("fsync", shard.parent.stat().st_ino)]
    assert shard.read_bytes() == BYTES and result.sha256 == hashlib.sha256(BYTES).hexdigest()


def test_gpu_shard_of_a_scratch_sink_is_renamed_unflushed(tmp_path, monkeypatch):
    writer = _writer(tmp_path, durable=False)
    events = _trace(monkeypatch)
    writer.close()
    monkeypatch.undo()
    assert [e[0] for e in events] == ["replace"]
