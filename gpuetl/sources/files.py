"""Input files: glob expansion, a stable order, and what the manifest records about each.

Globs are expanded here, not with `glob.glob`: its `**` follows a symlink to a parent folder
round and round (one file read dozens of times; two such links never finish). Here each real
folder is walked once per pattern position, each real file is read once, and only regular
files are inputs (a FIFO or a link to /dev/zero would block or never end): what is skipped is
said in the plan's notes.

Object-store patterns (s3://, gs://, az://) are listed through fsspec (gpuetl/storage.py) and
their objects read into local files (the cache tier, or a temporary folder: gpuetl/cache.py);
an input then names its local copy in `path` and its object in `display` and `url`. Without a
cache, an uncompressed object of a line format (text, jsonl) is not copied: `in_store` is set,
`path` is its URL, and each partition reads its own byte range from the store
(sources/ranges.py)."""

from __future__ import annotations

import fnmatch
import functools
import glob
import itertools
import os
import pickle
import re
import stat
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from .. import storage
from ..errors import InputsNotFound, SourceError, SpecError
from .pins import Identity

COMPRESSION_SUFFIXES = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2"}
MAX_NOTED = 5          # skipped paths named in a note; the rest are counted


@dataclass(frozen=True)
class InputFile:
    index: int
    path: str          # absolute
    display: str       # as the user knows it: relative to the pipeline folder (absolute on another drive)
    size: int
    mtime_ns: int
    compression: str | None
    url: str | None = None          # an object store's object (path is then its local copy)
    etag: str | None = None
    version_id: str | None = None
    in_store: bool = False          # read in byte ranges from the store (no local copy; path is the URL)
    storage_options: dict | None = field(default=None, repr=False, compare=False)   # to read it there
    identity: Identity | None = None    # a local file's, when listed (sources/pins.py)

    def pin(self, located: bool = False) -> dict:
        """What tells whether an input is still the same bytes: an object's ETag and version id
        (with its size); a local file's identity (device, inode, size, mtime, ctime; its ranges'
        hashes are added by the run, sources/pins.py). `located` adds a local file's absolute
        path, for the manifest (`gpuetl verify --inputs` finds it there)."""
        if self.url is not None:
            return {"path": self.display, "bytes": self.size, "etag": self.etag, "version_id": self.version_id,
                    "mtime_ns": self.mtime_ns}
        pin = {"path": self.display, "bytes": self.size, "mtime_ns": self.mtime_ns,
               "identity": self.identity.to_json() if self.identity else None}
        return {**pin, "location": self.path} if located else pin


class InputFiles(Sequence):
    """The inputs as each partition's task carries them (to read them and to name them in
    errors): one value, which dask passes whole (it walks lists and tuples item by item), pickled
    as one blob made once. An images source has an input per image, and pickling thousands of
    frozen dataclasses one by one, for every task, held the GIL for longer than the task's own
    Python. Unpickled, an input is rebuilt from its piece of the blob when first asked for: a
    task reads only its own partition's inputs. (A PartitionScoped source's task carries
    PartitionInputs instead: its partition's inputs alone.)"""

    __slots__ = ("_files", "_blob", "_ends")

    def __init__(self, files=()):
        self._files: list = list(files)
        self._blob: bytes | None = None       # each input's fields, pickled, one after another
        self._ends: array | None = None       # where each input's piece of the blob ends

    def __len__(self) -> int:
        return len(self._files)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        f = self._files[i]
        if f is None:                         # two threads may both rebuild it: the same value
            i = i % len(self._files)
            f = self._files[i] = InputFile(*pickle.loads(self._blob[self._ends[i - 1] if i else 0:self._ends[i]]))
        return f

    def __eq__(self, other) -> bool:
        return isinstance(other, (InputFiles, list, tuple)) and list(self) == list(other)

    __hash__ = None

    def __repr__(self) -> str:
        return f"InputFiles({len(self)} inputs)"

    def __reduce__(self):
        if self._blob is None:
            names = [x.name for x in fields(InputFile)]      # InputFile's own order: its arguments
            pieces = [pickle.dumps(tuple(getattr(f, n) for n in names), protocol=pickle.HIGHEST_PROTOCOL)
                      for f in self]
            self._ends = array("q", itertools.accumulate(map(len, pieces)))
            self._blob = b"".join(pieces)
        return _input_files, (self._blob, self._ends.tobytes())


