"""Helpers for the step tests: small frames on the CPU backend and whole jsonl pipeline runs."""

from __future__ import annotations

import json

import pyarrow.dataset as ds

import gpuetl
from gpuetl.backends.cpu import CpuBackend
from gpuetl.steps import step_class

CPU = CpuBackend()


def frame(backend=CPU, **columns):
    """A frame of typed columns: name=(type, values)."""
    return backend.xd.DataFrame({n: backend.series(v, t) for n, (t, v) in columns.items()})


def make_step(name, raw, schema):
    return step_class(name).from_raw(raw).bind(schema)


def write_jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def run_jsonl(tmp_path, steps, columns, blocksize="16KiB", **over):
    spec = {"version": 1, "name": "t",
            "source": {"type": "jsonl", "path": "in/*.jsonl", "blocksize": blocksize, "provenance": True},
            "columns": columns, "steps": steps,
            "sink": {"path": "out", "mode": "overwrite"}, **over}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    c = result.counts
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    for s in result.stages:
        assert s["rows_in"] == s["rows_out"] + s["filtered"] + s["deduplicated"] + s["quarantined"]
    rows = ds.dataset(result.out_dir, format="parquet", exclude_invalid_files=True,
                      ignore_prefixes=["_", "."]).to_table().to_pylist() if c["rows_out"] else []
    return result, sorted(rows, key=lambda r: (r["_file"], r["_offset"]))


def values(series) -> list:
    """A Series' values as Python objects (None for nulls), on either backend."""
    if hasattr(series, "to_arrow"):
        return series.to_arrow().to_pylist()
    import pyarrow as pa

    return pa.array(series).to_pylist()
