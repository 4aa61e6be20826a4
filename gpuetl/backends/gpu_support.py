"""Pure-Python parts of the GPU backend: nothing here imports cuDF, CuPy, KvikIO or RMM, so
every rule is tested on a machine without a GPU or RAPIDS.

* Detection and cluster sizing from NVML (no CUDA context in the client process), honouring
  CUDA_VISIBLE_DEVICES.
* `GpuPlanning`: what planning asks of the GPU backend (its name, which regexes it cannot run),
  without importing RAPIDS, so `gpuetl plan --backend gpu` works anywhere.
* Per-process tallies, summed over the workers by the runner (`client.run`): work handed to the
  CPU kernels (`fallbacks`), bytes copied from the device to the host by reason (the host-transfer
  ledger), and which path each file read really took (KvikIO GDS or its POSIX compat path).
* `to_cudf_regex` rewrites an RE2 pattern (what the plan accepts) into the subset libcudf's regex
  engine runs with the SAME meaning, or raises `Unsupported` with the reason. What it changes:
  named groups become plain groups, the shorthand classes become explicit ASCII classes (RE2's
  `\\d \\s \\w` are ASCII; libcudf's are Unicode), and RE2's end of text (`$` without (?m), and
  `\\z`) becomes libcudf's `\\Z`: libcudf's `$` also matches before a final newline.
  Sources: libcudf "Regex Features" (cpp/doxygen/regex.md) and cpp/src/strings/regex/regcomp.cpp.
* `timestamp_plan` turns a strptime format into a strict regex whose captures the GPU turns into
  UTC microseconds with integer arithmetic (`civil_to_micros`, written against xp so numpy runs it
  here). Values outside the strict form go to the CPU kernel, so results equal the CPU's exactly.
"""

from __future__ import annotations

import importlib.util
import os
import re
import threading
from collections import Counter
from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------
# detection and cluster sizing (NVML only: never a CUDA context in the client)


def visible_devices(env: str | None, count: int) -> list[str]:
    """The devices a CUDA process may use, as NVML indices ("0") or UUIDs ("GPU-...", "MIG-..."),
    from CUDA_VISIBLE_DEVICES the way the CUDA runtime reads it: unset means all; the list stops
    at the first entry that names no device; an empty value means none."""
    if env is None:
        return [str(i) for i in range(count)]
    out: list[str] = []
    for item in (x.strip() for x in env.split(",")):
        if item.isdigit():
            if int(item) >= count or item in out:
                break
            out.append(str(int(item)))
        elif item.startswith(("GPU-", "MIG-")):
            out.append(item)
        else:
            break
    return out


def _nvml():
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:        # no driver, no device, a container without NVML: all mean "no GPU"
        return None
    return pynvml


def gpu_memory() -> list[tuple[int, int]]:
    """(free, total) bytes of each GPU this process may use (CUDA_VISIBLE_DEVICES), from NVML;
    [] without one."""
    nvml = _nvml()
    if nvml is None:
        return []
    try:
        out = []
        for dev in visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"), int(nvml.nvmlDeviceGetCount())):
            handle = (nvml.nvmlDeviceGetHandleByIndex(int(dev)) if dev.isdigit()
                      else nvml.nvmlDeviceGetHandleByUUID(dev))
            info = nvml.nvmlDeviceGetMemoryInfo(handle)
            out.append((int(info.free), int(info.total)))
        return out
    except Exception:
        return []
    finally:
        nvml.nvmlShutdown()


def gpu_count() -> int:
    """GPUs this process may use (0 without a driver). Never initialises CUDA."""
    return len(gpu_memory())


def rapids_available() -> bool:
    return all(importlib.util.find_spec(m) is not None
               for m in ("cudf", "cupy", "dask_cudf", "dask_cuda", "kvikio", "rmm", "pylibcudf"))


POOL_FRACTION = 0.8        # of each device's memory: the RMM pool every allocation comes from
# Two task threads per GPU worker: while one partition is computed on the device, the next one's
# file read (KvikIO, into device memory) goes on in the other thread (docs/gpu.md, "Overlap").
THREADS_PER_WORKER = 2
WORKER_PRELOAD = "gpuetl.backends.gpu_worker"     # run in each worker process gpuetl starts


