import os

import pytest

from gpuetl.samples import write_access_logs

# The tests call gpuetl.cli.main in this process, which is a library caller's: the command's
# process-wide tunings (gpuetl/tuning.py) stay out of it. tests/test_library_manners.py checks
# them in fresh processes.
os.environ.setdefault("GPUETL_NO_TUNING", "1")


@pytest.fixture
def access_logs(tmp_path):
    """Three access-log files (one with garbage lines, one gzipped), ~6k lines."""
    folder = tmp_path / "in"
    folder.mkdir()
    write_access_logs(folder / "a.log", lines=2500, seed=1)
    write_access_logs(folder / "b.log", lines=2500, seed=2, bad_every=250)
    write_access_logs(folder / "c.log.gz", lines=1000, seed=3, gzip=True)
    return folder


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
