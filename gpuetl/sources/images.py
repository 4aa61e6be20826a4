"""The `images` source: JPEG, PNG and WebP files, and tar shards in the WebDataset layout.

A record is one image with its key, label and side fields. Planning lists every record (tar
headers are read, no image is), gives each its label and label_id (the index in the sorted
label list, as torchvision's ImageFolder does), and packs records into partitions of about
`blocksize` bytes, so a million small files make a few hundred tasks. A task asks the kernel to
read all its records' bytes at once (small-file reads wait on storage, not on the CPU), checks
each header (format, size, the pixel limit: nothing is decoded here) and hands on the bytes as a binary
`image` column. Anything unusable is quarantined with its reason and its exact bytes.

The key is the path relative to the folder the glob starts in (`photos/**/*.jpg`: `cat/1.jpg`),
or a WebDataset member's path up to the first '.' of its basename; splits, placement and
shuffle hash it, never pixels.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import json
import os
import re
import tarfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from ..columns import COUNT, FILE_INDEX, OFFSET, RAW, REASON, STAGE, STATUS, STATUS_QUARANTINED
from ..backends.cpu_images import BadImage, probe
from ..errors import InputsNotFound, SpecError
from .counters import SourceSummary
from .files import InputFile, InputFiles, compressed_by_its_bytes, first_bytes, readable_name, relative_to
from .pins import pin_bytes
from .ranges import Partition, pack
from .stage import PartitionScoped

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
DEFAULT_EXTENSIONS = (*IMAGE_EXTENSIONS, "tar")
TAR_TAIL_CHECKED = 1 << 20      # bytes after a tar's last member checked to be its zero end blocks
PIECE_PIXEL_BYTES = 128 << 20   # decoded pixels (width x height x 4) a task runs through its steps at once
PIXEL_BUDGET_BYTES = 384 << 20  # decoded pixels in flight in a process, all tasks together (PixelBudget)
# The backend's switch (base.Backend.images_on_gpu) that lets an images source run on its image
# path (backends/gpu_images.py); off, the backend's runs_images is False and planning is refused:
# that path has not been checked on a GPU yet (docs/gpu.md, "Images"). Named in the message.
GPU_IMAGES_SWITCH = "images_on_gpu"
_FIELD_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
BASE_COLUMNS = {
    "key": "string", "label": "string", "label_id": "int32", "image": "binary", "orig_format": "string",
    "orig_width": "int32", "orig_height": "int32", "orig_bytes": "int64", "content_hash": "string",
    "orientation": "int8",
}


@dataclass(frozen=True)
class ImageRecord:
    """One image to read: where its bytes are (a file, or a member of a tar), and what is known
    of it before reading."""

    file_index: int
    offset: int                       # 0 for a file; a tar member's header offset
    key: str
    label: str | None
    image: tuple[int, int] | None     # (data offset, size) of the image bytes
    extras: tuple[tuple[str, int, int], ...] = ()      # tar members: (field, data offset, size)
    side: tuple[tuple[str, str | None], ...] = ()       # side-file fields
    problem: str | None = None        # quarantined without reading (unsafe member, no label, ...)
    name: str = ""                    # a problem record's raw: the member's name


@dataclass
class ImagesStage(PartitionScoped):
    """What a partition's task needs (runtime/partition.py calls `read`). A task carries only its
    partition's inputs (`with_inputs`): a photo is an input, and there may be millions."""

    files: InputFiles          # by index; a task's: sources.files.PartitionInputs
    schema: dict
    labels: dict[str, int]
    max_pixels: int
    exif_transpose: bool
    extra_fields: tuple[str, ...] = ()
    default_key: tuple[str, ...] = ("key",)   # splits and placement hash the path, never pixels

    def input_indices(self, partition: Partition) -> set[int]:
        return {rec.file_index for rec in partition.ranges}

    def with_inputs(self, files) -> "ImagesStage":
        return replace(self, files=files)

    def summarize(self, spec, counters, metadata: dict) -> SourceSummary:
        """Images add nothing to the manifest beyond their counts (sources/counters.py)."""
        return SourceSummary()

    def read(self, partition: Partition, segment, backend, counters, decoded=()):
        """The partition's records as frames of at most PIECE_PIXEL_BYTES of decoded pixels each
        (from each header: width x height x 4 bytes; an image larger than that is a piece of its
        own). The kernel is asked to read every record's bytes at once (`_prefetch`); then this
        thread reads, checks (header, pixel limit, sha256) and hands on each image in order,
        while the rest still arrive. Reader threads did the same job worse: their Python and
        checks contended for the GIL with the other tasks' image work (docs/design.md). The
        runtime runs each piece through the row steps (decode, resize, encode) before asking
        for the next, so a task holds one piece's pixels, not its partition's: 40 PNGs of
        8000x8000 would otherwise be 7.7 GB of pixels at once. The hash of each span of bytes
        read goes to `counters` (sources/counters.py, sources/pins.py)."""
        rows = self._rows(partition, counters.read_pins)
        cuts, held = [0], 0
        for i, row in enumerate(rows):
            size = decoded_bytes(row)
            if i > cuts[-1] and held + size > PIECE_PIXEL_BYTES:
                cuts.append(i)
                held = 0
            held += size
        cuts.append(len(rows))
        for a, b in zip(cuts, cuts[1:]):
            if b > a:
                with PIXELS.hold(sum(decoded_bytes(r) for r in rows[a:b])):
                    yield _frame(rows[a:b], self, segment, backend)

    def _rows(self, partition: Partition, pins: list) -> list[dict]:
        records = partition.ranges
        _prefetch(self.files, records)
        return [self._read_one(rec, pins) for rec in records]

    def _read_one(self, rec: ImageRecord, pins: list) -> dict:
        """One record's row; the hash of each span of bytes read is added to `pins`."""
        row = {"file_index": rec.file_index, "offset": rec.offset, "key": rec.key, "label": rec.label,
               "side": dict(rec.side), "extras": {}, "raw": None, "reason": None}
        if rec.problem:
            row.update(key=readable_name(rec.key), label=None, raw=rec.name.encode("utf-8", "surrogateescape"),
                       reason=rec.problem)
            return row
        f = self.files[rec.file_index]
        try:
            data = _pread(f.path, *rec.image)
            pins.append(pin_bytes(f.index, rec.image[0], data))
            if rec.image[0] > rec.offset:      # a tar's record: the headers the plan read (keys, offsets) too
                pins.append(pin_bytes(f.index, rec.offset, _pread(f.path, rec.offset, rec.image[0] - rec.offset)))
            for name, offset, size in rec.extras:
                value = _pread(f.path, offset, size)
                pins.append(pin_bytes(f.index, offset, value))
                try:
                    row["extras"][name] = value.decode("utf-8")
                except UnicodeDecodeError:
                    raise BadImage(f"member {rec.key}.{name} is not valid UTF-8") from None
        except OSError as err:
            row.update(raw=b"", reason=f"{f.display}: cannot read: {err.strerror or err}")
            return row
        except BadImage as err:
            row.update(raw=data, reason=str(err))
            return row
        try:
            fmt, w, h, orientation = probe(data, self.max_pixels)
        except BadImage as err:
            row.update(raw=data, reason=str(err))
            return row
        row.update(image=data, orig_format=fmt, orig_width=w, orig_height=h, orig_bytes=len(data),
                   content_hash=hashlib.sha256(data).hexdigest(),
                   orientation=orientation if self.exif_transpose else 1)
        return row


