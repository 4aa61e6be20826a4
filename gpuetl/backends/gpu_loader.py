"""The Loader's CUDA path (device="cuda"; backends/batches.py says what it is asked for).

- Reading: each row group is read by libcudf's Parquet reader (pylibcudf) straight into device
  memory; libcudf reads local files through KvikIO (cuFile/GDS where the mount allows it, else
  KvikIO's POSIX thread pool). The shard is opened by the loader's dataset (never through a link)
  and libcudf is given that descriptor (/proc/self/fd/N), not the path again. A shard in an object
  store without a local cache copy is read on the host by pyarrow and copied to the device
  (`cache=` avoids that). The columns an image decode needs are read on the host: nvImageCodec
  decodes from host memory, so reading them into device memory would only copy them back.
- Shuffling: a shuffle window (loader/order.py) is permuted once on the device (one gather of
  all its columns by the window's permutation); a batch is then a slice of it (no copy), or two
  slices joined where a batch crosses a window. One stream synchronisation per window, none per batch.
- Outputs: a column's values are a CuPy view of the device buffer (no copy); output="torch" hands
  that view to torch through DLPack (`torch.from_dlpack`: no copy, no host round trip). Times are
  their int64 (date32: int32) storage, as CuPy has no datetime64. A column with nulls is refused,
  as on the CPU.
- Images: decoded by nvImageCodec in batches (gpu_images.decode_on_device: nvJPEG on the device,
  what it cannot decode through Pillow, counted), stacked on the device as uint8 HWC or CHW.

Not run on a GPU yet: the calls are bound against RAPIDS 26.10 without a GPU
(tests/backends/test_gpu_loader_api.py) and this module's own code runs on numpy/pyarrow stand-ins
for pylibcudf and CuPy (tests/loader/test_cuda_emulated.py), giving the CPU path's batches."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..errors import DataError

# Every RAPIDS call made here (as gpu.RAPIDS_CALLS): tests/backends/test_gpu_loader_api.py binds
# each against the installed release.
LOADER_CALLS: list[tuple[str, int, tuple[str, ...]]] = [
    ("pylibcudf.io.SourceInfo", 1, ()),
    ("pylibcudf.io.parquet.ParquetReaderOptions.builder", 1, ()),
    ("pylibcudf.io.parquet.ParquetReaderOptionsBuilder.column_names", 1, ()),
    ("pylibcudf.io.parquet.ParquetReaderOptionsBuilder.use_pandas_metadata", 1, ()),
    ("pylibcudf.io.parquet.ParquetReaderOptionsBuilder.build", 0, ()),
    ("pylibcudf.io.parquet.ParquetReaderOptions.set_row_groups", 1, ()),
    ("pylibcudf.io.parquet.read_parquet", 1, ()),
    ("pylibcudf.io.types.TableWithMetadata.column_names", 0, ()),
    ("pylibcudf.Table", 1, ()),
    ("pylibcudf.Table.from_arrow", 1, ()),
    ("pylibcudf.Table.num_rows", 0, ()),
    ("pylibcudf.Table.columns", 0, ()),
    ("pylibcudf.copying.slice", 2, ()),
    ("pylibcudf.copying.gather", 3, ()),
    ("pylibcudf.concatenate.concatenate", 1, ()),
    ("pylibcudf.Column.from_cuda_array_interface", 1, ()),
    ("pylibcudf.Column.null_count", 0, ()),
    ("pylibcudf.Column.offset", 0, ()),
    ("pylibcudf.Column.size", 0, ()),
    ("pylibcudf.Column.data", 0, ()),
    ("cupy.asarray", 1, ()),
    ("cupy.stack", 1, ()),
    ("cupy.ascontiguousarray", 1, ()),
    ("cupy.cuda.get_current_stream", 0, ()),
    ("cupy.cuda.Stream.synchronize", 0, ()),
]
LOADER_CONSTANTS = ["pylibcudf.copying.OutOfBoundsPolicy.DONT_CHECK"]


class LibcudfTables:
    """Device tables as pylibcudf Tables (columns in the order asked for), their columns' values
    as CuPy views. The one place this path calls libcudf; the emulated test stands in for it."""

    def __init__(self):
        import cupy as cp
        import pylibcudf as plc

        self.cp, self.plc = cp, plc

    def read(self, path: str, group: int, columns: list[str]):
        plc = self.plc
        options = (plc.io.parquet.ParquetReaderOptions.builder(plc.io.SourceInfo([path]))
                   .column_names(columns).use_pandas_metadata(False).build())
        options.set_row_groups([[group]])
        got = plc.io.parquet.read_parquet(options)
        names = got.column_names()
        return plc.Table([got.columns[names.index(c)] for c in columns])

    def upload(self, table: pa.Table):
        return self.plc.Table.from_arrow(table)

    def rows(self, t) -> int:
        return t.num_rows()

    def slice(self, t, lo: int, hi: int):
        return self.plc.copying.slice(t, [lo, hi])[0]

    def concat(self, tables: list):
        return tables[0] if len(tables) == 1 else self.plc.concatenate.concatenate(tables)

    def gather(self, t, perm: np.ndarray):
        """The rows of t in the order perm, synchronised: the window is complete when handed on."""
        plc, cp = self.plc, self.cp
        index = cp.asarray(perm.astype(np.int32))
        out = plc.copying.gather(t, plc.Column.from_cuda_array_interface(index),
                                 plc.copying.OutOfBoundsPolicy.DONT_CHECK)
        cp.cuda.get_current_stream().synchronize()
        return out

    def values(self, t, i: int, dtype: str):
        """(a CuPy view of column i's values, its null count): the device buffer, not a copy."""
        from .gpu_device import span_bytes

        col = t.columns()[i]
        n, off = col.size(), col.offset()
        data = col.data()
        if n == 0 or data is None:
            return self.cp.zeros(n, dtype=dtype), col.null_count()
        return span_bytes(data).view(dtype)[off:off + n], col.null_count()


def libcudf_tables():
    """(tables, array module) of a device run."""
    import cupy as cp

    return LibcudfTables(), cp


HOST_FOR_IMAGES = ("width", "height", "channels", "format")


class _Unit:
    """A row group or a window: its device columns (a table of `tables`) and the columns read on
    the host for image decode (a pyarrow Table), either None where there are none."""

    __slots__ = ("dev", "host")

    def __init__(self, dev, host):
        self.dev, self.host = dev, host


class DeviceBatches:
    """backends.batches.BatchFrames on the device; `tables` is LibcudfTables on a GPU, `xp` CuPy."""

    def __init__(self, spec, tables, xp):
        self.spec, self.t, self.xp = spec, tables, xp
        host = {spec.image_column, *HOST_FOR_IMAGES} if spec.decode_images else set()
        self.host_columns = [c for c in spec.read_columns if c in host]
        self.device_columns = [c for c in spec.read_columns if c not in host]
        self.index = {c: i for i, c in enumerate(self.device_columns)}

    # -- units and windows ------------------------------------------------------------------------

    def read(self, data, shard, group: int) -> _Unit:
        dev = host = None
        if self.device_columns:
            if data.is_local(shard):
                try:
                    with data.open(shard) as fh:          # opened never through a link; libcudf reads that file
                        dev = self.t.read(f"/proc/self/fd/{fh.fileno()}", group, self.device_columns)
                except (RuntimeError, OSError, pa.ArrowException) as err:
                    raise DataError(f"{data.where(shard)}: row group {group} cannot be read on the device ({err}); "
                                    f"the shard is damaged; run `gpuetl verify {data.root}`") from None
            else:                                         # object store, no cache copy: read on the host
                dev = self.t.upload(data.read_group(shard, group, self.device_columns))
        if self.host_columns:
            host = data.read_group(shard, group, self.host_columns)
        return _Unit(dev, host)

    def rows(self, unit: _Unit) -> int:
        return self.t.rows(unit.dev) if unit.dev is not None else unit.host.num_rows

    def window(self, parts, perm):
        dev = host = None
        if self.device_columns:
            dev = self.t.concat([self.t.slice(u.dev, a, a + n) for u, a, n in parts])
            if perm is not None:
                dev = self.t.gather(dev, perm)
        if self.host_columns:
            host = pa.concat_tables([u.host.slice(a, n) for u, a, n in parts])
            host = (host.take(pa.array(perm)) if perm is not None else host).combine_chunks()
        return _Unit(dev, host)

    def piece(self, window: _Unit, order, w: int, lo: int, hi: int):
        return window, lo, hi

    # -- batches ----------------------------------------------------------------------------------

    def batch(self, pieces, pool=None) -> dict:
        dev = host = None
        if self.device_columns:
            dev = self.t.concat([self.t.slice(u.dev, lo, hi) for u, lo, hi in pieces])
        if self.host_columns:
            host = pa.concat_tables([u.host.slice(lo, hi - lo) for u, lo, hi in pieces])
        spec, out = self.spec, {}
        for name in spec.columns:
            if spec.kinds[name] == "image":
                array = self._images(host)
            else:
                array, nulls = self.t.values(dev, self.index[name], spec.dtypes[name])
                if nulls:
                    raise DataError(f"{spec.where}: column {name!r} holds nulls, which a {spec.output} array cannot: "
                                    "leave it out (columns=[...]) or fill it in the pipeline")
            out[name] = self._torch(array) if spec.output == "torch" else array
        return out

    @staticmethod
    def _torch(array):
        import torch

        return torch.from_dlpack(array)            # the same device memory (DLPack), no copy

    def _images(self, host: pa.Table):
        """The batch's images decoded on the device, stacked (B, H, W, C) or (B, C, H, W) uint8;
        every image the size its row says, all of one size (as the CPU path)."""
        from . import cpu_images
        from .gpu_images import decode_on_device

        spec, xp = self.spec, self.xp
        w, h, c = (host.column(k).to_pylist() for k in ("width", "height", "channels"))
        sizes = set(zip(w, h, c))
        if len(sizes) > 1:
            raise DataError(f"{spec.where}: the images of a batch differ in size ({sorted(sizes)[:3]}…): "
                            "decode_images needs a dataset resized to one size (the resize step)")
        data, fmts = host.column(spec.image_column).to_pylist(), host.column("format").to_pylist()
        arrays: list = [None] * len(data)
        coded = []
        for i, (d, fmt) in enumerate(zip(data, fmts)):
            if fmt == "raw":
                if d is None or len(d) != w[i] * h[i] * c[i]:
                    arrays[i] = cpu_images.BadImage(f"raw pixels are not {w[i]}x{h[i]}x{c[i]}")
                else:
                    arrays[i] = xp.asarray(np.frombuffer(d, np.uint8)).reshape(h[i], w[i], c[i])
            else:
                coded.append(i)
        if coded:
            items = [(data[i] or b"", cpu_images.MODES.get(c[i], "RGB"), 1, None) for i in coded]
            for i, a in zip(coded, decode_on_device(items)):
                arrays[i] = a
        for i, a in enumerate(arrays):
            why = str(a) if isinstance(a, Exception) else (
                None if tuple(a.shape) == (h[i], w[i], c[i]) else
                f"decodes to {a.shape[1]}x{a.shape[0]}x{a.shape[2]}, its row says {w[i]}x{h[i]}x{c[i]}")
            if why:
                raise DataError(f"{spec.where}: an image of column {spec.image_column!r} cannot be decoded: {why}")
        if not arrays:
            H, W, C = 0, 0, 0
            return xp.zeros((0, C, H, W) if spec.decode_images == "chw" else (0, H, W, C), dtype=np.uint8)
        stacked = xp.stack(arrays)
        return xp.ascontiguousarray(stacked.transpose(0, 3, 1, 2)) if spec.decode_images == "chw" else stacked
