"""An emulated device for the GPU backend's own code (marker gpu_api: RAPIDS must import, nothing
touches CUDA): CuPy is numpy (a device array's `.set`/`.get` are copies), a cuDF Series is a
pandas Series over Arrow (`DevSeries`: `.values` a numpy array as CuPy's, `astype` to a numpy
type keeps nulls as cuDF's does, `to_arrow`), a cuDF DataFrame a pandas one (`DevFrame`), and
the few libcudf calls the read and parse path makes are stood in for: regexes (libcudf's
dialect: ASCII classes and `\\Z`, which Python's `re` reads alike) run by Python's `re`,
`extract` and `contains_re` over those Series, a strings column over device bytes
(gpu_device.strings_from_buffers) built from the same bytes, KvikIO's pread a file read, a UTC
label on naive timestamps an Arrow cast. Series from host values are the CPU backend's (the
device's would allocate). What runs is GpuBackend's own code: read_block, split_lines, the
access-log presets' extraction, the casts, parse_json's and parse_csv's rules around libcudf's
readers (stood in by the CPU kernel's reading of the same records, as the readers' outputs),
separate, and every device -> host read through gpu_device.to_host_value."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa

from gpuetl.backends import gpu, gpu_device, gpu_records, gpu_tallies
from gpuetl.backends.cpu import CpuBackend

CPU = CpuBackend()


def arrow_of(col) -> pa.Array:
    """A Series' values as one Arrow array (nulls kept)."""
    if isinstance(col.dtype, pd.ArrowDtype):
        arr = col.array.__arrow_array__()
        return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    return pa.array(np.asarray(col.to_numpy()))


MASK_SELECTIONS = [0]     # boolean-mask selections of a DevSeries or DevFrame: libcudf reads each one's size (a sync)


def _is_mask(key) -> bool:
    dtype = getattr(key, "dtype", None)
    return dtype is not None and (dtype == bool or str(dtype).startswith("bool"))


class DevSeries(pd.Series):
    """cuDF's Series as the backend uses it, over a pandas Series."""

    def __getitem__(self, key):
        MASK_SELECTIONS[0] += _is_mask(key)
        return super().__getitem__(key)

    @property
    def _constructor(self):
        return DevSeries

    @property
    def _constructor_expanddim(self):
        return DevFrame

    @property
    def values(self):
        """CuPy's array of a column without nulls (numpy here); otherwise pandas' own."""
        if isinstance(self.dtype, pd.ArrowDtype):
            arr = arrow_of(self)
            if not arr.null_count and (pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type)
                                       or pa.types.is_boolean(arr.type)):
                return arr.to_numpy(zero_copy_only=False)
        return super().values

    def astype(self, dtype, *args, **kwargs):
        """cuDF's astype to a numpy type name keeps the nulls (Arrow's types here)."""
        if isinstance(self.dtype, pd.ArrowDtype) and isinstance(dtype, (str, np.dtype)) \
                and str(dtype) not in ("str", "object"):
            np_type = np.dtype(dtype)
            target = pa.timestamp("us") if np_type.kind == "M" else pa.from_numpy_dtype(np_type)
            dtype = pd.ArrowDtype(target)
        return super().astype(dtype, *args, **kwargs)

    def to_arrow(self):
        return arrow_of(self)

    def to_pylibcudf(self):
        return self.reset_index(drop=True), None

    @staticmethod
    def from_pylibcudf(col):
        return DevSeries(col)

    @staticmethod
    def from_arrow(arr):
        return DevSeries(pd.arrays.ArrowExtensionArray(arr.combine_chunks() if isinstance(arr, pa.ChunkedArray)
                                                       else arr))


class DevFrame(pd.DataFrame):
    def __getitem__(self, key):
        MASK_SELECTIONS[0] += _is_mask(key)
        return super().__getitem__(key)

    @property
    def _constructor(self):
        return DevFrame

    @property
    def _constructor_sliced(self):
        return DevSeries

    def to_arrow(self):
        return pa.table({str(c): arrow_of(self[c]) for c in self.columns})


class _DeviceArray(np.ndarray):
    """A numpy array with CuPy's host copies: `.set(host)` in, `.get()` out."""

    def set(self, host):
        self[...] = host

    def get(self):
        return np.asarray(self)