class PixelBudget:
    """Decoded pixels in flight in this process, across the tasks of all its threads: a piece's
    pixels are held from when its frame is made until its row steps are done (the runtime asks
    for the next piece). A piece waits while the others in flight and it would pass the budget;
    a piece larger than the budget waits until it is alone. Without it, each worker thread
    decodes its own piece at once: on a machine of many cores, as many huge images at a time."""

    def __init__(self, limit: int):
        self.limit, self.held = limit, 0
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def hold(self, size: int):
        size = min(size, self.limit)
        with self._changed:
            self._changed.wait_for(lambda: self.held == 0 or self.held + size <= self.limit)
            self.held += size
        try:
            yield
        finally:
            with self._changed:
                self.held -= size
                self._changed.notify_all()


PIXELS = PixelBudget(PIXEL_BUDGET_BYTES)


def decoded_bytes(row: dict) -> int:
    """The most bytes a checked image's pixels take decoded (4 channels of 8 bits); 0 for a
    record set aside."""
    return 4 * (row.get("orig_width") or 0) * (row.get("orig_height") or 0) if row["reason"] is None else 0


def _prefetch(files: list[InputFile], records) -> None:
    """Start the reads of a partition's bytes, all at once (POSIX_FADV_WILLNEED): on a cold
    disk or a network folder the kernel reads them in parallel while the task checks and
    decodes the first ones; on files already in memory it costs an open and a close each. A
    file that cannot be opened is left to the read, which quarantines it with the reason."""
    if not hasattr(os, "posix_fadvise"):         # not on macOS or Windows: the reads wait in turn
        return
    ranges: dict[int, list[tuple[int, int]]] = {}
    for rec in records:
        if not rec.problem:
            ranges.setdefault(rec.file_index, []).extend([rec.image, *((o, n) for _, o, n in rec.extras)])
    for index, wanted in ranges.items():
        try:
            fd = os.open(files[index].path, os.O_RDONLY)
        except OSError:
            continue
        try:
            for offset, size in wanted:
                os.posix_fadvise(fd, offset, size, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass                                 # advice only: the read itself will tell
        finally:
            os.close(fd)


def _pread(path: str, offset: int, size: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, size, offset)
    finally:
        os.close(fd)
    if len(data) != size:
        raise OSError(f"short read ({len(data)} of {size} bytes): the file changed after planning")
    return data


def _frame(rows: list[dict], stage: ImagesStage, segment, backend):
    from .frames import frame_schema, refuse_first_bad

    good = [r["reason"] is None for r in rows]
    cols = {}
    for name, t in stage.schema.items():
        if name == "label_id":
            values = [stage.labels.get(r["label"]) if ok else None for r, ok in zip(rows, good)]
        elif name in stage.extra_fields:
            values = [(r["extras"].get(name) if name in r["extras"] else r["side"].get(name)) if ok else None
                      for r, ok in zip(rows, good)]
        elif name in ("key", "label"):
            values = [r[name] for r in rows]
        elif name == "image":
            values = [r.get(name) if ok else None for r, ok in zip(rows, good)]
            decode_next = bool(segment.steps) and segment.steps[0].step.name == "decode"
            cols[name] = backend.image_file_bytes(values, [(r["file_index"], r["offset"]) for r in rows], decode_next)
            continue
        elif name == "_file":
            values = [stage.files[r["file_index"]].display for r in rows]
        elif name == "_offset":
            values = [r["offset"] for r in rows]
        else:
            values = [r.get(name) if ok else None for r, ok in zip(rows, good)]
        cols[name] = backend.series(values, t)
    n = len(rows)
    cols[FILE_INDEX] = backend.series([r["file_index"] for r in rows], "int32")
    cols[OFFSET] = backend.series([r["offset"] for r in rows], "int64")
    cols[STATUS] = backend.series([0 if ok else STATUS_QUARANTINED for ok in good], "int8")
    cols[COUNT] = backend.series([1] * n, "int64")
    cols[STAGE] = backend.series([-1 if ok else 0 for ok in good], "int16")
    cols[RAW] = backend.series([r["raw"] for r in rows], "binary")
    cols[REASON] = backend.series([r["reason"] for r in rows], "string")
    df = backend.conform(backend.xd.DataFrame(cols), frame_schema(stage.schema))
    if segment.on_error == "fail" and not all(good):
        refuse_first_bad(df, stage.files, backend)
    return df


# -- planning ----------------------------------------------------------------------------------

def plan_images(loaded, files: list[InputFile], notes: list[str], backend=None) -> tuple[list[Partition], ImagesStage, dict]:
    """(partitions, the source stage, what the manifest records: the label list)."""
    src = loaded.spec.source
    where = f"{loaded.path}: source"
    if backend is not None and not backend.runs_images:
        # docs/gpu.md ("Images") says why: the GPU image path has not been checked on a GPU yet
        raise SpecError(f"{where}.type: images run on the CPU backend unless the {backend.name} backend's "
                        f"`{GPU_IMAGES_SWITCH}` switch is on (its image path, nvImageCodec and CV-CUDA, has not "
                        "been checked on a GPU yet)",
                        hint=f"run with --backend cpu; or, from Python, b = gpuetl.backends.get_backend("
                             f"'{backend.name}'); b.{GPU_IMAGES_SWITCH} = True; pipeline.run(backend=b)")
    if remote := next((f.url for f in files if f.url), None):
        raise SpecError(f"{where}.path: {remote}: images sources read local files for now (labels come from "
                        "local folders)", hint="copy the images to a local folder first")
    extensions = tuple(e.lower().lstrip(".") for e in (src.extensions or DEFAULT_EXTENSIONS))
    roots = [_glob_root(p, loaded.base_dir) for p in src.paths]
    if loaded.spec.columns:
        raise SpecError(f"{loaded.path}: columns: an images source types its own columns "
                        f"({', '.join(BASE_COLUMNS)}, side fields as strings)", hint="remove `columns`")
    kept = [f for f in files if _suffix(f.path) in extensions]
    if not kept:
        raise InputsNotFound(f"{where}.path: none of the {len(files)} matched file(s) has an image suffix "
                             f"({', '.join(extensions)})", hint="check the pattern, or list the suffixes in extensions")
    if len(kept) < len(files):
        notes.append(f"source: {len(files) - len(kept)} matched file(s) without an image suffix "
                     f"({', '.join(extensions)}) are not read")
    side = _side_file(loaded) if src.label == "file" else {}
    regex = _label_regex(loaded) if src.label == "regex" else None
    records: list[tuple[ImageRecord, int]] = []
    extra_fields: dict[str, None] = {}
    real_folder = functools.lru_cache(maxsize=None)(os.path.realpath)    # a folder holds many images
    for f in kept:
        root = _root_of(f.path, roots)
        if _suffix(f.path) == "tar":
            for rec, size in _tar_records(f, extra_fields):
                records.append((rec, size))
        else:
            key = relative_to(f.path, root).replace(os.sep, "/")
            problem = None
            real = (os.path.realpath(f.path) if os.path.islink(f.path)
                    else os.path.join(real_folder(os.path.dirname(f.path)), os.path.basename(f.path)))
            if not (real + os.sep).startswith(real_folder(root) + os.sep):
                problem = f"a link that leads outside {root} (to {real}); not read"
            records.append((ImageRecord(f.index, 0, key, None, (0, f.size), problem=problem,
                                        name=f.display), max(f.size, 1)))
    side_fields = sorted({k for values in side.values() for k in values} - {"key", "label"})
    fields = {**BASE_COLUMNS}
    for name in [*extra_fields, *side_fields]:
        if name in fields:
            raise SpecError(f"{where}: the side field or tar member {name!r} would replace the column "
                            f"{name!r}; rename it")
        fields[name] = "string"
    if src.provenance:
        fields.update({"_file": "string", "_offset": "int64"})
    labelled = [(_label(rec, src.label or "parent", regex, side, files), size) for rec, size in records]
    if side and records:     # `./cat/1.jpg` or `cat\\1.jpg` for `cat/1.jpg`: every image quarantined as unlabelled
        keys = {k for rec, _ in records for k in (rec.key, os.path.splitext(rec.key)[0])}
        if unmatched := [k for k in side if k not in keys]:
            notes.append(f"source.side_file: {len(unmatched):,} of its {len(side):,} keys match no image "
                         f"(e.g. {unmatched[0]!r}); a key is the path relative to the glob's folder, such as "
                         f"{records[0][0].key!r}")
    labels = sorted({rec.label for rec, _ in labelled if rec.label is not None and not rec.problem})
    if (src.label or "parent") == "parent" and len(labels) == 1 and len(labelled) > 1:
        # a flat folder, or WebDataset shards (their folder names every member): one class is a slip
        notes.append(f"source: label: parent gives every image the one label {labels[0]!r} (the folder the images "
                     "or their tars are in); for a class per folder, glob from the folder above; otherwise "
                     "set source.label to none, regex or file")
    stage = ImagesStage(InputFiles(files), fields, {name: i for i, name in enumerate(labels)}, src.max_pixels,
                        src.exif_transpose, tuple([*extra_fields, *side_fields]))
    partitions = [Partition(p.index, tuple(p.ranges)) for p in pack(labelled, src.blocksize)]
    return partitions, stage, {"labels": labels}


def _suffix(path: str) -> str:
    return os.path.splitext(path)[1].lower().lstrip(".")


def _glob_root(pattern: str, base: Path) -> str:
    """The folder a glob starts in: its components up to the first with a wildcard."""
    full = pattern if os.path.isabs(pattern) else os.path.join(str(base), pattern)
    parts = Path(full).parts
    fixed = []
    for part in parts[:-1]:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return os.path.abspath(os.path.join(*fixed)) if fixed else os.path.abspath(str(base))


def _root_of(path: str, roots: list[str]) -> str:
    under = [r for r in roots if path.startswith(r.rstrip(os.sep) + os.sep)]
    return max(under, key=len) if under else os.path.dirname(path)


def _label(rec: ImageRecord, how: str, regex, side: dict, files: list[InputFile]) -> ImageRecord:
    if rec.problem:
        return rec
    if readable_name(rec.key) != rec.key:
        return _problem(rec, f"the name {readable_name(rec.key)!r} is not UTF-8 text, which a key must be; rename it")
    label, fields = None, ()
    if how == "parent":
        folder = os.path.dirname(rec.key)
        label = os.path.basename(folder) if folder else os.path.basename(os.path.dirname(files[rec.file_index].path))
    elif how == "regex":
        m = regex.search(rec.key)
        if m is None or (m.group("label") if "label" in regex.groupindex else m.group(1)) is None:
            return _problem(rec, f"the key {rec.key!r} does not match label_regex")
        label = m.group("label") if "label" in regex.groupindex else m.group(1)
        if not label:
            return _problem(rec, f"label_regex gives the key {rec.key!r} an empty label")
    elif how == "file":
        values = side.get(rec.key) or side.get(os.path.splitext(rec.key)[0])
        if values is None:
            return _problem(rec, f"the key {rec.key!r} is not in the side file")
        label = values.get("label")
        fields = tuple((k, v) for k, v in sorted(values.items()) if k not in ("key", "label"))
        if not label:
            return _problem(rec, f"the side file has no label for {rec.key!r}")
    if label is not None and readable_name(label) != label:
        return _problem(rec, f"the label {readable_name(label)!r} is not UTF-8 text; rename its folder")
    return ImageRecord(rec.file_index, rec.offset, rec.key, label, rec.image, rec.extras, fields)


def _problem(rec: ImageRecord, reason: str) -> ImageRecord:
    return ImageRecord(rec.file_index, rec.offset, rec.key, rec.label, rec.image, rec.extras, rec.side,
                       problem=reason, name=rec.key)


def _label_regex(loaded):
    src = loaded.spec.source
    try:
        regex = re.compile(src.label_regex)
    except re.error as err:
        raise SpecError(f"{loaded.path}: source.label_regex: not a valid regular expression: {err}") from None
    if "label" not in regex.groupindex and regex.groups < 1:
        raise SpecError(f"{loaded.path}: source.label_regex: capture the label with (?P<label>...) or a group")
    return regex


def _side_file(loaded) -> dict[str, dict]:
    """key -> {field: value as a string}, from a csv (header line) or jsonl file."""
    src = loaded.spec.source
    path = src.side_file if os.path.isabs(src.side_file) else str(loaded.base_dir / src.side_file)
    where = f"{loaded.path}: source.side_file: {path}"
    try:
        text = Path(path).read_text(encoding="utf-8-sig")      # a spreadsheet's BOM is not part of 'key'
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"{where}: cannot read it: {err}") from None
    rows: list[dict] = []
    if path.endswith((".jsonl", ".json", ".ndjson")):
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as err:
                    raise SpecError(f"{where}, line {lineno}: not JSON ({err.msg})") from None
                if not isinstance(obj, dict):
                    raise SpecError(f"{where}, line {lineno}: expected a JSON object")
                rows.append(obj)
    else:
        import csv
        import io

        rows = list(csv.DictReader(io.StringIO(text, newline="")))
        if long := next((i for i, row in enumerate(rows, 1) if None in row), None):
            raise SpecError(f"{where}, record {long}: more fields than the header names",
                            hint="quote a value holding a comma (\"a, b\"), or name every column in the header")
    out: dict[str, dict] = {}
    for i, row in enumerate(rows, 1):
        if "key" not in row or row["key"] in (None, ""):
            raise SpecError(f"{where}, record {i}: no 'key' field (the image's path relative to the glob's folder)")
        key = str(row["key"])
        if key in out:
            raise SpecError(f"{where}: the key {key!r} appears twice")
        out[key] = {str(k): (None if v is None else v if isinstance(v, str) else json.dumps(v))
                    for k, v in row.items()}
    bad = [k for v in out.values() for k in v if not _FIELD_NAME.match(k)]
    if bad:
        raise SpecError(f"{where}: field name {bad[0]!r}: use lower-case letters, digits and '_'")
    return out


