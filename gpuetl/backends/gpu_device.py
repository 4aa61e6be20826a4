"""Device helpers the GPU backend's modules share (gpu.py and its facets gpu_records, gpu_spill,
gpu_text, gpu_images import them here, never from gpu.py): the one way device data is read on
the host (`to_host_value`: each call one sync, counted by reason, its bytes in the host-transfer
ledger; `to_host_copy`, `any_true` and `host_numbers` go through it; `nonzero_rows` counts CuPy's
nonzero search), views of a column's device buffers, and libcudf regex matching.

Loaded only for a GPU run, like gpu.py (nothing else imports GPU libraries)."""

from __future__ import annotations

import cudf
import cupy as cp
import numpy as np
import pyarrow as pa
import pylibcudf as plc

from .gpu_tallies import count_host_bytes, count_sync


def to_host_value(values, why: str, as_pandas: bool = False):
    """The one device -> host read of the GPU backend (tests/backends/test_gpu_sync_rule.py
    finds no other in backends/gpu*.py): a CuPy array (a reduction's 0-d result included)
    becomes numpy, a cuDF Series an Arrow array, a DataFrame an Arrow table. Each call is one
    sync (the host waits for the stream), counted by `why` (the sync budget,
    host_transfer.syncs), and its bytes are counted in the host-transfer ledger under `why`.
    as_pandas: a cuDF object as pandas, its index kept (small results read row by row)."""
    if as_pandas and isinstance(values, (cudf.Series, cudf.DataFrame)):
        out = values.to_pandas()
        count_sync(why)
        count_host_bytes(why, int(out.memory_usage(deep=True).sum()) if hasattr(out, "columns")
                         else int(out.memory_usage(deep=True)))
        return out
    if isinstance(values, cp.ndarray):
        out = cp.asnumpy(values)
    elif isinstance(values, (cudf.Series, cudf.DataFrame)):
        out = values.to_arrow()
        if isinstance(out, pa.ChunkedArray):
            out = out.combine_chunks()
    elif isinstance(values, (np.ndarray, np.generic, bool, int)):   # a stand-in's, already on the host (tests)
        out = np.asarray(values)
    else:
        raise TypeError(f"to_host_value: not device data ({type(values).__name__})")
    count_sync(why)
    count_host_bytes(why, out.nbytes)
    return out


def to_host_copy(values, reason: str):
    """Device data copied to the host (the host-transfer ledger's name for it): to_host_value."""
    return to_host_value(values, reason)


def any_true(values, reason: str = "control: any()") -> bool:
    """bool(values.any()) for a CuPy bool array or cuDF bool Series (nulls are False): one
    reduction on the device, then a one-byte read, counted."""
    hit = values.any() if isinstance(values, cp.ndarray) else values.fillna(False).values.any()
    return bool(to_host_value(hit, reason))


def host_numbers(values: list, why: str) -> list[int]:
    """Several device scalars of one type (0-d CuPy arrays: flags, counts, extremes) read in ONE
    sync, as Python ints: checks batched into one read instead of one read each."""
    if not values:
        return []
    return [int(v) for v in to_host_value(cp.stack([cp.asarray(v) for v in values]), why)]


def nonzero_rows(mask, why: str):
    """cp.flatnonzero(mask): its output size is read from the device (CuPy syncs for it), so it
    is counted as one sync by `why`."""
    count_sync(why)
    return cp.flatnonzero(mask)


def device_values(col):
    """A CuPy view of a fixed-width column's values (timestamps as int64; nulls undefined)."""
    plc_col, _ = col.to_pylibcudf()
    n, off = plc_col.size(), plc_col.offset()
    if n == 0 or plc_col.data() is None:
        return cp.zeros(n, dtype=cp.int64)
    tid = plc_col.type().id()
    kinds = {plc.TypeId.BOOL8: cp.bool_, plc.TypeId.INT8: cp.int8, plc.TypeId.INT16: cp.int16,
             plc.TypeId.INT32: cp.int32, plc.TypeId.INT64: cp.int64, plc.TypeId.UINT8: cp.uint8,
             plc.TypeId.UINT16: cp.uint16, plc.TypeId.UINT32: cp.uint32, plc.TypeId.UINT64: cp.uint64,
             plc.TypeId.FLOAT32: cp.float32, plc.TypeId.FLOAT64: cp.float64,
             plc.TypeId.TIMESTAMP_MICROSECONDS: cp.int64}
    return span_bytes(plc_col.data()).view(kinds[tid])[off:off + n]