def _strings(values) -> list:
    return arrow_of(values).to_pylist()


def _regex_program(pattern: str, dotall: bool = False):
    return re.compile(pattern, re.S if dotall else 0)


def _extract(col, program):
    found = [None if v is None else program.search(v) for v in _strings(col)]
    return SimpleNamespace(columns=lambda: [
        DevSeries(CPU.series(pa.array([m.group(i) if m else None for m in found], pa.string()), "string"))
        for i in range(1, program.groups + 1)])


def _contains_re(col, program):
    return DevSeries(CPU.series(pa.array([None if v is None else bool(program.search(v)) for v in _strings(col)],
                                         pa.bool_()), "bool"))


def regex_matches(col, pattern: str):
    rx = re.compile(pattern)
    return np.array([v is not None and bool(rx.search(v)) for v in _strings(col)], dtype=bool)


def strings_from_buffers(buf, bounds, n):
    data = np.asarray(buf).tobytes()
    b = np.asarray(bounds)
    assert len(b) == n + 1 and b[0] == 0 and b[-1] == len(data)
    return DevSeries(CPU.series(pa.array([data[x:y].decode("utf-8", "surrogateescape") for x, y in zip(b[:-1], b[1:])],
                                         pa.string()), "string"))


def utc_timestamps(naive):
    return naive.astype(pd.ArrowDtype(pa.timestamp("us", tz="UTC")))


def _read_json_records(body, tree):
    raise NotImplementedError("libcudf's JSON reader is stood in for by EmulatedGpu.parse_json's records")


class EmulatedGpu(gpu.GpuBackend):
    """GpuBackend's own code on the stand-ins."""

    xd = SimpleNamespace(DataFrame=DevFrame)

    def series(self, values, type_name, index=None):
        if isinstance(values, pd.Series):
            values = arrow_of(values)
        return DevSeries(CPU.series(values, type_name, index=index))

    def nulls(self, n, type_name, index=None):
        return DevSeries(CPU.nulls(n, type_name, index=index))

    def dtype(self, type_name):
        """GpuBackend.dtype's rule: binary is held as strings (libcudf's strings hold any bytes)."""
        return CPU.dtype("string" if type_name == "binary" else type_name)

    def conform(self, df, schema):
        return DevFrame(CPU.conform(df, schema))

    def empty(self, schema):
        return DevFrame(CPU.empty(schema))

    def _pread(self, path, dest, file_offset):
        with open(path, "rb") as fh:
            fh.seek(file_offset)
            dest.set(np.frombuffer(fh.read(len(dest)), dtype=np.uint8))


def install(monkeypatch) -> EmulatedGpu:
    """The stand-ins in place (undone by monkeypatch), the tallies zeroed; the backend."""
    cupy = SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("_")})
    cupy.empty = lambda shape, dtype=float: np.empty(shape, dtype=dtype).view(_DeviceArray)
    cupy.asnumpy = np.asarray
    cupy.ndarray = np.ndarray
    cudf = SimpleNamespace(Series=DevSeries, DataFrame=DevFrame, concat=pd.concat)
    plc = SimpleNamespace(strings=SimpleNamespace(extract=SimpleNamespace(extract=_extract),
                                                  contains=SimpleNamespace(contains_re=_contains_re)))
    for module in (gpu, gpu_device, gpu_records):
        monkeypatch.setattr(module, "cp", cupy)
        monkeypatch.setattr(module, "cudf", cudf)
    monkeypatch.setattr(gpu, "plc", plc)
    monkeypatch.setattr(gpu, "regex_program", _regex_program)
    monkeypatch.setattr(gpu, "strings_from_buffers", strings_from_buffers)
    monkeypatch.setattr(gpu, "utc_timestamps", utc_timestamps)
    monkeypatch.setattr(gpu, "regex_matches", regex_matches)
    monkeypatch.setattr(gpu_device, "regex_matches", regex_matches)
    monkeypatch.setattr(gpu, "_STRING_DTYPE", [CPU.dtype("string")])
    gpu_tallies.reset_tallies()
    MASK_SELECTIONS[0] = 0
    backend = EmulatedGpu()
    backend.xp = cupy
    return backend
