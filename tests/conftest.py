import os

import pytest

from gpuetl.samples import write_access_logs

# The tests call gpuetl.cli.main in this process, which is a library caller's: the command's
# process-wide tunings (gpuetl/cli/tuning.py) stay out of it. tests/test_library_manners.py checks
# them in fresh processes.
os.environ.setdefault("GPUETL_NO_TUNING", "1")

# The `slow` marker's rule (tests/slow_rule.py): unmarked tests over 2 s are listed at the end of
# a run, and one over 6 s fails it.
pytest_plugins = ["slow_rule"]


ACCESS_LOG_FILES = {"a.log": {"lines": 2500, "seed": 1},
                    "b.log": {"lines": 2500, "seed": 2, "bad_every": 250},
                    "c.log.gz": {"lines": 1000, "seed": 3, "gzip": True}}
_access_log_bytes: dict[str, bytes] = {}


def write_access_log_folder(folder):
    """Three access-log files (one with garbage lines, one gzipped), ~6k lines. They are generated
    once a session; later folders get copies of the same bytes."""
    folder.mkdir()
    for name, kwargs in ACCESS_LOG_FILES.items():
        if name in _access_log_bytes:
            (folder / name).write_bytes(_access_log_bytes[name])
        else:
            write_access_logs(folder / name, **kwargs)
            _access_log_bytes[name] = (folder / name).read_bytes()
    return folder


@pytest.fixture
def access_logs(tmp_path):
    """tmp_path/in: the access-log files of write_access_log_folder."""
    return write_access_log_folder(tmp_path / "in")


@pytest.fixture(scope="session")
def shared_access_logs(tmp_path_factory):
    """The same files written once, for tests that only read them: <base>/in, with runs given
    base_dir=<base> and a sink outside it (their own tmp_path)."""
    return write_access_log_folder(tmp_path_factory.mktemp("access-logs") / "in")


def access_spec(**overrides):
    spec = {
        "version": 1,
        "name": "t",
        "source": {"type": "text", "path": "in/*", "blocksize": "64KiB"},
        "parse": {"preset": "apache_combined"},
        "sink": {"path": "out", "mode": "overwrite", "row_group_rows": 1000},
    }
    for key, value in overrides.items():
        section, _, name = key.partition("__")
        if name:
            spec.setdefault(section, {})[name] = value
        else:
            spec[section] = value
    return spec


@pytest.fixture(scope="session")
def loader_dataset(tmp_path_factory):
    """One finished dataset per session for the loader's tests (tests/loaderdata.py); they only read it."""
    from loaderdata import make_loader_dataset

    return make_loader_dataset(tmp_path_factory.mktemp("loader"))


@pytest.fixture
def dataset_copy(loader_dataset, tmp_path):
    """A copy of the session's loader dataset that a test may damage."""
    import shutil

    return shutil.copytree(loader_dataset, tmp_path / "data")


def pytest_collection_modifyitems(config, items):
    """`gpu` tests need a GPU as well as RAPIDS: skipped cleanly where NVML sees none (a machine
    with the RAPIDS extra but no device runs the `gpu_api` tier instead)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    from gpuetl.backends.gpu_detect import gpu_count, rapids_available

    if gpu_count() and rapids_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with RAPIDS (NVML sees no GPU, or RAPIDS is missing)")
    for item in gpu_items:
        item.add_marker(skip)


from objectstore_server import faulty_s3, s3, s3_endpoint  # noqa: E402,F401  (fixtures: an S3 server on loopback)
