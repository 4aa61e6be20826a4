"""The CPU backend's spill facet (base.Spill): pieces are host Arrow tables in Arrow IPC files
(the functions in host_spill.py), read back memory-mapped."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..types import Schema
from .host_spill import arrow_groups, arrow_histogram, read_ipc, write_ipc


class CpuSpill:
    """Spill pieces as host Arrow tables (CpuBackend's)."""

    spill_suffix: str = ".arrow"
    spill_read_once = False        # a shuffled shard's pieces are read again for every turn
    shard_batch_bytes = None       # sinks/parquet.py's SHARD_BATCH_BYTES

    def spill_piece(self, df: Any, schema: Schema) -> Any:
        """The live rows, with exactly `schema`'s columns and types, as a piece. The columns keep
        the partition's chunks (one per parsed piece) unjoined: a ranged piece's gather
        (spill_groups) already writes one chunk per column, and joining first would copy the
        whole partition beside its frame for no less work downstream."""
        return self.to_arrow(df, schema)

    def spill_groups(self, piece: Any, split: np.ndarray, ranged: bool) -> dict[int, Any]:
        return arrow_groups(piece, split, ranged)

    def spill_histogram(self, piece: Any, schema: Schema) -> np.ndarray:
        return arrow_histogram(piece, schema)

    def write_spill(self, piece: Any, path: str, schema: Schema) -> None:
        write_ipc(piece, path)          # Arrow's types are the schema's already

    def read_spill(self, path: str, columns: list[str] | None = None,
                   buckets: tuple[int, int] | None = None) -> Any:
        """The CPU memory-maps its pieces and returns them whole (spill_range narrows them)."""
        table = read_ipc(path)
        return table.select(columns) if columns is not None else table

    def spill_range(self, piece: Any, lo_bucket: int, hi_bucket: int) -> tuple[Any, Any]:
        from ..placement import PLACE, hash_range

        if not len(piece):
            return piece, None
        start, stop, mine = hash_range(piece.column(PLACE).to_numpy(), lo_bucket, hi_bucket)
        return piece.slice(start, stop - start), mine

    def spill_column(self, piece: Any, name: str) -> Any:
        return piece.column(name).to_numpy()

    def spill_filter(self, piece: Any, mask: Any) -> Any:
        return piece.filter(pa.array(mask))

    def spill_concat(self, pieces: list) -> Any:
        return pa.concat_tables(pieces)

    def spill_sort(self, piece: Any, keys: list[str]) -> Any:
        import pyarrow.compute as pc

        return piece.take(pc.sort_indices(piece, sort_keys=[(k, "ascending") for k in keys]))

    def spill_span(self, piece: Any, name: str) -> tuple[int, int] | None:
        if not len(piece):
            return None
        values = piece.column(name).to_numpy()
        return int(values.min()), int(values.max())

    def keep_rows(self, df: Any, split: np.ndarray) -> dict[int, Any] | None:
        """None: the live rows are set aside as host Arrow (pyarrow's encoder reads Arrow)."""
        return None
