"""The GPU backend: cuDF frames, CuPy arrays, KvikIO file reads, RMM memory, Dask-CUDA workers.

This is the only module of gpuetl (with gpu_text.py) that imports cudf, cupy, kvikio, rmm,
dask_cudf or dask_cuda (tests/test_import_rule.py enforces it). The imports are lazy: importing
this module on a machine without a GPU costs nothing, and GPUs are counted through NVML without
creating a CUDA context in the client process, so dask-cuda workers can start cleanly.

Parity rule: the GPU gives the CPU backend's rows, bit for bit. Where a libcudf kernel's meaning
differs from the CPU kernel's (regex dialect, strptime, number parsing), the GPU runs a strict fast
path whose inputs both kernels read the same way, and hands the rest to the CPU kernel on the host,
counted in `fallbacks()`. docs/gpu.md explains each case.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import SpecError
from ..types import ARROW_TYPES, INT_TYPES, UINT_TYPES, Schema
from .base import Backend, Lines
from .gpu_support import (MONTHS, STRIP, Unsupported, check_regex, civil_to_micros, count_fallback,
                          days_in_month, fallback_counts, timestamp_plan, to_cudf_regex)
from .gpu_text import GpuTextMixin



# -- detection (NVML only: no CUDA context in the client) ---------------------------------------

def gpu_count() -> int:
    """GPUs visible to NVML (0 without a driver). Never initialises CUDA."""
    try:
        import pynvml
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no device, a container without NVML: all mean "no GPU"
        return 0


def gpu_memory() -> list[tuple[int, int]]:
    """(free, total) bytes per GPU, from NVML ([] without one)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i))
            out.append((int(info.free), int(info.total)))
        return out
    finally:
        pynvml.nvmlShutdown()


def rapids_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("cudf", "cupy", "dask_cudf"))


