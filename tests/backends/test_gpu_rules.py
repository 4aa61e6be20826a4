"""The GPU backend's pure-Python rules, checked on CPU: regex translation, strict timestamp forms,
date arithmetic, exact number conversions, UTF-8 validation, cluster sizing, the tallies and the
host-transfer report, and NVML detection on a machine without a GPU."""

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gpuetl.backends import get_backend
from gpuetl.backends.cpu import CpuBackend
from gpuetl.backends.civil import civil_to_micros
from gpuetl.backends.gpu_detect import GpuPlanning, cluster_settings, gpu_count, visible_devices
from gpuetl.backends.gpu_regex import Unsupported, check_regex, drop_group_names, to_cudf_regex
from gpuetl.backends.gpu_tallies import (count_host_bytes, count_read, host_transfer_report, reset_tallies,
                                         sum_tallies, worker_tallies)
from gpuetl.backends.gpu_values import integer_cast_loses, timestamp_plan, utf8_bad_bytes
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
    assert get_backend("gpu", for_planning=True).check_regex(pattern) == reason


def _captures(pattern, lines):
    arr = pa.array(lines, pa.string())
    names = tuple(re.findall(r"\(\?P<(\w+)>", pattern))        # RE2's \z is not Python's: no re.compile
    struct = pc.extract_regex(arr, pattern=pattern)
    return [struct.is_valid().to_pylist()] + [pc.struct_field(struct, n).to_pylist() for n in names]


def _renamed(translated, names):
    """Give the translated (numbered) groups their names back, to run it through RE2 too."""
    out, k = [], 0
    i = 0
    while i < len(translated):
        if translated[i] == "\\":     # libcudf's \Z is RE2's \z
            out.append("\\z" if translated[i:i + 2] == "\\Z" else translated[i:i + 2]); i += 2; continue
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


def test_cluster_settings_one_memory_design():
    """An RMM pool as a fraction of device memory (never more than is free), CuPy allocating from
    it, dask-cuda spilling below the pool, cuDF's own spilling off."""
    s = cluster_settings([(130 << 30, 141 << 30), (120 << 30, 141 << 30)])
    assert s["n_workers"] == 2 and s["enable_cudf_spill"] is False
    assert s["rmm_allocator_external_lib_list"] == ["cupy"]
    assert s["rmm_pool_size"] == int(0.8 * (141 << 30)) // (256 << 20) * (256 << 20)
    assert s["rmm_pool_size"] % (256 << 20) == 0
    assert s["device_memory_limit"] == int(0.6 * (141 << 30)) < s["rmm_pool_size"]
    assert s["threads_per_worker"] == 2          # one partition read while another is computed
    busy = cluster_settings([(10 << 30, 141 << 30)])
    assert busy["rmm_pool_size"] == 10 << 30 and busy["device_memory_limit"] <= busy["rmm_pool_size"]
    with pytest.raises(ValueError):
        cluster_settings([])


def test_kvikio_threads_share_the_cores_among_the_gpu_workers():
    from gpuetl.backends.gpu_kvikio import kvikio_threads

    assert kvikio_threads(192, 8) == 24 and kvikio_threads(16, 1) == 16
    assert kvikio_threads(2, 1) == 4 and kvikio_threads(512, 1) == 64 and kvikio_threads(8, 0) == 8


@pytest.mark.parametrize("env, count, expected", [
    (None, 3, ["0", "1", "2"]),
    ("", 3, []),
    ("1", 3, ["1"]),
    ("2,0", 3, ["2", "0"]),
    ("0,7,1", 3, ["0"]),                      # the runtime stops at the first entry naming no device
    ("1,1", 3, ["1"]),
    ("GPU-8f3c,1", 2, ["GPU-8f3c", "1"]),
    ("MIG-abcd", 1, ["MIG-abcd"]),
    ("-1", 2, []),
])
def test_worker_count_honours_cuda_visible_devices(env, count, expected):
    assert visible_devices(env, count) == expected


def test_re2_end_of_text_is_libcudfs_capital_z():
    """libcudf's $ also matches before a final newline; RE2's (no (?m)) and \\z only at the end."""
    assert to_cudf_regex(r"^a$") == r"^a\Z"
    assert to_cudf_regex(r"^a\z") == r"^a\Z"
    assert to_cudf_regex(r"^[$]\$$") == r"^[$]\$\Z"
    assert timestamp_plan(None).regex.endswith(r"\Z")
    assert re.fullmatch(timestamp_plan("%Y-%m-%d").regex.replace(r"\x0b", "\x0b"), "2026-01-02") is not None


@pytest.mark.parametrize("lo, hi, target, loses", [
    (-1, 5, "uint64", True),                  # a round trip gives -1 back: the range does not
    (0, 2**64 - 1, "int64", True),
    (0, 2**63 - 1, "int64", False),
    (-128, 127, "int8", False),
    (-129, 0, "int8", True),
    (0, 255, "uint8", False),
    (0, 2**53, "float64", False),
    (0, 2**53 + 1, "float64", True),
    (-(2**24) - 1, 0, "float32", True),
])
def test_integer_conversions_check_the_range_not_a_round_trip(lo, hi, target, loses):
    assert integer_cast_loses(lo, hi, target) is loses
    arrow_refuses = False
    try:
        pa.array([lo, hi], pa.uint64() if hi > 2**63 - 1 else pa.int64()).cast(getattr(pa, target)())
    except (pa.ArrowInvalid, OverflowError):
        arrow_refuses = True
    assert arrow_refuses is loses


