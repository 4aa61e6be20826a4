from __future__ import annotations

import shutil

import pytest

from loaderdata import make_loader_dataset


@pytest.fixture(scope="session")
def loader_dataset(tmp_path_factory):
    """One dataset per session (tests/loaderdata.py); tests only read it."""
    return make_loader_dataset(tmp_path_factory.mktemp("loader"))


@pytest.fixture
def dataset_copy(loader_dataset, tmp_path):
    """A copy of the session's dataset that a test may damage."""
    return shutil.copytree(loader_dataset, tmp_path / "data")
