"""The GPU backend's pure-Python rules, checked on CPU: regex translation, strict timestamp forms,
date arithmetic, cluster sizing, and NVML detection on a machine without a GPU."""

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gpuetl.backends import get_backend
from gpuetl.backends.cpu import CpuBackend
from gpuetl.backends.gpu import GpuBackend, cluster_settings, gpu_count
from gpuetl.backends.gpu_support import (Unsupported, check_regex, civil_to_micros, drop_group_names,
                                         timestamp_plan, to_cudf_regex)
from gpuetl.errors import SpecError
from gpuetl.parsing import PRESETS, preset, template_to_regex
from gpuetl.samples import write_access_logs


def test_no_gpu_here_means_nvml_reports_none_and_gpu_backend_refuses():
    if gpu_count():
        pytest.skip("a GPU is present")
    with pytest.raises(SpecError):
        get_backend("gpu")
    assert get_backend("auto").name == "cpu"


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_runs_on_libcudf(name):
    if name == "json":
        pytest.skip("not a regex")
    assert check_regex(preset(name).regex) is None


@pytest.mark.parametrize("pattern, why", [
    (r"(?i)^(?P<a>x)$", "inline flags"),
    (r"^(?P<a>\w+)\b", "word boundaries"),
    (r"^(?P<a>\pL+)$", "Unicode classes"),
    (r"^(?P<a>[[:alpha:]]+)$", "POSIX"),
    (r"^(?P<a>a|)$", "empty"),
    (r"^(?P<a>x{1000})$", "above 999"),
    (r"^(?P<a>[\S]+)$", "negated shorthand"),
])
def test_unsupported_constructs_are_named(pattern, why):
    reason = check_regex(pattern)
    assert reason and why in reason
    assert GpuBackend().check_regex(pattern) == reason


def _captures(pattern, lines):
    arr = pa.array(lines, pa.string())
    names = tuple(sorted(re.compile(pattern).groupindex, key=re.compile(pattern).groupindex.get))
    struct = pc.extract_regex(arr, pattern=pattern)
    return [struct.is_valid().to_pylist()] + [pc.struct_field(struct, n).to_pylist() for n in names]


def _renamed(translated, names):
    """Give the translated (numbered) groups their names back, to run it through RE2 too."""
    out, k = [], 0
    i = 0
    while i < len(translated):
        if translated[i] == "\\":
            out.append(translated[i:i + 2]); i += 2; continue
        if translated[i] == "[":
            j = i + 1 + (translated[i + 1] == "^")
            j += translated[j] == "]"
            j = translated.index("]", j)
            out.append(translated[i:j + 1]); i = j + 1; continue
        if translated[i] == "(" and not translated.startswith("(?:", i):
            out.append(f"(?P<{names[k]}>"); k += 1; i += 1; continue
        out.append(translated[i]); i += 1
    return "".join(out)


@pytest.mark.parametrize("pattern", [
    preset("apache_combined").regex, preset("syslog_rfc3164").regex, preset("syslog_rfc5424").regex,
    template_to_regex("<Date> <Time> <Level>: <Content>")[0],
    r"^(?P<a>\d+)\s+(?P<b>\S*)\W(?P<c>[\w.-]+)$",
])
def test_translation_keeps_the_meaning(tmp_path, pattern):
    """The translated pattern, run by RE2, captures exactly what the original does."""
    path = tmp_path / "a.log"
    write_access_logs(path, lines=400, seed=5, bad_every=13)
    lines = path.read_text().splitlines() + ["٣٤ x", "12\u00a0ab.c", "1 ab\u2003c", "Oct  1 10:00:00 h app[1]: m",
                                             "2026-01-01 10:00:00 INFO: x", "", " \t"]
    names = tuple(sorted(re.compile(pattern).groupindex, key=re.compile(pattern).groupindex.get))
    translated = to_cudf_regex(pattern)
    assert "(?P<" not in translated and "\\d" not in translated and "\\s" not in translated
    assert _captures(_renamed(translated, names), lines) == _captures(pattern, lines)


def test_group_names_dropped_only_where_they_are_groups():
    assert drop_group_names(r"(?P<a>x)\(?P<b>y)") == r"(x)\(?P<b>y)"


