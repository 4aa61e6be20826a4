"""Shared tools of the hostile-input gallery: every case checks that nothing outside the dataset
changed, by hashing a folder's surroundings before and after."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest


def snapshot(root: Path, skip: Path | None = None) -> dict[str, str]:
    """Every entry under `root` (links not followed) → what it is: a file's sha256, a link's
    target, or 'dir'. Entries under `skip` (the dataset folder) are left out."""
    state: dict[str, str] = {}
    skip_abs = os.path.abspath(skip) if skip else None
    for folder, dirs, files in os.walk(root, followlinks=False):
        if skip_abs and (folder == skip_abs or folder.startswith(skip_abs + os.sep)):
            dirs[:] = []
            continue
        for name in dirs + files:
            path = os.path.join(folder, name)
            if skip_abs and path == skip_abs:
                continue
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                state[rel] = "link -> " + os.readlink(path)
            elif os.path.isdir(path):
                state[rel] = "dir"
            elif os.path.isfile(path):
                with open(path, "rb") as fh:
                    state[rel] = hashlib.sha256(fh.read()).hexdigest()
            else:
                state[rel] = "special"
    return state


class Surroundings:
    """`with surroundings(tmp_path, dataset=out):` fails if anything outside `out` changed."""

    def __call__(self, root: Path, dataset: Path | None = None):
        return _Guard(Path(root), dataset)


class _Guard:
    def __init__(self, root: Path, dataset: Path | None):
        self.root, self.dataset = root, dataset

    def __enter__(self):
        self.before = snapshot(self.root, self.dataset)
        return self

    def __exit__(self, *exc):
        after = snapshot(self.root, self.dataset)
        changed = sorted(k for k in self.before.keys() | after.keys() if self.before.get(k) != after.get(k))
        assert not changed, f"files outside the dataset changed: {changed[:10]}"
        return False


@pytest.fixture
def surroundings():
    return Surroundings()