class PartitionInputs(Sequence):
    """The plan's inputs as one task carries them: the same indices, but only its partition's
    inputs. A source whose task reads many small files (images) would otherwise carry every
    input of the plan in every task: 430 bytes an input, 430 MB a task at a million photos.
    Looked up by index only; listing them is refused, since a task holds only some."""

    __slots__ = ("_n", "_files")

    def __init__(self, n: int, files: dict):
        self._n, self._files = n, dict(files)

    @classmethod
    def of(cls, inputs, indices) -> "PartitionInputs":
        return cls(len(inputs), {i: inputs[i] for i in sorted(set(indices))})

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if not isinstance(i, int):
            raise TypeError("a task's inputs are looked up one index at a time")
        try:
            return self._files[i + self._n if i < 0 else i]
        except KeyError:
            raise IndexError(f"input {i} is not one of this task's partition's inputs") from None

    def __iter__(self):
        raise TypeError("a task holds only its partition's inputs: look them up by index")

    def __repr__(self) -> str:
        return f"PartitionInputs({len(self._files)} of {self._n} inputs)"


def _input_files(blob: bytes, ends: bytes) -> InputFiles:
    files = InputFiles()
    files._blob, files._ends = blob, array("q")
    files._ends.frombytes(ends)
    files._files = [None] * len(files._ends)
    return files


