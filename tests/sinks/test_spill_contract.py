"""The spill goes through the backend's declared piece methods (Backend.spill_*, write_spill,
read_spill): the map side (sinks/spill.py) and the shard writers (sinks/parquet.py) never open a
piece file or touch a piece's rows themselves, so a backend may keep its pieces in its own form
(a GPU: device frames in Parquet, backends/gpu_spill.py)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.backends import host_spill
from gpuetl.backends.cpu import CpuBackend
from gpuetl.placement import PLACE
from gpuetl.samples import write_access_logs
from gpuetl.sinks import parquet, spill

PIECE_METHODS = ("spill_piece", "spill_groups", "spill_histogram", "write_spill", "read_spill", "spill_range",
                 "spill_column", "spill_filter", "spill_concat", "spill_sort", "spill_span")


class Recording(CpuBackend):
    """The CPU backend, recording each piece method it is asked for (the CPU's own code does the work)."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []
        self.written: list[str] = []

    def __getattribute__(self, name):
        attr = super().__getattribute__(name)
        if name in PIECE_METHODS:
            calls = super().__getattribute__("calls")

            def recorded(*args, **kwargs):
                calls.append(name)
                if name == "write_spill":
                    super(Recording, self).__getattribute__("written").append(args[1])
                return attr(*args, **kwargs)
            return recorded
        return attr


class ParquetPieces(Recording):
    """Pieces kept in another form and file format (Parquet, as the GPU's are), through the
    same contract: the shards must not change."""

    spill_suffix = ".parquet"

    def write_spill(self, piece, path, schema):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(piece, path + ".partial")
        os.replace(path + ".partial", path)

    def read_spill(self, path, columns=None, buckets=None):
        return pq.read_table(path, columns=columns)


SHARDS = {
    "shuffled by key, splits": {"count": 3, "shuffle": True, "key": ["ip"], "splits": {"train": 0.8, "val": 0.2}},
    "ranged, unshuffled": {"count": 3},
    "in input order, splits": {"splits": {"train": 0.5, "val": 0.5}},
}


def _run(tmp_path, name, shard, backend):
    spec = {"version": 1, "name": "contract", "source": {"type": "text", "path": "access.log", "blocksize": "48KiB"},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
            "steps": [{"filter": "status < 500"}],
            "shard": shard, "sink": {"path": name, "row_group_rows": 300, "mode": "resume"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend=backend, scheduler="sync")
    c = result.counts
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    return result


@pytest.mark.parametrize("shard", SHARDS.values(), ids=SHARDS)
def test_the_spill_goes_through_the_backends_piece_methods(tmp_path, monkeypatch, shard):
    write_access_logs(tmp_path / "access.log", lines=1500, seed=3)
    plain = _run(tmp_path, "plain", shard, "cpu")
    opened = []
    real_read = host_spill.read_ipc

    def read_ipc(path):
        opened.append(path)
        return real_read(path)

    monkeypatch.setattr(host_spill, "read_ipc", read_ipc)
    monkeypatch.setattr(parquet, "read_ipc", read_ipc)
    monkeypatch.setattr(parquet, "SHARD_BATCH_BYTES", 20_000)       # shuffled shards in several turns
    for name, backend in (("recorded", Recording()), ("parquet", ParquetPieces())):
        opened.clear()
        result = _run(tmp_path, name, shard, backend)
        assert [s["sha256"] for s in result.shards] == [s["sha256"] for s in plain.shards], name
        assert result.counts == plain.counts
        calls = set(backend.calls)
        assert {"spill_piece", "spill_groups", "write_spill", "read_spill"} <= calls, calls
        assert backend.written and all(p.endswith(backend.spill_suffix) for p in backend.written)
        if shard.get("count"):
            assert "spill_histogram" in calls and "spill_range" in calls
        if shard.get("shuffle"):
            assert {"spill_sort", "spill_span", "spill_column", "spill_filter"} <= calls, calls
        # no piece was opened but through read_spill (the CPU's read_spill reads IPC itself)
        pieces = [p for p in opened if "quarantine" not in p]
        assert len(pieces) <= backend.calls.count("read_spill")
        if isinstance(backend, ParquetPieces):
            assert pieces == []


def test_a_resumed_run_keeps_pieces_in_either_form(tmp_path):
    """load_result accepts a piece where this run writes it, in the CPU's or a GPU's form."""
    table = CpuBackend().spill_piece(CpuBackend().xd.DataFrame({PLACE: np.array([1, 2], dtype=np.uint64)}),
                                     {PLACE: "uint64"})
    for suffix in spill.PIECE_SUFFIXES:
        folder = tmp_path / suffix.strip(".")
        path = spill.piece_path(str(folder), 0, 3, suffix)
        os.makedirs(os.path.dirname(path))
        if suffix == ".parquet":
            pq.write_table(table, path)
        else:
            host_spill.write_ipc(table, path)
        spill.save_result(spill.MapResult(3, pieces={0: path}, rows={0: 2}), str(folder))
        loaded = spill.load_result(str(folder), 3)
        assert loaded is not None and loaded.pieces == {0: path}
        assert host_spill.read_ipc(path).column(PLACE).to_pylist() == [1, 2]
        spill.save_result(spill.MapResult(3, pieces={0: path + ".x"}, rows={0: 2}), str(folder))
        assert spill.load_result(str(folder), 3) is None             # not where this run writes it
    with pytest.raises(ValueError, match="spill pieces"):
        spill.piece_path(str(tmp_path), 0, 3, ".csv")


def test_a_map_record_from_before_a_restart_is_not_trusted(tmp_path, monkeypatch):
    """Spill pieces are not flushed to the disk (gpuetl/durable.py): after a power cut one may be
    empty or lost while its map record survived. A record written in another boot of the machine
    is not trusted, so a resumed run maps that partition again rather than read the piece. (A
    record another host's worker wrote cannot be checked from here: it is trusted, as before.)"""
    import json
    from gpuetl import durable

    table = CpuBackend().spill_piece(CpuBackend().xd.DataFrame({PLACE: np.array([1, 2], dtype=np.uint64)}),
                                     {PLACE: "uint64"})
    path = spill.piece_path(str(tmp_path), 0, 3, ".arrow")
    os.makedirs(os.path.dirname(path))
    host_spill.write_ipc(table, path)
    spill.save_result(spill.MapResult(3, pieces={0: path}, rows={0: 2}), str(tmp_path))
    assert spill.load_result(str(tmp_path), 3) is not None                # this boot: trusted
    monkeypatch.setattr(durable, "boot_id", lambda: "another-boot")
    monkeypatch.setattr(spill, "boot_id", durable.boot_id, raising=False)
    assert spill.load_result(str(tmp_path), 3) is None                    # after a restart: run again
    record = tmp_path / "maps" / "p000003.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "host": "another-host"}))
    assert spill.load_result(str(tmp_path), 3) is not None


def test_a_ranged_piece_is_one_chunk_per_column_when_the_frame_is_in_several():
    """A partition's columns arrive as one chunk per parsed piece; spill_piece leaves them so
    (joining would copy the partition), and the ranged gather writes each split's rows as one
    chunk per column, so the shard writers sort and take over as many chunks as before."""
    import pandas as pd
    import pyarrow as pa

    backend = CpuBackend()
    rows = 600
    place = np.random.default_rng(0).integers(0, 2**63, rows, dtype=np.uint64)
    parts = [slice(0, 250), slice(250, 400), slice(400, rows)]
    chunked = {PLACE: pa.chunked_array([pa.array(place[p]) for p in parts]),
               "text": pa.chunked_array([pa.array([f"row {i}" for i in range(rows)][p]) for p in parts])}
    frame = pd.DataFrame({name: pd.Series(pd.arrays.ArrowExtensionArray(col)) for name, col in chunked.items()})
    piece = backend.spill_piece(frame, {PLACE: "uint64", "text": "string"})
    assert piece.column("text").num_chunks == 3
    split = (np.arange(rows) % 3).astype(np.int8)
    groups = backend.spill_groups(piece, split, ranged=True)
    assert sorted(groups) == [0, 1, 2]
    for s, table in groups.items():
        assert [table.column(name).num_chunks for name in table.column_names] == [1, 1]
        assert sorted(table.column("text").to_pylist()) == sorted(f"row {i}" for i in range(s, rows, 3))
