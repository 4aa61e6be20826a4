from __future__ import annotations

import os
from dataclasses import dataclass

from pydantic import Field, model_validator

import numpy as np
import pyarrow as pa

from ..columns import FILE_INDEX, OFFSET, STATUS, STATUS_DEDUPLICATED, STATUS_LIVE
from ..types import Schema
from .base import Binding, InOrderGlobalStep, Params, register
from .select import missing

DUPLICATE = "__dup"       # set by Dedupe.mark: this live row repeats an earlier one
_POSITION, _PARTITION = "__pos", "__part"


class DedupeParams(Params):
    on: list[str] | None = Field(None, description="columns that make two rows duplicates; all columns when absent")
    keep: str = Field("first", description="which copy survives: the first by input file and byte offset")

    @model_validator(mode="after")
    def _check(self):
        if self.keep != "first":
            raise ValueError("keep: only 'first' (the earliest record by file and offset) is supported")
        if self.on is not None and not self.on:
            raise ValueError("on: give at least one column, or leave it out to compare whole rows")
        return self


@dataclass(frozen=True)
class DedupeBinding(Binding):
    keys: tuple[str, ...]          # the columns that make two rows duplicates


@register
class Dedupe(InOrderGlobalStep):
    """Exact duplicates across the whole dataset, found without moving rows: every partition
    hashes its keys; one task finds the hashes that occur more than once; only those rows'
    values are gathered and compared (a hash collision never drops a row); each partition then
    drops its own repeats. Rows stay in input order, so the output streams straight to Parquet.
    On the local cluster each partition is settled as soon as the partitions before it are, so
    writing starts while later ones are still read (steps/base.py's protocols, run by
    runtime/graph.py: resolve_in_order, resolve_in_place)."""

    name = "dedupe"
    summary = "Remove exact duplicates across all partitions, keeping the first by file and offset."
    example = "- dedupe: {on: [ip, time, request]}"
    Params = DedupeParams

    @classmethod
    def from_raw(cls, raw):
        return cls(cls.Params.model_validate({} if raw is None else raw))

    def key_columns(self, schema: Schema) -> list[str]:
        return list(self.params.on) if self.params.on else [c for c in schema if not c.startswith("_")]

    def derive(self, schema: Schema) -> Binding:
        if self.params.on:
            missing(schema, self.params.on)
        return DedupeBinding(dict(schema), tuple(self.key_columns(schema)))

    def keep(self, df, backend):
        """The rows `mark` did not mark (a global step always starts a segment: marked first)."""
        if len(df) == 0:
            return None
        return ~df[DUPLICATE].astype(bool)

    # -- resolved in place (runtime/graph.py: resolve_in_place) -------------------------------
    def row_keys(self, df, backend):
        """(positions of the live rows, the hash of each one's key): 8 bytes a row leave the task."""
        xp = backend.xp
        if not len(df):
            return xp.zeros(0, dtype=xp.int64), xp.zeros(0, dtype=xp.uint64)
        live = xp.asarray((df[STATUS] == STATUS_LIVE).values).astype(bool)
        hashes = xp.asarray(backend.row_hash([df[k] for k in self.binding.keys]))
        return xp.flatnonzero(live), hashes[live]

    def repeated_keys(self, parts: list, backend):
        """The key hashes that occur more than once in the whole dataset, sorted."""
        xp = backend.xp
        hashes = [h for _, h in parts if len(h)]
        if not hashes:
            return xp.zeros(0, dtype=xp.uint64)
        ordered = xp.sort(xp.concatenate(hashes))
        return xp.unique(ordered[1:][ordered[1:] == ordered[:-1]])

    def candidates(self, df, part_keys, repeated, partition: int, backend):
        """The live rows whose key hash repeats somewhere: key values, file, offset, position."""
        xp = backend.xp
        positions, hashes = part_keys
        if not len(repeated) or not len(positions):
            return None
        at = xp.minimum(xp.searchsorted(repeated, hashes), len(repeated) - 1)
        rows = positions[repeated[at] == hashes]
        if not len(rows):
            return None
        columns = list(dict.fromkeys([*self.binding.keys, FILE_INDEX, OFFSET]))
        out = df.iloc[backend.to_host(rows)][columns].reset_index(drop=True)
        out[_POSITION] = backend.series(rows, "int64", index=out.index)
        out[_PARTITION] = backend.series(xp.full(len(out), partition, dtype=xp.int32), "int32", index=out.index)
        return out

    def decide(self, candidates: list, backend) -> dict[int, np.ndarray]:
        """{partition: positions of its rows that repeat an earlier row (by file and offset)}:
        values are compared exactly, so rows that merely share a hash are both kept."""
        frames = [c for c in candidates if c is not None and len(c)]
        if not frames:
            return {}
        rows = backend.concat(frames).sort_values([FILE_INDEX, OFFSET])
        repeats = rows[rows.duplicated(subset=list(self.binding.keys), keep="first")][[_PARTITION, _POSITION]]
        repeats = backend.to_pandas(repeats)
        return {int(p): group[_POSITION].to_numpy(dtype=np.int64) for p, group in repeats.groupby(_PARTITION)}

    def mark(self, df, partition: int, decided: dict, backend):
        """The partition with DUPLICATE set on the rows `decide` found (keep drops them)."""
        mark = np.zeros(len(df), dtype=bool)
        mark[decided.get(partition, np.zeros(0, dtype=np.int64))] = True
        return df.assign(**{DUPLICATE: backend.series(backend.xp.asarray(mark), "bool", index=df.index)})

    # -- settled in input order (runtime/graph.py: resolve_in_order) -----------------------------

    def start(self, backend, scratch: str | None = None) -> "Seen":
        schema = {**{k: self.binding.output_schema[k] for k in self.binding.keys}, FILE_INDEX: "int32",
                  OFFSET: "int64"}
        return Seen((), KeyFrames(scratch, schema), np.zeros(1 << (_FILTER_BITS - 3), dtype=np.uint8))

    def advance(self, seen: "Seen", df, part_keys, partition: int, backend):
        """(the next Seen, {partition: positions of its rows that repeat an earlier row}). A row
        is a candidate when its key hash was kept before or repeats within the partition; only
        candidates are compared, by value, with the kept rows that share their hash (decide),
        so unequal rows that share a hash are both kept. Kept rows join Seen."""
        positions, hashes = (backend.to_host(a) for a in part_keys)
        current = df[list(seen.frames.schema)]
        order = np.argsort(hashes)                 # sorted queries search several times faster
        hashes, positions = hashes[order], positions[order]
        candidate = np.zeros(len(hashes), dtype=bool)
        earlier = []
        maybe = np.flatnonzero(_test_bits(seen.bits, hashes))     # the rest were never kept
        queries = hashes[maybe]
        for run_hashes, run_rows in seen.runs:
            lo = np.searchsorted(run_hashes, queries, side="left")
            hit = run_hashes[np.minimum(lo, len(run_hashes) - 1)] == queries
            if hit.any():
                candidate[maybe[hit]] = True
                hi = np.searchsorted(run_hashes, queries[hit], side="right")
                earlier.append(run_rows[_ranges(lo[hit], hi)])
        same = hashes[1:] == hashes[:-1]
        candidate[1:] |= same
        candidate[:-1] |= same
        dropped = np.zeros(0, dtype=np.int64)
        if candidate.any():
            rows = np.sort(positions[candidate])
            found = [self._rows(_picked(current, rows, backend), rows, partition, backend)]
            earlier = np.concatenate(earlier) if earlier else np.zeros(0, dtype=np.int64)
            for p in np.unique(earlier >> _PART_SHIFT):
                rows = np.unique(earlier[(earlier >> _PART_SHIFT) == p] & _POSITION_MASK)
                found.append(self._rows(seen.frames.get(int(p), rows, backend), rows, int(p), backend))
            dropped = self.decide(found, backend).get(partition, dropped)
        kept = ~np.isin(positions, dropped)
        run = (hashes[kept], (np.int64(partition) << _PART_SHIFT) | positions[kept])
        runs = [*seen.runs, run] if len(run[0]) else list(seen.runs)      # runs are never empty
        _set_bits(seen.bits, run[0])
        seen.frames.add(partition, current, backend)
        return Seen(_merge_runs(runs), seen.frames, seen.bits), {partition: dropped}

    def _rows(self, out, rows, partition: int, backend):
        """The rows of partition `partition` at positions `rows` (picked from its key frame), as
        decide() takes them."""
        out[_POSITION] = backend.series(backend.xp.asarray(rows), "int64", index=out.index)
        out[_PARTITION] = backend.series(backend.xp.full(len(out), partition, dtype=backend.xp.int32), "int32",
                                         index=out.index)
        return out



