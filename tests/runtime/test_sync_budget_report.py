"""The manifest's sync budget (docs/gpu.md): a backend that counts its device -> host reads
(`host_transfer()["syncs"]`, the GPU's) gets `syncs_per_partition`, its syncs over the plan's
partitions; the CPU reports no host transfer at all."""

from __future__ import annotations

import pytest

import gpuetl
from gpuetl.backends.cpu import CpuBackend


class CountingSyncs(CpuBackend):
    """The CPU backend reporting syncs as the GPU's host_transfer does (30 in all)."""

    def host_transfer(self, client=None, input_bytes: int = 0) -> dict:
        return {"input_bytes": input_bytes, "syncs": {"total": 30, "by_reason": {"control: rows left": 30}}}


def _spec():
    return {"version": 1, "name": "t", "source": {"type": "text", "path": "*.log", "blocksize": "1KiB"},
            "parse": {"regex": "(?P<line>.*)"}, "sink": {"path": "out"}}


@pytest.mark.slow
def test_syncs_per_partition_are_the_runs_syncs_over_its_partitions(tmp_path):
    (tmp_path / "a.log").write_bytes(b"a line of text\n" * 150)          # 2,250 bytes: 3 partitions
    pipeline = gpuetl.Pipeline.from_dict(_spec(), base_dir=tmp_path)
    assert len(pipeline.plan().partitions) == 3
    result = pipeline.run(backend=CountingSyncs(), scheduler="sync")
    assert result.manifest["host_transfer"]["syncs_per_partition"] == 10.0
    assert result.manifest["host_transfer"]["syncs"]["total"] == 30


def test_the_cpu_reports_no_syncs(tmp_path):
    (tmp_path / "a.log").write_bytes(b"a line\n" * 10)
    spec = {**_spec(), "sink": {"path": "out2"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.manifest["host_transfer"] == {}