def resolve_inputs(patterns: list[str], base_dir: Path, compression: str,
                   notes: list[str] | None = None, remote=None, ranged: bool = False, keep=None) -> list[InputFile]:
    """Expand globs ('**' allowed) relative to base_dir: sorted, each real file once, regular
    files only. What is left out (other kinds of files, the same file by another name) is
    added to `notes`. Object-store patterns need `remote` (a cache.RemoteInputs), which fetches
    their objects and must live as long as the inputs are read. keep(InputFile) -> bool: which
    of the listed inputs to read (an append's new ones), asked before an object is fetched."""
    remote_patterns = [p for p in patterns if storage.is_remote(p)]
    patterns = [storage.local_path(p) for p in patterns if not storage.is_remote(p)]
    objects = _remote_objects(remote_patterns, remote)
    found: dict[str, os.stat_result | None] = {}      # each file's stat, taken when it was matched
    skipped: dict[str, list[str]] = {}
    for pattern in patterns:
        full = pattern if os.path.isabs(pattern) else os.path.join(str(base_dir), pattern)
        misses: list[str] = []
        matches = sorted(expand(pattern, base_dir, misses)) if glob.has_magic(pattern) else []
        if misses and notes is not None:
            notes.append(_case_note(pattern, misses, base_dir))
        if not matches and os.path.lexists(full):
            matches = [full]                    # a plain name, or an exact name with glob characters
            kind = _kind(full)
            if kind:
                raise SpecError(f"source.path: {full} is {kind}, not a regular file",
                                hint="gpuetl reads regular files (it must know their size); copy the data "
                                     "into a file first" if kind != "a folder" else
                                     f"name the files in it, e.g. {os.path.join(pattern, '*')!r}")
        files, left_out = [], 0
        for m in matches:
            st = _stat(m)
            kind = _kind_of(st)
            if kind == "a folder" and "**" in pattern:    # '**' reaches the files inside it as well
                continue
            if kind:                 # a folder named like an input (`x.jsonl/`) is said, not read
                skipped.setdefault(kind, []).append(_display(os.path.abspath(m), base_dir))
                left_out += 1
            else:
                files.append((m, st))
        if not files:
            if left_out:
                raise InputsNotFound(f"source.path: the pattern {pattern!r} matches no regular file "
                                     f"({_skipped_text(skipped)})", hint=_FOLDER_HINT if "a folder" in skipped
                                     else "check the pattern")
            if glob.has_magic(pattern):
                hint = (_case_note(pattern, misses, base_dir).removeprefix("source: ") if misses else
                        "check the pattern; relative paths are relative to the pipeline file's folder")
                raise InputsNotFound(f"source.path: the pattern {pattern!r} matches no file (looked in {base_dir})",
                                     hint=hint)
            raise InputsNotFound(f"source.path: no such file: {full}",
                                 hint="relative paths are relative to the pipeline file's folder")
        for m, st in files:
            found[os.path.abspath(m)] = st
    result: list[InputFile] = []
    if objects and keep is not None:
        objects = [o for o in objects if keep(InputFile(0, o.url, o.url, o.size, o.mtime_ns, None, o.url, o.etag,
                                                        o.version_id))]
    if objects:
        kinds = {o.url: _compression(o.url, compression) for o in objects}
        in_place = remote.in_place([o for o in objects if ranged and kinds[o.url] is None])
        copies = remote.local_copies([o for o in objects if o.url not in in_place])
        result = [InputFile(i, copies.get(o.url, o.url), o.url, o.size, o.mtime_ns, kinds[o.url], o.url, o.etag,
                            o.version_id, o.url in in_place, remote.storage_options if o.url in in_place else None)
                  for i, o in enumerate(objects)]
    seen: dict[tuple[int, int], str] = {}
    duplicates: list[str] = []
    mislabelled: list[str] = []
    wide: list[str] = []
    sniffed = 0
    base = os.path.abspath(base_dir)
    for path in sorted(found):
        st = found[path]
        if st is None:
            try:
                st = os.stat(path)
            except OSError as err:
                raise SpecError(f"source.path: cannot read {path}: {err.strerror}") from None
        display = readable_name(relative_to(path, base))      # shown, and stored as text in `_file`
        first = seen.setdefault((st.st_dev, st.st_ino), display)
        if first != display:             # the same file by another name (a link): read once
            duplicates.append(f"{display} (= {first})")
            continue
        listed = InputFile(len(result), path, display, st.st_size, st.st_mtime_ns, _compression(path, compression),
                           identity=Identity.of(st))
        if keep is not None and not keep(listed):
            continue
        result.append(listed)
        if compression == "infer" and result[-1].compression is None and notes is not None and sniffed < MAX_SNIFFED:
            sniffed += 1
            head = first_bytes(path)
            if kind := compressed_by_its_bytes(head):
                mislabelled.append(f"{display} ({kind})")
            elif head.startswith((b"\xff\xfe", b"\xfe\xff")):
                wide.append(display)
    if notes is not None:
        if mislabelled:
            notes.append(f"source: {_names(mislabelled)} look compressed, but their names do not say so: read as "
                         "they are; name them .gz/.zst/.bz2 or set source.compression (xz and zip: decompress first)")
        if wide:
            notes.append(f"source: {_names(wide)} start with a UTF-16 byte-order mark: gpuetl reads UTF-8, so "
                         "their records would hold NUL bytes between the characters; convert them first "
                         "(iconv -f UTF-16 -t UTF-8)")
        for kind, paths in sorted(skipped.items()):
            notes.append(f"source: skipped {len(paths)} path(s) that are {kind}, not regular files: "
                         + _names(paths) + (f" ({_FOLDER_HINT})" if kind == "a folder" else ""))
        if duplicates:
            notes.append(f"source: {len(duplicates)} path(s) name a file already read, read once: "
                         + _names(duplicates))
    return result


_FOLDER_HINT = "to read the files in a folder, name them: 'folder/*', or '**' in the pattern"
MAX_CASE_MISSES = 1000      # names matched only when case is ignored, collected for the note


def _case_note(pattern: str, misses: list[str], base_dir) -> str:
    """Files the pattern reaches but does not match by case alone (`a.JPG` for `**/*.jpg`)."""
    first = misses[0]
    suffix, wanted = os.path.splitext(first)[1], os.path.splitext(pattern)[1]
    also = (f"; add {pattern[:len(pattern) - len(wanted)] + suffix!r} to source.path to read them"
            if wanted and suffix and suffix != wanted and suffix.lower() == wanted.lower() else "")
    many = f"{MAX_CASE_MISSES:,} or more" if len(misses) >= MAX_CASE_MISSES else f"{len(misses):,}"
    return (f"source: {many} file(s) such as {_display(os.path.abspath(first), base_dir)} match {pattern!r} only "
            f"when case is ignored and are not read (patterns are case-sensitive){also}")