def cluster_settings(memory: list[tuple[int, int]], pool_fraction: float = 0.8,
                     limit_fraction: float = 0.9) -> dict:
    """LocalCUDACluster arguments for GPUs with the given (free, total) memory: the RMM pool takes
    `pool_fraction` of the smallest free memory (rounded down to 256 MiB); dask-cuda spills device
    memory to host past `limit_fraction` of the smallest total; cuDF spills its own buffers."""
    if not memory:
        raise ValueError("no GPU")
    free = min(f for f, _ in memory)
    total = min(t for _, t in memory)
    step = 256 << 20
    pool = max(step, int(free * pool_fraction) // step * step)
    return {"n_workers": len(memory), "threads_per_worker": 1, "rmm_pool_size": pool,
            "device_memory_limit": int(total * limit_fraction), "enable_cudf_spill": True,
            "protocol": "tcp"}


# -- lazy RAPIDS modules (never pickled with the backend) ---------------------------------------

class _Rapids:
    _mods: dict = {}

    def __getattr__(self, name):
        mods = _Rapids._mods
        if not mods:
            import cudf
            import cupy
            import pylibcudf as plc

            mods.update(cudf=cudf, cupy=cupy, plc=plc)
        return mods[name]


R = _Rapids()


class GpuBackend(GpuTextMixin, Backend):
    name = "gpu"

    @property
    def xp(self):
        return R.cupy

    @property
    def xd(self):
        return R.cudf

    @classmethod
    def create(cls) -> "GpuBackend":
        if gpu_count() == 0:
            raise SpecError("--backend gpu: no NVIDIA GPU is visible (NVML reports none)",
                            hint="use --backend cpu or auto")
        if not rapids_available():
            raise SpecError("--backend gpu: RAPIDS is not installed",
                            hint="pip install 'gpuetl[gpu]' (cuDF, dask-cuDF, dask-cuda, KvikIO, CuPy)")
        return cls()

    def __init__(self):
        self._cpu = None

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self._cpu = None

    @property
    def cpu(self):
        """The CPU backend, for the host fallbacks."""
        if self._cpu is None:
            from .cpu import CpuBackend

            self._cpu = CpuBackend()
        return self._cpu

    # -- run reports ---------------------------------------------------------------------------
    def check_regex(self, pattern: str) -> str | None:
        return check_regex(pattern)

    def fallbacks(self, client: Any = None) -> dict[str, int]:
        if client is None:
            return fallback_counts()
        total: dict[str, int] = {}
        for counts in client.run(_worker_fallbacks).values():
            for k, v in counts.items():
                total[k] = total.get(k, 0) + v
        return total

    def versions(self) -> dict:
        out = {}
        for name in ("cudf", "cupy", "kvikio", "rmm", "dask_cudf", "dask_cuda"):
            try:
                out[name] = __import__(name).__version__
            except Exception:
                pass
        return out

    def io_path(self) -> str:
        """Which path file reads take: KvikIO with GDS (cuFile), or KvikIO's POSIX compat mode."""
        try:
            import kvikio
            import kvikio.defaults as kd
        except ImportError:
            return "posix (python file reads; KvikIO not installed)"
        try:
            mode = kd.get("compat_mode") if hasattr(kd, "get") else kd.compat_mode()
        except Exception:
            mode = None
        preferred = None
        for probe in (getattr(kd, "is_compat_mode_preferred", None),
                      getattr(getattr(getattr(kvikio, "_lib", None), "defaults", None), "is_compat_mode_preferred", None)):
            if probe is not None:
                try:
                    preferred = bool(probe())
                    break
                except Exception:
                    pass
        gds = None
        try:
            import kvikio.cufile_driver as drv

            gds = bool(drv.get("is_gds_available"))
        except Exception:
            pass
        name = getattr(mode, "name", str(mode))
        if preferred is None:
            preferred = name == "ON" or (name == "AUTO" and gds is False)
        if preferred:
            return f"kvikio posix (compat mode; KVIKIO_COMPAT_MODE={name}, GDS available: {gds})"
        return f"kvikio gds (cuFile; KVIKIO_COMPAT_MODE={name})"

    @contextmanager
    def local_cluster(self):
        """One dask-cuda worker per GPU, an RMM pool sized from free memory (NVML), cuDF spilling."""
        import logging

        from dask_cuda import LocalCUDACluster

        settings = cluster_settings(gpu_memory())
        with LocalCUDACluster(**settings, dashboard_address=":8787", silence_logs=logging.ERROR) as cluster:
            yield cluster

    # -- frames --------------------------------------------------------------------------------
    def dtype(self, type_name: str):
        if type_name == "string":
            return _string_dtype()
        if type_name == "timestamp":
            import pandas as pd

            return pd.DatetimeTZDtype(unit="us", tz="UTC")
        return np.dtype(type_name)

    def series(self, values, type_name: str, index=None):
        cudf, cp = R.cudf, R.cupy
        if isinstance(values, cudf.Series):
            s = values.reset_index(drop=True)
        elif isinstance(values, cp.ndarray):
            s = cudf.Series(values)
        elif isinstance(values, np.ndarray) and values.dtype.kind in "biuf":
            s = cudf.Series(cp.asarray(values))
        else:
            if not isinstance(values, (pa.Array, pa.ChunkedArray)):
                values = (pa.array(values) if hasattr(values, "to_numpy") and not isinstance(values, np.ndarray)
                          else pa.array(values, type=ARROW_TYPES[type_name]))
            s = _from_arrow(values, type_name)
        return self._finish(s, type_name, index)

    def _finish(self, s, type_name, index):
        if s.dtype != self.dtype(type_name):
            s = self._retype(s, type_name)
        if index is not None:
            s.index = index
        return s

    def _retype(self, s, type_name):
        if type_name == "timestamp":
            if getattr(s.dtype, "tz", None) is None:
                return s.astype("datetime64[us]").dt.tz_localize("UTC")
            return s.dt.tz_convert("UTC").astype(self.dtype("timestamp"))
        if type_name == "string":
            return s.astype("str")
        return s.astype(self.dtype(type_name))

    def nulls(self, n: int, type_name: str, index=None):
        return self.series(pa.nulls(n, ARROW_TYPES[type_name]), type_name, index=index)

    def astype(self, col, type_name: str):
        """Exact conversion, as Arrow's safe cast: numbers on the device with a round-trip check;
        to or from strings and timestamps on the host (Arrow formats numbers as text)."""
        target = self.dtype(type_name)
        if col.dtype == target:
            return col
        src_num = col.dtype.kind in "iufb"
        if src_num and type_name not in ("string", "timestamp"):
            out = col.astype(target)
            back = out.astype(col.dtype)
            lost = (back != col) & col.notna()
            if bool(lost.any()):
                raise ValueError(f"cannot convert {col.dtype} to {type_name} without losing values")
            return out
        count_fallback(f"astype {col.dtype} -> {type_name}: host", 1)
        host = self.cpu.astype(self.cpu.series(_to_arrow(col), _type_of(col)), type_name)
        return self.series(pa.array(host), type_name, index=col.index)

    def concat(self, frames: list):
        frames = [f for f in frames if f is not None]
        if len(frames) == 1:
            return frames[0]
        return R.cudf.concat(frames, ignore_index=True)

    def to_arrow(self, df, schema: Schema) -> pa.Table:
        arrays = [_to_arrow(df[name]).cast(ARROW_TYPES[t]) for name, t in schema.items()]
        return pa.Table.from_arrays(arrays, schema=pa.schema([(n, ARROW_TYPES[t]) for n, t in schema.items()]))

    def from_arrow(self, table: pa.Table):
        from ..types import type_name_of

        cudf = R.cudf
        return cudf.DataFrame({name: _from_arrow(table.column(name).combine_chunks(), type_name_of(table.column(name).type))
                               for name in table.column_names})

    def to_host(self, values):
        cp = R.cupy
        if isinstance(values, cp.ndarray):
            return cp.asnumpy(values)
        if hasattr(values, "to_numpy") and not isinstance(values, np.ndarray):
            return values.to_numpy()
        return np.asarray(values)

    # -- reading -------------------------------------------------------------------------------
    def read_block(self, files, ranges):
        """Plain ranges go from the file straight into device memory (KvikIO: GDS or its POSIX
        compat mode); compressed files are decompressed on the host (sources.ranges) and copied
        over. Record boundaries are found with small host peeks around each range's ends, so
        the semantics are exactly those of sources.ranges.read_range."""
        from ..sources.ranges import Block, read_range, record_span, truncated_piece

        cp = R.cupy
        pieces = []            # (kind, file, a, b, host bytes or None, needs newline)
        seg_pos, seg_start, seg_file, extra_bad = [], [], [], []
        position = 0
        for rng in ranges:
            f = files[rng.file_index]
            if rng.length < 0:
                got = read_range(f, rng)
                data = truncated_piece(f, got, extra_bad)
                pieces.append(("host", f, 0, len(data), data, False))
                start, size = got.start, len(data)
            else:
                start, end, newline = record_span(f.path, rng.offset, rng.length)
                pieces.append(("file", f, start, end, None, newline))
                size = end - start + newline
            seg_pos.append(position)
            seg_start.append(start)
            seg_file.append(f.index)
            position += size
        buf = cp.empty(position, dtype=cp.uint8)
        at = 0
        for kind, f, a, b, data, newline in pieces:
            if kind == "host":
                if data:
                    buf[at:at + len(data)].set(np.frombuffer(data, dtype=np.uint8))
                at += len(data)
                continue
            if b > a:
                _pread(f.path, buf[at:at + (b - a)], a)
            at += b - a
            if newline:
                buf[at] = 10
                at += 1
        return Block(buf, seg_pos, seg_start, seg_file, extra_bad)

    def split_lines(self, data, base_offset: int) -> Lines:
        """Newlines found with CuPy; the strings column is built over the same device bytes
        (offsets child + chars, pylibcudf), then '\\r'/'\\n' are stripped on the device. Only a
        block with non-ASCII bytes is copied to the host, once, for exact UTF-8 validation."""
        cp = R.cupy
        buf = data if isinstance(data, cp.ndarray) else cp.asarray(np.frombuffer(data, dtype=np.uint8))
        n = len(buf)
        if n and int(buf[n - 1]) != 10:
            buf = cp.concatenate([buf, cp.asarray([10], dtype=cp.uint8)])
            n += 1
        newlines = cp.flatnonzero(buf == 10)
        starts = cp.concatenate([cp.zeros(1, dtype=cp.int64), (newlines + 1).astype(cp.int64)])
        if n == 0 or int(starts[-1]) == n:
            starts = starts[:-1]
        bounds = cp.concatenate([starts, cp.asarray([n], dtype=cp.int64)])
        bad = cp.zeros(len(starts), dtype=bool)
        if n and bool((buf >= 0x80).any()):
            host = cp.asnumpy(buf)
            hb = cp.asnumpy(bounds)
            raw = pa.Array.from_buffers(pa.large_binary(), len(starts), [None, pa.py_buffer(hb), pa.py_buffer(host)])
            try:
                raw.cast(pa.large_string())
            except pa.ArrowInvalid:
                count_fallback("split_lines: invalid UTF-8 block decoded on host", len(starts))
                lines = self.cpu.split_lines(host.tobytes(), base_offset)
                text = self.series(pa.array(lines.text), "string")
                return Lines(text, cp.asarray(lines.offsets), cp.asarray(lines.bad_utf8))
        text = _strings_from_buffers(buf, bounds, len(starts))
        text = text.str.rstrip("\r\n")
        keep = (text.str.len() > 0).values
        text = text[keep].reset_index(drop=True)
        return Lines(text=text, offsets=starts[keep] + base_offset, bad_utf8=bad[keep])

    # -- parsing -------------------------------------------------------------------------------
    def extract(self, text, regex: str, names: tuple[str, ...], kernel: str | None = None):
        if kernel in ("clf", "combined"):
            return self._extract_clf(text, regex, names)
        try:
            pattern = to_cudf_regex(regex)
        except Unsupported as err:
            return self._host_extract(text, regex, names, kernel, f"regex: {err}")
        try:
            cols, matched = _device_extract(text, pattern)
        except Exception as err:         # e.g. a pattern too large for the device engine
            return self._host_extract(text, regex, names, kernel, f"regex: libcudf refused it ({type(err).__name__})")
        out = {name: _with_index(_matched_groups(col, matched), text.index) for name, col in zip(names, cols)}
        return out, _with_index(R.cudf.Series(matched), text.index)

    def _extract_clf(self, text, regex, names):
        """The access-log presets: the request field's two alternatives are split by a second,
        small regex on the request alone, as backends/cpu_clf.py does (equal to RE2's captures:
        tests/backends/test_cpu_clf.py). One regex with fewer groups is also faster on libcudf."""
        from .cpu_clf import REQUEST_PARTS, REQUEST_RE, outer_regex

        outer = tuple(n for n in names if n not in REQUEST_PARTS)
        cols, matched = self.extract(text, outer_regex(regex), outer)
        parts, _ = self.extract(cols["request"], REQUEST_RE, REQUEST_PARTS)
        request = cols["request"]
        for name in REQUEST_PARTS:
            part = parts[name]
            cols[name] = part.where(part.notna() | request.isna(), "")
        return {name: cols[name] for name in names}, matched

    def _host_extract(self, text, regex, names, kernel, why):
        count_fallback(why, len(text))
        host = self.cpu.series(_to_arrow(text), "string")
        cols, matched = self.cpu.extract(host, regex, names, kernel=kernel)
        return ({n: self.series(pa.array(c), "string", index=text.index) for n, c in cols.items()},
                _with_index(R.cudf.Series(R.cupy.asarray(matched.to_numpy(dtype=bool))), text.index))

    def parse_json(self, text, schema: Schema):
        """On the host, with the CPU kernel: pyarrow's reader and Python's json for bad records
        define which records are bad and why; cudf.read_json coerces types differently (see
        docs/gpu.md), so using it would break parity. Counted."""
        count_fallback("parse_json: host (pyarrow JSON reader)", len(text))
        cols, ok, reasons = self.cpu.parse_json(self.cpu.series(_to_arrow(text), "string"), schema)
        return self._back(cols, ok, reasons, schema, text.index)

    def parse_csv(self, text, names, delimiter):
        count_fallback("parse_csv: host (pyarrow CSV reader)", len(text))
        cols, ok, reason = self.cpu.parse_csv(self.cpu.series(_to_arrow(text), "string"), names, delimiter)
        out = {n: self.series(pa.array(c), "string", index=text.index) for n, c in cols.items()}
        return out, _with_index(R.cudf.Series(R.cupy.asarray(ok.to_numpy(dtype=bool))), text.index), reason

    def _back(self, cols, ok, reasons, schema, index):
        out = {}
        for name, t in schema.items():
            t = "string" if t == "timestamp" else t
            out[name] = self.series(pa.array(cols[name]), t, index=index)
        ok_dev = _with_index(R.cudf.Series(R.cupy.asarray(ok.to_numpy(dtype=bool))), index)
        if reasons is not None and not isinstance(reasons, str):
            reasons = self.series(pa.array(reasons), "string", index=index)
        return out, ok_dev, reasons

    # -- casts ---------------------------------------------------------------------------------
    def cast(self, col, type_name: str, *, fmt=None, timezone=None):
        cp = R.cupy
        if not _is_string_dtype(col.dtype):
            count_fallback(f"cast {col.dtype} -> {type_name}: host", 1)
            return self._host_cast(col, type_name, fmt, timezone, None)
        if type_name == "string":
            return col, _with_index(R.cudf.Series(cp.zeros(len(col), dtype=bool)), col.index)
        if type_name in INT_TYPES or type_name in UINT_TYPES:
            values, fast = self._cast_integer(col, type_name)
        elif type_name == "float64":
            values, fast = self._cast_float(col)
        elif type_name == "bool":
            values, fast = self._cast_bool(col)
        elif type_name == "timestamp":
            plan = timestamp_plan(fmt)
            if plan is None or (not plan.has_zone and timezone not in (None, "UTC")):
                count_fallback(f"cast timestamp format {fmt!r}: host (not a strict GPU form)", 1)
                return self._host_cast(col, type_name, fmt, timezone, None)
            values, fast = self._cast_timestamp(col, plan, timezone)
        else:   # float32: a double-rounding hazard on the device; the CPU kernel is exact
            count_fallback(f"cast {type_name}: host", 1)
            return self._host_cast(col, type_name, fmt, timezone, None)
        present = col.notna().values
        slow = present & ~fast
        if bool(slow.any()):
            values = self._patch(col, values, slow, type_name, fmt, timezone)
        bad = present & values.isna().values
        return _with_index(values, col.index), _with_index(R.cudf.Series(bad), col.index)

    def _patch(self, col, values, slow, type_name, fmt, timezone):
        """Rows outside the strict fast path: the CPU kernel's values, scattered back."""
        cp, cudf = R.cupy, R.cudf
        idx = cp.flatnonzero(slow)
        count_fallback(f"cast {type_name}: rows outside the GPU fast path", len(idx))
        sub = col.reset_index(drop=True).iloc[idx]
        host, _ = self.cpu.cast(self.cpu.series(_to_arrow(sub), "string"), type_name, fmt=fmt, timezone=timezone)
        fixed = self.series(pa.array(host), type_name)
        values = values.reset_index(drop=True)
        position = cudf.Series(cp.arange(len(values)))
        merged = cudf.concat([values[~cudf.Series(slow)], fixed], ignore_index=True)
        order = cudf.concat([position[~cudf.Series(slow)], cudf.Series(idx)], ignore_index=True)
        return merged.iloc[order.argsort().values].reset_index(drop=True)

    def _host_cast(self, col, type_name, fmt, timezone, _):
        host, bad = self.cpu.cast(self.cpu.series(_to_arrow(col), _type_of(col)), type_name, fmt=fmt, timezone=timezone)
        return (self.series(pa.array(host), type_name, index=col.index),
                _with_index(R.cudf.Series(R.cupy.asarray(bad.to_numpy(dtype=bool))), col.index))

    def _cast_integer(self, col, type_name):
        unsigned = type_name in UINT_TYPES
        digits = 19 if unsigned else 18
        sign = r"\+?" if unsigned else r"[+-]?"
        fast = _matches(col, r"^[\t\n\x0b\f\r ]*" + sign + r"[0-9]{1," + str(digits) + r"}[\t\n\x0b\f\r ]*$")
        s = col.reset_index(drop=True).str.strip(STRIP)
        s = s.where(~s.str.startswith("+").fillna(False), s.str.slice(1))
        s = s.where(R.cudf.Series(fast))
        wide = "uint64" if unsigned else "int64"
        number = s.astype(wide)
        info = np.iinfo(type_name)
        ok = ((number >= info.min) & (number <= info.max)) if not unsigned else (number <= info.max)
        return number.where(ok.fillna(False)).astype(type_name), fast

    def _cast_float(self, col):
        """Up to 15 significant digits and no exponent: mantissa / 10**k in float64 is one
        correctly rounded division, as Arrow's parser gives. Everything else: CPU kernel."""
        cp, cudf = R.cupy, R.cudf
        fast = _matches(col, r"^[\t\n\x0b\f\r ]*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[\t\n\x0b\f\r ]*$")
        s = col.reset_index(drop=True).str.strip(STRIP).where(cudf.Series(fast))
        negative = s.str.startswith("-").fillna(False).values
        body = s.str.lstrip("+-")
        dot = body.str.find(".")
        ndigits = body.str.len() - (dot >= 0).astype("int64")
        fast = fast & (ndigits <= 15).fillna(False).values
        frac = (body.str.len() - dot - 1).where(dot >= 0, 0).fillna(0).astype("int64").values
        mantissa = body.str.replace(".", "", regex=False).where(cudf.Series(fast))
        mantissa = mantissa.where(mantissa.str.len() > 0, "0").astype("int64").fillna(0).values
        powers = cp.asarray([10.0 ** k for k in range(23)])        # exact doubles, built on the host
        value = mantissa.astype(cp.float64) / powers[cp.clip(frac, 0, 22)]
        value = cp.where(negative, -value, value)
        out = cudf.Series(value).where(cudf.Series(fast))
        return out, fast

    def _cast_bool(self, col):
        cudf = R.cudf
        from .cpu import _FALSE, _TRUE

        fast = _matches(col, r"^[\t\n\x0b\f\r ]*[A-Za-z0-9]{1,5}[\t\n\x0b\f\r ]*$")
        s = col.reset_index(drop=True).str.strip(STRIP).str.lower()
        truthy = s.isin(list(_TRUE)).fillna(False)
        falsy = s.isin(list(_FALSE)).fillna(False)
        out = self.nulls(len(s), "bool")
        out = out.where(~truthy, True).where(~falsy, False)
        return out.where(cudf.Series(fast)), fast

    def _cast_timestamp(self, col, plan, timezone):
        cp, cudf = R.cupy, R.cudf
        groups, matched = _device_extract(col.reset_index(drop=True), plan.regex)
        parts = dict(zip(plan.fields, groups))

        def num(name, default=0):
            if name not in parts:
                return cp.full(len(col), default, dtype=cp.int64)
            return parts[name].fillna("0").astype("int64").values

        y, d = num("Y"), num("d")
        if "b" in parts:
            m = cp.zeros(len(col), dtype=cp.int64)
            for i, name in enumerate(MONTHS):
                m = cp.where((parts["b"] == name).fillna(False).values, i + 1, m)
        else:
            m = num("m", 1)
        micro = cp.zeros(len(col), dtype=cp.int64)
        if "f" in parts:
            frac = parts["f"].fillna("")
            micro = frac.str.pad(6, side="right", fillchar="0").where(frac.str.len() > 0, "0").astype("int64").values
        offset = cp.zeros(len(col), dtype=cp.int64)
        if "zs" in parts:
            sign = cp.where((parts["zs"] == "-").fillna(False).values, -1, 1)
            offset = sign * (num("zh") * 60 + num("zm"))
        m_safe = cp.clip(m, 1, 12)
        fast = matched & (y >= 1) & (m >= 1) & (d <= days_in_month(cp, y, m_safe))
        if "Z" in parts:          # ISO 8601, read by pandas on the CPU: keep to its nanosecond range
            fast &= (y >= 1678) & (y <= 2261)
            if timezone not in (None, "UTC"):   # naive values take the zone's rules: the CPU's job
                fast &= parts["Z"].notna().values | parts["zs"].notna().values
        micros = civil_to_micros(cp, y, m_safe, d, num("H"), num("M"), num("S"), micro, offset)
        out = cudf.Series(micros).astype("datetime64[us]").dt.tz_localize("UTC").where(cudf.Series(fast))
        return out, fast

    # -- hashing primitives --------------------------------------------------------------------
    def fixed_width(self, col):
        cp = R.cupy
        valid = col.notna().values
        raw = _device_values(col)
        if raw.dtype.kind == "f":
            values = raw.astype(cp.float64).view(cp.uint64)
        elif raw.dtype.kind == "b":
            values = raw.astype(cp.uint64)
        elif raw.dtype.kind == "i":
            values = raw.astype(cp.int64).view(cp.uint64)
        else:
            values = raw.astype(cp.uint64)
        return cp.where(valid, values, cp.uint64(0)), valid

    def string_buffers(self, col):
        cp = R.cupy
        valid = col.notna().values
        plc_col, _ = col.to_pylibcudf()
        n, off = plc_col.size(), plc_col.offset()
        if n == 0 or plc_col.num_children() == 0:
            return cp.zeros(n + 1, dtype=cp.int64), cp.zeros(0, dtype=cp.uint8), valid
        child = plc_col.child(0)
        width = 8 if child.type().id() == R.plc.TypeId.INT64 else 4
        offsets = cp.asarray(child.data()).view(cp.int64 if width == 8 else cp.int32)[off:off + n + 1]
        data = cp.asarray(plc_col.data()) if plc_col.data() is not None else cp.zeros(0, dtype=cp.uint8)
        return offsets.astype(cp.int64), data.view(cp.uint8), valid


# -- helpers (device) ----------------------------------------------------------------------------

_STRING_DTYPE = []


def _string_dtype():
    if not _STRING_DTYPE:
        _STRING_DTYPE.append(R.cudf.Series(["a"]).dtype)
    return _STRING_DTYPE[0]


def _is_string_dtype(dtype) -> bool:
    return dtype == _string_dtype() or str(dtype) in ("object", "str", "string")


def _type_of(col) -> str:
    from ..types import type_name_of

    return type_name_of(_to_arrow(col).type)


def _with_index(s, index):
    s = s.reset_index(drop=True)
    s.index = index
    return s


def _to_arrow(s) -> pa.Array:
    arr = s.to_arrow()
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def _from_arrow(arr, type_name: str):
    cudf = R.cudf
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if type_name == "timestamp" or pa.types.is_timestamp(arr.type):
        naive = arr.cast(pa.timestamp("us", tz="UTC")).cast(pa.timestamp("us")) if arr.type.tz else arr.cast(pa.timestamp("us"))
        return cudf.Series.from_arrow(naive).dt.tz_localize("UTC")
    target = ARROW_TYPES.get(type_name)
    if target is not None and arr.type != target and not (pa.types.is_large_string(arr.type) and type_name == "string"):
        arr = arr.cast(target)
    return cudf.Series.from_arrow(arr)


def _device_values(col):
    """A CuPy view of a fixed-width column's values (timestamps as int64; nulls undefined)."""
    cp, plc = R.cupy, R.plc
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
    return cp.asarray(plc_col.data()).view(kinds[tid])[off:off + n]


def _strings_from_buffers(buf, bounds, n):
    """A cudf string Series over device bytes: element i is buf[bounds[i]:bounds[i+1]]. Built as a
    pylibcudf STRING column (offsets child + chars), so no byte is copied; if this pylibcudf's
    Column constructor differs, falls back to one host round trip through Arrow (counted)."""
    cp, cudf, plc = R.cupy, R.cudf, R.plc
    large = len(buf) >= 2**31 - 1
    offsets = bounds.astype(cp.int64 if large else cp.int32)
    try:
        offsets_col = (plc.Column.from_cuda_array_interface(offsets)
                       if hasattr(plc.Column, "from_cuda_array_interface")
                       else plc.Column.from_cuda_array_interface_obj(offsets))
        chars = plc.gpumemoryview(buf) if len(buf) else None
        column = plc.Column(plc.DataType(plc.TypeId.STRING), n, chars, None, 0, 0, [offsets_col])
        return cudf.Series.from_pylibcudf(column)
    except (TypeError, ValueError, AttributeError):
        count_fallback("split_lines: strings column built through host Arrow", n)
        arr = pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(cp.asnumpy(bounds.astype(cp.int64))),
                                                            pa.py_buffer(cp.asnumpy(buf))])
        return cudf.Series.from_arrow(arr)


