"""The Loader's CUDA path (backends/gpu_loader.py) checked against the installed RAPIDS release
without a GPU (`make gpu-api`, marker gpu_api; skipped cleanly where RAPIDS does not import):
the module imports with the real libraries, every call in gpu_loader.LOADER_CALLS exists and
accepts the arguments used (bound as tests/backends/test_gpu_api.py binds gpu.RAPIDS_CALLS), the
enum members named exist, and the reader options it builds hold what it asked for (the builder
runs on the host)."""

from __future__ import annotations

import os
import warnings

import pytest

pytestmark = pytest.mark.gpu_api

try:                                        # RAPIDS installed: import it without touching CUDA
    os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")
    import cupy  # noqa: F401
    import pylibcudf as plc
except Exception as err:                    # noqa: BLE001 (no RAPIDS, or a broken install)
    pytest.skip(f"RAPIDS does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

from test_gpu_api import _resolve, _signature  # noqa: E402  (the same binding as the backend's calls)

from gpuetl.backends import gpu_loader  # noqa: E402


@pytest.mark.parametrize("dotted, positional, keywords", gpu_loader.LOADER_CALLS,
                         ids=[c[0] for c in gpu_loader.LOADER_CALLS])
def test_every_loader_call_exists_and_accepts_the_arguments_used(dotted, positional, keywords):
    obj = _resolve(dotted)
    sig = _signature(obj)
    params = list(sig.parameters.values())
    unbound_method = params and params[0].name == "self" and not isinstance(obj, type)
    sig.bind(*[None] * (positional + (1 if unbound_method else 0)), **{k: None for k in keywords})


@pytest.mark.parametrize("dotted", gpu_loader.LOADER_CONSTANTS)
def test_every_constant_the_loader_names_exists(dotted):
    module, _, member = dotted.rpartition(".")
    assert hasattr(_resolve(module), member), dotted


def test_the_binding_can_fail():
    with pytest.raises(TypeError):
        _signature(_resolve("pylibcudf.copying.gather")).bind(None, None)       # bounds_policy is required
    with pytest.raises(TypeError):
        _signature(_resolve("pylibcudf.io.parquet.ParquetReaderOptions.set_row_groups")).bind(None, None, None)


def test_the_reader_options_are_built_on_the_host_with_one_list_of_row_groups_per_source(tmp_path):
    """The builder chain gpu_loader.LibcudfTables.read makes runs on the host (read_parquet is the
    first call that touches the device); set_row_groups takes one inner list per source, so a
    flat list, the shape cudf.read_parquet would accept, is refused."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"a": list(range(10)), "b": [1.0] * 10}), path, row_group_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # no deprecated call (26.10 deprecates .columns)
        options = (plc.io.parquet.ParquetReaderOptions.builder(plc.io.SourceInfo([str(path)]))
                   .column_names(["b", "a"]).use_pandas_metadata(False).build())
        options.set_row_groups([[1]])
    with pytest.raises(TypeError):
        options.set_row_groups([1])


def test_the_device_module_imports_with_the_real_libraries():
    assert callable(gpu_loader.libcudf_tables) and gpu_loader.LibcudfTables.read
