"""A small dataset for the loader's tests, made by a gpuetl run: access logs with provenance
(`_file`, `_offset` name each row), four shards, two splits, row groups of 200 rows; and
ArrowTables, the host stand-in for the CUDA path's device tables (backends/gpu_loader.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from conftest import access_spec, write_access_log_folder
from gpuetl import Pipeline


def make_loader_dataset(base):
    write_access_log_folder(base / "in")
    spec = access_spec(source__provenance=True, shard={"count": 4, "splits": {"train": 0.8, "val": 0.2}},
                       columns={"status": "int16", "size": "int64", "time": {"type": "timestamp", "format": "%d/%b/%Y:%H:%M:%S %z"}})
    spec["sink"]["row_group_rows"] = 200
    Pipeline.from_dict(spec, base_dir=base).run(backend="cpu", scheduler="sync", report=False)
    return base / "out"


class ArrowTables:
    """gpu_loader.LibcudfTables on the host: pyarrow tables for pylibcudf's, numpy for CuPy."""

    def __init__(self):
        self.calls: dict[str, int] = {}
        self.paths: list[str] = []

    def _count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def read(self, path, group, columns):
        self._count("read")
        self.paths.append(path)
        return pq.ParquetFile(path).read_row_group(group, columns=columns)

    def upload(self, table):
        self._count("upload")
        return table

    def rows(self, t):
        return t.num_rows

    def slice(self, t, lo, hi):
        return t.slice(lo, hi - lo)

    def concat(self, tables):
        if len(tables) == 1:
            return tables[0]
        self._count("concat")
        return pa.concat_tables(tables).combine_chunks()

    def gather(self, t, perm):
        self._count("gather")
        return t.take(pa.array(perm))

    def values(self, t, i, dtype):
        col = t.column(i).combine_chunks()
        nulls = col.null_count
        col = col.fill_null(0) if nulls else col         # what a device buffer holds under a null is undefined
        if pa.types.is_timestamp(col.type) or pa.types.is_date(col.type):
            col = col.view(pa.int64() if dtype == "int64" else pa.int32())
        # a writable array, as a device buffer is (Arrow's host buffers are read-only)
        return np.array(col.to_numpy(zero_copy_only=False), dtype=dtype), nulls