def _program(pattern: str):
    plc = R.plc
    return plc.strings.regex_program.RegexProgram.create(pattern, plc.strings.regex_flags.RegexFlags.DEFAULT)


def _matches(col, pattern: str):
    """cupy bool: the (libcudf-dialect) pattern matches; null -> False."""
    cudf = R.cudf
    plc_col, _ = col.to_pylibcudf()
    hit = cudf.Series.from_pylibcudf(R.plc.strings.contains.contains_re(plc_col, _program(pattern)))
    return hit.fillna(False).values


def _device_extract(text, pattern: str):
    """libcudf extract: (group Series list, matched cupy bool). libcudf gives null for every group
    of a non-matching row; a matching row's group that did not take part is null or '' depending
    on the version, so "matched" comes from the groups where one is set, and from contains_re for
    the rows where none is (usually just the rows that do not match)."""
    cp, cudf, plc = R.cupy, R.cudf, R.plc
    plc_col, _ = text.to_pylibcudf()
    prog = _program(pattern)
    table = plc.strings.extract.extract(plc_col, prog)
    cols = [cudf.Series.from_pylibcudf(c) for c in table.columns()]
    present = text.notna().values
    some = cp.zeros(len(text), dtype=bool)
    for c in cols:
        some |= c.notna().values
    unsure = cp.flatnonzero(present & ~some)
    matched = some.copy()
    if len(unsure):
        sub = text.reset_index(drop=True).iloc[unsure]
        sub_col, _ = sub.to_pylibcudf()
        hit = cudf.Series.from_pylibcudf(plc.strings.contains.contains_re(sub_col, prog)).fillna(False).values
        matched[unsure] = hit
    return cols, matched


def _matched_groups(col, matched):
    """RE2's convention: '' for a group that did not take part in a match, null for no match."""
    cudf = R.cudf
    col = col.reset_index(drop=True)
    m = cudf.Series(matched)
    return col.where(~(m & col.isna()), "").where(m)


def _pread(path: str, dest, file_offset: int) -> None:
    try:
        import kvikio
    except ImportError:     # no KvikIO: a host read and one copy
        with open(path, "rb") as fh:
            fh.seek(file_offset)
            dest.set(np.frombuffer(fh.read(len(dest)), dtype=np.uint8))
        return
    with kvikio.CuFile(path, "r") as fh:
        got = fh.pread(dest, len(dest), file_offset).get()
    if got != len(dest):
        raise OSError(f"{path}: short read ({got} of {len(dest)} bytes at {file_offset})")


def _worker_fallbacks():
    from gpuetl.backends.gpu_support import fallback_counts as counts

    return counts()
