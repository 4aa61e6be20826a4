"""The sync budget (docs/gpu.md, "The sync budget"): a partition's device -> host reads of a value
(each one a sync, all through gpu_device.to_host_value) are a fixed number that does not grow
with the partition's rows. The access-log, JSON-lines and CSV pipelines' first segment (read,
parse, cast, their row steps) and the map side's `separate` run through GpuBackend's own code on
an emulated device (device_standins.py; marker gpu_api), one partition of 1,000 rows and one of
20,000: the same syncs, by reason, within the budget; and the rows are the CPU backend's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

pytestmark = pytest.mark.gpu_api

try:                                        # RAPIDS installed: import it without touching CUDA
    os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")
    from gpuetl.backends import gpu_records, gpu_tallies
    import device_standins as dev
except Exception as err:                    # noqa: BLE001 (no RAPIDS, or a broken install)
    pytest.skip(f"RAPIDS does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

import gpuetl  # noqa: E402
from gpuetl.runtime.partition import read_partition  # noqa: E402
from gpuetl.samples import write_access_logs, write_app_events  # noqa: E402

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"
# syncs a partition may make (reads of a value, nonzero searches), whatever its rows
BUDGET = 24


def _from_pipeline_file(name: str, data: str, tmp_path: Path):
    """The example pipeline file, on this data, in one partition."""
    return gpuetl.load(PIPELINES / name, [f"source.path={tmp_path / data}", "source.blocksize=1GiB",
                                          f"sink.path={tmp_path / 'out'}"])


def access_logs(tmp_path: Path, rows: int) -> dict:
    write_access_logs(tmp_path / "access.log", lines=rows, seed=7)
    return _from_pipeline_file("access_logs.yaml", "access.log", tmp_path)


def app_events(tmp_path: Path, rows: int) -> dict:
    write_app_events(tmp_path / "events.jsonl", lines=rows, seed=7, bad_every=97)
    return _from_pipeline_file("app_events.yaml", "events.jsonl", tmp_path)


def orders_csv(tmp_path: Path, rows: int):
    rng = np.random.default_rng(7)
    lines = ["order,customer,amount,note"]
    for i in range(rows):
        note = ['plain', '"with, comma"', '', '"say ""hi"""'][i % 4]
        amount = "oops" if i % 101 == 0 else f"{rng.integers(1, 10_000) / 100:.2f}"
        lines.append(f"{i},c{rng.integers(0, 500)},{amount},{note}" + (",extra" if i % 211 == 5 else ""))
    (tmp_path / "orders.csv").write_text("\n".join(lines) + "\n")
    return gpuetl.Pipeline.from_dict(
        {"version": 1, "name": "orders", "source": {"type": "csv", "path": "orders.csv", "blocksize": "1GiB"},
         "columns": {"order": "int64", "customer": "string", "amount": "float64", "note": "string"},
         "steps": [{"filter": "amount > 10"}, {"derive": {"big": "amount > 50"}}],
         "on_error": "quarantine", "sink": {"path": "out"}}, base_dir=tmp_path)


class _JsonRoot:
    """libcudf's JSON reader's wrapper column, stood in for: each record as Python's json reads it."""

    def __init__(self, records):
        self.records = records

    def size(self):
        return len(self.records)


def _read_json_records(body, tree):
    records = []
    for text in dev.arrow_of(body).to_pylist():
        try:
            value = json.loads(text) if text is not None else None
        except ValueError:
            value = None                    # recovery mode: a record it cannot read is null
        records.append(value if isinstance(value, dict) else None)
    return _JsonRoot(records), {}


def _valid(col, n):
    if isinstance(col, _JsonRoot):
        return np.array([r is not None for r in col.records], dtype=bool)
    return np.zeros(n, dtype=bool)


def _json_token(root, names, col, lines, record_read):
    """Each record's token text for the column (quotes kept, as libcudf's keep_quotes gives)."""
    tokens = []
    for r in root.records:
        value = None if r is None else r.get(col.name)
        for step in (col.path or ()) if value is None and r is not None else ():
            r = r.get(step) if isinstance(r, dict) else (r[step] if isinstance(r, list) and step < len(r) else None)
            value = r
        tokens.append(None if value is None else json.dumps(value, ensure_ascii=False) if isinstance(value, str)
                      else ("true" if value is True else "false" if value is False else str(value)))
    return dev.DevSeries(dev.CPU.series(pa.array(tokens, pa.string()), "string")), np.zeros(len(tokens), dtype=bool)


def _read_csv_records(records, names, delimiter, null_values):
    import csv

    rows = list(csv.reader(dev.arrow_of(records).to_pylist(), delimiter=delimiter))
    quoted = [[False] * len(names)]          # unquoted fields in null_values are null (the records are plain)
    raw = [line.split(delimiter) if '"' not in line else None for line in dev.arrow_of(records).to_pylist()]
    out = []
    for k in range(len(names)):
        values = []
        for row, fields in zip(rows, raw):
            v = row[k]
            values.append(None if fields is not None and v in null_values else v)
        out.append(dev.DevSeries(dev.CPU.series(pa.array(values, pa.string()), "string")))
    del quoted
    return out


PIPELINE_DATA = {"access logs (text, apache_combined)": access_logs, "app events (jsonl)": app_events,
                 "orders (csv)": orders_csv}


def _plan(make, tmp_path: Path, rows: int):
    folder = tmp_path / str(rows)
    folder.mkdir()
    plan = make(folder, rows).plan("cpu")
    assert len(plan.partitions) == 1
    return plan


def _partition(plan, backend):
    part = plan.partitions[0]
    return read_partition(part, plan.segments[0].for_partition(part), backend).frame     # its counters aside


def _rows(df, backend) -> list:
    return [dev.arrow_of(df[c]).to_pylist() for c in sorted(df.columns)]


@pytest.mark.slow
@pytest.mark.parametrize("make", PIPELINE_DATA.values(), ids=PIPELINE_DATA)
def test_a_partitions_syncs_do_not_grow_with_its_rows(tmp_path, monkeypatch, make):
    backend = dev.install(monkeypatch)
    monkeypatch.setattr(gpu_records, "_read_json_records", _read_json_records)
    monkeypatch.setattr(gpu_records, "_valid", _valid)
    monkeypatch.setattr(gpu_records, "_json_token", _json_token)
    monkeypatch.setattr(gpu_records, "_read_csv_records", _read_csv_records)
    syncs, selections = {}, {}
    for rows in (1_000, 20_000):
        plan = _plan(make, tmp_path, rows)
        gpu_tallies.reset_tallies()
        dev.MASK_SELECTIONS[0] = 0
        df = _partition(plan, backend)
        live, quarantined, _ = backend.separate(df)
        counted = gpu_tallies.worker_tallies()["syncs"]
        syncs[rows], selections[rows] = counted, dev.MASK_SELECTIONS[0]
        assert len(live) + len(quarantined) > 0
        assert _rows(df, backend) == _rows(_partition(plan, dev.CPU), dev.CPU)
    assert syncs[1_000] == syncs[20_000], syncs
    # the syncs libcudf makes inside a call (a mask selection reads its size): not counted, and
    # not growing with the rows either
    assert selections[1_000] == selections[20_000], selections
    assert 0 < sum(syncs[20_000].values()) <= BUDGET, syncs
    assert gpu_tallies.host_transfer_report(gpu_tallies.worker_tallies(), 1)["syncs"] == \
        {"total": sum(syncs[20_000].values()), "by_reason": dict(sorted(syncs[20_000].items()))}
