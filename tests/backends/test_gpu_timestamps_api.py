"""UTC timestamps on the GPU without a time-zone database (marker gpu_api: `make gpu-api`).
cuDF 26.10's `dt.tz_localize("UTC")` reads the zone's transition table from /usr/share/zoneinfo
or the `tzdata` wheel; on an image with neither, every timestamp cast would raise."""

from __future__ import annotations

import ast
import os
import zoneinfo
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

pytestmark = pytest.mark.gpu_api

try:                                        # RAPIDS installed: import it without touching CUDA
    os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")
    import cudf
    import cudf.core.column.datetime as cudf_datetime
    import pylibcudf as plc

    from gpuetl.backends import gpu
except Exception as err:                    # noqa: BLE001 (no RAPIDS, or a broken install)
    pytest.skip(f"RAPIDS does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

BACKENDS = Path(gpu.__file__).parent


@pytest.fixture
def no_zone_database(monkeypatch):
    """Neither /usr/share/zoneinfo nor tzdata: any read of a zone raises."""
    def missing(*args, **kwargs):
        raise zoneinfo.ZoneInfoNotFoundError("no time zone database on this image")

    monkeypatch.setattr(cudf_datetime, "_get_tz_data", missing)
    monkeypatch.setattr(zoneinfo, "ZoneInfo", missing)


def test_utc_timestamps_reads_no_zone_database(monkeypatch, no_zone_database):
    """The backend's UTC labelling keeps the device column and gives the backend's timestamp
    dtype without reading a zone file."""
    made = []
    monkeypatch.setattr(cudf.Series, "_from_column",
                        classmethod(lambda cls, column, index=None, name=None: made.append((column, name)) or column))
    naive = plc.Column(plc.DataType(plc.TypeId.TIMESTAMP_MICROSECONDS), 0, None, None, 0, 0, [])
    column = gpu.utc_timestamps(SimpleNamespace(_column=SimpleNamespace(plc_column=naive), index=None, name="t"))
    assert made == [(column, "t")]
    assert column.plc_column is naive                           # the same device column, relabelled
    assert column.dtype == pd.DatetimeTZDtype(unit="us", tz="UTC")
    assert isinstance(column, cudf_datetime.DatetimeTZColumn)


def test_the_gpu_backend_never_localizes_with_a_zone_database():
    """No `tz_localize` call is left in the GPU backend's modules: each UTC timestamp is built
    by utc_timestamps."""
    calls = []
    for path in sorted(BACKENDS.glob("gpu*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "tz_localize":
                calls.append(f"{path.name}:{node.lineno}")
    assert calls == []


def test_the_gpu_extra_installs_tzdata():
    """What a zoned column's other operations still read (its .dt fields) comes with the extra."""
    import tomllib

    extra = tomllib.loads((BACKENDS.parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    assert any(req.split(">")[0].split("=")[0].strip() == "tzdata" for req in extra)
