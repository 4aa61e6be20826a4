"""Durable on power loss: the one place gpuetl calls fsync (docs/reliability.md, "Power loss").

A rename is atomic but not durable: after a power cut the new name can point at an empty or
partial file, and a rename made after another can survive it while the other is lost. So every
file gpuetl publishes on a local disk is flushed (fsync) before the rename that gives it its
name, and the folder that holds the name is flushed after, before the next step that relies on
it. Object stores need none of this: a PUT is durable when it returns.

`durable=False` (the pipeline file's `sink.durable: false`, passed down explicitly; nothing
process-wide) skips the flushes, for scratch output that a power cut may lose."""

from __future__ import annotations

import errno
import os

# fsync on a folder is refused by some file systems (EINVAL) or kinds of descriptors; there is
# nothing more to flush there, so the step goes on. Any other error (EIO) is a write that failed.
_DIR_SYNC_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EBADF}


def sync_file(file) -> None:
    """Flush an open file (a Python file object, or a descriptor) to the disk."""
    if hasattr(file, "flush"):
        file.flush()
        file = file.fileno()
    os.fsync(file)


def sync_path(path, *, dir_fd: int | None = None) -> None:
    """Flush a file that another writer (pyarrow, libcudf) wrote and closed; never through a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_dir(folder) -> None:
    """Flush a folder's entries (the names made, renamed or removed in it): a path or a descriptor."""
    fd = folder if isinstance(folder, int) else os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in _DIR_SYNC_UNSUPPORTED:
            raise
    finally:
        if fd is not folder:
            os.close(fd)


def publish(partial: str, path: str, *, durable: bool = True) -> None:
    """Give a finished file its name: flush it, rename it, flush its folder (durable), or only
    rename it. The rename stays atomic either way: a reader sees the old name's file or the new."""
    if durable:
        sync_path(partial)
    os.replace(partial, path)
    if durable:
        sync_dir(os.path.dirname(path) or ".")


def boot_id() -> str | None:
    """This boot of the machine (Linux; None elsewhere): what a power cut or a crash changes.
    Work a run left unflushed (its spill pieces) is trusted only within the boot that wrote it."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return None