def _tar_records(f: InputFile, extra_fields: dict) -> list[tuple[ImageRecord, int]]:
    """A WebDataset shard's records: members grouped by key (the path up to the first '.' of the
    basename). Members with absolute paths, '..', links or special types are quarantined, never
    followed; nothing is extracted (members are read in place by offset)."""
    out: list[tuple[ImageRecord, int]] = []
    groups: dict[str, list[tarfile.TarInfo]] = {}
    try:
        with tarfile.open(f.path, "r:") as tar:
            while True:
                try:
                    member = tar.next()
                except tarfile.TarError as err:
                    out.append((ImageRecord(f.index, tar.offset, f"{f.display}@{tar.offset}", None, None,
                                            problem=f"{f.display}: the tar is truncated or corrupt here ({err})",
                                            name=f.display), 1))
                    break
                if member is None:
                    if damage := _tar_end_damage(tar.fileobj, tar.offset, f.size):
                        out.append((ImageRecord(f.index, tar.offset, f"{f.display}@{tar.offset}", None, None,
                                                problem=f"{f.display}: {damage}", name=f.display), 1))
                    break
                if member.isdir():
                    continue
                folder, base = os.path.split(member.name)
                stem = base.split(".", 1)[0]
                unsafe = _unsafe(member) or (None if stem else "a name starting with '.' has no key")
                # a sparse member's size is its expanded size, not what the tar stores: never "cut short"
                cut = not member.issparse() and member.offset_data + member.size > f.size
                if not unsafe and cut:
                    unsafe = (f"the tar is cut short inside this member ({max(f.size - member.offset_data, 0):,} "
                              f"of {member.size:,} bytes present)")
                if unsafe:
                    out.append((ImageRecord(f.index, member.offset, member.name, None, None,
                                            problem=f"{f.display}: member {member.name!r}: {unsafe}; not read",
                                            name=member.name), 1))
                    if cut:
                        break                       # the damage is this member's: nothing follows it
                    continue
                groups.setdefault(f"{folder}/{stem}" if folder else stem, []).append(member)
    except (tarfile.TarError, OSError) as err:
        packed = compressed_by_its_bytes(first_bytes(f.path))
        why = (f"a {packed}-compressed tar: images read plain .tar shards; decompress it first" if packed
               else f"not a readable tar ({err})")
        return [(ImageRecord(f.index, 0, f.display, None, None, problem=f"{f.display}: {why}",
                             name=f.display), 1)]
    for key, members in groups.items():
        images, extras, problem = [], [], None
        seen: set[str] = set()
        for m in members:
            ext = os.path.basename(m.name).split(".", 1)[1].lower() if "." in os.path.basename(m.name) else ""
            if ext in IMAGE_EXTENSIONS:
                images.append(m)
                continue
            name = ext.replace(".", "_")
            if not _FIELD_NAME.match(name) or name in BASE_COLUMNS:
                problem = problem or f"member {m.name!r}: the extension {ext!r} cannot name a column"
                continue
            if name in seen:             # two `0001.cls`: keeping either would lose the other silently
                problem = problem or f"two members give the field {name!r} of this key ({m.name!r} repeated)"
                continue
            seen.add(name)
            extra_fields.setdefault(name, None)
            extras.append((name, m.offset_data, m.size))
        first = min(members, key=lambda m: m.offset)
        if not images:
            problem = problem or "no image member (jpg, jpeg, png, webp) for this key"
        elif len(images) > 1:
            problem = problem or f"{len(images)} image members for one key"
        image = (images[0].offset_data, images[0].size) if images else None
        out.append((ImageRecord(f.index, first.offset, key, None, image, tuple(extras), problem=problem,
                                name=key if problem else ""), max(sum(m.size for m in members), 1)))
    out.sort(key=lambda item: item[0].offset)
    return out


