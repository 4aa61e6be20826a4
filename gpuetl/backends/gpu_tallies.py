"""Per-process tallies of the GPU backend, summed over the workers by the runner (`client.run`):
work handed to the CPU kernels (`fallbacks`), bytes copied from the device to the host by reason
(the host-transfer ledger), which path each file read really took (KvikIO GDS or its POSIX
compat path), and the device -> host reads of a value by reason (the sync budget). Pure Python."""

from __future__ import annotations

import threading
from collections import Counter


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