def _picked(frame, rows, backend):
    """The rows at these ascending positions. Picked with a mask: a take on Arrow columns of
    several chunks would first join them."""
    mask = np.zeros(len(frame), dtype=bool)
    mask[rows] = True
    return backend.filter(frame, backend.series(backend.xp.asarray(mask), "bool", index=frame.index)
                          ).reset_index(drop=True)


KEY_FRAMES_IN_MEMORY = 32 << 20


class KeyFrames:
    """Each settled partition's key columns, file and offset, to compare a later candidate's
    values with. The first KEY_FRAMES_IN_MEMORY bytes of them stay in memory; each partition's
    after that goes to an Arrow IPC file in `folder` (a folder of the run's), read back
    memory-mapped for the few rows a candidate needs, so the state in memory does not grow with
    the input. Without a folder every partition's stays in memory."""

    def __init__(self, folder: str | None, schema: Schema):
        self.folder, self.schema = folder, schema
        self.held: dict = {}              # partition -> its key frame
        self.files: dict[int, str] = {}   # partition -> its IPC file
        self.held_bytes = 0

    def add(self, partition: int, frame, backend) -> None:
        size = int(frame.memory_usage(deep=True, index=False).sum())
        if self.folder is None or self.held_bytes + size <= KEY_FRAMES_IN_MEMORY:
            self.held[partition] = frame
            self.held_bytes += size
            return
        os.makedirs(self.folder, exist_ok=True)
        path = os.path.join(self.folder, f"p{partition:06d}.arrow")
        table = backend.host_table(frame, self.schema, "dedupe: key frames set aside on disk")
        with pa.OSFile(path + ".partial", "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=1 << 20)
        os.replace(path + ".partial", path)
        self.files[partition] = path

    def get(self, partition: int, rows: np.ndarray, backend):
        """The rows of the partition's key frame at these ascending positions."""
        if partition in self.held:
            return _picked(self.held[partition], rows, backend)
        table = pa.ipc.open_file(pa.memory_map(self.files[partition], "r")).read_all()
        mask = np.zeros(table.num_rows, dtype=bool)
        mask[rows] = True
        return backend.from_arrow(table.filter(pa.array(mask)))


@dataclass(frozen=True)
class Seen:
    """What advance() has kept so far: sorted runs of (key hash, row) for every kept row, where
    row = partition << 32 | position in its partition's frame, 16 bytes a kept row, and each
    partition's key columns (KeyFrames), to compare a later candidate's values with. Runs are
    merged when the newest is about as large as the one before, like a binary counter, up to
    MAX_MERGED_ROWS: about log2(partitions) runs to search until then, and each kept row is
    moved about log2 times.
    `bits` has a bit set for the top bits of every kept hash (16 MiB): a hash whose bit is clear
    was never kept, so only the few others are searched in the runs (with 4 million rows kept,
    about 3 % of new hashes find their bit set by chance). Bits are only ever added, in place: a
    bit too many costs a search, never a wrong answer."""

    runs: tuple
    frames: KeyFrames
    bits: np.ndarray


_PART_SHIFT = np.int64(32)
_POSITION_MASK = np.int64((1 << 32) - 1)
_FILTER_BITS = 27


def _slots(hashes: np.ndarray) -> np.ndarray:
    return (hashes.astype(np.uint64, copy=False) >> np.uint64(64 - _FILTER_BITS)).astype(np.int64)


def _test_bits(bits: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    slot = _slots(hashes)
    return (bits[slot >> 3] >> (slot & 7).astype(np.uint8) & 1).astype(bool)


def _set_bits(bits: np.ndarray, hashes: np.ndarray) -> None:
    slot = _slots(hashes)
    np.bitwise_or.at(bits, slot >> 3, (1 << (slot & 7)).astype(np.uint8))


MAX_MERGED_ROWS = 1 << 22    # kept rows in a merged run (64 MiB): what a merge holds beside the runs is bounded


def _merge_runs(runs: list) -> tuple:
    """Merge the newest runs while about equal (a binary counter), but never into a run of more
    than MAX_MERGED_ROWS: a merge writes its run beside the two it joins, so an unbounded one
    would hold about twice the state for a moment; past the cap runs stay as they are, and
    their number grows by one per MAX_MERGED_ROWS / 2 kept rows or so."""
    while (len(runs) > 1 and len(runs[-2][0]) <= 1.5 * len(runs[-1][0])
           and len(runs[-2][0]) + len(runs[-1][0]) <= MAX_MERGED_ROWS):
        (h1, r1), (h2, r2) = runs[-2], runs[-1]
        # the newer run's places among the older's (after equal hashes: older rows first), then
        # both written once into the merged arrays: 17 bytes a row beside the runs, no sort
        at = np.searchsorted(h1, h2, side="right") + np.arange(len(h2))
        older = np.ones(len(h1) + len(h2), dtype=bool)
        older[at] = False
        hashes, rows = np.empty(len(older), dtype=h1.dtype), np.empty(len(older), dtype=r1.dtype)
        hashes[at], rows[at] = h2, r2
        hashes[older], rows[older] = h1, r1
        runs[-2:] = [(hashes, rows)]
    return tuple(runs)


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The indices lo[0]..hi[0]-1, lo[1]..hi[1]-1, ... as one array."""
    counts = hi - lo
    if not counts.sum():
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return starts + np.arange(counts.sum())
