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

    from gpuetl.backends import gpu, gpu_device, gpu_tallies
except Exception as err:                    # noqa: BLE001 (no RAPIDS, or a broken install)
    pytest.skip(f"RAPIDS does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

from gpuetl.backends.cpu import CpuBackend  # noqa: E402
from gpuetl.expr import parse_expression  # noqa: E402

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
    gpu_tallies.reset_fallbacks()
    monkeypatch.setattr(gpu_device, "to_host_copy", lambda col, reason: pa.array(col.host))
    monkeypatch.setattr(cudf.Series, "from_arrow", lambda arr: pd.Series(arr.to_pylist(), dtype=object))
    yield
    gpu_tallies.reset_fallbacks()


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
    fell_back = sum(gpu_tallies.fallback_counts().values())
    if column.device_patterns:
        assert fell_back == 0
        if "\\d" in pattern or "\\w" in pattern or "\\s" in pattern or "\\z" in pattern:
            assert column.device_patterns != [pattern]         # translated, not passed through
    else:
        assert not _compiles(pattern)                          # what libcudf rejects runs on the host
        assert fell_back == len(TEXT)


# -- case and white space: Arrow's meaning on both backends (docs/steps.md) --------------------

_LIBCUDF_SPACE = "".join(chr(c) for c in range(0x21))   # libcudf's strip() without characters


def _each(values, fn):
    return [None if v is None else fn(v) for v in values]


class _LibcudfStr:
    """What libcudf's strings kernels give, on the host: lower/upper with the full case mapping
    (Python's str.lower/upper: 'ß' -> 'SS', 'İ' -> 'i̇'), strip() of every code point up to
    U+0020, strip(chars) of those characters, contains by the pattern."""

    def __init__(self, column):
        self.column = column

    def lower(self):            # code point by code point: libcudf has no final-sigma rule
        return LibcudfText(_each(self.column.values, lambda v: "".join(c.lower() for c in v)))

    def upper(self):
        return LibcudfText(_each(self.column.values, lambda v: "".join(c.upper() for c in v)))

    def strip(self, to_strip=None):
        chars = _LIBCUDF_SPACE if to_strip is None else to_strip
        return LibcudfText(_each(self.column.values, lambda v: v.strip(chars)))

    def contains(self, pattern, regex):
        assert regex is True and _compiles(pattern)
        return pd.Series(_each(self.column.values, lambda v: re.search(pattern, v) is not None), dtype=object)


class LibcudfText:
    """A cuDF strings Series stand-in (selection and assignment by a boolean mask)."""

    def __init__(self, values, index=None):
        self.values = list(values)
        self.index = pd.RangeIndex(len(self.values)) if index is None else index
        self.str = _LibcudfStr(self)

    def __len__(self):
        return len(self.values)

    def __getitem__(self, mask):
        keep = [bool(m) for m in mask.tolist()]
        return LibcudfText([v for v, k in zip(self.values, keep) if k], self.index[keep])

    def copy(self):
        return LibcudfText(self.values, self.index)

    def __setitem__(self, mask, fixed):
        at = [i for i, m in enumerate(mask.tolist()) if m]
        for i, v in zip(at, fixed.tolist()):
            self.values[i] = v


@pytest.fixture
def libcudf_text(monkeypatch):
    gpu_tallies.reset_fallbacks()
    monkeypatch.setattr(gpu_device, "to_host_copy", lambda col, reason: pa.array(col.values, pa.string()))
    monkeypatch.setattr(cudf.Series, "from_arrow", lambda arr: pd.Series(arr.to_pylist(), dtype=object))
    yield gpu.GpuBackend.__new__(gpu.GpuBackend)
    gpu_tallies.reset_fallbacks()


CASES = ["straße", "İSTANBUL", "ﬁle", "ᾳ", "plain ASCII", None, "ǅemal", "\U00010428x", "ΣΑΣ"]
SPACES = ["\u3000 x \u00a0", "\x01x\x02", " \t\r\nx\x0b\x0c", "\u2028x\u2029", "\x1cx\x1f", "\u0085x", None, "x"]


@pytest.mark.parametrize("how", ["lower", "upper"])
def test_lower_and_upper_on_the_gpu_are_arrows_simple_case_mapping(libcudf_text, how):
    """libcudf maps 'ß' to 'SS', 'İ' to 'i̇', 'ﬁ' to 'FI' and leaves letters past U+FFFF; the GPU
    backend gives Arrow's one-for-one mapping, the CPU's, mapping only the rows that hold such a
    character on the host (counted)."""
    got = getattr(libcudf_text, f"text_{how}")(LibcudfText(CASES)).values
    expected = getattr(CPU, f"text_{how}")(CPU.series(pa.array(CASES, pa.string()), "string")).tolist()
    assert got == [None if v is None or v is pd.NA else v for v in expected]
    assert got[0] == "straße" if how == "lower" else "SS" not in got[0]     # Arrow: 'ß' -> 'ẞ'
    assert len(got[1]) == len(CASES[1])                                         # 'İ' -> 'i', not 'i̇'
    differs = {"lower": 5, "upper": 6}[how]        # the rows holding a code point libcudf maps otherwise
    assert sum(gpu_tallies.fallback_counts().values()) == differs


def test_strip_on_the_gpu_is_unicode_white_space(libcudf_text):
    """libcudf's strip() takes every code point up to U+0020 (control characters too) and no
    Unicode space; the GPU backend strips Arrow's white space, the CPU's."""
    got = libcudf_text.text_strip(LibcudfText(SPACES)).values
    expected = CPU.text_strip(CPU.series(pa.array(SPACES, pa.string()), "string")).tolist()
    assert got == [None if v is None or v is pd.NA else v for v in expected]
    assert got[:2] == ["x", "\x01x\x02"]