def _remote_objects(patterns: list[str], remote) -> list[storage.RemoteObject]:
    """The objects remote patterns name, each once, in URL order."""
    if patterns and remote is None:
        raise SpecError(f"source.path: {patterns[0]} is in an object store; resolve_inputs needs a "
                        "cache.RemoteInputs to read it")
    found: dict[str, storage.RemoteObject] = {}
    for pattern in patterns:
        objects = storage.list_objects(pattern, remote.storage_options)
        if not objects:
            raise InputsNotFound(f"source.path: the pattern {pattern!r} matches no object",
                                 hint="check the bucket and prefix (prefixes are compared up to a '/')")
        for o in objects:
            found.setdefault(o.url, o)
    return [found[url] for url in sorted(found)]


def check_objects_unchanged(files: list[InputFile], patterns: list[str], storage_options: dict | None) -> None:
    """Before a commit: every remote input still is the object that was read (same ETag, version
    id and size), else an error naming it. Listed again, not asked one by one."""
    pinned = [f for f in files if f.url]
    if not pinned:
        return
    now = {o.url: o for p in patterns if storage.is_remote(p) for o in storage.list_objects(p, storage_options)}
    for f in pinned:
        o = now.get(f.url)
        if o is None:
            raise SourceError(f"source.path: {f.url} was removed during the run; nothing was committed",
                              hint="run again once the data stops changing")
        if (o.etag, o.version_id, o.size) != (f.etag, f.version_id, f.size):
            raise SourceError(f"source.path: {f.url} changed during the run (ETag {f.etag} -> {o.etag}, "
                              f"{f.size} -> {o.size} bytes); nothing was committed",
                              hint="run again once the data stops changing, or read from a versioned bucket")


def _names(paths: list[str]) -> str:
    more = len(paths) - MAX_NOTED
    return ", ".join(paths[:MAX_NOTED]) + (f" and {more} more" if more > 0 else "")


def _skipped_text(skipped: dict[str, list[str]]) -> str:
    return "; ".join(f"{kind}: {_names(paths)}" for kind, paths in sorted(skipped.items()))


def _display(path: str, base_dir: Path | str) -> str:
    """The path (absolute) relative to the pipeline folder (`../x` included); absolute only where
    no relative path leads there (another drive)."""
    return relative_to(path, os.path.abspath(base_dir))


def readable_name(name: str) -> str:
    """A file or member name as text: bytes that are not UTF-8 (kept by the OS and tarfile as
    surrogate escapes, which Arrow and JSON text cannot hold) shown as U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def relative_to(path: str, folder: str) -> str:
    """os.path.relpath for an absolute, normalised path and folder, without walking both paths
    part by part for every file: a path inside the folder is cut; one outside it is its own
    folder's relative path (worked out once per folder) and its name. The path itself where no
    relative path leads (another drive)."""
    inside = folder if folder.endswith(os.sep) else folder + os.sep
    if path.startswith(inside) and len(path) > len(inside):
        return path[len(inside):]
    parent, name = os.path.split(path)
    if not name or parent == path or inside.startswith(path + os.sep):      # the folder or one above it
        return _relpath(path, folder)
    up = _relpath(parent, folder)
    return path if os.path.isabs(up) else os.path.join(up, name) if up != os.curdir else name


@functools.lru_cache(maxsize=1024)
def _relpath(path: str, folder: str) -> str:
    try:
        return os.path.relpath(path, folder)
    except ValueError:
        return path


def _stat(path: str) -> os.stat_result | None:
    """The path's stat (links followed); None where it cannot be taken (a dangling link, no
    permission: the caller's own stat later says which)."""
    try:
        return os.stat(path)
    except OSError:
        return None


def _kind(path: str) -> str | None:
    """None for a regular file (links followed); else what it is, in words."""
    return _kind_of(_stat(path))


def _kind_of(st: os.stat_result | None) -> str | None:
    if st is None:
        return None
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


# -- glob expansion ------------------------------------------------------------------------------

