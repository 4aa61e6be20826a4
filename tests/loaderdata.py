"""A small dataset for the loader's tests, made by a gpuetl run: access logs with provenance
(`_file`, `_offset` name each row), four shards, two splits, row groups of 200 rows."""

from __future__ import annotations

from conftest import access_spec, write_access_log_folder
from gpuetl import Pipeline


def make_loader_dataset(base):
    write_access_log_folder(base / "in")
    spec = access_spec(source__provenance=True, shard={"count": 4, "splits": {"train": 0.8, "val": 0.2}},
                       columns={"status": "int16", "size": "int64", "time": {"type": "timestamp", "format": "%d/%b/%Y:%H:%M:%S %z"}})
    spec["sink"]["row_group_rows"] = 200
    Pipeline.from_dict(spec, base_dir=base).run(backend="cpu", scheduler="sync", report=False)
    return base / "out"
