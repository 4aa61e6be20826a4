"""The run lock of a dataset folder, `_tmp/_lock`: one run at a time writes there.

It is created exclusively (a complete file, flushed to the disk, hard-linked into place, so no
reader ever sees it half written, not even after a power cut) and records host, pid, the
process's start time and the boot id. A same-host lock whose process is gone, or whose pid now
belongs to another process, is moved aside and replaced (the inode moved is compared with the
one read, so two runs cannot both take it over); another host's lock is refused, naming it,
since its process cannot be checked from here.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import time
import uuid
from dataclasses import dataclass

from ..errors import OutputError

LOCK = "_lock"
LOCK_FORMAT = "gpuetl-lock/1"
# The files RunLock.acquire makes beside the lock: the new lock before it is linked into place
# (`_lock.<pid>.<hex>`), a dead run's lock moved aside to be removed (`_lock.stale.<pid>.<hex>`,
# the pid of the run taking it over). A kill between making and removing one leaves it behind.
LOCK_TEMP = re.compile(r"_lock\.(stale\.)?([0-9]{1,10})\.[0-9a-f]{8}")


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc), or None where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def this_process(kind: str) -> dict:
    return {"format": kind, "host": socket.gethostname(), "pid": os.getpid(), "start": _start_time(os.getpid()),
            "boot": _boot_id(), "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def is_alive(record: dict) -> bool:
    """Whether the process a lock or owner record names still runs (another host's: assume so)."""
    if record.get("host") != socket.gethostname():
        return True
    if record.get("boot") and _boot_id() and record["boot"] != _boot_id():
        return False
    try:
        pid = int(record["pid"])
        if pid <= 0:                          # 0 and -1 would ask about a group or every process
            return False
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass                                  # someone else's process: it exists
    except (OSError, ValueError, KeyError, TypeError, OverflowError):
        return False
    try:                                      # a killed process lingers as a zombie until reaped
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False
    except (OSError, IndexError):
        return True
    start = record.get("start")
    return start is None or _start_time(pid) in (None, start)   # another start time: the pid was reused


def _running(pid: int) -> bool:
    """Whether a process with this pid exists here now (or cannot be told)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def left_lock(name: str, raw: bytes) -> tuple[str, dict | None]:
    """What a file in `_tmp/` named like one RunLock.acquire makes (LOCK_TEMP) is: ("gone", its
    record) when the process that made it is provably gone (the lock record it holds names this
    host and a process that is gone, by pid, start time and boot id; for a lock moved aside, the
    run that moved it is gone too); ("alive", record) when it may still run; ("unreadable", None)
    when it holds no lock record (killed before writing it: nothing proves whose it is)."""
    match = LOCK_TEMP.fullmatch(name)
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        record = None
    if match is None or not isinstance(record, dict) or record.get("format") != LOCK_FORMAT or \
            type(record.get("pid")) is not int or not 0 < record["pid"] < 1 << 31:
        return "unreadable", None
    pid = int(match.group(2))
    if not match.group(1) and pid != record["pid"]:
        return "unreadable", None            # a new lock holds its own maker's pid
    if record.get("host") != socket.gethostname() or is_alive(record) or (match.group(1) and _running(pid)):
        return "alive", record
    return "gone", record


def describe(record: dict) -> str:
    return f"host {record.get('host')}, pid {record.get('pid')}, started {record.get('since', '?')}"


@dataclass
class RunLock:
    """The lock in `tmp` (the dataset's _tmp/ folder, opened as a commit._Tree)."""

    tmp: object
    record: dict
    inode: int = 0

    def acquire(self, log) -> None:
        data = json.dumps(self.record).encode()
        for _ in range(8):
            fresh = f"{LOCK}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
            self.tmp.write_file(fresh, data, exclusive=True)
            try:
                os.link(fresh, LOCK, src_dir_fd=self.tmp.fd, dst_dir_fd=self.tmp.fd, follow_symlinks=False)
                self.inode = os.stat(LOCK, dir_fd=self.tmp.fd, follow_symlinks=False).st_ino
                return
            except FileExistsError:
                pass
            finally:
                os.unlink(fresh, dir_fd=self.tmp.fd)
                self.tmp.sync()                # the lock's name on the disk (durable folders only)
            holder, inode = self._read()
            if holder is None:
                continue                       # gone in between: try again
            if is_alive(holder):
                raise OutputError(f"sink.path: {self.tmp.path.parent} is in use by another gpuetl run "
                                  f"({describe(holder)}; lock {self.tmp.path / LOCK})",
                                  hint="wait for it to end, or choose another sink.path; if that run is "
                                       "gone (another host's lock cannot be checked), remove the lock file")
            aside = f"{LOCK}.stale.{os.getpid()}.{uuid.uuid4().hex[:8]}"
            try:
                os.rename(LOCK, aside, src_dir_fd=self.tmp.fd, dst_dir_fd=self.tmp.fd)
            except FileNotFoundError:
                continue
            if os.stat(aside, dir_fd=self.tmp.fd, follow_symlinks=False).st_ino != inode:
                try:                           # another run took it over first: give its lock back
                    os.link(aside, LOCK, src_dir_fd=self.tmp.fd, dst_dir_fd=self.tmp.fd, follow_symlinks=False)
                except FileExistsError:
                    pass
            else:
                log(f"taking over the lock of a gpuetl run that is gone ({describe(holder)})")
            os.unlink(aside, dir_fd=self.tmp.fd)
        raise OutputError(f"sink.path: could not take the lock {self.tmp.path / LOCK}: other runs keep taking it")

    def _read(self) -> tuple[dict | None, int]:
        try:
            st = os.stat(LOCK, dir_fd=self.tmp.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None, 0
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"sink.path: {self.tmp.path / LOCK} is not a lock file gpuetl wrote",
                              hint="move it or choose another sink.path")
        try:
            record = json.loads(self.tmp.read_file(LOCK, 1 << 16))
            if not isinstance(record, dict) or record.get("format") != LOCK_FORMAT or \
                    type(record.get("pid")) is not int or not 0 < record["pid"] < 1 << 31:
                raise ValueError
        except (OSError, ValueError, RecursionError):
            raise OutputError(f"sink.path: {self.tmp.path / LOCK} is not a lock file gpuetl can read",
                              hint="if no gpuetl run is writing here, remove it") from None
        return record, st.st_ino

    def check(self) -> None:
        """Still ours? Checked again just before the commit."""
        try:
            holder, inode = self._read()
        except OutputError:
            holder, inode = None, 0
        if inode != self.inode or holder != self.record:
            raise OutputError(f"sink.path: the lock {self.tmp.path / LOCK} was taken by another process during "
                              "this run; nothing was committed", hint="make sure one run at a time writes here")

    def release(self) -> None:
        try:
            if os.stat(LOCK, dir_fd=self.tmp.fd, follow_symlinks=False).st_ino == self.inode:
                os.unlink(LOCK, dir_fd=self.tmp.fd)
        except FileNotFoundError:
            pass