def expand(pattern: str, base_dir: Path, case_misses: list[str] | None = None) -> list[str]:
    """The paths a glob matches, as glob.glob(recursive=True) would name them (hidden names
    only where a part of the pattern starts with '.'), but each real folder is listed at most
    once per part of the pattern, so links that lead back up end the walk instead of looping.
    Matching is case-sensitive; `case_misses` collects the names the last part would match if
    case were ignored (`a.JPG` for `*.jpg`)."""
    if os.path.isabs(pattern):
        root, rest = os.path.splitdrive(pattern)[0] + os.sep, pattern
    else:
        root, rest = str(base_dir), pattern
    parts = [p for p in re.split(r"[\\/]+" if os.sep == "\\" else r"/+", rest) if p and p != "."]
    out: list[str] = []
    seen: set[tuple[int, int, int]] = set()
    _walk(root, parts, seen, out, case_misses)
    return out


def _walk(root: str, parts: list[str], seen: set, out: list[str], case_misses: list[str] | None = None) -> None:
    """Depth first, with a stack of its own instead of recursion (a tree of any depth is walked:
    Python's recursion limit is about a thousand frames), in the order a recursive walk takes:
    an item is ('visit', folder, k), matching parts[k:] under the folder, or ('found', path)."""
    stack: list[tuple] = [("visit", root, 0)]
    last = len(parts) - 1
    while stack:
        item = stack.pop()
        if item[0] == "found":
            out.append(item[1])
            continue
        _, folder, k = item
        if k == len(parts):
            out.append(folder)
            continue
        part = parts[k]
        if not glob.has_magic(part):
            path = os.path.join(folder, part)
            if k == last:
                if os.path.lexists(path):
                    out.append(path)
            elif os.path.isdir(path):
                stack.append(("visit", path, k + 1))
            continue
        if not _first_visit(folder, k, seen):
            continue
        entries = _listdir(folder)
        todo: list[tuple] = []
        if part == "**":
            todo.append(("visit", folder, k + 1))           # '**' matches no folder at all, too
            for name, is_dir in entries:
                if name.startswith("."):
                    continue
                path = os.path.join(folder, name)
                if k == last:
                    todo.append(("found", path))            # a trailing '**' matches files as well
                if is_dir:
                    todo.append(("visit", path, k))
        else:
            hidden = part.startswith(".")
            folded = part.lower()
            for name, is_dir in entries:
                if not (hidden or not name.startswith(".")):
                    continue
                if fnmatch.fnmatchcase(name, part):
                    path = os.path.join(folder, name)
                    if k == last:
                        todo.append(("found", path))
                    elif is_dir:
                        todo.append(("visit", path, k + 1))
                elif k == last and case_misses is not None and not is_dir and len(case_misses) < MAX_CASE_MISSES \
                        and fnmatch.fnmatchcase(name.lower(), folded):
                    case_misses.append(os.path.join(folder, name))
        stack.extend(reversed(todo))


def _first_visit(folder: str, k: int, seen: set) -> bool:
    try:
        st = os.stat(folder)
    except OSError:
        return False
    key = (k, st.st_dev, st.st_ino)
    if key in seen:
        return False
    seen.add(key)
    return True


def _listdir(folder: str) -> list[tuple[str, bool]]:
    """(name, whether it is a folder, links followed) for each entry, by name: one scandir,
    whose entries know their type without a stat per file on most file systems."""
    try:
        with os.scandir(folder) as it:
            return sorted((entry.name, _is_dir(entry)) for entry in it)
    except OSError:
        return []


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


MAX_SNIFFED = 20        # files without a compression suffix whose first bytes are looked at
MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"BZh": "bz2", b"\xfd7zXZ\x00": "xz",
         b"PK\x03\x04": "zip"}


def first_bytes(path: str, n: int = 10) -> bytes:
    """A file's first bytes (none where it cannot be read: the read itself will say why)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def compressed_by_its_bytes(head: bytes) -> str | None:
    """The compression a file's first bytes announce (a mislabelled `.log` that is gzip), or None."""
    if head.startswith(b"BZh") and head[4:10] != b"\x31\x41\x59\x26\x53\x59":   # bz2's block magic too
        return None
    return next((kind for magic, kind in MAGIC.items() if head.startswith(magic)), None)


def _compression(path: str, setting: str) -> str | None:
    if setting == "none":
        return None
    if setting == "infer":
        name = path.rsplit("/", 1)[-1]          # a URL's or a local path's last part
        return COMPRESSION_SUFFIXES.get(os.path.splitext(os.path.basename(name))[1].lower())
    return setting
