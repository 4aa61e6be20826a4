"""The loader's facet of a backend: how a device holds the row groups of a finished dataset and
cuts them into batches (gpuetl/loader asks for it with `device_batches` when device="cuda").

The Loader owns the order (loader/order.py: a function of (seed, epoch) only), the ranks, the
read-ahead threads, resuming and the statistics; a `BatchFrames` only does the table work, and the
host's (pyarrow, loader/loader.py) and the device's (cuDF, backends/gpu_loader.py) do it on the same
arguments, so both paths give the same batches in the same order:

- `read(data, shard, group)`: one row group of the batch columns (and what image decode needs);
- `rows(unit)`: its row count;
- `window(parts, perm)`: a shuffle window from (unit, offset, length) slices laid end to end, in
  stream order, with the window's permutation (order.EpochOrder.window_perm; None: the identity);
- `piece(window, order, w, lo, hi)`: window positions lo..hi-1 of window w, for `batch`;
- `batch(pieces, pool)`: the pieces joined, as the output's arrays (dict of column -> array).

Nothing here imports a GPU library; gpu_loader.py is imported only when a device is asked for."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..errors import SpecError


@dataclass(frozen=True)
class BatchSpec:
    """What a batch holds, as the Loader validated it."""

    columns: list[str]                 # the batch's columns, in order
    read_columns: list[str]            # read from the shards: columns + what image decode needs
    kinds: dict[str, str]              # column -> numeric | time | image
    dtypes: dict[str, str] = field(default_factory=dict)   # numeric/time column -> numpy dtype of its values
    output: str = "torch"              # cupy | torch
    decode_images: str | None = None   # hwc | chw | None
    image_column: str = "image"
    where: str = ""                    # the dataset, for errors


class BatchFrames(Protocol):
    def read(self, data: Any, shard: Any, group: int) -> Any: ...
    def rows(self, unit: Any) -> int: ...
    def window(self, parts: list[tuple[Any, int, int]], perm: np.ndarray | None) -> Any: ...
    def piece(self, window: Any, order: Any, w: int, lo: int, hi: int) -> Any: ...
    def batch(self, pieces: list[Any], pool: Any = None) -> dict: ...


def storage_dtype(arrow_type) -> str:
    """The numpy dtype of a numeric, boolean or time column's values as a device holds them:
    times as their integer storage (CuPy has no datetime64): int64, date32 int32."""
    import pyarrow as pa

    if pa.types.is_date32(arrow_type):
        return "int32"
    if pa.types.is_timestamp(arrow_type) or pa.types.is_duration(arrow_type) or pa.types.is_date64(arrow_type):
        return "int64"
    return np.dtype(arrow_type.to_pandas_dtype()).name


def check_device() -> None:
    """A clear error where device="cuda" cannot run: no RAPIDS or no visible GPU."""
    from .gpu_detect import gpu_count, rapids_available

    if not (rapids_available() and gpu_count()):
        raise SpecError("Loader: device='cuda' needs an NVIDIA GPU with RAPIDS installed (the GPU backend); "
                        f"{'RAPIDS is not importable' if not rapids_available() else 'no GPU is visible'}. "
                        "Use device='cpu'")


def device_batches(spec: BatchSpec) -> BatchFrames:
    """The device's BatchFrames: cuDF tables, CuPy views, nvImageCodec (backends/gpu_loader.py)."""
    check_device()
    from .gpu_loader import DeviceBatches, libcudf_tables

    return DeviceBatches(spec, *libcudf_tables())
