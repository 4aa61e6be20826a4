"""Input files: glob expansion, a stable order, and what the manifest records about each."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputsNotFound, SpecError

COMPRESSION_SUFFIXES = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2"}


@dataclass(frozen=True)
class InputFile:
    index: int
    path: str          # absolute
    display: str       # as the user knows it: relative to the pipeline folder where possible
    size: int
    mtime_ns: int
    compression: str | None


def resolve_inputs(patterns: list[str], base_dir: Path, compression: str) -> list[InputFile]:
    """Expand globs ('**' allowed) relative to base_dir; sorted, de-duplicated, files only."""
    found: dict[str, None] = {}
    for pattern in patterns:
        full = pattern if os.path.isabs(pattern) else str(base_dir / pattern)
        # The pipeline's folder is a place, not a pattern: '[' in it must not act as a glob.
        pattern_full = pattern if os.path.isabs(pattern) else os.path.join(glob.escape(str(base_dir)), pattern)
        matches = sorted(glob.glob(pattern_full, recursive=True))
        if not matches and os.path.lexists(full):
            matches = [full]                    # an exact name that holds glob characters
        matches = [m for m in matches if not os.path.isdir(m)]
        if not matches:
            if os.path.isdir(full):
                raise SpecError(f"source.path: {full} is a folder, not a file",
                                hint=f"name the files in it, e.g. {os.path.join(pattern, '*')!r}")
            if glob.has_magic(pattern):
                raise InputsNotFound(f"source.path: the pattern {pattern!r} matches no file (looked in {base_dir})",
                                hint="check the pattern; relative paths are relative to the pipeline file's folder")
            raise InputsNotFound(f"source.path: no such file: {full}",
                            hint="relative paths are relative to the pipeline file's folder")
        for m in matches:
            found[os.path.abspath(m)] = None
    files = []
    for index, path in enumerate(sorted(found)):
        try:
            st = os.stat(path)
        except OSError as err:
            raise SpecError(f"source.path: cannot read {path}: {err.strerror}") from None
        try:
            display = os.path.relpath(path, base_dir)
        except ValueError:
            display = path
        if display.startswith(".."):
            display = path
        files.append(InputFile(index, path, display, st.st_size, st.st_mtime_ns, _compression(path, compression)))
    return files


def _compression(path: str, setting: str) -> str | None:
    if setting == "none":
        return None
    if setting == "infer":
        return COMPRESSION_SUFFIXES.get(Path(path).suffix.lower())
    return setting
