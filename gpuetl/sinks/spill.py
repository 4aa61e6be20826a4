"""The map side of the sink: each final partition sets its rows aside, per split, in piece files
under the run's temporary folder, and reports what it holds (counts, a histogram of the
placement hash) so the shards can be cut before anything is written to the dataset. The backend
holds, orders, counts, writes and reads the pieces (Backend.spill_*: host Arrow IPC on the CPU,
device frames in Parquet on a GPU); this module decides what goes where."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ..backends.host_spill import write_ipc
from ..columns import COUNT, FILE_INDEX, OFFSET, RAW, REASON, STAGE, STATUS, STATUS_QUARANTINED
from ..durable import boot_id
from ..placement import ORDER, PLACE
from ..sources.counters import CountedFrame, PartitionCounters
from ..sources.pins import RangePin
from ..types import Schema
from .layout import Layout

QUARANTINE_SCHEMA = pa.schema([("_file", pa.string()), ("_offset", pa.int64()), ("_raw", pa.binary()),
                               ("_reason", pa.string()), ("_stage", pa.string())])


@dataclass
class MapResult:
    partition: int
    tallies: dict[tuple[int, int], int] = field(default_factory=dict)   # (stage, status) -> records
    reasons: dict[str, int] = field(default_factory=dict)               # quarantine reason -> records
    pieces: dict[int, str] = field(default_factory=dict)                # split -> piece file
    rows: dict[int, int] = field(default_factory=dict)                  # split -> live rows
    histograms: dict[int, np.ndarray] = field(default_factory=dict)     # split -> bytes per bucket
    quarantine: str | None = None
    tables: dict[int, Any] = field(default_factory=dict, repr=False)    # split -> rows kept in memory (a piece)
    counters: PartitionCounters = field(default_factory=PartitionCounters)   # what its reading counted

    @property
    def dropped_fields(self) -> dict[str, int] | None:
        """JSON extra field -> records it was left out of; None: not counted."""
        return self.counters.dropped_fields

    @property
    def read_pins(self) -> tuple[RangePin, ...]:
        """sources.pins.RangePin of each local input range read (resume, manifest)."""
        return tuple(self.counters.read_pins)


def spill_partition(part: CountedFrame, partition: int, *, layout: Layout, schema: Schema, tmp_dir: str,
                    file_names: list[str], stage_names: list[str], backend, in_memory: bool = False) -> MapResult:
    """Spill a partition's frame; its counters go into the result. in_memory: hand the rows to
    the caller in the result instead of a piece file (the streaming writer in the same process;
    a run that cannot be resumed anyway), saving a write and a read of every byte. Such a result
    is not recorded for resume."""
    result = _spill(part.frame, part.counters, partition, layout=layout, schema=schema, tmp_dir=tmp_dir,
                    file_names=file_names, stage_names=stage_names, backend=backend, in_memory=in_memory)
    if not in_memory:
        save_result(result, tmp_dir)
    return result


def _spill(df, counters: PartitionCounters, partition: int, *, layout: Layout, schema, tmp_dir, file_names,
           stage_names, backend, in_memory=False) -> MapResult:
    result = MapResult(partition, counters=counters)
    ranged = layout.ranged
    status = df[STATUS]
    if bool(status.isna().any()):     # every row must be live, dropped or counted: never unknown
        raise RuntimeError(f"internal error: {int(status.isna().sum())} rows of partition {partition} lost "
                           "their bookkeeping columns; please report this with the pipeline file")
    live, bad, result.tallies = backend.separate(df)
    if len(bad):
        counts = bad.groupby(STAGE)[COUNT].sum()
        counts = backend.to_pandas(counts)
        for stage, n in counts.items():
            key = (int(stage), STATUS_QUARANTINED)
            result.tallies[key] = result.tallies.get(key, 0) + int(n)
        reasons = bad.groupby(REASON)[COUNT].sum()
        reasons = backend.to_pandas(reasons)
        result.reasons = {str(k): int(v) for k, v in reasons.items()}
        kept = bad[bad[RAW].notna()]
        if len(kept):
            result.quarantine = _write_quarantine(kept, partition, tmp_dir, file_names, stage_names, backend)
    if not len(live):
        return result
    split, place, order = layout.placement(live, backend)
    table_cols = dict(schema)
    live = backend.conform(live, {**schema, FILE_INDEX: "int32", OFFSET: "int64"})
    live[PLACE] = backend.series(place, "uint64", index=live.index)
    if order is not None:
        live[ORDER] = backend.series(order, "uint64", index=live.index)
    split_host = backend.to_host(split)
    if in_memory and not ranged and (kept := backend.keep_rows(live, split_host)) is not None:
        result.tables, result.rows = kept, {s: len(rows) for s, rows in kept.items()}
        return result             # rows stay where the backend holds them (a device), for its writer
    extra = {FILE_INDEX: "int32", OFFSET: "int64", PLACE: "uint64"}
    if order is not None:
        extra[ORDER] = "uint64"
    piece_schema = {**table_cols, **extra}
    piece = backend.spill_piece(live, piece_schema)
    for s, rows in backend.spill_groups(piece, split_host, ranged).items():
        result.rows[s] = len(rows)
        if in_memory:
            result.tables[s] = rows
        else:
            path = piece_path(tmp_dir, s, partition, backend.spill_suffix)
            backend.write_spill(rows, path, piece_schema)
            result.pieces[s] = path
        if ranged or layout.shuffle:   # where the bytes lie: shards are cut, and shuffled ones written in turns
            result.histograms[s] = backend.spill_histogram(rows, schema)
    return result


def save_result(result: MapResult, tmp_dir: str) -> None:
    """Record a finished map task, so a resumed run can skip it (written last, atomically)."""
    import json

    folder = os.path.join(tmp_dir, "maps")
    os.makedirs(folder, exist_ok=True)
    for split, hist in result.histograms.items():
        path = os.path.join(folder, f"p{result.partition:06d}-s{split}.npy")
        np.save(path + ".partial.npy", hist)
        os.replace(path + ".partial.npy", path)
    state = {"partition": result.partition, "tallies": [[s, st, n] for (s, st), n in result.tallies.items()],
             "reasons": result.reasons, "pieces": {str(k): v for k, v in result.pieces.items()},
             "rows": {str(k): v for k, v in result.rows.items()}, "quarantine": result.quarantine,
             "histograms": sorted(result.histograms), "dropped_fields": result.dropped_fields,
             "read_pins": [list(p) for p in result.read_pins],
             "host": socket.gethostname(), "boot": boot_id()}   # pieces are not flushed: a power cut may lose them
    path = os.path.join(folder, f"p{result.partition:06d}.json")
    with open(path + ".partial", "w") as fh:
        json.dump(state, fh)
    os.replace(path + ".partial", path)


def load_result(tmp_dir: str, partition: int) -> MapResult | None:
    import json

    path = os.path.join(tmp_dir, "maps", f"p{partition:06d}.json")
    try:
        with open(path) as fh:
            state = json.load(fh)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(state, dict) or (state.get("host") == socket.gethostname() and state.get("boot") != boot_id()):
        return None                     # written before this machine restarted: its pieces may be lost
    try:
        pieces = {int(k): v for k, v in state["pieces"].items()}
        splits = [int(s) for s in state.get("histograms", [])]
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    # The state is read back from disk: a piece counts only when it is exactly where this run
    # writes it (never a path taken from the file), a regular file reached without a link.
    if (any(p not in {piece_path(tmp_dir, s, partition, suffix) for suffix in PIECE_SUFFIXES} for s, p in pieces.items())
            or not all(_ours(tmp_dir, p) for p in pieces.values())):
        return None
    quarantine = state.get("quarantine")
    if quarantine is not None and (quarantine != os.path.join(tmp_dir, "spill", "quarantine", f"p{partition:06d}.arrow")
                                   or not _ours(tmp_dir, quarantine)):
        return None
    hists = {}
    for split in splits:
        path = os.path.join(tmp_dir, "maps", f"p{partition:06d}-s{split}.npy")
        if not _ours(tmp_dir, path):
            return None
        try:
            hists[split] = np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            return None
    try:
        tallies = {(int(s), int(st)): int(n) for s, st, n in state["tallies"]}
        reasons = {str(k): int(v) for k, v in state["reasons"].items()}
        rows = {int(k): int(v) for k, v in state["rows"].items()}
        dropped = state.get("dropped_fields")
        dropped = None if dropped is None else {str(k): int(v) for k, v in dropped.items()}
        pins = tuple(_read_pin(p) for p in state["read_pins"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None                     # not a state this code wrote: the partition is run again
    return MapResult(partition, tallies, reasons, pieces, rows, hists, quarantine,
                     counters=PartitionCounters(dropped, list(pins)))


def _read_pin(value) -> RangePin:
    """A RangePin as save_result wrote it (else ValueError: the partition is run again)."""
    fi, start, end, digest = value
    if not (type(fi) is int and type(start) is int and type(end) is int and 0 <= start <= end
            and (digest is None or isinstance(digest, str))):
        raise ValueError("not a range pin")
    return RangePin(fi, start, end, digest)


def _ours(tmp_dir: str, path: str) -> bool:
    """`path` (under `tmp_dir`) is a regular file and no folder between them is a link."""
    import stat

    rel = os.path.relpath(path, tmp_dir)
    if rel == os.curdir or rel.split(os.sep)[0] == os.pardir:
        return False
    current, mode = tmp_dir, 0
    for part in rel.split(os.sep):
        current = os.path.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            return False
        if stat.S_ISLNK(mode):
            return False
    return stat.S_ISREG(mode)


# The files a piece may be in: host Arrow IPC (Backend.write_spill) or a device backend's Parquet
# (gpu_spill.py); a resumed run on another backend reads either.
PIECE_SUFFIXES = (".arrow", ".parquet")


def piece_path(tmp_dir: str, split: int, partition: int, suffix: str) -> str:
    """Where a partition's piece of a split is written (load_result accepts nothing else)."""
    if suffix not in PIECE_SUFFIXES:
        raise ValueError(f"internal error: spill pieces are {PIECE_SUFFIXES} files, not {suffix!r}")
    return os.path.join(tmp_dir, "spill", f"s{int(split)}", f"p{partition:06d}{suffix}")


def _write_quarantine(bad, partition, tmp_dir, file_names, stage_names, backend) -> str:
    table = backend.host_table(bad, {FILE_INDEX: "int32", OFFSET: "int64", RAW: "binary", REASON: "string",
                                     STAGE: "int16"}, "quarantine: records set aside")
    fi = table.column(FILE_INDEX).to_numpy()
    names = np.asarray(file_names, dtype=object)
    stages = np.asarray(stage_names, dtype=object)
    out = pa.table({
        "_file": pa.array([names[i] if i >= 0 else None for i in fi], pa.string()),
        "_offset": table.column(OFFSET),
        "_raw": table.column(RAW),
        "_reason": table.column(REASON),
        "_stage": pa.array([stages[i] for i in table.column(STAGE).to_numpy()], pa.string()),
        FILE_INDEX: table.column(FILE_INDEX),
    })
    path = os.path.join(tmp_dir, "spill", "quarantine", f"p{partition:06d}.arrow")
    write_ipc(out, path)
    return path