def kvikio_threads(cpus: int, gpus: int) -> int:
    """KvikIO's thread pool for a worker gpuetl starts: the machine's cores shared among its GPU
    workers, 4 to 64 (KvikIO splits a read into tasks of `task_size`, 4 MiB, run by the pool;
    its default pool has one thread, so a 1 GiB partition would be read by one thread)."""
    return max(4, min(64, cpus // max(1, gpus)))
SPILL_FRACTION = 0.6       # dask-cuda moves finished partitions to host memory past this


def cluster_settings(memory: list[tuple[int, int]], pool_fraction: float = POOL_FRACTION,
                     spill_fraction: float = SPILL_FRACTION) -> dict:
    """LocalCUDACluster arguments for the visible GPUs' (free, total) memory (docs/gpu.md,
    "Memory"): one worker per GPU; an RMM pool of `pool_fraction` of the smallest device's
    memory (rounded down to 256 MiB, and never more than it has free) that CuPy allocates
    from too; dask-cuda spills whole finished partitions to host past `spill_fraction`; cuDF's
    own spilling stays off (one spilling mechanism: cuDF's moves buffers under the views the
    backend takes with to_pylibcudf and CuPy)."""
    if not memory:
        raise ValueError("no GPU")
    free = min(f for f, _ in memory)
    total = min(t for _, t in memory)
    step = 256 << 20
    pool = max(step, min(int(total * pool_fraction), free) // step * step)
    return {"n_workers": len(memory), "threads_per_worker": THREADS_PER_WORKER, "rmm_pool_size": pool,
            "rmm_allocator_external_lib_list": ["cupy"],
            "device_memory_limit": min(int(total * spill_fraction), pool), "enable_cudf_spill": False,
            "protocol": "tcp"}


BLOCKSIZE_SHARE = 16        # a partition's default size: this fraction of the RMM pool
BLOCKSIZE_STEP = 64 << 20
MAX_GPU_BLOCKSIZE = 1 << 30     # spec.models.MAX_BLOCKSIZE: a partition is held whole


def gpu_blocksize(memory: list[tuple[int, int]]) -> int | None:
    """The GPU's default `source.blocksize` for the visible GPUs' (free, total) memory: a 16th
    of the RMM pool cluster_settings gives each worker (a partition's bytes grow several times
    as typed columns and their temporaries, and two partitions are in flight per worker: one
    read while the other is computed), in whole 64 MiB, between 64 MiB and 1 GiB; None
    without a GPU (the pipeline file's default stays). An H200 (141 GiB) gets 1 GiB, a
    16 GiB device 768 MiB."""
    if not memory:
        return None
    pool = cluster_settings(memory)["rmm_pool_size"]
    return max(BLOCKSIZE_STEP, min(MAX_GPU_BLOCKSIZE, pool // BLOCKSIZE_SHARE // BLOCKSIZE_STEP * BLOCKSIZE_STEP))


class GpuPlanning:
    """The GPU backend as planning sees it (base.PlanningBackend): a name and the regex checks.
    Needs no RAPIDS."""

    name = "gpu"
    images_on_gpu = False       # base.Backend.images_on_gpu

    def default_blocksize(self) -> int | None:
        """source.blocksize where the pipeline file sets none: sized for this machine's GPUs."""
        return gpu_blocksize(gpu_memory())

    @property
    def runs_images(self) -> bool:
        return self.images_on_gpu

    def check_regex(self, pattern: str) -> str | None:
        return check_regex(pattern)

    def regex_error(self, pattern: str) -> str | None:
        """Never: a pattern libcudf cannot run goes to the CPU kernel (check_regex notes it)."""
        return None


# ---------------------------------------------------------------------------------------------
# per-process tallies (the runner sums them over the workers with client.run)

_LOCK = threading.Lock()
FALLBACKS: Counter = Counter()           # reason -> rows or columns handed to the CPU kernels
HOST_BYTES: Counter = Counter()          # reason -> bytes copied device -> host by gpuetl
READS: Counter = Counter()               # "<path> reads" / "<path> bytes" -> count
SYNCS: Counter = Counter()               # reason -> device -> host reads of a value (each a sync)


def count_fallback(what: str, rows: int = 1) -> None:
    with _LOCK:
        FALLBACKS[what] += int(rows)


def fallback_counts() -> dict[str, int]:
    with _LOCK:
        return dict(FALLBACKS)


def reset_fallbacks() -> None:
    with _LOCK:
        FALLBACKS.clear()


def count_host_bytes(reason: str, nbytes: int) -> None:
    """The host-transfer ledger: called by the one function that copies device -> host."""
    with _LOCK:
        HOST_BYTES[reason] += int(nbytes)


def count_sync(reason: str) -> None:
    """One device -> host read of a value (the stream waits for it): called only by
    gpu_device.to_host_value, the one function through which the GPU backend reads one."""
    with _LOCK:
        SYNCS[reason] += 1


def count_read(path: str, nbytes: int) -> None:
    """One file read of nbytes that took `path` ('kvikio gds', 'kvikio posix', 'host')."""
    with _LOCK:
        READS[f"{path} reads"] += 1
        READS[f"{path} bytes"] += int(nbytes)


def worker_tallies() -> dict[str, dict[str, int]]:
    """This process's tallies (run on each worker by `client.run`)."""
    with _LOCK:
        return {"fallbacks": dict(FALLBACKS), "host_bytes": dict(HOST_BYTES), "reads": dict(READS),
                "syncs": dict(SYNCS)}


def reset_tallies() -> None:
    with _LOCK:
        FALLBACKS.clear()
        HOST_BYTES.clear()
        READS.clear()
        SYNCS.clear()


def sum_tallies(parts) -> dict[str, dict[str, int]]:
    total: dict[str, dict[str, int]] = {"fallbacks": {}, "host_bytes": {}, "reads": {}, "syncs": {}}
    for part in parts:
        for kind, counts in part.items():
            for k, v in counts.items():
                total.setdefault(kind, {})[k] = total[kind].get(k, 0) + v
    return total


def host_transfer_report(tallies: dict[str, dict[str, int]], input_bytes: int) -> dict:
    """The manifest's `host_transfer` entry: gpuetl's own device -> host copies by reason and per
    input byte, and the file reads by path. KvikIO's POSIX path reads through host bounce
    buffers: those bytes are reported on their own line, not as gpuetl's copies."""
    host = dict(sorted(tallies["host_bytes"].items()))
    total = sum(host.values())
    reads = tallies["reads"]
    paths = sorted({k.rsplit(" ", 1)[0] for k in reads})
    return {
        "input_bytes": int(input_bytes),
        "host_bytes": total,
        "host_bytes_per_input_byte": (total / input_bytes) if input_bytes else 0.0,
        "by_reason": host,
        "reads": {p: {"reads": reads.get(f"{p} reads", 0), "bytes": reads.get(f"{p} bytes", 0)} for p in paths},
        # every path through KvikIO's POSIX backend: the partitions' reads and the spill pieces'
        "bounce_buffer_bytes": sum(reads.get(f"{p} bytes", 0) for p in paths if p.endswith("kvikio posix")),
        **sync_report(tallies.get("syncs", {})),
    }


def sync_report(syncs: dict[str, int]) -> dict:
    """The manifest's sync budget: every device -> host read of a value the GPU backend made
    (gpu_device.to_host_value), in all and by reason. The run adds `syncs_per_partition` (all
    of them, shard tasks' included, over the plan's partitions: runtime/run.py)."""
    counted = dict(sorted(syncs.items()))
    return {"syncs": {"total": sum(counted.values()), "by_reason": counted}}


# ---------------------------------------------------------------------------------------------
# regex translation


class Unsupported(ValueError):
    """The pattern uses something libcudf's regex engine lacks or reads differently."""


_WS = r"\t\n\f\r "                   # RE2's \s (no \v)
_CLASS_BODY = {"d": "0-9", "s": _WS, "w": "0-9A-Za-z_"}
_SHORTHAND = {"d": "[0-9]", "D": "[^0-9]", "s": f"[{_WS}]", "S": f"[^{_WS}]",
              "w": "[0-9A-Za-z_]", "W": "[^0-9A-Za-z_]"}
# escapes libcudf accepts as literals (regcomp.cpp: escapable_chars)
_ESCAPABLE = set(".-+*\\?^$|{}()[]<>\"~'`_@=;:!#%&,/ ")
_SIMPLE_ESCAPES = {"t": r"\t", "n": r"\n", "r": r"\r", "f": r"\f", "a": r"\a", "v": r"\x0b"}
_MAX_REPEAT = 999                    # libcudf: counted repeats 0-999 (RE2 allows 1000)


def leading_dotall(pattern: str) -> tuple[str, bool]:
    """(the pattern less a leading `(?s)`, whether it had one). RE2's `(?s)` over the whole
    pattern (`.` matches `\n` too: multi-line records) is libcudf's DOTALL flag; any other
    inline flag stays unsupported (to_cudf_regex)."""
    return (pattern[4:], True) if pattern.startswith("(?s)") else (pattern, False)


def check_regex(pattern: str) -> str | None:
    """Why libcudf cannot run `pattern` with RE2's meaning, or None when it can."""
    try:
        to_cudf_regex(leading_dotall(pattern)[0])
    except Unsupported as err:
        return str(err)
    return None


def to_cudf_regex(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    prev_open_or_bar = True          # at the start of a group/alternative (empty-branch check)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise Unsupported("a trailing backslash")
            e = pattern[i + 1]
            if e in _SHORTHAND:
                out.append(_SHORTHAND[e])
            elif e in _SIMPLE_ESCAPES:
                out.append(_SIMPLE_ESCAPES[e])
            elif e == "x":
                hexd = pattern[i + 2:i + 4]
                if not re.fullmatch(r"[0-9A-Fa-f]{2}", hexd):
                    raise Unsupported(r"\x{...} escapes (only \xHH)")
                out.append("\\x" + hexd)
                i += 2
            elif e == "A":
                out.append(r"\A")
            elif e == "z":
                out.append(r"\Z")      # the end of the text (libcudf's $ also matches before a final \n)
            elif e in "bB":
                raise Unsupported(r"word boundaries \b \B (libcudf uses Unicode word characters, RE2 ASCII)")
            elif e in "pP":
                raise Unsupported(r"Unicode classes \p{...}")
            elif e in "QEC":
                raise Unsupported(f"the \\{e} escape")
            elif e.isdigit():
                raise Unsupported("octal escapes or backreferences")
            elif e in _ESCAPABLE:
                out.append("\\" + e)
            elif not e.isalnum():
                out.append("\\x%02x" % ord(e) if ord(e) < 128 else e)
            else:
                raise Unsupported(f"the \\{e} escape")
            i += 2
            prev_open_or_bar = False
            continue
        if c == "[":
            body, i = _translate_class(pattern, i)
            out.append(body)
            prev_open_or_bar = False
            continue
        if c == "(":
            if pattern.startswith("(?P<", i):
                end = pattern.index(">", i)
                out.append("(")
                i = end + 1
            elif pattern.startswith("(?:", i):
                out.append("(?:")
                i += 3
            elif pattern.startswith("(?", i):
                raise Unsupported("inline flags, lookarounds or other (?...) groups")
            else:
                out.append("(")
                i += 1
            if i < n and pattern[i] in ")|":
                raise Unsupported("an empty group or alternative")
            prev_open_or_bar = True
            continue
        if c == "|":
            if prev_open_or_bar or i + 1 >= n or pattern[i + 1] in ")|":
                raise Unsupported("an empty alternative")
            out.append("|")
            i += 1
            prev_open_or_bar = True
            continue
        if c == "{":
            m = re.match(r"\{(\d+)(?:,(\d*))?\}", pattern[i:])
            if m:
                if int(m.group(1)) > _MAX_REPEAT or (m.group(2) and int(m.group(2)) > _MAX_REPEAT):
                    raise Unsupported(f"a counted repeat above {_MAX_REPEAT}")
                out.append(m.group(0))
                i += len(m.group(0))
                if i < n and pattern[i] in "+":
                    raise Unsupported("possessive quantifiers")
                continue
            out.append(r"\{")
            i += 1
            prev_open_or_bar = False
            continue
        if c == "}":
            out.append(r"\}")
            i += 1
            prev_open_or_bar = False
            continue
        out.append(r"\Z" if c == "$" else c)      # RE2's $ (no (?m)) is the end of the text
        prev_open_or_bar = False
        i += 1
    return "".join(out)


def _translate_class(pattern: str, i: int) -> tuple[str, int]:
    """pattern[i] == '['; returns (libcudf class, index after ']')."""
    n = len(pattern)
    j = i + 1
    out = ["["]
    if j < n and pattern[j] == "^":
        out.append("^")
        j += 1
    first = True
    while j < n:
        c = pattern[j]
        if c == "]" and not first:
            out.append("]")
            return "".join(out), j + 1
        first = False
        if c == "[" and pattern.startswith("[:", j):
            raise Unsupported("POSIX classes like [[:alpha:]]")
        if c == "\\":
            if j + 1 >= n:
                raise Unsupported("a trailing backslash")
            e = pattern[j + 1]
            if e in _CLASS_BODY:
                out.append(_CLASS_BODY[e].replace("\t", r"\t").replace("\n", r"\n").replace("\f", r"\f")
                           .replace("\r", r"\r"))
            elif e in "DSW":
                raise Unsupported(f"negated shorthand \\{e} inside a character class")
            elif e in _SIMPLE_ESCAPES:
                out.append(_SIMPLE_ESCAPES[e])
            elif e == "x":
                hexd = pattern[j + 2:j + 4]
                if not re.fullmatch(r"[0-9A-Fa-f]{2}", hexd):
                    raise Unsupported(r"\x{...} escapes (only \xHH)")
                out.append("\\x" + hexd)
                j += 2
            elif e.isalnum():
                raise Unsupported(f"the \\{e} escape inside a character class")
            else:
                out.append("\\" + e)
            j += 2
            continue
        out.append(c)
        j += 1
    raise Unsupported("an unterminated character class")


def drop_group_names(pattern: str) -> str:
    """`(?P<name>` -> `(` outside classes and escapes (for engines that number groups)."""
    return re.sub(r"(?<!\\)\(\?P<[A-Za-z_][A-Za-z0-9_]*>", "(", pattern)


# ---------------------------------------------------------------------------------------------
# timestamps: strict forms the GPU parses with integer arithmetic

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DIRECTIVES = {
    "Y": r"([0-9]{4})",
    "m": r"(0[1-9]|1[0-2])",
    "d": r"(0[1-9]|[12][0-9]|3[01])",
    "H": r"([01][0-9]|2[0-3])",
    "M": r"([0-5][0-9])",
    "S": r"([0-5][0-9])",
    "b": "(" + "|".join(MONTHS) + ")",
    "z": r"([+-])([01][0-9]|2[0-3])([0-5][0-9])",
}
STRIP = " \t\n\v\f\r"
_WS_RUN = r"[\t\n\x0b\f\r ]*"


@dataclass(frozen=True)
class TimestampPlan:
    regex: str                       # libcudf-ready, anchored, whitespace allowed around the value
    fields: tuple[str, ...]          # the directive of each capture group, in order ('z' takes 3)
    has_zone: bool


def timestamp_plan(fmt: str | None) -> TimestampPlan | None:
    """A strict GPU form for `fmt` (None: ISO 8601), or None when the GPU does not parse it."""
    if fmt is None:
        body = (r"([0-9]{4})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
                r"(?:[T ]([01][0-9]|2[0-3]):([0-5][0-9]):([0-5][0-9])(?:\.([0-9]{1,6}))?)?"
                r"(?:(Z)|([+-])([01][0-9]|2[0-3]):([0-5][0-9]))?")
        return TimestampPlan("^" + _WS_RUN + body + _WS_RUN + r"\Z",
                             ("Y", "m", "d", "H", "M", "S", "f", "Z", "zs", "zh", "zm"), True)
    parts: list[str] = []
    fields: list[str] = []
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c == "%":
            if i + 1 >= len(fmt):
                return None
            d = fmt[i + 1]
            if d == "%":
                parts.append("%")
            elif d in _DIRECTIVES and d not in fields:
                parts.append(_DIRECTIVES[d])
                fields += ["zs", "zh", "zm"] if d == "z" else [d]
            else:
                return None          # %y %I %p %j %f %B ...: the CPU kernel parses these
            i += 2
            continue
        if c.isalnum() or c in "%":
            if c.isalpha():
                return None          # letters in the literal text could collide with month names
            parts.append(c)
        elif c == " ":
            parts.append(" ")        # strptime lets a space match any run of white space; the
                                     # strict form takes exactly one (the rest: CPU kernel)
        elif c in STRIP:
            return None
        else:
            parts.append("\\" + c if c in _ESCAPABLE else c)
        i += 1
    if "Y" not in fields or "d" not in fields or not ({"m", "b"} & set(fields)):
        return None
    return TimestampPlan("^" + _WS_RUN + "".join(parts) + _WS_RUN + r"\Z", tuple(fields), "zs" in fields)


def civil_to_days(xp, y, m, d):
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil)."""
    y = y - (m <= 2).astype(y.dtype)
    era = xp.floor_divide(y, 400)
    yoe = y - era * 400
    mp = (m + 9) % 12
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def days_in_month(xp, y, m):
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    table = xp.asarray([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=xp.int64)
    return table[m - 1] + (leap & (m == 2)).astype(xp.int64)


def civil_to_micros(xp, y, m, d, hh, mm, ss, micro, offset_minutes):
    """UTC microseconds since the epoch; every argument an int64 xp array."""
    days = civil_to_days(xp, y, m, d)
    seconds = days * 86400 + hh * 3600 + mm * 60 + ss - offset_minutes * 60
    return seconds * 1_000_000 + micro


# ---------------------------------------------------------------------------------------------
# exact conversions between typed numbers (Arrow's safe cast), decided from a column's range

_FLOAT_EXACT = {"float64": 2 ** 53, "float32": 2 ** 24}       # integers a float holds exactly


def integer_cast_loses(lo: int, hi: int, target: str) -> bool:
    """Whether integers in [lo, hi] (a column's min and max, as Python ints) can lose a value
    converted to `target`: out of an integer type's range (a round trip cannot see that: -1 ->
    uint64 -> int64 gives -1 back), or past what a float holds exactly (Arrow's safe cast
    refuses both)."""
    import numpy as np

    if target in _FLOAT_EXACT:
        return max(abs(lo), abs(hi)) > _FLOAT_EXACT[target]
    info = np.iinfo(target)
    return lo < int(info.min) or hi > int(info.max)


# ---------------------------------------------------------------------------------------------
# UTF-8 validation as array operations (CuPy on the device; numpy runs it in the tests)


def utf8_bad_bytes(xp, b):
    """A bool per byte of `b` (uint8): True where the byte breaks UTF-8 (RFC 3629: no overlongs,
    no surrogates, nothing past U+10FFFF, no stray or missing continuation bytes). A sequence
    cut off by a newline or the end marks the byte that should have continued it."""
    n = len(b)
    cont = (b & 0xC0) == 0x80
    length = xp.where((b >= 0xC2) & (b <= 0xDF), 2,
                      xp.where((b >= 0xE0) & (b <= 0xEF), 3, xp.where((b >= 0xF0) & (b <= 0xF4), 4, 1)))
    bad = (b == 0xC0) | (b == 0xC1) | (b >= 0xF5)
    covered = xp.zeros(n, dtype=bool)
    # every byte at once, no compaction (so no sync on a device): `going` marks the leads whose
    # sequence still runs at step k; the byte k after such a lead is covered, and the sequence
    # goes on only where that byte continues it
    going = length > 1
    for k in (1, 2, 3):
        going &= length > k
        if k >= n:
            bad |= going                                # cut off by the end of the buffer
            break
        bad[n - k:] |= going[n - k:]                    # cut off by the end of the buffer
        covered[k:] |= going[:n - k]
        # a sequence stops at its first byte that does not continue it (a newline, say): the
        # bytes after belong to no sequence, so the next line's stray continuations are its own
        going[:n - k] &= cont[k:]
        going[n - k:] = False
    nxt = xp.concatenate([b[1:], xp.zeros(1, dtype=b.dtype)])
    bad |= (((b == 0xE0) & (nxt < 0xA0)) | ((b == 0xED) & (nxt > 0x9F)) |
            ((b == 0xF0) & (nxt < 0x90)) | ((b == 0xF4) & (nxt > 0x8F)))
    return bad | (cont & ~covered) | (covered & ~cont)


# ---------------------------------------------------------------------------------------------
# JSON lines and CSV records on the device: which records the device decides, in libcudf's
# regex dialect (tests/backends/test_gpu_api.py compiles each; test_gpu_support.py checks the
# rules against the CPU kernel with Python's re, which reads these ASCII patterns alike).
#
# The device reads each JSON record with libcudf (recovery mode, strict validation, every value
# kept as its token text: keep_quotes), wrapped as {"r": <record>} so that a record libcudf
# cannot read (the wrapper is null) is told apart from a record whose fields are all null (the
# wrapper is there, its fields null). It keeps a value only where the token says exactly what
# the CPU kernel makes of it; every other record is read on the host by the CPU kernel, which
# also gives each bad record its reason.

JSON_WRAPPER = "r"

# Tokens the device turns into a column's value (anything else present: the record goes to the CPU)
JSON_INT_TOKEN = r"^-?(?:0|[1-9][0-9]{0,17})\Z"               # JSON integers within 18 digits
JSON_DECIMAL_TOKEN = r"^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?\Z"  # no exponent (the float fast path)
JSON_TEXT_LITERAL = r"^(?:-?[1-9][0-9]{0,17}|0|true|false)\Z"  # json.dumps gives the same text

# Records libcudf's strict validator reads differently from Python's json, or whose keys the
# device cannot check: the CPU kernel reads them.
JSON_DOUBTFUL_RECORD = "|".join([
    r"[0-9]\.[eE]",                         # 1.e5: libcudf's validator accepts it, Python's json does not
    r"\\u[dD][89a-fA-F]",                   # a UTF-16 surrogate escape: Python keeps a lone one
    r'\\.(?:[^"\\]|\\.)*"[\t\r ]*:',       # an escape in a key (the duplicate-key check reads keys as written)
    r"[\x00-\x08\x0b\x0c\x0e-\x1f]",        # control characters (never valid JSON outside strings)
    r"[,{\[][\t\r ]*,|,[\t\r ]*[}\]]",       # an empty member: Python's json refuses it (not left to the PDA)
])
JSON_OPENINGS = r"[\[{]"
JSON_MAX_OPENINGS = 256                     # deeper records are Python's RecursionError case: the CPU's

JSON_DEVICE_TYPES = frozenset({"string", "bool", "float64", "int8", "int16", "int32", "int64",
                               "uint8", "uint16", "uint32", "uint64"})


# Case and white space: one meaning on both backends, Arrow's (docs/steps.md). lower()/upper()
# map one code point to one (Unicode's simple case mapping, Arrow's utf8proc); libcudf 26.10
# applies the full mapping (ß -> SS, İ -> i̇, ﬁ -> FI, Greek with ypogegrammeni), cases only the
# Basic Multilingual Plane and has an older table for a few letters. The code points where its
# lower or upper differs from Arrow's, found by running libcudf 26.10's tables
# (cpp/src/strings/char_types/char_cases.{h,cu}, char_flags.h, as case.cu applies them) against
# pyarrow's utf8_lower/utf8_upper for every code point, plus every code point of libcudf's
# special-case table: a row holding one is mapped on the host by Arrow (counted).
CASE_DIFFERS = {
    "upper": ((0xDF, 0xDF), (0x130, 0x130), (0x149, 0x149), (0x19B, 0x19B), (0x1C5, 0x1C5), (0x1C8, 0x1C8),
              (0x1CB, 0x1CB), (0x1F0, 0x1F0), (0x1F2, 0x1F2), (0x264, 0x264), (0x277, 0x277), (0x27C, 0x27C),
              (0x390, 0x390), (0x3B0, 0x3B0), (0x587, 0x587), (0x1C8A, 0x1C8A), (0x1E96, 0x1E9A), (0x1F50, 0x1F50),
              (0x1F52, 0x1F52), (0x1F54, 0x1F54), (0x1F56, 0x1F56), (0x1F80, 0x1FAF), (0x1FB2, 0x1FB4),
              (0x1FB6, 0x1FB7), (0x1FBC, 0x1FBC), (0x1FC2, 0x1FC4), (0x1FC6, 0x1FC7), (0x1FCC, 0x1FCC),
              (0x1FD2, 0x1FD3), (0x1FD6, 0x1FD7), (0x1FE2, 0x1FE4), (0x1FE6, 0x1FE7), (0x1FF2, 0x1FF4),
              (0x1FF6, 0x1FF7), (0x1FFC, 0x1FFC), (0x2C5F, 0x2C5F), (0xA7C1, 0xA7C1), (0xA7C8, 0xA7C8),
              (0xA7CA, 0xA7CA), (0xA7CD, 0xA7CD), (0xA7CF, 0xA7CF), (0xA7D1, 0xA7D1), (0xA7D3, 0xA7D3),
              (0xA7D5, 0xA7D5), (0xA7D7, 0xA7D7), (0xA7D9, 0xA7D9), (0xA7DB, 0xA7DB), (0xA7F6, 0xA7F6),
              (0xAB4B, 0xAB4C), (0xFB00, 0xFB06), (0xFB09, 0xFB0D), (0xFB13, 0xFB17), (0x10428, 0x1044F),
              (0x104D8, 0x104FB), (0x10597, 0x105A1), (0x105A3, 0x105B1), (0x105B3, 0x105B9), (0x105BB, 0x105BC),
              (0x10CC0, 0x10CF2), (0x10D70, 0x10D85), (0x118C0, 0x118DF), (0x16E60, 0x16E7F), (0x16EBB, 0x16ED3),
              (0x1DF41, 0x1DF41), (0x1DF49, 0x1DF49), (0x1DF4B, 0x1DF4B), (0x1DF4E, 0x1DF4E), (0x1DF52, 0x1DF52),
              (0x1DF69, 0x1DF69), (0x1DF6B, 0x1DF6B), (0x1DF6D, 0x1DF6D), (0x1DF6F, 0x1DF6F), (0x1DF73, 0x1DF73),
              (0x1DF75, 0x1DF75), (0x1DF77, 0x1DF77), (0x1DF79, 0x1DF79), (0x1DF7B, 0x1DF7B), (0x1DF7D, 0x1DF7D),
              (0x1DF7F, 0x1DF7F), (0x1E922, 0x1E943)),
    "lower": ((0xDF, 0xDF), (0x130, 0x130), (0x149, 0x149), (0x1C5, 0x1C5), (0x1C8, 0x1C8), (0x1CB, 0x1CB),
              (0x1F0, 0x1F0), (0x1F2, 0x1F2), (0x390, 0x390), (0x3B0, 0x3B0), (0x587, 0x587), (0x1C89, 0x1C89),
              (0x1E96, 0x1E9A), (0x1F50, 0x1F50), (0x1F52, 0x1F52), (0x1F54, 0x1F54), (0x1F56, 0x1F56),
              (0x1F80, 0x1FAF), (0x1FB2, 0x1FB4), (0x1FB6, 0x1FB7), (0x1FBC, 0x1FBC), (0x1FC2, 0x1FC4),
              (0x1FC6, 0x1FC7), (0x1FCC, 0x1FCC), (0x1FD2, 0x1FD3), (0x1FD6, 0x1FD7), (0x1FE2, 0x1FE4),
              (0x1FE6, 0x1FE7), (0x1FF2, 0x1FF4), (0x1FF6, 0x1FF7), (0x1FFC, 0x1FFC), (0x2C2F, 0x2C2F),
              (0xA7C0, 0xA7C0), (0xA7C7, 0xA7C7), (0xA7C9, 0xA7C9), (0xA7CB, 0xA7CC), (0xA7CE, 0xA7CE),
              (0xA7D0, 0xA7D0), (0xA7D2, 0xA7D2), (0xA7D4, 0xA7D4), (0xA7D6, 0xA7D6), (0xA7D8, 0xA7D8),
              (0xA7DA, 0xA7DA), (0xA7DC, 0xA7DD), (0xA7E2, 0xA7E2), (0xA7F5, 0xA7F5), (0xAB6C, 0xAB6D),
              (0xFB00, 0xFB06), (0xFB13, 0xFB17), (0x10400, 0x10427), (0x104B0, 0x104D3), (0x10570, 0x1057A),
              (0x1057C, 0x1058A), (0x1058C, 0x10592), (0x10594, 0x10595), (0x10C80, 0x10CB2), (0x10D50, 0x10D65),
              (0x118A0, 0x118BF), (0x16E40, 0x16E5F), (0x16EA0, 0x16EB8), (0x1DF40, 0x1DF40), (0x1DF48, 0x1DF48),
              (0x1DF4A, 0x1DF4A), (0x1DF4D, 0x1DF4D), (0x1DF51, 0x1DF51), (0x1DF68, 0x1DF68), (0x1DF6A, 0x1DF6A),
              (0x1DF6C, 0x1DF6C), (0x1DF6E, 0x1DF6E), (0x1DF72, 0x1DF72), (0x1DF74, 0x1DF74), (0x1DF76, 0x1DF76),
              (0x1DF78, 0x1DF78), (0x1DF7A, 0x1DF7A), (0x1DF7C, 0x1DF7C), (0x1DF7E, 0x1DF7E), (0x1E900, 0x1E921)),
}

# strip(): Unicode white space, as Arrow's utf8_trim_whitespace and Python's str.isspace (libcudf's
# strip() without characters strips every code point up to U+0020, control characters included)
UNICODE_SPACE = "".join(chr(c) for c in (0x9, 0xA, 0xB, 0xC, 0xD, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x85, 0xA0, 0x1680,
                                         *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000))


def case_differs_pattern(how: str) -> str:
    """A libcudf regex character class of the code points where libcudf's `how` ("lower" or
    "upper") differs from Arrow's (CASE_DIFFERS), written as the characters themselves."""
    return "[" + "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in CASE_DIFFERS[how]) + "]"


def span_gather_index(offsets, lo, total: int, xp):
    """Where each byte of the spans [lo[i], lo[i] + length i) lies in the buffer, the spans laid
    end to end (`offsets`: their n + 1 running starts, from 0; `total`: the last, known on the
    host): one gather copies every span at once. Index arithmetic in any array module."""
    pos = xp.arange(total, dtype=xp.int64)
    span = xp.searchsorted(offsets[1:], pos, side="right")
    return lo[span] + (pos - offsets[span])


def json_device_refusal(read) -> str | None:
    """Why a JSON batch is read on the host as a whole (None: the device reads it)."""
    if read.extra != "drop":
        return f"parse_json: extra_fields: {read.extra} (host)"
    if read.raw:                # each value's source text: the CPU kernel's, so both backends agree
        return "parse_json: a field kept as source text (host)"
    for col in read.columns:
        if col.type not in JSON_DEVICE_TYPES:
            return f"parse_json: a {col.type.split('<')[0]} column (host)"
    return None


def json_read_tree(read) -> dict:
    """The keys the device reads below the wrapper, as a tree: a key maps to None (a value,
    read as its token text), {"struct": {...}} or {"list": node}. Columns' flat keys are values;
    their paths are structs and lists down to a value (the plan has refused clashes)."""
    tree: dict = {}
    for col in read.columns:
        tree.setdefault(col.name, None)
        if col.path:
            _insert(tree, col.path)
    return tree


def _insert(level: dict, path) -> None:
    key, rest = path[0], path[1:]
    level[key] = _node(level.get(key), rest) if rest else level.get(key)


def _node(node, rest):
    """`node` (None: a value) grown so that the steps in `rest` can be taken from it."""
    if isinstance(rest[0], int):
        node = node if node is not None and "list" in node else {"list": None}
        if len(rest) > 1:
            node["list"] = _node(node["list"], rest[1:])
        return node
    node = node if node is not None and "struct" in node else {"struct": {}}
    _insert(node["struct"], rest)
    return node


def json_tree_keys(tree: dict) -> set[str]:
    """Every key the device reads, at any depth (checked for duplicates within a record)."""
    out: set[str] = set()
    for key, node in tree.items():
        out.add(key)
        while node is not None and "list" in node:
            node = node["list"]
        if node is not None and "struct" in node:
            out |= json_tree_keys(node["struct"])
    return out


def json_key_literal(key: str) -> str:
    """The key as it is written in a record without escapes (a key that needs escapes is found
    by JSON_DOUBTFUL_RECORD instead)."""
    return '"' + key + '"'


# CSV: records the device reads with libcudf's reader, all others with the CPU kernel
def _one_char_class(ch: str) -> str:
    """A libcudf character class holding one character, spelled with a hex escape."""
    return f"[\\x{ord(ch):02x}]"


CSV_QUOTED_FIELD = r'"(?:[^"]|"")*"'


def csv_device_refusal(delimiter: str, null_values) -> str | None:
    """Why a CSV batch is read on the host as a whole (None: the device reads it)."""
    if len(delimiter) != 1 or ord(delimiter) > 0x7f or delimiter in '"\r\n':
        return "parse_csv: a delimiter libcudf's reader takes differently (host)"
    if any(('"' in v or "\n" in v or "\r" in v or delimiter in v) for v in null_values):
        return "parse_csv: a null value with a quote, delimiter or newline (host)"
    return None


def csv_record_pattern(delimiter: str) -> str:
    """A record the device reads: fields quoted whole (doubled quotes inside) or without quotes,
    no quote anywhere else (pyarrow and libcudf read a stray quote differently)."""
    d = _one_char_class(delimiter)
    unquoted = f"[^\"\\x{ord(delimiter):02x}]*"
    field = f"(?:{CSV_QUOTED_FIELD}|{unquoted})"
    return f"^{field}(?:{d}{field})*\\Z"


def csv_quoted_empty_pattern(delimiter: str) -> str:
    """A quoted empty field: libcudf makes it null when "" is a null value; the CPU keeps ''."""
    d = _one_char_class(delimiter)
    return f'(?:^|{d})""(?:{d}|\\Z)'


def csv_delimiter_pattern(delimiter: str) -> str:
    return _one_char_class(delimiter)


# ---------------------------------------------------------------------------------------------
# s3:// objects read by KvikIO into device memory (issue 18): the same endpoint and credentials
# as the CPU client (storage.py: source.storage_options, else the AWS environment), or the CPU
# client where KvikIO cannot be given them.

_KVIKIO_OPTIONS = {"key", "secret", "token", "endpoint_url", "client_kwargs", "config_kwargs", "skip_instance_cache"}
_KVIKIO_CLIENT_KWARGS = {"endpoint_url", "region_name"}
_KVIKIO_CONFIG_KWARGS = {"retries"}
_URL_SAFE_KEY = re.compile(r"[A-Za-z0-9._~/!$&'()*+,;=:@-]+")     # nothing KvikIO would have to escape


def kvikio_s3_arguments(url: str, storage_options: dict | None, env) -> tuple[dict | None, str]:
    """(keyword arguments of kvikio.RemoteFile.open_s3_url, "") for an s3:// object, from the
    storage_options and AWS environment the CPU client reads; or (None, why) where KvikIO cannot
    be given what the CPU client would use (a profile, config files, an instance role, anonymous
    access, other client settings, a key that needs escaping): that object is read by the CPU client."""
    m = re.match(r"^(s3a?)://([^/]+)/(.+)$", url)
    if not m:
        return None, "not an s3:// object"
    options = dict(storage_options or {})
    client = dict(options.get("client_kwargs") or {})
    config = dict(options.get("config_kwargs") or {})
    if set(options) - _KVIKIO_OPTIONS or set(client) - _KVIKIO_CLIENT_KWARGS or set(config) - _KVIKIO_CONFIG_KWARGS:
        return None, "storage_options KvikIO cannot be given"
    explicit = bool(options.get("key") and options.get("secret"))
    if not explicit and env.get("AWS_PROFILE"):
        return None, "credentials from an AWS profile"
    key = options.get("key") or env.get("AWS_ACCESS_KEY_ID")
    secret = options.get("secret") or env.get("AWS_SECRET_ACCESS_KEY")
    if not (key and secret):
        return None, "credentials from config files or an instance role (KvikIO reads explicit keys only)"
    token = options.get("token") if explicit else env.get("AWS_SESSION_TOKEN")
    endpoint = (options.get("endpoint_url") or client.get("endpoint_url") or env.get("AWS_ENDPOINT_URL_S3")
                or env.get("AWS_ENDPOINT_URL"))
    region = client.get("region_name") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if not region and not endpoint:
        return None, "no region in the environment (the CPU client may read it from config files)"
    bucket, name = m.group(2), m.group(3)
    if not _URL_SAFE_KEY.fullmatch(name):
        return None, "an object key KvikIO would have to escape"
    return {"url": f"s3://{bucket}/{name}", "aws_region_name": region or "us-east-1", "aws_access_key_id": key,
            "aws_secret_access_key": secret, "aws_endpoint_url": endpoint, "aws_session_token": token or None}, ""


def remote_record_span(f, offset: int, length: int, peek: int = 1 << 16) -> tuple[int, int, int]:
    """(start, end, add_newline): the bytes of the records that start in [offset, offset+length)
    of an object in the store, by the rule of sources/ranges.py (a record belongs to the range its
    first byte is in), found with small ranged GETs pinned to the object's ETag (storage.read_span),
    so the bulk of the range can then be read straight into device memory."""
    from .. import storage

    size = f.size

    def newline_at_or_after(pos: int) -> int | None:
        step = peek
        while pos < size:
            chunk = storage.read_span(f.url, f.etag, f.version_id, pos, min(size, pos + step), f.storage_options)
            k = chunk.find(b"\n")
            if k >= 0:
                return pos + k
            pos += len(chunk)
            step *= 2
        return None

    if offset > 0:
        p = newline_at_or_after(offset - 1)
        if p is None or p + 1 >= offset + length:
            return offset, offset, 0              # no record starts in the range
        start = p + 1
    else:
        start = 0
    if start >= size:
        return start, start, 0
    q = newline_at_or_after(max(start, offset + length - 1))
    end = size if q is None else q + 1
    return start, end, int(q is None and end > start)


# ---------------------------------------------------------------------------------------------
# spill pieces: where a shard's stretch lies in a piece file (backends/gpu_spill.py)

# A ranged piece's rows are grouped by the placement hash's top COARSE_BITS bits
# (host_spill.arrow_groups). Its writer stores where each group starts in the file's key-value
# metadata and cuts the file into row groups of about a PIECE_ROW_GROUPS-th of its rows, so a
# shard task reads the rows of its groups (libcudf's skip_rows/num_rows read only the row groups
# they cross) instead of the whole piece.
PIECE_GROUPS_KEY = "gpuetl.placement_group_starts"
PIECE_ROW_GROUPS = 64
PIECE_FRAGMENT_ROWS = 5_000        # libcudf's page fragment: its writer cuts row groups between fragments


def piece_group_rows(rows: int) -> int:
    """Rows per Parquet row group of a spill piece of `rows` rows: about a PIECE_ROW_GROUPS-th
    of them in whole page fragments (so libcudf cuts exactly there); a stretch read crosses at
    most two row groups it does not need all of."""
    return max(1, -(-rows // (PIECE_ROW_GROUPS * PIECE_FRAGMENT_ROWS))) * PIECE_FRAGMENT_ROWS


def group_starts(place, xp, to_host):
    """The row each coarse placement group starts at in a piece (1 + the number of groups
    values, the last the row count), or None when the rows are not grouped (a piece in input
    order). `place`: the piece's placement hashes (xp uint64); `to_host` copies the few numbers
    to the host (and counts them)."""
    from ..placement import COARSE_BITS

    coarse = (place >> xp.uint64(64 - COARSE_BITS)).astype(xp.int64)
    starts = xp.searchsorted(coarse, xp.arange((1 << COARSE_BITS) + 1, dtype=xp.int64), side="left")
    unordered = (coarse[1:] < coarse[:-1]).sum()
    host = to_host(xp.concatenate([starts.astype(xp.int64), unordered.reshape(1).astype(xp.int64)]))
    return None if int(host[-1]) else [int(v) for v in host[:-1]]


def encode_group_starts(starts: list[int]) -> str:
    import json

    return json.dumps(starts, separators=(",", ":"))


def piece_stretch_rows(stored, num_rows: int, lo_bucket: int, hi_bucket: int) -> tuple[int, int] | None:
    """The rows [start, stop) of a piece that hold placement buckets [lo_bucket, hi_bucket):
    the whole coarse groups placement.hash_range's stretch spans, from the group starts the
    piece's writer stored (`stored`: that key-value entry, bytes or str). None where there is
    none or it does not describe this piece (a piece written before, or by another writer):
    the piece is then read whole."""
    import json

    from ..placement import BUCKET_BITS, BUCKETS, COARSE_BITS

    if stored is None:
        return None
    try:
        starts = json.loads(stored)
    except (TypeError, ValueError, RecursionError):
        return None
    groups = 1 << COARSE_BITS
    if not (isinstance(starts, list) and len(starts) == groups + 1
            and all(type(s) is int for s in starts) and starts[0] == 0 and starts[-1] == num_rows
            and all(a <= b for a, b in zip(starts, starts[1:]))):
        return None
    shift = BUCKET_BITS - COARSE_BITS
    first = min(max(lo_bucket, 0) >> shift, groups)
    last = groups if hi_bucket >= BUCKETS else min(max(hi_bucket - 1, 0) >> shift, groups - 1) + 1
    start = starts[first]
    return start, max(starts[last], start)


def piece_file_stretch(path: str, lo_bucket: int, hi_bucket: int) -> tuple[int, int] | None:
    """piece_stretch_rows for a Parquet piece file, from its footer (read on the host by
    pyarrow: a few KiB of the file, no device copy)."""
    import pyarrow.parquet as pq

    footer = pq.read_metadata(path)
    return piece_stretch_rows((footer.metadata or {}).get(PIECE_GROUPS_KEY.encode()), footer.num_rows,
                              lo_bucket, hi_bucket)