def _tar_end_damage(fileobj, offset: int, size: int) -> str | None:
    """Why a tar whose member list ended at `offset` did not end there cleanly, or None. Python's
    tarfile ends the list quietly at a header cut short or failing its checksum, so the members
    after it would be lost without a word: a tar ends with zero blocks, and nothing follows them."""
    if offset >= size:
        return f"the tar ends at byte {offset:,} without its end-of-archive blocks (cut short?)"
    fileobj.seek(offset)
    rest = fileobj.read(min(size - offset, TAR_TAIL_CHECKED))
    zeros = len(rest) - len(rest.lstrip(b"\0"))
    if zeros == len(rest):
        return None
    if zeros < tarfile.BLOCKSIZE:
        return (f"a damaged or cut-short member header at byte {offset:,}; the members after it "
                "cannot be found")
    return (f"data after the tar's end-of-archive blocks, at byte {offset + zeros:,}, is not read "
            "(tars joined with cat? write them as separate shards)")


def _unsafe(member: tarfile.TarInfo) -> str | None:
    name = member.name
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "an absolute path"
    if ".." in re.split(r"[\\/]", name):
        return "a path with '..'"
    if member.issym() or member.islnk():
        return f"a link (to {member.linkname!r})"
    if member.issparse():           # its stored bytes are not the file: tarfile expands them on extract only
        return "a sparse member (GNU sparse format), which images sources do not read"
    if not member.isfile():
        return "not a regular file"
    return None