UTF8_CASES = [b"", b"plain ascii", "héllo € 𝄞".encode(), b"\xc0\x80", b"\xc1\xbf", b"\xed\xa0\x80",
              b"\xf4\x90\x80\x80", b"\xe2\x82", b"ab\xe2\x82\ncd", b"\x80", b"\xe0\x9f\xbf",
              b"\xf0\x8f\xbf\xbf", "\U0010ffff".encode(), b"\xf5\x80\x80\x80", b"\xff", b"\xc3\xa9\xa9"]


@pytest.mark.parametrize("data", UTF8_CASES)
def test_device_utf8_validation_agrees_with_pythons_decoder(data):
    try:
        data.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    assert (not utf8_bad_bytes(np, np.frombuffer(data, dtype=np.uint8)).any()) is valid


def test_device_utf8_validation_on_random_bytes():
    rng = np.random.default_rng(7)
    alphabet = np.array([0x41, 0x0A, 0x80, 0x9F, 0xA0, 0xBF, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xC0],
                        dtype=np.uint8)
    for _ in range(3000):
        data = bytes(rng.choice(alphabet, size=rng.integers(1, 7)))
        try:
            data.decode("utf-8")
            valid = True
        except UnicodeDecodeError:
            valid = False
        assert (not utf8_bad_bytes(np, np.frombuffer(data, dtype=np.uint8)).any()) is valid, data


def test_device_utf8_validation_blames_the_right_line():
    """Bad bytes are mapped to lines as split_lines does: a sequence cut by a newline is the
    first line's fault, the next line's stray continuation bytes its own."""
    rng = np.random.default_rng(11)
    alphabet = np.array([0x41, 0x0A, 0x0A, 0x82, 0xAC, 0xE2, 0xC3, 0xA9, 0xF0, 0x9F], dtype=np.uint8)
    for _ in range(2000):
        data = bytes(rng.choice(alphabet, size=rng.integers(1, 12))) + b"\n"
        lines = data.split(b"\n")[:-1]
        expected = []
        for line in lines:
            try:
                line.decode("utf-8")
                expected.append(False)
            except UnicodeDecodeError:
                expected.append(True)
        buf = np.frombuffer(data, dtype=np.uint8)
        starts = np.concatenate([[0], np.flatnonzero(buf == 10)[:-1] + 1])
        got = np.zeros(len(starts), dtype=bool)
        got[np.searchsorted(starts, np.flatnonzero(utf8_bad_bytes(np, buf)), side="right") - 1] = True
        assert got.tolist() == expected, data


def test_tallies_sum_over_workers_and_report_host_bytes_per_input_byte():
    reset_tallies()
    try:
        count_host_bytes("quarantined raw lines", 300)
        count_host_bytes("bookkeeping columns", 700)
        count_read("kvikio posix", 4000)
        count_read("kvikio gds", 6000)
        here = worker_tallies()
        total = sum_tallies([here, here])
        report = host_transfer_report(total, input_bytes=100_000)
        assert report["host_bytes"] == 2000 and report["host_bytes_per_input_byte"] == 0.02
        assert report["by_reason"] == {"bookkeeping columns": 1400, "quarantined raw lines": 600}
        assert report["reads"] == {"kvikio gds": {"reads": 2, "bytes": 12000},
                                   "kvikio posix": {"reads": 2, "bytes": 8000}}
        assert report["bounce_buffer_bytes"] == 8000
        assert host_transfer_report(sum_tallies([]), 0)["host_bytes_per_input_byte"] == 0.0
    finally:
        reset_tallies()


def test_syncs_are_summed_over_workers_and_reported_by_reason():
    from gpuetl.backends.gpu_tallies import count_sync

    reset_tallies()
    try:
        count_sync("control: rows left")
        count_sync("control: rows left")
        count_sync("tallies of dropped rows")
        total = sum_tallies([worker_tallies(), worker_tallies()])
        assert host_transfer_report(total, 10)["syncs"] == {
            "total": 6, "by_reason": {"control: rows left": 4, "tallies of dropped rows": 2}}
        assert host_transfer_report(sum_tallies([]), 0)["syncs"] == {"total": 0, "by_reason": {}}
    finally:
        reset_tallies()


def test_cpu_backend_reports_no_host_transfer():
    assert CpuBackend().host_transfer(None, 123) == {}


def test_unsupported_error_type():
    with pytest.raises(Unsupported):
        to_cudf_regex(r"(?=x)")


def test_plan_notes_what_the_gpu_hands_to_the_cpu(tmp_path):
    """The plan says, before any data is read, which pattern the GPU backend cannot run."""
    from gpuetl import Pipeline

    (tmp_path / "a.log").write_text("Hello\n")
    spec = {"version": 1, "name": "n", "source": {"type": "text", "path": "a.log"},
            "parse": {"regex": "(?i)^(?P<word>hello)$"}, "sink": {"path": "out"}}
    pipeline = Pipeline.from_dict(spec, base_dir=tmp_path)
    notes = pipeline.plan(GpuPlanning()).notes
    assert pipeline.plan("gpu").notes == notes
    assert len(notes) == 1 and "runs on the CPU (RE2)" in notes[0]
    assert pipeline.plan("cpu").notes == []