def _cpu_times(values, fmt, tz=None):
    cpu = CpuBackend()
    out, bad = cpu.cast(cpu.series(values, "string"), "timestamp", fmt=fmt, timezone=tz)
    return pa.array(out).cast(pa.int64()).to_pylist(), bad.tolist()


def _gpu_rule(values, fmt):
    """What the GPU computes for the values its strict form accepts (numpy stands in for CuPy)."""
    plan = timestamp_plan(fmt)
    rx = re.compile(plan.regex.replace(r"\x0b", "\x0b"))
    out = []
    for v in values:
        m = rx.match(v) if v is not None else None
        if not m:
            out.append("slow")
            continue
        parts = dict(zip(plan.fields, m.groups()))
        month = (["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].index(parts["b"]) + 1
                 if "b" in parts else int(parts.get("m") or 1))
        off = 0
        if parts.get("zs"):
            off = (-1 if parts["zs"] == "-" else 1) * (int(parts["zh"]) * 60 + int(parts["zm"]))
        micro = int((parts.get("f") or "0").ljust(6, "0")) if parts.get("f") else 0
        a = lambda k: np.array([int(parts.get(k) or 0)], dtype=np.int64)  # noqa: E731
        out.append(int(civil_to_micros(np, a("Y"), np.array([month]), a("d"), a("H"), a("M"), a("S"),
                                       np.array([micro]), np.array([off]))[0]))
    return out


@pytest.mark.parametrize("fmt, values", [
    ("%d/%b/%Y:%H:%M:%S %z", ["10/Oct/2000:13:55:36 -0700", " 01/Jan/1970:00:00:00 +0000 ", "29/Feb/2024:23:59:59 +0530",
                              "31/Dec/1999:23:59:59 -2359", "10/oct/2000:13:55:36 -0700", "1/Oct/2000:13:55:36 -0700", None]),
    ("%Y-%m-%d %H:%M:%S", ["2026-03-29 02:30:00", "1600-02-29 00:00:00", "2026-12-31 23:59:59"]),
    (None, ["2026-03-29T02:30:00Z", "2026-03-29 02:30:00.5+01:00", "2026-03-29", "2026-03-29T02:30:00.123456-05:30",
            "2026-03-29T02:30:00"]),
])
def test_strict_timestamp_forms_give_the_cpu_values(fmt, values):
    cpu, _ = _cpu_times(values, fmt)
    gpu = _gpu_rule(values, fmt)
    for c, g in zip(cpu, gpu):
        if g != "slow":
            assert g == c
    assert gpu.count("slow") <= 3


def test_formats_outside_the_strict_set_go_to_the_cpu():
    assert timestamp_plan("%d/%b/%Y:%H:%M:%S %z") is not None and timestamp_plan("%d %b %Y") is not None
    for fmt in ("%y-%m-%d", "%I:%M %p %Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%H:%M", "%d/%B/%Y"):
        assert timestamp_plan(fmt) is None, fmt


def test_cluster_settings_are_sized_from_free_memory():
    s = cluster_settings([(100 << 30, 141 << 30), (90 << 30, 141 << 30)])
    assert s["n_workers"] == 2 and s["enable_cudf_spill"] is True
    assert s["rmm_pool_size"] <= int(0.8 * (90 << 30)) and s["rmm_pool_size"] % (256 << 20) == 0
    assert s["device_memory_limit"] == int(0.9 * (141 << 30))
    with pytest.raises(ValueError):
        cluster_settings([])


def test_unsupported_error_type():
    with pytest.raises(Unsupported):
        to_cudf_regex(r"(?=x)")


def test_plan_notes_what_the_gpu_hands_to_the_cpu(tmp_path):
    """The plan says, before any data is read, which pattern the GPU backend cannot run."""
    from gpuetl import Pipeline
    from gpuetl.backends.gpu import GpuBackend

    (tmp_path / "a.log").write_text("Hello\n")
    spec = {"version": 1, "name": "n", "source": {"type": "text", "path": "a.log"},
            "parse": {"regex": "(?i)^(?P<word>hello)$"}, "sink": {"path": "out"}}
    pipeline = Pipeline.from_dict(spec, base_dir=tmp_path)
    notes = pipeline.plan(GpuBackend()).notes
    assert len(notes) == 1 and "runs on the CPU (RE2)" in notes[0]
    assert pipeline.plan("cpu").notes == []
