"""The CPU backend's own partition size: a pipeline file without `source.blocksize` is cut into
32 MiB partitions on the CPU (what a run holds at once follows the partition: docs/design.md, "the
CPU engine"), without a note; the file's blocksize or --set's still wins; an images source keeps
the file's default; the shards do not depend on it (tests/runtime/test_end_to_end.py and
tests/sinks/test_bounded_shards.py run the same rows at other blocksizes)."""

from __future__ import annotations

import gpuetl
from gpuetl.backends.cpu import CPU_BLOCKSIZE
from gpuetl.cli import main
from imagedata import image_spec, photo_folder

MIB = 1 << 20


def _spec(**source):
    return {"version": 1, "name": "t", "source": {"type": "text", "path": "*.log", **source},
            "parse": {"regex": "(?P<line>.*)"}, "sink": {"path": "out"}}


def test_a_cpu_plan_without_a_blocksize_cuts_32_mib_partitions_unnoted(tmp_path):
    line = b"a line of forty bytes, give or take it.\n"
    (tmp_path / "a.log").write_bytes(line * (65 * MIB // len(line)))        # 65 MiB
    plan = gpuetl.Pipeline.from_dict(_spec(), base_dir=tmp_path).plan("cpu")
    assert CPU_BLOCKSIZE == 32 * MIB and plan.spec.source.blocksize == 32 * MIB
    sizes = [sum(r.length for r in p.ranges) for p in plan.partitions]
    assert sum(sizes) == (tmp_path / "a.log").stat().st_size
    assert len(sizes) == 3 and max(sizes) <= 32 * MIB + len(line)
    assert not any("blocksize" in n for n in plan.notes)


def test_the_files_blocksize_or_sets_still_wins_on_the_cpu(tmp_path):
    (tmp_path / "a.log").write_bytes(b"a line\n" * 1000)
    assert gpuetl.Pipeline.from_dict(_spec(blocksize="64MiB"), base_dir=tmp_path).plan("cpu").spec.source.blocksize \
        == 64 * MIB
    over = gpuetl.Pipeline.from_dict(_spec(), base_dir=tmp_path, overrides=["source.blocksize=2KiB"]).plan("cpu")
    assert over.spec.source.blocksize == 2048
    assert all(sum(r.length for r in p.ranges) <= 2048 for p in over.partitions) and len(over.partitions) >= 4


def test_an_images_source_keeps_the_files_default_on_the_cpu(tmp_path):
    photo_folder(tmp_path / "photos", n=2)
    plan = gpuetl.Pipeline.from_dict(image_spec(), base_dir=tmp_path).plan("cpu")
    assert plan.spec.source.blocksize == 64 * MIB


def test_gpuetl_plan_on_the_cpu_shows_the_partition_size(tmp_path, capsys):
    import yaml

    (tmp_path / "a.log").write_bytes(b"a line\n" * 1000)
    path = tmp_path / "pipe.yaml"
    path.write_text(yaml.safe_dump(_spec()))
    assert main(["plan", str(path), "--backend", "cpu"]) == 0
    assert "partitions: 1 (blocksize 32.0 MiB)" in capsys.readouterr().out


def test_a_parquet_source_keeps_the_files_default_so_its_ratio_floor_does_not_move(tmp_path):
    """A parquet row group decoding to no more than source.blocksize is never refused for its
    compression ratio: 3,000,000 equal int64s (48 MB decoded from a few KB) are rows on the CPU,
    as on any backend, not a quarantined bomb."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": np.full(3_000_000, 7), "status": np.full(3_000_000, 200)}),
                   tmp_path / "constant.parquet", row_group_size=3_000_000, compression="zstd")
    spec = {"version": 1, "name": "t", "source": {"type": "parquet", "path": "*.parquet"},
            "on_error": "quarantine", "sink": {"path": "out"}}
    pipeline = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path)
    assert pipeline.plan("cpu").spec.source.blocksize == 64 * MIB
    result = pipeline.run(backend="cpu", scheduler="sync", report=False)
    assert result.counts["rows_out"] == 3_000_000 and result.counts["quarantined"] == 0