def span_bytes(span):
    """A CuPy uint8 view of a pylibcudf buffer: any Span (ptr and size; a gpumemoryview or
    another buffer type), kept alive by the view."""
    memory = cp.cuda.UnownedMemory(span.ptr, span.size, span)
    return cp.ndarray(span.size, dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(memory, 0))


def strings_from_buffers(buf, bounds, n):
    """A cudf string Series over device bytes: element i is buf[bounds[i]:bounds[i+1]]. Built as a
    pylibcudf STRING column (offsets child + chars), so no byte is copied."""
    large = len(buf) >= 2**31 - 1
    offsets_col = plc.Column.from_cuda_array_interface(bounds.astype(cp.int64 if large else cp.int32))
    chars = plc.gpumemoryview(buf) if len(buf) else None
    column = plc.Column(plc.DataType(plc.TypeId.STRING), n, chars, None, 0, 0, [offsets_col])
    return cudf.Series.from_pylibcudf(column)


def regex_program(pattern: str, dotall: bool = False):
    flags = plc.strings.regex_flags.RegexFlags
    return plc.strings.regex_program.RegexProgram.create(pattern, flags.DOTALL if dotall else flags.DEFAULT)


def regex_matches(col, pattern: str):
    """cupy bool: the (libcudf-dialect) pattern matches; null -> False."""
    plc_col, _ = col.to_pylibcudf()
    hit = cudf.Series.from_pylibcudf(plc.strings.contains.contains_re(plc_col, regex_program(pattern)))
    return hit.fillna(False).values


def with_index(s, index):
    s = s.reset_index(drop=True)
    s.index = index
    return s


def scatter(col, rows, values):
    """col with col[rows[i]] = values[i] (rows: CuPy int, ascending), as a new Series."""
    col = col.reset_index(drop=True)
    keep = cp.ones(len(col), dtype=bool)
    keep[rows] = False
    position = cudf.Series(cp.arange(len(col)))
    merged = cudf.concat([col[cudf.Series(keep)], values.reset_index(drop=True)], ignore_index=True)
    order = cudf.concat([position[cudf.Series(keep)], cudf.Series(rows)], ignore_index=True)
    return merged.iloc[order.argsort().values].reset_index(drop=True)


UTC_TIMESTAMP = None     # the backend's timestamp dtype, datetime64[us, UTC] (set on first use)


def utc_timestamps(naive):
    """A naive datetime64[us] Series of UTC microseconds as datetime64[us, UTC]: the same device
    column under the zoned dtype, nothing copied and no time-zone database read. cuDF 26.10's
    `dt.tz_localize("UTC")` reads the zone's transition table from /usr/share/zoneinfo or the
    `tzdata` wheel (cudf/core/column/datetime.py: _get_tz_data) and searches it for every row, and
    its `astype` refuses a naive -> zoned cast; a UTC label needs neither. (Zoned columns' other
    operations, such as `.dt` fields, still read the table: the `gpu` extra installs tzdata.)"""
    global UTC_TIMESTAMP
    import datetime

    import pandas as pd
    from cudf.core.column import ColumnBase

    if UTC_TIMESTAMP is None:
        UTC_TIMESTAMP = pd.DatetimeTZDtype(unit="us", tz=datetime.timezone.utc)
    column = ColumnBase.create(naive._column.plc_column, UTC_TIMESTAMP, validate=False)   # already cuDF's
    return cudf.Series._from_column(column, index=naive.index, name=naive.name)
