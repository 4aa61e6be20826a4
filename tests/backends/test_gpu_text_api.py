"""The GPU text kernels' choices that need no device (marker gpu_api: `make gpu-api`): what the
`matches()` expression function hands libcudf. libcudf's regex compiler runs on the host, so the
patterns it receives are compiled for real; the column is a stand-in that records them."""

from __future__ import annotations

import os
import re

import pandas as pd
import pyarrow as pa
import pytest

pytestmark = pytest.mark.gpu_api

try:                                        # RAPIDS installed: import it without touching CUDA
    os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")
    import cudf
    import pylibcudf as plc

    from gpuetl.backends import gpu, gpu_support
except Exception as err:                    # noqa: BLE001 (no RAPIDS, or a broken install)
    pytest.skip(f"RAPIDS does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

from gpuetl.backends.cpu import CpuBackend  # noqa: E402
from gpuetl.steps.expr import parse_expression  # noqa: E402

CPU = CpuBackend()
TEXT = ["GET /a", "get /b", "Straße 7", "x٣y", "aaa", "abc", ".*", None, "Ünïcode"]


def _compiles(pattern: str) -> bool:
    flags = plc.strings.regex_flags.RegexFlags
    try:
        plc.strings.regex_program.RegexProgram.create(pattern, flags.DEFAULT)
    except RuntimeError:
        return False
    return True


class _Str:
    def __init__(self, column):
        self.column = column

    def contains(self, pattern, regex):
        assert regex is True
        self.column.device_patterns.append(pattern)
        assert _compiles(pattern), pattern       # libcudf would reject what the device is handed
        # libcudf's dialect on the host: Python's re reads the translated forms alike ([0-9], \Z)
        return pd.Series([None if v is None else re.search(pattern, v) is not None for v in self.column.values],
                         dtype=object)


class DeviceColumn:
    """A cuDF strings Series stand-in: `.str.contains` records the pattern libcudf would get."""

    def __init__(self, values):
        self.values = list(values)
        self.host = CPU.series(pa.array(values, pa.string()), "string")
        self.index = self.host.index
        self.device_patterns: list[str] = []
        self.str = _Str(self)

    def __len__(self):
        return len(self.host)


@pytest.fixture
def host_calls(monkeypatch):
    """The host fallback's copies and uploads without a device; counts reset."""
    gpu_support.reset_fallbacks()
    monkeypatch.setattr(gpu, "to_host_copy", lambda col, reason: pa.array(col.host))
    monkeypatch.setattr(cudf.Series, "from_arrow", lambda arr: pd.Series(arr.to_pylist(), dtype=object))
    yield
    gpu_support.reset_fallbacks()


# the patterns: libcudf rejects the raw pattern, or reads it otherwise (\d \w \s Unicode)
PATTERNS = [r"(?i)get", r"\d", r"\w+\s\d", r"7\z", r"\pL{5}", r"\Q.*\E", r"a{1000}", r"^get"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_matches_on_the_gpu_translates_or_falls_back_and_agrees_with_the_cpu(host_calls, pattern):
    """matches() on the GPU (Backend.contains_regex, which the expression evaluator calls)
    hands libcudf only a pattern it compiles with RE2's meaning (ASCII classes for \\d \\w \\s,
    \\Z for \\z) or runs RE2 on the host, counted as a fallback; the rows are the CPU's."""
    column = DeviceColumn(TEXT)
    got = gpu.GpuBackend.contains_regex(gpu.GpuBackend.__new__(gpu.GpuBackend), column, pattern)
    expected = parse_expression(f"matches(s, {pattern!r})").evaluate(
        CPU.from_arrow(pa.table({"s": pa.array(TEXT, pa.string())})), backend=CPU)
    as_list = [None if v is None or v is pd.NA else bool(v) for v in got.tolist()]
    assert as_list == [None if v is None or v is pd.NA else bool(v) for v in expected.tolist()]
    fell_back = sum(gpu_support.fallback_counts().values())
    if column.device_patterns:
        assert fell_back == 0
        if "\\d" in pattern or "\\w" in pattern or "\\s" in pattern or "\\z" in pattern:
            assert column.device_patterns != [pattern]         # translated, not passed through
    else:
        assert not _compiles(pattern)                          # what libcudf rejects runs on the host
        assert fell_back == len(TEXT)
