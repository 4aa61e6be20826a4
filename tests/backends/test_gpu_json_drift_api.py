"""The GPU backend keeps a drifting JSON field as the CPU backend does (#28.2), checked with the
real RAPIDS release and no device (marker gpu_api): a read with fields kept as source text is
handed whole to the CPU kernel before anything touches the device, so both backends give each
value's source text and quarantine the same records."""

from __future__ import annotations

import os

import pytest

import gpuetl

pytestmark = pytest.mark.gpu_api

try:                                        # RAPIDS installed: import it without touching CUDA
    os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")
    import cudf  # noqa: F401
except Exception as err:                    # noqa: BLE001 (no RAPIDS, or a broken install)
    pytest.skip(f"RAPIDS does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)


def test_a_read_with_source_text_fields_goes_to_the_cpu_kernel_before_the_device(tmp_path):
    from gpuetl.backends.gpu_records import GpuRecordsMixin

    (tmp_path / "a.jsonl").write_text('{"id": "1", "n": 1}\n{"id": 2, "n": 2}\n{"id": [3], "n": 3}\n')
    plan = gpuetl.Pipeline.from_dict({"version": 1, "name": "t", "source": {"type": "jsonl", "path": "a.jsonl"},
                                      "sink": {"path": "out"}}, base_dir=tmp_path).plan()
    read = plan.segments[0].source.parser.read
    assert read.raw == frozenset({("id",)}) and read.inferred

    class Host:
        def _host_json(self, text, read, why):
            return ("host", why)

    assert GpuRecordsMixin.parse_json(Host(), "records", read) == (
        "host", "parse_json: a field kept as source text (host)")
