"""Where a shard's stretch lies in a GPU spill piece file (backends/gpu_spill.py). Pure Python."""

from __future__ import annotations


# ---------------------------------------------------------------------------------------------
# spill pieces: where a shard's stretch lies in a piece file (backends/gpu_spill.py)

# A ranged piece's rows are grouped by the placement hash's top COARSE_BITS bits
# (host_spill.arrow_groups). Its writer stores where each group starts in the file's key-value
# metadata and cuts the file into row groups of about a PIECE_ROW_GROUPS-th of its rows, so a
# shard task reads the rows of its groups (libcudf's skip_rows/num_rows read only the row groups
# they cross) instead of the whole piece.
PIECE_GROUPS_KEY = "gpuetl.placement_group_starts"
PIECE_ROW_GROUPS = 64
PIECE_FRAGMENT_ROWS = 5_000        # libcudf's page fragment: its writer cuts row groups between fragments


def piece_group_rows(rows: int) -> int:
    """Rows per Parquet row group of a spill piece of `rows` rows: about a PIECE_ROW_GROUPS-th
    of them in whole page fragments (so libcudf cuts exactly there); a stretch read crosses at
    most two row groups it does not need all of."""
    return max(1, -(-rows // (PIECE_ROW_GROUPS * PIECE_FRAGMENT_ROWS))) * PIECE_FRAGMENT_ROWS


def group_starts(place, xp, to_host):
    """The row each coarse placement group starts at in a piece (1 + the number of groups
    values, the last the row count), or None when the rows are not grouped (a piece in input
    order). `place`: the piece's placement hashes (xp uint64); `to_host` copies the few numbers
    to the host (and counts them)."""
    from ..placement import COARSE_BITS

    coarse = (place >> xp.uint64(64 - COARSE_BITS)).astype(xp.int64)
    starts = xp.searchsorted(coarse, xp.arange((1 << COARSE_BITS) + 1, dtype=xp.int64), side="left")
    unordered = (coarse[1:] < coarse[:-1]).sum()
    host = to_host(xp.concatenate([starts.astype(xp.int64), unordered.reshape(1).astype(xp.int64)]))
    return None if int(host[-1]) else [int(v) for v in host[:-1]]


def encode_group_starts(starts: list[int]) -> str:
    import json

    return json.dumps(starts, separators=(",", ":"))


def piece_stretch_rows(stored, num_rows: int, lo_bucket: int, hi_bucket: int) -> tuple[int, int] | None:
    """The rows [start, stop) of a piece that hold placement buckets [lo_bucket, hi_bucket):
    the whole coarse groups placement.hash_range's stretch spans, from the group starts the
    piece's writer stored (`stored`: that key-value entry, bytes or str). None where there is
    none or it does not describe this piece (a piece written before, or by another writer):
    the piece is then read whole."""
    import json

    from ..placement import BUCKET_BITS, BUCKETS, COARSE_BITS

    if stored is None:
        return None
    try:
        starts = json.loads(stored)
    except (TypeError, ValueError, RecursionError):
        return None
    groups = 1 << COARSE_BITS
    if not (isinstance(starts, list) and len(starts) == groups + 1
            and all(type(s) is int for s in starts) and starts[0] == 0 and starts[-1] == num_rows
            and all(a <= b for a, b in zip(starts, starts[1:]))):
        return None
    shift = BUCKET_BITS - COARSE_BITS
    first = min(max(lo_bucket, 0) >> shift, groups)
    last = groups if hi_bucket >= BUCKETS else min(max(hi_bucket - 1, 0) >> shift, groups - 1) + 1
    start = starts[first]
    return start, max(starts[last], start)


def piece_file_stretch(path: str, lo_bucket: int, hi_bucket: int) -> tuple[int, int] | None:
    """piece_stretch_rows for a Parquet piece file, from its footer (read on the host by
    pyarrow: a few KiB of the file, no device copy)."""
    import pyarrow.parquet as pq

    footer = pq.read_metadata(path)
    return piece_stretch_rows((footer.metadata or {}).get(PIECE_GROUPS_KEY.encode()), footer.num_rows,
                              lo_bucket, hi_bucket)
