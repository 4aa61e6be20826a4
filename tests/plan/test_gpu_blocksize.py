"""Partitions sized for the device (docs/gpu.md, "Partitions"): planned for the GPU, a pipeline
file without `source.blocksize` gets a 16th of the RMM pool the device's memory gives, in whole
64 MiB, at most 1 GiB; the file's blocksize (or --set's) still wins, the CPU keeps its own 32 MiB
(tests/plan/test_cpu_blocksize.py), and
`gpuetl plan --backend gpu` shows it. The device memory is faked (NVML's answer)."""

from __future__ import annotations

import pytest

import gpuetl
from gpuetl.backends import gpu_detect
from gpuetl.backends.gpu_detect import GpuPlanning, gpu_blocksize
from gpuetl.cli import main

GIB, MIB = 1 << 30, 1 << 20
H200 = [(139 * GIB, 141 * GIB)]


def _spec(**source):
    return {"version": 1, "name": "t", "source": {"type": "text", "path": "*.log", **source},
            "parse": {"regex": "(?P<line>.*)"}, "sink": {"path": "out"}}


@pytest.fixture
def logs(tmp_path):
    (tmp_path / "a.log").write_bytes(b"a line\n" * 1000)
    return tmp_path


def _device(monkeypatch, memory):
    monkeypatch.setattr(gpu_detect, "gpu_memory", lambda: memory)


def test_the_gpu_default_is_a_share_of_the_pool_within_64mib_and_1gib():
    assert gpu_blocksize(H200) == GIB                                       # 7 GiB of pool / 16: capped
    assert gpu_blocksize([(15 * GIB, 16 * GIB)]) == 768 * MIB               # 12.75 GiB pool / 16, in 64 MiB
    assert gpu_blocksize([(3 * GIB, 16 * GIB)]) == 192 * MIB                # a busy device: its free memory
    assert gpu_blocksize([(GIB, 2 * GIB)]) == 64 * MIB                      # never below the CPU's default
    assert gpu_blocksize(H200 + [(15 * GIB, 16 * GIB)]) == 768 * MIB        # the smallest device decides
    assert gpu_blocksize([]) is None                                        # no GPU: the file's default


def test_planned_for_the_gpu_a_file_without_blocksize_gets_the_devices(monkeypatch, logs):
    _device(monkeypatch, H200)
    plan = gpuetl.Pipeline.from_dict(_spec(), base_dir=logs).plan(GpuPlanning())
    assert plan.spec.source.blocksize == GIB
    assert any("source.blocksize: 1.0 GiB" in n and "gpu backend's default" in n for n in plan.notes)
    assert gpuetl.Pipeline.from_dict(_spec(), base_dir=logs).plan("cpu").spec.source.blocksize == 32 * MIB


def test_the_pipeline_files_blocksize_still_wins(monkeypatch, logs):
    _device(monkeypatch, H200)
    plan = gpuetl.Pipeline.from_dict(_spec(blocksize="4KiB"), base_dir=logs).plan(GpuPlanning())
    assert plan.spec.source.blocksize == 4096 and len(plan.partitions) == 2
    assert not any("source.blocksize" in n for n in plan.notes)
    over = gpuetl.Pipeline.from_dict(_spec(), base_dir=logs, overrides=["source.blocksize=2KiB"]).plan(GpuPlanning())
    assert over.spec.source.blocksize == 2048


def test_without_a_visible_gpu_the_plan_keeps_the_files_default(monkeypatch, logs):
    _device(monkeypatch, [])
    plan = gpuetl.Pipeline.from_dict(_spec(), base_dir=logs).plan(GpuPlanning())
    assert plan.spec.source.blocksize == 64 * MIB


def test_gpuetl_plan_for_the_gpu_shows_the_devices_blocksize(monkeypatch, logs, capsys):
    import yaml

    _device(monkeypatch, [(15 * GIB, 16 * GIB)])
    path = logs / "pipe.yaml"
    path.write_text(yaml.safe_dump(_spec()))
    assert main(["plan", str(path), "--backend", "gpu"]) == 0
    out = capsys.readouterr().out
    assert "partitions: 1 (blocksize 768.0 MiB)" in out
    assert main(["plan", str(path), "--backend", "cpu"]) == 0
    assert "(blocksize 32.0 MiB)" in capsys.readouterr().out


def test_the_blocksize_taken_is_in_the_runs_fingerprint(monkeypatch, logs):
    """A run resumed where the device gives another blocksize would cut other partitions: the
    fingerprint differs, so resume refuses rather than mixing two partitionings."""
    from gpuetl.runtime.phases.resume import pipeline_digest

    digests = []
    for memory in (H200, [(15 * GIB, 16 * GIB)], H200):
        _device(monkeypatch, memory)
        digests.append(pipeline_digest(gpuetl.Pipeline.from_dict(_spec(), base_dir=logs).plan(GpuPlanning())))
    assert digests[0] != digests[1] and digests[0] == digests[2]
