"""The GPU backend: cuDF frames, CuPy arrays, KvikIO file reads, RMM memory, Dask-CUDA workers.

Only gpuetl/backends/gpu* import cudf, cupy, kvikio, rmm, dask_cudf, dask_cuda or pylibcudf
(tests/test_import_rule.py). This module imports them plainly: it is loaded only for a GPU run
(`backends.get_backend`), never by `import gpuetl` or by planning (`gpu_detect.GpuPlanning`).
The rules that need no RAPIDS are modules of their own, one job each: gpu_detect.py (NVML,
cluster sizing), gpu_tallies.py, gpu_regex.py (the regex dialect), gpu_values.py, gpu_formats.py
(device JSON/CSV), gpu_kvikio.py, gpu_pieces.py, and civil.py (the calendar, shared with the CPU).
The device helpers this module shares with its facets (gpu_records, gpu_spill, gpu_text,
gpu_images) are in gpu_device.py, which they import; none of them imports this module.

Rows: the GPU gives the CPU backend's rows and values. Where a libcudf kernel's meaning differs
from the CPU kernel's (regex dialect, strptime, number parsing), the GPU runs a strict fast path
whose inputs both kernels read the same way and hands the rest to the CPU kernel, counted in
`fallbacks()`. Every device -> host copy goes through `gpu_device.to_host_copy`, which counts its bytes by
reason (the host-transfer ledger, `host_transfer()`). docs/gpu.md explains each case.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Any

import cudf
import cupy as cp
import kvikio
import numpy as np
import pyarrow as pa
import pylibcudf as plc

from ..sources.line_ends import record_ends
from ..types import ARROW_TYPES, INT_TYPES, UINT_TYPES, Schema, arrow_schema, is_nested
from ..columns import COUNT, STAGE, STATUS, STATUS_LIVE, STATUS_QUARANTINED
from .base import Lines
from .common import conform_frame, empty_frame, extract_fields, hash_series
from .civil import civil_to_micros, days_in_month
from .gpu_detect import WORKER_PRELOAD, cluster_settings, gpu_blocksize, gpu_memory
from .gpu_kvikio import kvikio_s3_arguments, remote_record_span
from .gpu_regex import Unsupported, check_regex, leading_dotall, to_cudf_regex
from .gpu_tallies import (count_fallback, count_read, host_transfer_report, reset_tallies,
                          sum_tallies, worker_tallies)
from .gpu_values import MONTHS, STRIP, integer_cast_loses, span_gather_index, timestamp_plan, utf8_bad_bytes
from .gpu_device import (any_true, device_values, host_numbers, nonzero_rows, regex_matches, regex_program, scatter,
                         span_bytes, strings_from_buffers, to_host_copy, to_host_value, utc_timestamps, with_index)
from .gpu_records import GpuRecordsMixin
from .gpu_spill import GpuSpillMixin, writer_metadata
from .gpu_text import GpuTextMixin

# Every RAPIDS call this backend makes, with the positional-argument count and the keywords it
# passes: tests/backends/test_gpu_api.py binds each against the installed release's signature
# (or its .pyi stub), so a renamed function or keyword fails on a machine without a GPU.
RAPIDS_CALLS: list[tuple[str, int, tuple[str, ...]]] = [
    ("cudf.Series.from_pylibcudf", 1, ()),
    ("cudf.Series.from_arrow", 1, ()),
    ("cudf.ListDtype.from_arrow", 1, ()),
    ("cudf.StructDtype.from_arrow", 1, ()),
    ("cudf.DataFrame.from_arrow", 1, ()),
    ("cudf.concat", 1, ("ignore_index",)),
    ("pylibcudf.Table", 1, ()),
    ("pylibcudf.io.SinkInfo", 1, ()),
    ("pylibcudf.io.types.TableInputMetadata", 1, ()),
    ("pylibcudf.io.types.ColumnInMetadata.set_name", 1, ()),
    ("pylibcudf.io.types.ColumnInMetadata.set_nullability", 1, ()),
    ("pylibcudf.io.types.ColumnInMetadata.set_output_as_binary", 1, ()),
    ("pylibcudf.io.parquet.ChunkedParquetWriterOptions.builder", 1, ()),
    ("pylibcudf.io.parquet.ChunkedParquetWriterOptions.set_dictionary_policy", 1, ()),
    ("pylibcudf.io.parquet.ChunkedParquetWriterOptionsBuilder.metadata", 1, ()),
    ("pylibcudf.io.parquet.ChunkedParquetWriterOptionsBuilder.compression", 1, ()),
    ("pylibcudf.io.parquet.ChunkedParquetWriterOptionsBuilder.stats_level", 1, ()),
    ("pylibcudf.io.parquet.ChunkedParquetWriterOptionsBuilder.row_group_size_rows", 1, ()),
    ("pylibcudf.io.parquet.ChunkedParquetWriterOptionsBuilder.max_page_size_rows", 1, ()),
    ("pylibcudf.io.parquet.ChunkedParquetWriterOptionsBuilder.build", 0, ()),
    ("pylibcudf.io.parquet.ChunkedParquetWriter.from_options", 1, ()),
    ("pylibcudf.io.parquet.ChunkedParquetWriter.write", 1, ()),
    ("pylibcudf.io.parquet.ChunkedParquetWriter.close", 1, ()),
    ("cudf.core.accessors.string.StringMethods.minhash", 1, ("a", "b", "width")),
    ("cudf.core.accessors.string.StringMethods.replace", 2, ("regex",)),
    ("cudf.core.accessors.string.StringMethods.contains", 1, ("regex",)),
    ("cudf.core.accessors.string.StringMethods.pad", 1, ("side", "fillchar")),
    ("cudf.Series.hash_values", 0, ("method", "seed")),
    ("pylibcudf.Column", 7, ()),
    ("pylibcudf.Column.from_cuda_array_interface", 1, ()),
    ("cupy.cuda.UnownedMemory", 3, ()),
    ("cupy.cuda.MemoryPointer", 2, ()),
    ("cupy.ndarray", 1, ("dtype", "memptr")),
    ("pylibcudf.DataType", 1, ()),
    ("pylibcudf.Scalar.from_py", 2, ()),
    ("pylibcudf.Column.from_scalar", 2, ()),
    ("pylibcudf.gpumemoryview", 1, ()),
    ("pylibcudf.strings.regex_program.RegexProgram.create", 2, ()),
    ("pylibcudf.strings.contains.contains_re", 2, ()),
    ("pylibcudf.strings.extract.extract", 2, ()),
    ("kvikio.CuFile", 2, ()),
    ("kvikio.CuFile.pread", 3, ()),
    ("kvikio.RemoteFile.open_s3_url", 2, ("aws_region_name", "aws_access_key_id", "aws_secret_access_key",
                                          "aws_endpoint_url", "aws_session_token")),
    ("kvikio.RemoteFile.pread", 3, ()),
    ("kvikio.RemoteFile.close", 0, ()),
    ("kvikio.remote_file.is_remote_file_available", 0, ()),
    ("kvikio.SummaryMonitor", 0, ()),
    ("kvikio.SummaryMonitor.since", 1, ()),
    ("kvikio.defaults.is_compat_mode_preferred", 0, ()),
    ("cudf.core.accessors.lists.ListMethods.len", 0, ()),
    ("cudf.Series.to_pylibcudf", 0, ()),
    ("cudf.DataFrame.groupby", 1, ("sort",)),
    # gpu_records.py: JSON lines and CSV on the device
    ("cudf.core.accessors.string.StringMethods.startswith", 1, ()),
    ("cudf.core.accessors.string.StringMethods.endswith", 1, ()),
    ("cudf.core.accessors.string.StringMethods.strip", 1, ()),
    ("cudf.core.accessors.string.StringMethods.slice", 2, ()),
    ("cudf.core.accessors.string.StringMethods.insert", 2, ()),
    ("cudf.core.accessors.string.StringMethods.count", 1, ()),
    ("cudf.core.accessors.string.StringMethods.len", 0, ()),
    ("cudf.Series.where", 2, ()),
    ("pylibcudf.Scalar.from_py", 1, ()),
    ("pylibcudf.unary.is_valid", 1, ()),
    ("pylibcudf.Column.child", 1, ()),
    ("pylibcudf.Column.type", 0, ()),
    ("pylibcudf.Column.size", 0, ()),
    ("pylibcudf.Column.data", 0, ()),
    ("cudf.Series.fillna", 1, ()),
    ("cudf.Series.notna", 0, ()),
    ("cudf.Series.reset_index", 0, ("drop",)),
    ("pylibcudf.DataType.id", 0, ()),
    ("pylibcudf.lists.count_elements", 1, ()),
    ("pylibcudf.lists.extract_list_element", 2, ()),
    ("pylibcudf.strings.combine.join_strings", 3, ()),
    ("pylibcudf.io.SourceInfo", 1, ()),
    ("pylibcudf.io.json.JsonReaderOptions.builder", 1, ()),
    ("pylibcudf.io.json.JsonReaderOptionsBuilder.lines", 1, ()),
    ("pylibcudf.io.json.JsonReaderOptionsBuilder.recovery_mode", 1, ()),
    ("pylibcudf.io.json.JsonReaderOptionsBuilder.keep_quotes", 1, ()),
    ("pylibcudf.io.json.JsonReaderOptionsBuilder.prune_columns", 1, ()),
    ("pylibcudf.io.json.JsonReaderOptionsBuilder.strict_validation", 1, ()),
    ("pylibcudf.io.json.JsonReaderOptionsBuilder.numeric_leading_zeros", 1, ()),
    ("pylibcudf.io.json.JsonReaderOptionsBuilder.nonnumeric_numbers", 1, ()),
    ("pylibcudf.io.json.JsonReaderOptionsBuilder.unquoted_control_chars", 1, ()),
    ("pylibcudf.io.json.JsonReaderOptionsBuilder.dtypes", 1, ()),
    ("pylibcudf.io.json.JsonReaderOptionsBuilder.build", 0, ()),
    ("pylibcudf.io.json.read_json", 1, ()),
    ("pylibcudf.io.csv.CsvReaderOptions.builder", 1, ()),
    ("pylibcudf.io.csv.CsvReaderOptionsBuilder.delimiter", 1, ()),
    ("pylibcudf.io.csv.CsvReaderOptionsBuilder.quotechar", 1, ()),
    ("pylibcudf.io.csv.CsvReaderOptionsBuilder.quoting", 1, ()),
    ("pylibcudf.io.csv.CsvReaderOptionsBuilder.doublequote", 1, ()),
    ("pylibcudf.io.csv.CsvReaderOptionsBuilder.skipinitialspace", 1, ()),
    ("pylibcudf.io.csv.CsvReaderOptionsBuilder.skip_blank_lines", 1, ()),
    ("pylibcudf.io.csv.CsvReaderOptionsBuilder.keep_default_na", 1, ()),
    ("pylibcudf.io.csv.CsvReaderOptionsBuilder.na_filter", 1, ()),
    ("pylibcudf.io.csv.CsvReaderOptionsBuilder.build", 0, ()),
    ("pylibcudf.io.csv.CsvReaderOptions.set_header", 1, ()),
    ("pylibcudf.io.csv.CsvReaderOptions.set_names", 1, ()),
    ("pylibcudf.io.csv.CsvReaderOptions.set_dtypes", 1, ()),
    ("pylibcudf.io.csv.CsvReaderOptions.set_na_values", 1, ()),
    ("pylibcudf.io.csv.read_csv", 1, ()),
    ("dask_cuda.LocalCUDACluster", 0, ("n_workers", "threads_per_worker", "rmm_pool_size",
                                       "rmm_allocator_external_lib_list", "device_memory_limit",
                                       "enable_cudf_spill", "protocol", "dashboard_address",
                                       "silence_logs", "CUDA_VISIBLE_DEVICES", "preload")),
    ("kvikio.defaults.set", 2, ()),
    ("kvikio.defaults.get", 1, ()),
    # gpu_spill.py: spill pieces on the device
    ("pylibcudf.io.parquet.ParquetWriterOptions.builder", 2, ()),
    ("pylibcudf.io.parquet.ParquetWriterOptionsBuilder.metadata", 1, ()),
    ("pylibcudf.io.parquet.ParquetWriterOptionsBuilder.key_value_metadata", 1, ()),
    ("pylibcudf.io.parquet.ParquetWriterOptionsBuilder.compression", 1, ()),
    ("pylibcudf.io.parquet.ParquetWriterOptionsBuilder.stats_level", 1, ()),
    ("pylibcudf.io.parquet.ParquetWriterOptionsBuilder.row_group_size_rows", 1, ()),
    ("pylibcudf.io.parquet.ParquetWriterOptionsBuilder.utc_timestamps", 1, ()),
    ("pylibcudf.io.parquet.ParquetWriterOptionsBuilder.build", 0, ()),
    ("pylibcudf.io.parquet.write_parquet", 1, ()),
    ("cudf.utils.ioutils.generate_pandas_metadata", 2, ()),
    ("pylibcudf.io.types.ColumnInMetadata.child", 1, ()),
    ("cudf.StructDtype.to_arrow", 0, ()),
    ("cudf.ListDtype.to_arrow", 0, ()),
    ("cudf.read_parquet", 1, ("columns",)),
    ("cudf.read_parquet", 1, ("columns", "skip_rows", "nrows")),
    ("cudf.DataFrame.take", 1, ()),
    ("cudf.core.column.ColumnBase.create", 2, ("validate",)),
    ("cudf.Series._from_column", 1, ("index", "name")),
    ("cudf.DataFrame.reset_index", 0, ("drop",)),
    ("cudf.core.accessors.string.StringMethods.byte_count", 0, ()),
    ("cudf.core.accessors.string.StringMethods.lower", 0, ()),
    ("cudf.core.accessors.string.StringMethods.upper", 0, ()),
    ("pylibcudf.sorting.stable_sorted_order", 3, ()),
    ("cupy.argsort", 1, ()),
    ("cupy.searchsorted", 2, ("side",)),
    ("cupy.bincount", 1, ("weights", "minlength")),
    ("cupy.stack", 1, ()),
]

# Enum members and constants the backend names (tests/backends/test_gpu_api.py resolves each).
RAPIDS_CONSTANTS: list[str] = [
    "pylibcudf.TypeId.STRING", "pylibcudf.TypeId.STRUCT", "pylibcudf.TypeId.LIST", "pylibcudf.TypeId.INT32",
    "pylibcudf.TypeId.INT64", "pylibcudf.TypeId.BOOL8", "pylibcudf.TypeId.TIMESTAMP_MICROSECONDS",
    "pylibcudf.io.types.JSONRecoveryMode.RECOVER_WITH_NULL", "pylibcudf.io.types.QuoteStyle.MINIMAL",
    "pylibcudf.io.types.StatisticsFreq.STATISTICS_ROWGROUP", "pylibcudf.io.types.StatisticsFreq.STATISTICS_NONE",
    "pylibcudf.io.types.DictionaryPolicy.ADAPTIVE",
    "pylibcudf.io.types.CompressionType.NONE", "pylibcudf.io.types.CompressionType.ZSTD",
    "pylibcudf.strings.regex_flags.RegexFlags.DOTALL", "pylibcudf.strings.regex_flags.RegexFlags.DEFAULT",
    "pylibcudf.types.Order.ASCENDING", "pylibcudf.types.NullOrder.AFTER",
]

# The backend's own regexes (libcudf dialect; tests/backends/test_gpu_api.py compiles each).
_WS = r"[\t\n\x0b\f\r ]*"
FLOAT_PATTERN = "^" + _WS + r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)" + _WS + r"\Z"
BOOL_PATTERN = "^" + _WS + r"[A-Za-z0-9]{1,5}" + _WS + r"\Z"


def integer_pattern(unsigned: bool) -> str:
    """Integers both kernels read alike: a sign, up to 18 digits (19 unsigned), ASCII space."""
    sign, digits = (r"\+?", 19) if unsigned else (r"[+-]?", 18)
    return "^" + _WS + sign + "[0-9]{1," + str(digits) + "}" + _WS + r"\Z"


def device_patterns() -> list[str]:
    """Every fixed regex this backend hands to libcudf (the user's go through to_cudf_regex)."""
    from ..parsing import preset
    from .cpu_clf import REQUEST_RE, outer_regex
    from .gpu_regex import case_differs_pattern
    from .gpu_text import NON_ASCII, WHITESPACE_RUN

    clf = [to_cudf_regex(outer_regex(preset(name).regex)) for name in ("apache_common", "apache_combined")]
    from . import gpu_formats as rules

    records = [rules.JSON_INT_TOKEN, rules.JSON_DECIMAL_TOKEN, rules.JSON_TEXT_LITERAL, rules.JSON_DOUBTFUL_RECORD,
               rules.JSON_OPENINGS, rules.CSV_QUOTED_FIELD]
    for d in (",", "\t", ";", "|", "]", "^", "-", "\\"):
        records += [rules.csv_record_pattern(d), rules.csv_quoted_empty_pattern(d), rules.csv_delimiter_pattern(d)]
    return [FLOAT_PATTERN, BOOL_PATTERN, integer_pattern(False), integer_pattern(True),
            to_cudf_regex(REQUEST_RE), *clf, NON_ASCII, WHITESPACE_RUN, *records,
            case_differs_pattern("lower"), case_differs_pattern("upper")]


# KvikIO's statistics are the process's, and a GPU worker runs two task threads (one reads while
# the other computes): the I/O counted by path is done one at a time, so each count is its own.
# Compute in the other thread goes on meanwhile.
MONITORED_IO = threading.Lock()


class GpuBackend(GpuSpillMixin, GpuRecordsMixin, GpuTextMixin):
    name = "gpu"

    @property
    def runs_images(self) -> bool:
        """Only with the images_on_gpu switch on: the image path has not run on a GPU yet."""
        return self.images_on_gpu

    xp = cp
    xd = cudf

    @classmethod
    def create(cls) -> "GpuBackend":
        """The backend for a run (backends.get_backend has checked for a GPU and RAPIDS)."""
        return cls()

    def __init__(self):
        self._cpu = None
        self._reads = None           # a kvikio.SummaryMonitor, made with the first file read

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self._cpu = None
        self._reads = None

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

    def default_blocksize(self) -> int | None:
        """source.blocksize where the pipeline file sets none: sized for the device (gpu_detect.gpu_blocksize)."""
        return gpu_blocksize(gpu_memory())

    def _tallies(self, client: Any = None) -> dict:
        """This process's tallies and, on a cluster, every worker's. The client's own count too:
        on a LocalCUDACluster it reads spill pieces and encodes shards in its own process; a
        worker in this very process (a threaded cluster) is not counted twice."""
        if client is None:
            return worker_tallies()
        workers = client.run(_pid_and_tallies).values()
        mine = [] if any(pid == os.getpid() for pid, _ in workers) else [worker_tallies()]
        return sum_tallies([*mine, *(t for _, t in workers)])

    def counted_file_io(self, label: str, nbytes, io):
        """Run `io` (libcudf writing or reading a file through KvikIO: a spill piece) and count
        its bytes under the path KvikIO took (its statistics by backend: GDS, or POSIX through
        host bounce buffers), as `<label>: kvikio <path>`; where the statistics attribute nothing,
        `nbytes()` (asked after the I/O) under `unattributed`. KvikIO's statistics are the
        process's: counted I/O is done one at a time (MONITORED_IO), so another thread's is not
        counted here too."""
        if getattr(self, "_reads", None) is None:
            self._reads = kvikio.SummaryMonitor()
        with MONITORED_IO:
            before = self._reads.get()
            out = io()
            carried = {name: int(t["bytes_transferred"]) for name, t in self._reads.since(before).by_backend.items()
                       if t["bytes_transferred"]}
        for name, n in (carried or {"unattributed": nbytes()}).items():
            count_read(f"{label}: kvikio {name.lower()}", n)
        return out

    def start_reports(self, client: Any = None) -> None:
        reset_tallies()
        if client is not None:
            client.run(reset_tallies)

    def note_host_work(self, what: str, count: int = 1) -> None:
        count_fallback(what, count)

    def fallbacks(self, client: Any = None) -> dict[str, int]:
        return self._tallies(client)["fallbacks"]

    def host_transfer(self, client: Any = None, input_bytes: int = 0) -> dict:
        return host_transfer_report(self._tallies(client), input_bytes)

    def versions(self) -> dict[str, str]:
        out = {}
        for name in ("cudf", "cupy", "kvikio", "rmm", "dask_cudf", "dask_cuda"):
            try:
                out[name] = __import__(name).__version__
            except Exception:
                pass
        return out

    def io_path(self) -> str:
        """What KvikIO is set to prefer in this process. What each read really took (GDS or the
        POSIX path, decided per file handle) is counted per read: host_transfer()["reads"]."""
        import kvikio.defaults

        return ("kvikio posix (compat mode preferred)" if kvikio.defaults.is_compat_mode_preferred()
                else "kvikio gds preferred (per-read paths in host_transfer.reads)")

    @contextmanager
    def local_cluster(self, *, quiet: bool = True, dashboard_address: str | None = None):
        """One dask-cuda worker per visible GPU; one memory design (docs/gpu.md, "Memory"). The
        dashboard is served where asked (--dashboard), else on a free local port, never a fixed one."""
        import logging

        from dask_cuda import LocalCUDACluster

        settings = cluster_settings(gpu_memory())
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        extra = {"CUDA_VISIBLE_DEVICES": visible} if visible is not None else {}
        # KvikIO's thread pool is sized in the worker processes started here, by a preload
        # (gpu_worker.dask_setup), never in this process: dask-cuda replaces the workers' `env`
        # and `plugins` with its own, and keeps `preload`
        with LocalCUDACluster(**settings, **extra, dashboard_address=dashboard_address or "127.0.0.1:0",
                              silence_logs=logging.ERROR, preload=[WORKER_PRELOAD]) as cluster:
            yield cluster

    def to_pandas(self, obj):
        """Small results read row by row (tallies, a first bad row, quarantined rows kept as
        JSON, exact dedupe's repeats): counted."""
        return to_host_value(obj, "to_pandas: tallies and rows read in Python", as_pandas=True)

    def to_pylist(self, col) -> list:
        """The few values an expression checks in Python (int64 products near the limit): counted."""
        return to_host_copy(col, "to_pylist: values checked in Python").to_pylist()

    def keep_rows(self, df, split):
        """Streamed in this process, the rows stay on the device until libcudf encodes them."""
        present = np.unique(split)
        if len(present) == 1:
            return {int(present[0]): df}
        where = cp.asarray(split)
        return {int(s): df[cudf.Series(where == s, index=df.index)] for s in present}

    def shard_encoder(self, schema: Schema, compression: str):
        """libcudf's Parquet writer: pages encoded and compressed on the device."""
        return GpuShardEncoder(schema, compression)

    # -- frames --------------------------------------------------------------------------------
    def dtype(self, type_name: str):
        if type_name in ("string", "binary"):     # libcudf strings hold any bytes: binary is one
            return _string_dtype()
        if type_name == "timestamp":
            import pandas as pd

            return pd.DatetimeTZDtype(unit="us", tz="UTC")
        if is_nested(type_name):             # list<...>, struct<...> (JSON sources)
            arrow = ARROW_TYPES[type_name]
            return (cudf.ListDtype if pa.types.is_list(arrow) else cudf.StructDtype).from_arrow(arrow)
        return np.dtype(type_name)

    def series(self, values, type_name: str, index=None):
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
                return utc_timestamps(s.astype("datetime64[us]"))
            return s.dt.tz_convert("UTC").astype(self.dtype("timestamp"))
        if type_name == "string":
            return s.astype("str")
        return s.astype(self.dtype(type_name))

    def nulls(self, n: int, type_name: str, index=None):
        """n nulls made on the device (a null scalar broadcast by libcudf)."""
        if is_nested(type_name):
            return self.series(pa.nulls(n, ARROW_TYPES[type_name]), type_name, index=index)
        kind = plc.DataType(_PLC_TYPES[type_name])
        column = plc.Column.from_scalar(plc.Scalar.from_py(None, kind), n)
        return self._finish(cudf.Series.from_pylibcudf(column), type_name, index)

    def astype(self, col, type_name: str):
        """Exact conversion, as Arrow's safe cast: numbers on the device with a round-trip check;
        to or from strings and timestamps on the host (Arrow formats numbers as text)."""
        target = self.dtype(type_name)
        if col.dtype == target:
            return col
        src_num = col.dtype.kind in "iufb"
        if src_num and type_name not in ("string", "timestamp"):
            if _numbers_lost(col, type_name):
                raise ValueError(f"cannot convert {col.dtype} to {type_name} without losing values")
            return col.astype(target)
        count_fallback(f"astype {col.dtype} -> {type_name}: host", 1)
        host = self.cpu.astype(self.cpu.series(_to_arrow(col, "astype on the host"), _type_of(col)), type_name)
        return self.series(pa.array(host), type_name, index=col.index)

    def concat(self, frames: list):
        frames = [f for f in frames if f is not None]
        if len(frames) == 1:
            return frames[0]
        return cudf.concat(frames, ignore_index=True)

    def separate(self, df):
        """Backend.separate on the device: only the dropped rows' tallies (a few numbers per
        stage) come to the host, not the status column."""
        status = df[STATUS]
        live = status == STATUS_LIVE
        bad = status == STATUS_QUARANTINED
        dropped = ~live & ~bad
        # rows left, quarantined, dropped: one read of two counts
        counts = [bad.fillna(False).values.sum(), dropped.fillna(False).values.sum()]
        some_bad, some_dropped = (v > 0 for v in host_numbers(counts, "control: rows quarantined or dropped"))
        if not (some_bad or some_dropped):
            return df, df.iloc[:0], {}
        quarantined = df[bad] if some_bad else df.iloc[:0]
        tallies: dict[tuple[int, int], int] = {}
        if some_dropped:
            sums = df[dropped].groupby([STAGE, STATUS], sort=True)[COUNT].sum().reset_index()
            host = to_host_copy(sums, "tallies of dropped rows")
            tallies = {(int(st), int(s)): int(n) for st, s, n in zip(*(host.column(c).to_pylist()
                                                                       for c in (STAGE, STATUS, COUNT)))}
        return df[live], quarantined, tallies

    def to_arrow(self, df, schema: Schema) -> pa.Table:
        return self.host_table(df, schema, "to_arrow: frame to host Arrow")

    def host_table(self, df, schema: Schema, reason: str) -> pa.Table:
        arrays = [_to_arrow(df[name], reason).cast(ARROW_TYPES[t]) for name, t in schema.items()]
        return pa.Table.from_arrays(arrays, schema=pa.schema([(n, ARROW_TYPES[t]) for n, t in schema.items()]))

    def from_arrow(self, table: pa.Table):
        from ..types import type_name_of

        return cudf.DataFrame({name: _from_arrow(table.column(name).combine_chunks(), type_name_of(table.column(name).type))
                               for name in table.column_names})

    # -- where the GPU does exactly what the CPU does: the shared definitions (common.py), or
    # what pandas and cuDF spell alike, stated here rather than inherited
    images_on_gpu = False           # base.PlanningBackend: set on the object to run `type: images` here
    counts_dropped_fields = False   # parse_json does not count the fields it drops on the device
    piece_bytes = None              # a block is parsed whole: a device wants the largest batch it can hold

    def regex_error(self, pattern: str) -> str | None:
        """Never: a pattern libcudf cannot run goes to the CPU kernel (check_regex notes it)."""
        return None

    def frame(self, columns: dict, index=None):
        """cuDF shares the columns it is given (its DataFrame takes no `copy`)."""
        return cudf.DataFrame(columns, index=index)

    def empty(self, schema: Schema):
        return empty_frame(self, schema)

    def conform(self, df, schema: Schema):
        return conform_frame(self, df, schema)

    def filter(self, df, mask):
        return df[mask]

    def batches(self, data):
        """One piece: the whole block."""
        return [(0, data)]

    def extract_fields(self, text, regex, names, *, kernel=None, dash_is_null=False):
        return extract_fields(self, text, regex, names, kernel=kernel, dash_is_null=dash_is_null)

    def hash_columns(self, columns: list, seed: int = 0):
        return hash_series(self, columns, seed)

    def hash64(self, columns: list, seed: int = 0):
        from ..hashing import hash_columns

        return hash_columns(self, columns, seed)

    def row_hash(self, columns: list):
        """hash64's arithmetic with -0.0 and NaN made canonical (hashing.hash_columns)."""
        from ..hashing import hash_columns

        return hash_columns(self, columns, 0, canonical_floats=True)

    def pack_rows(self, matrix, index=None):
        """None: a signature does not travel as one value on the device; callers recompute."""
        return None

    def unpack_rows(self, col, width):
        raise NotImplementedError("gpu backend: unpack_rows (pack_rows gives None)")

    def nullable_dtype(self, type_name: str):
        """cuDF's own dtypes hold nulls."""
        return self.dtype(type_name)

    def mod(self, a, b, type_name: str):
        """cuDF's % has Python's sign rule."""
        return a % b

    def weekday(self, col):
        return col.dt.weekday

    def timezone(self, col):
        return getattr(col.dtype, "tz", None)

    # -- images: the pixels stay in the device column from decode to encode (gpu_images.py) ------
    def decode_images(self, df, mode: str, *, resize_to=None, draft_for=None):
        """draft_for is the CPU's (DCT-scaled JPEG decoding): nvImageCodec decodes at full size."""
        return _gpu_images().decode_step(self, df, mode, resize_to)

    def resize_images(self, df, how: str, width: int, height: int, filter: str):
        return _gpu_images().resize_step(self, df, how, width, height, filter)

    def center_crop_images(self, df, width: int, height: int):
        return _gpu_images().center_crop_step(self, df, width, height)

    def convert_images(self, df, mode: str):
        return _gpu_images().convert_step(self, df, mode)

    def encode_images(self, df, fmt: str, quality: int):
        return _gpu_images().encode_step(self, df, fmt, quality)

    def phash_images(self, df, column: str):
        return _gpu_images().phash_step(self, df, column)

    def image_file_bytes(self, values: list, keys: list, decode_next: bool):
        """Where decode is next, the file bytes stay on the host for it (gpu_images.hold_file_bytes)."""
        return _gpu_images().hold_file_bytes(self, values, keys, decode_next)

    def image_bytes(self, rows):
        return _gpu_images().held_image_bytes(self, rows)

    def to_host(self, values):
        """For the shared code's bookkeeping (status and stage columns, split ids): counted."""
        if isinstance(values, cp.ndarray):
            return to_host_copy(values, "bookkeeping columns")
        if isinstance(values, cudf.Series):
            return to_host_copy(values, "bookkeeping columns").to_numpy(zero_copy_only=False)
        return np.asarray(values)

    # -- reading -------------------------------------------------------------------------------
    def read_block(self, files, ranges):
        """Plain ranges go from the file straight into device memory (KvikIO: GDS or its POSIX
        compat mode); compressed files are decompressed on the host (sources.ranges) and copied
        over, as are ranges of objects read from a store. Record boundaries are found with small
        host peeks around each range's ends, so the semantics are exactly those of
        sources.ranges.read_range. The bytes that pass through the host are hashed there (pins);
        those KvikIO puts straight into device memory are pinned by their file's identity only."""
        from ..sources.pins import RangePin
        from ..sources.ranges import Block, ByteRange, range_pin, read_range, record_span, truncated_piece

        pieces = []            # (kind, file, a, b, host bytes or KvikIO arguments or None, needs newline)
        seg_pos, seg_start, seg_file, extra_bad, added, pins = [], [], [], [], [], []
        position = 0
        for rng in ranges:
            f = files[rng.file_index]
            remote = (self._kvikio_remote(f) if f.in_store and type(rng) is ByteRange and rng.length >= 0
                      and not f.compression else None)
            if remote is not None:                     # an object in the store, read by KvikIO
                start, end, newline = remote_record_span(f, rng.offset, rng.length)
                pieces.append(("remote", f, start, end, remote, newline))
                size = end - start + newline
            elif rng.length < 0 or f.in_store:         # decompressed, or ranged GETs by the CPU client
                got = read_range(f, rng)
                if (pin := range_pin(f, got)) is not None:
                    pins.append(pin)
                data = truncated_piece(f, got, extra_bad)
                newline = int(len(data) > 0 and data[-1] != 10)
                pieces.append(("host", f, 0, len(data), data, newline))
                start, size = got.start, len(data) + newline
            else:
                start, end, newline = record_span(f.path, rng.offset, rng.length)
                pieces.append(("file", f, start, end, None, newline))
                pins.append(RangePin(f.index, start, end, None))
                size = end - start + newline
            seg_pos.append(position)
            seg_start.append(start)
            seg_file.append(f.index)
            position += size
            if newline:                                # after a file's last line that lacks one
                added.append(position - 1)
        buf = cp.empty(position, dtype=cp.uint8)
        at = 0
        for kind, f, a, b, data, newline in pieces:
            if kind == "host":
                if len(data):
                    buf[at:at + len(data)].set(np.frombuffer(data, dtype=np.uint8))
                    count_read("host (object store)" if f.in_store else "host (decompressed)", len(data))
            elif b > a:
                if kind == "remote":
                    self._remote_pread(f, data, buf[at:at + (b - a)], a)
                else:
                    self._pread(f.path, buf[at:at + (b - a)], a)
            at += b - a                                # a host piece's (a, b) is (0, its length)
            if newline:
                buf[at] = 10
                at += 1
        return Block(buf, seg_pos, seg_start, seg_file, extra_bad, added, pins)

    def _pread(self, path: str, dest, file_offset: int) -> None:
        """One KvikIO read into device memory, counted under the path KvikIO really took for it
        (its statistics name the backend: GDS, or the POSIX path through host bounce buffers)."""
        if self._reads is None:
            self._reads = kvikio.SummaryMonitor()
        with MONITORED_IO:
            before = self._reads.get()
            with kvikio.CuFile(path, "r") as fh:
                got = fh.pread(dest, len(dest), file_offset).get()
            carried = {name: int(t["bytes_transferred"]) for name, t in self._reads.since(before).by_backend.items()
                       if t["bytes_transferred"]}
        for name, nbytes in (carried or {"unattributed": got}).items():
            count_read(f"kvikio {name.lower()}", nbytes)
        if got != len(dest):
            raise OSError(f"{path}: short read ({got} of {len(dest)} bytes at {file_offset})")

    def _kvikio_remote(self, f):
        """KvikIO's arguments for an s3:// object (the CPU client's endpoint and credentials), or
        None where it cannot read it (no remote support in this KvikIO build, or settings only the
        CPU client reads: gpu_kvikio.kvikio_s3_arguments); that object is then read by the CPU
        client, counted."""
        from kvikio.remote_file import is_remote_file_available

        if not is_remote_file_available():
            count_fallback("s3 reads: KvikIO built without remote support (CPU client)", 1)
            return None
        arguments, why = kvikio_s3_arguments(f.url, f.storage_options, os.environ)
        if arguments is None:
            count_fallback(f"s3 reads: {why} (CPU client)", 1)
        return arguments

    def _remote_pread(self, f, arguments: dict, dest, file_offset: int) -> None:
        """Bytes of an object in the store straight into device memory (kvikio.RemoteFile). KvikIO
        cannot pin a read to an ETag (no If-Match), so the object is checked before and after the
        read (ETag, version id, size as listed): a replaced object is an error naming it, never a
        mix of two versions."""
        from .. import storage
        from ..errors import SourceError

        def unchanged() -> None:
            now = storage.head(f.url, f.storage_options)
            if now is None or (now.etag, now.size) != (f.etag, f.size) or \
                    (f.version_id and now.version_id and now.version_id != f.version_id):
                raise SourceError(f"source.path: {f.url} changed during the run (listed with ETag {f.etag}, "
                                  f"{f.size} bytes; now {'gone' if now is None else f'ETag {now.etag}, {now.size} bytes'}); "
                                  "nothing was committed",
                                  hint="run again once the data stops changing, or read from a versioned bucket")

        unchanged()
        with storage.translated(f.url, f.storage_options, "read"):
            args = dict(arguments)
            remote = kvikio.RemoteFile.open_s3_url(args.pop("url"), f.size, **args)
            try:
                got = remote.pread(dest, len(dest), file_offset).get()
            finally:
                remote.close()
        unchanged()
        count_read("kvikio remote (s3)", got)
        if got != len(dest):
            raise SourceError(f"source.path: {f.url}: short read ({got} of {len(dest)} bytes at {file_offset})")

    def split_lines(self, data, base_offset: int, added=()) -> Lines:
        """Newlines found with CuPy, and each line's end by the line-ending rule on the device
        (sources/line_ends.record_ends, the CPU's index arithmetic). The strings column is built
        over the same device bytes (offsets child + chars, pylibcudf) as pieces: record, line
        ending, record, ...; the records are gathered from it (one copy, as a trim makes).
        UTF-8 is validated on the device (gpu_values.utf8_bad_bytes); only the lines that are
        not valid go to the host, where Python's decoder gives them the CPU kernel's U+FFFD."""
        buf = data if isinstance(data, cp.ndarray) else cp.asarray(np.frombuffer(data, dtype=np.uint8))
        n = len(buf)
        newlines = nonzero_rows(buf == 10, "control: where the lines end")
        starts = cp.concatenate([cp.zeros(1, dtype=cp.int64), (newlines + 1).astype(cp.int64)])
        # two checks in one read: a line after the last newline, and any byte past ASCII
        open_end, non_ascii = host_numbers([buf[n - 1] != 10, (buf >= 0x80).any()], "control: last byte, non-ASCII") \
            if n else (0, 0)
        if not open_end:
            starts = starts[:len(newlines)]          # no line starts after the last newline
        ends = record_ends(cp, buf, starts, cp.asarray(added, dtype=cp.int64) if len(added) else None)
        bad = cp.zeros(len(starts), dtype=bool)
        if non_ascii:
            # a line is bad where a bad byte lies between its start and the next line's: counted
            # with a running sum, no nonzero search (a sync)
            wrong = cp.concatenate([cp.zeros(1, dtype=cp.int64), cp.cumsum(utf8_bad_bytes(cp, buf), dtype=cp.int64)])
            upto = cp.concatenate([starts[1:], cp.full(1, n, dtype=cp.int64)])
            bad = wrong[upto] > wrong[starts]
        m = len(starts)
        bounds = cp.empty(2 * m + 1, dtype=cp.int64)
        bounds[0:2 * m:2] = starts
        bounds[1:2 * m:2] = ends
        bounds[2 * m] = n
        keep = ends > starts                         # empty records are not records
        take = cp.zeros(2 * m, dtype=bool)
        take[0::2] = keep
        text = strings_from_buffers(buf, bounds, 2 * m)[take].reset_index(drop=True)
        starts, ends, bad = starts[keep], ends[keep], bad[keep]
        raw = None
        if non_ascii and any_true(bad, "control: invalid UTF-8"):      # ASCII is valid UTF-8: no read
            text, raw = self._replace_invalid(text, buf, starts, ends, nonzero_rows(bad, "control: invalid UTF-8 lines"))
        return Lines(text=text, offsets=starts + base_offset, bad_utf8=bad, raw=raw)

    def _replace_invalid(self, text, buf, starts, ends, rows):
        """The records at `rows` decoded as the CPU kernel does (Python's decoder, U+FFFD for
        each bad sequence): only those records' bytes cross to the host. Also their exact bytes
        as a binary Series, null for the other records: the quarantine's `_raw`, as the CPU's
        Lines.raw.

        Two copies whatever the number of lines: their spans (24 bytes a line), then every
        line's bytes in one gather on the device (gpu_values.span_gather_index), not a copy and
        a sync per line (a Latin-1 log is invalid on most of its lines)."""
        count_fallback("split_lines: invalid UTF-8 lines decoded on the host", len(rows))
        lo = starts[rows].astype(cp.int64)
        spans = to_host_copy(cp.stack([lo, ends[rows].astype(cp.int64), rows.astype(cp.int64)]), "invalid UTF-8 lines")
        offsets = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(spans[1] - spans[0])])
        gather = span_gather_index(cp.asarray(offsets), lo, int(offsets[-1]), cp)
        data = bytes(to_host_copy(buf[gather], "invalid UTF-8 lines"))
        lines = [data[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
        decoded = [line.decode("utf-8", errors="replace") for line in lines]
        exact: list = [None] * len(text)
        for row, line in zip(spans[2].tolist(), lines):
            exact[row] = line
        return (scatter(text, rows, cudf.Series(decoded, dtype="str")),
                self.series(pa.array(exact, type=pa.binary()), "binary"))

    # -- parsing -------------------------------------------------------------------------------
    def extract(self, text, regex: str, names: tuple[str, ...], kernel: str | None = None):
        if kernel in ("clf", "combined"):
            return self._extract_clf(text, regex, names)
        body, dotall = leading_dotall(regex)
        try:
            pattern = to_cudf_regex(body)
        except Unsupported as err:
            return self._host_extract(text, regex, names, kernel, f"regex: {err}")
        try:
            cols, matched = _device_extract(text, pattern, dotall)
        except Exception as err:         # e.g. a pattern too large for the device engine
            return self._host_extract(text, regex, names, kernel, f"regex: libcudf refused it ({type(err).__name__})")
        out = {name: with_index(_matched_groups(col, matched), text.index) for name, col in zip(names, cols)}
        return out, with_index(cudf.Series(matched), text.index)

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
        host = self.cpu.series(_to_arrow(text, "regex the device cannot run"), "string")
        cols, matched = self.cpu.extract(host, regex, names, kernel=kernel)
        return ({n: self.series(pa.array(c), "string", index=text.index) for n, c in cols.items()},
                with_index(cudf.Series(cp.asarray(matched.to_numpy(dtype=bool))), text.index))

    def _back(self, cols, ok, reasons, schema, index):
        out = {}
        for name, t in schema.items():
            t = "string" if t == "timestamp" else t
            out[name] = self.series(pa.array(cols[name]), t, index=index)
        ok_dev = with_index(cudf.Series(cp.asarray(ok.to_numpy(dtype=bool))), index)
        if reasons is not None and not isinstance(reasons, str):
            reasons = self.series(pa.array(reasons), "string", index=index)
        return out, ok_dev, reasons

    # -- casts ---------------------------------------------------------------------------------
    def cast(self, col, type_name: str, *, fmt=None, timezone=None):
        if not _is_string_dtype(col.dtype):
            count_fallback(f"cast {col.dtype} -> {type_name}: host", 1)
            return self._host_cast(col, type_name, fmt, timezone, None)
        if type_name == "string":
            return col, with_index(cudf.Series(cp.zeros(len(col), dtype=bool)), col.index)
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
        if any_true(slow):
            values = self._patch(col, values, slow, type_name, fmt, timezone)
        bad = present & values.isna().values
        return with_index(values, col.index), with_index(cudf.Series(bad), col.index)

    def _patch(self, col, values, slow, type_name, fmt, timezone):
        """Rows outside the strict fast path: the CPU kernel's values, scattered back."""
        idx = nonzero_rows(slow, "control: rows outside the device fast path")
        count_fallback(f"cast {type_name}: rows outside the GPU fast path", len(idx))
        sub = col.reset_index(drop=True).iloc[idx]
        host, _ = self.cpu.cast(self.cpu.series(_to_arrow(sub, "casts outside the device fast path"), "string"),
                                type_name, fmt=fmt, timezone=timezone)
        fixed = self.series(pa.array(host), type_name)
        values = values.reset_index(drop=True)
        position = cudf.Series(cp.arange(len(values)))
        merged = cudf.concat([values[~cudf.Series(slow)], fixed], ignore_index=True)
        order = cudf.concat([position[~cudf.Series(slow)], cudf.Series(idx)], ignore_index=True)
        return merged.iloc[order.argsort().values].reset_index(drop=True)

    def _host_cast(self, col, type_name, fmt, timezone, _):
        host, bad = self.cpu.cast(self.cpu.series(_to_arrow(col, "casts on the host"), _type_of(col)), type_name,
                                  fmt=fmt, timezone=timezone)
        return (self.series(pa.array(host), type_name, index=col.index),
                with_index(cudf.Series(cp.asarray(bad.to_numpy(dtype=bool))), col.index))

    def _cast_integer(self, col, type_name):
        unsigned = type_name in UINT_TYPES
        fast = regex_matches(col, integer_pattern(unsigned))
        s = col.reset_index(drop=True).str.strip(STRIP)
        s = s.where(~s.str.startswith("+").fillna(False), s.str.slice(1))
        s = s.where(cudf.Series(fast))
        wide = "uint64" if unsigned else "int64"
        number = s.astype(wide)
        info = np.iinfo(type_name)
        ok = ((number >= info.min) & (number <= info.max)) if not unsigned else (number <= info.max)
        return number.where(ok.fillna(False)).astype(type_name), fast

    def _cast_float(self, col):
        """Up to 15 significant digits and no exponent: mantissa / 10**k in float64 is one
        correctly rounded division, as Arrow's parser gives. Everything else: CPU kernel."""
        fast = regex_matches(col, FLOAT_PATTERN)
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
        from .cpu_values import FALSE_WORDS, TRUE_WORDS

        fast = regex_matches(col, BOOL_PATTERN)
        s = col.reset_index(drop=True).str.strip(STRIP).str.lower()
        truthy = s.isin(list(TRUE_WORDS)).fillna(False)
        falsy = s.isin(list(FALSE_WORDS)).fillna(False)
        out = self.nulls(len(s), "bool")
        out = out.where(~truthy, True).where(~falsy, False)
        return out.where(cudf.Series(fast)), fast

    def _cast_timestamp(self, col, plan, timezone):
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
        out = utc_timestamps(cudf.Series(micros).astype("datetime64[us]")).where(cudf.Series(fast))
        return out, fast

    # -- hashing primitives --------------------------------------------------------------------
    def fixed_width(self, col):
        valid = col.notna().values
        raw = device_values(col)
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
        valid = col.notna().values
        plc_col, _ = col.to_pylibcudf()
        n, off = plc_col.size(), plc_col.offset()
        if n == 0 or plc_col.num_children() == 0:
            return cp.zeros(n + 1, dtype=cp.int64), cp.zeros(0, dtype=cp.uint8), valid
        child = plc_col.child(0)
        width = 8 if child.type().id() == plc.TypeId.INT64 else 4
        offsets = span_bytes(child.data()).view(cp.int64 if width == 8 else cp.int32)[off:off + n + 1]
        data = span_bytes(plc_col.data()) if plc_col.data() is not None else cp.zeros(0, dtype=cp.uint8)
        return offsets.astype(cp.int64), data.view(cp.uint8), valid


_PLC_TYPES = {"bool": plc.TypeId.BOOL8, "int8": plc.TypeId.INT8, "int16": plc.TypeId.INT16,
              "int32": plc.TypeId.INT32, "int64": plc.TypeId.INT64, "uint8": plc.TypeId.UINT8,
              "uint16": plc.TypeId.UINT16, "uint32": plc.TypeId.UINT32, "uint64": plc.TypeId.UINT64,
              "float32": plc.TypeId.FLOAT32, "float64": plc.TypeId.FLOAT64, "string": plc.TypeId.STRING,
              "binary": plc.TypeId.STRING, "timestamp": plc.TypeId.TIMESTAMP_MICROSECONDS}


# -- helpers (device) ----------------------------------------------------------------------------

_STRING_DTYPE = []


def _string_dtype():
    if not _STRING_DTYPE:
        _STRING_DTYPE.append(cudf.Series(["a"]).dtype)
    return _STRING_DTYPE[0]


def _is_string_dtype(dtype) -> bool:
    return dtype == _string_dtype() or str(dtype) in ("object", "str", "string")


def _type_of(col) -> str:
    from ..types import type_name_of

    return type_name_of(_to_arrow(col.iloc[:0], "control: type").type)


def _to_arrow(s, reason: str) -> pa.Array:
    return to_host_copy(s, reason)


def _numbers_lost(col, type_name: str) -> bool:
    """Arrow's safe-cast rule between typed numbers, decided on the device: integers by their
    range (gpu_values.integer_cast_loses); floats to integers must be whole and in range;
    anything else by a round trip."""
    kind = col.dtype.kind
    present = col.dropna()
    if not len(present):
        return False
    if kind in "iub" and type_name in INT_TYPES + UINT_TYPES + ("float32", "float64"):
        values = present.astype("int64" if kind != "u" else "uint64").values
        lo, hi = host_numbers([values.min(), values.max()], "control: min/max")
        return integer_cast_loses(lo, hi, type_name)
    if kind == "f" and type_name in INT_TYPES + UINT_TYPES:
        info = np.iinfo(type_name)
        whole = (present == present.floor()) & (present >= float(info.min)) & (present < float(info.max) + 1.0)
        return any_true(~whole)
    back = col.astype(col.dtype if type_name == "bool" else type_name).astype(col.dtype)
    return any_true(((back != col) & col.notna()).fillna(False))


def _pid_and_tallies():
    return os.getpid(), worker_tallies()


def _from_arrow(arr, type_name: str):
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if type_name == "timestamp" or pa.types.is_timestamp(arr.type):
        naive = arr.cast(pa.timestamp("us", tz="UTC")).cast(pa.timestamp("us")) if arr.type.tz else arr.cast(pa.timestamp("us"))
        return utc_timestamps(cudf.Series.from_arrow(naive))
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        # exact bytes (the quarantine's raw records): the same buffers seen as a strings column,
        # which libcudf never checks for UTF-8; to_arrow casts back to binary (no copy)
        arr = pa.Array.from_buffers(pa.large_string() if pa.types.is_large_binary(arr.type) else pa.string(),
                                    len(arr), arr.buffers(), offset=arr.offset)
        return cudf.Series.from_arrow(arr)
    target = ARROW_TYPES.get(type_name)
    if target is not None and arr.type != target and not (pa.types.is_large_string(arr.type) and type_name == "string"):
        arr = arr.cast(target)
    return cudf.Series.from_arrow(arr)


def _device_extract(text, pattern: str, dotall: bool = False):
    """libcudf extract: (group Series list, matched cupy bool). libcudf gives null for every group
    of a non-matching row; a matching row's group that did not take part is null or '' depending
    on the version, so "matched" comes from the groups where one is set, and from contains_re for
    the rows where none is (usually just the rows that do not match)."""
    plc_col, _ = text.to_pylibcudf()
    prog = regex_program(pattern, dotall)
    table = plc.strings.extract.extract(plc_col, prog)
    cols = [cudf.Series.from_pylibcudf(c) for c in table.columns()]
    present = text.notna().values
    some = cp.zeros(len(text), dtype=bool)
    for c in cols:
        some |= c.notna().values
    unsure = nonzero_rows(present & ~some, "control: rows no group matched")
    matched = some.copy()
    if len(unsure):
        sub = text.reset_index(drop=True).iloc[unsure]
        sub_col, _ = sub.to_pylibcudf()
        hit = cudf.Series.from_pylibcudf(plc.strings.contains.contains_re(sub_col, prog)).fillna(False).values
        matched[unsure] = hit
    return cols, matched


def _matched_groups(col, matched):
    """RE2's convention: '' for a group that did not take part in a match, null for no match."""
    col = col.reset_index(drop=True)
    m = cudf.Series(matched)
    return col.where(~(m & col.isna()), "").where(m)





# -- Parquet on the device -----------------------------------------------------------------------

class GpuShardEncoder:
    """One shard encoded by libcudf's chunked Parquet writer, behind the hooks of the sinks' one
    shard-writer state machine (sinks/shard_writer.py: row groups, hash, durable publishing):
    pages encoded and compressed on the device. libcudf cuts row groups within each write()
    call and never across two (its writer_impl counts them per call), so each row group is
    exactly one write() (write_group): the bytes depend only on the rows, never on how
    partitions arrived. The dictionary choice is libcudf's ADAPTIVE policy."""

    def __init__(self, schema: Schema, compression: str):
        self.schema, self.compression = dict(schema), compression
        self.writer = None
        self.path: str | None = None

    def conform(self, rows):
        """A cuDF frame of the output columns, in order, with the output types."""
        backend = GpuBackend()
        if isinstance(rows, pa.Table):      # a spilled piece: one host -> device copy
            rows = backend.from_arrow(rows.select(list(self.schema)))
        return backend.conform(rows[[n for n in self.schema if n in rows.columns]], self.schema).reset_index(drop=True)

    def concat(self, pieces: list):
        return cudf.concat(pieces, ignore_index=True)

    def slice(self, rows, start: int, stop: int):
        return rows.iloc[start:stop]

    def nbytes(self, rows) -> float:
        return float(sum(rows[name].memory_usage(index=False) for name in rows.columns))

    def empty(self):
        return GpuBackend().empty(self.schema)

    def _table(self, frame):
        """The frame's output columns as a pylibcudf table (views, no copy)."""
        return plc.Table([frame[name].to_pylibcudf()[0] for name in self.schema])

    def open(self, path: str, first, rows_per_group: int, dictionary) -> None:
        """libcudf's chunked writer, every column and nested child named and declared nullable
        as pyarrow writes them (gpu_spill.writer_metadata): the Arrow schema read back is the
        CPU backend's, and a later chunk with nulls is accepted. `dictionary` (the sink's
        choice for Arrow tables) is not taken: libcudf chooses per column chunk (ADAPTIVE)."""
        self.path = path
        meta = writer_metadata(self._table(first), list(self.schema), arrow_schema(self.schema).types, nullable=True)
        kinds = plc.io.types.CompressionType
        compression = kinds.NONE if self.compression == "none" else getattr(kinds, self.compression.upper())
        options = (plc.io.parquet.ChunkedParquetWriterOptions.builder(plc.io.SinkInfo([path]))
                   .metadata(meta).compression(compression)
                   .stats_level(plc.io.types.StatisticsFreq.STATISTICS_ROWGROUP)
                   .row_group_size_rows(rows_per_group)
                   .max_page_size_rows(min(20_000, rows_per_group))
                   .build())
        options.set_dictionary_policy(plc.io.types.DictionaryPolicy.ADAPTIVE)
        # No Arrow schema is stored (libcudf's types strings as Utf8View): readers take the
        # Parquet logical types (string, timestamp[us, tz=UTC] as libcudf marks UTC, int16...).
        self.writer = plc.io.parquet.ChunkedParquetWriter.from_options(options)

    def write_group(self, rows) -> None:
        self.writer.write(self._table(rows))

    def close(self) -> None:
        self.writer.close([])

    def metadata(self):
        """The footer of the file just closed, read back from it here, on the worker that wrote
        it (libcudf's close hands its metadata over only with a column chunk path set in it)."""
        import pyarrow.parquet as pq

        return pq.read_metadata(self.path)

    def abort(self) -> None:
        self.writer.close([])


def _gpu_images():
    """backends/gpu_images.py, imported when an image step first runs (it loads Pillow for the
    images the device does not decode)."""
    from . import gpu_images

    return gpu_images
