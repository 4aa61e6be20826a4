"""`Pipeline.preview()` / `gpuetl preview`: the rows after each stage and the bad records, from the
first records of the first partition, in memory; nothing is written anywhere."""

from __future__ import annotations

import gzip

import pytest

from gpuetl import Pipeline, samples
from gpuetl.cli import main
from gpuetl.runtime.preview import PREVIEW_BYTES
from hostile.conftest import Surroundings

LINES, BAD_EVERY = 1200, 100


def access_spec(path="data/*.log", **extra) -> dict:
    spec = {"version": 1, "name": "w", "source": {"type": "text", "path": path},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
            "steps": [{"filter": "status >= 200 and status < 500"}, {"dedupe": {"on": ["ip", "request"]}},
                      {"select": ["ip", "status", "request"]}],
            "sink": {"path": "out"}}
    spec.update(extra)
    return spec


@pytest.fixture
def logs(tmp_path):
    samples.write_access_logs(tmp_path / "data" / "access.log", lines=LINES, bad_every=BAD_EVERY)
    return tmp_path


def adds_up(preview) -> None:
    for before, after in zip(preview.stages, preview.stages[1:]):
        assert after.rows_in == before.rows_out
    for s in preview.stages:
        assert s.rows_in == s.rows_out + s.filtered + s.deduplicated + s.quarantined


def test_preview_shows_each_stage_and_the_bad_records_and_writes_nothing(logs):
    with Surroundings()(logs):
        shown = Pipeline.from_dict(access_spec(), base_dir=logs).preview(n=5)
    assert [(s.index, s.name) for s in shown.stages] == [(0, "read-parse"), (1, "filter"), (2, "dedupe"), (3, "select")]
    adds_up(shown)
    assert shown.stages[0].rows_in == LINES and shown.stages[0].quarantined == LINES // BAD_EVERY
    assert shown.stages[1].filtered > 0 and shown.stages[2].deduplicated > 0
    assert [s.alone for s in shown.stages] == [False, False, True, False]       # dedupe saw these rows only
    assert all(s.rows.num_rows == 5 for s in shown.stages)
    assert shown.stages[0].rows.column_names[:2] == ["ip", "ident"]
    assert shown.stages[3].rows.column_names == ["ip", "status", "request"]
    assert str(shown.stages[3].rows.schema.field("status").type) == "int16"
    bad = shown.quarantined.to_pylist()
    assert len(bad) == 5 and all(r["reason"] == "line does not match preset apache_combined" for r in bad)
    assert [r["offset"] for r in bad] == sorted(r["offset"] for r in bad) and bad[0]["file"] == "data/access.log"
    assert all(r["stage"] == "0:read-parse" and r["record"] for r in bad)
    frames = shown.frames()
    assert list(frames) == ["0:read-parse", "1:filter", "2:dedupe", "3:select", "quarantined"]
    assert len(frames["3:select"]) == 5
    assert not (logs / "out").exists()


def test_preview_reads_a_bounded_first_piece_of_a_big_file_in_whole_lines(tmp_path):
    samples.write_access_logs(tmp_path / "data" / "big.log", lines=12000)
    size = (tmp_path / "data" / "big.log").stat().st_size
    assert size > 2 * PREVIEW_BYTES
    shown = Pipeline.from_dict(access_spec(source={"type": "text", "path": "data/*.log", "blocksize": "64MiB"}),
                               base_dir=tmp_path).preview(n=3)
    assert shown.read.startswith("the first 1 MiB of partition 1 of 1")
    first = shown.stages[0]
    assert 0 < first.rows_in < 12000 * (PREVIEW_BYTES * 1.1) / size
    assert first.quarantined == 0                  # the cut falls after a whole line, never inside one
    adds_up(shown)


def test_preview_of_a_gzipped_file_and_on_error_fail_shows_the_bad_records_with_a_note(tmp_path):
    samples.write_access_logs(tmp_path / "data" / "a.log.gz", lines=600, bad_every=50, gzip=True)
    with gzip.open(tmp_path / "data" / "a.log.gz") as fh:
        assert len(fh.read().splitlines()) == 600
    with Surroundings()(tmp_path):
        shown = Pipeline.from_dict(access_spec(path="data/*.gz", on_error="fail"), base_dir=tmp_path).preview(n=50)
    assert shown.stages[0].rows_in == 600 and shown.stages[0].quarantined == 12
    assert shown.quarantined.num_rows == 12
    assert any("on_error is fail" in note for note in shown.notes)
    adds_up(shown)


def test_preview_with_a_filter_that_keeps_nothing(logs):
    spec = access_spec(steps=[{"filter": "status > 9000"}])
    shown = Pipeline.from_dict(spec, base_dir=logs).preview()
    assert shown.stages[-1].rows_out == 0 and shown.stages[-1].rows.num_rows == 0
    assert shown.stages[-1].filtered == LINES - LINES // BAD_EVERY
    adds_up(shown)


def test_preview_of_images_prints_byte_lengths_not_bytes(tmp_path, capsys):
    from imagedata import image_spec, photo_folder
    import yaml

    photo_folder(tmp_path / "photos", n=4)
    (tmp_path / "photos" / "cat" / "broken.jpg").write_bytes(b"\xff\xd8 not really")
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(image_spec()))
    with Surroundings()(tmp_path):
        assert main(["preview", str(tmp_path / "p.yaml"), "-n", "3"]) == 0
    out = capsys.readouterr().out
    assert " bytes>" in out and "\\xff" not in out and "b'" not in out
    assert "quarantined: 1 record, the first 1:" in out and "photos/cat/broken.jpg" in out and "<13 bytes>" in out


def test_cli_preview_prints_stages_and_bad_records(logs, capsys):
    import yaml

    (logs / "p.yaml").write_text(yaml.safe_dump(access_spec()))
    with Surroundings()(logs):
        assert main(["preview", str(logs / "p.yaml"), "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert "nothing written" in out
    assert f"stage 0 read-parse: {LINES:,} rows in" in out and "stage 3 select:" in out
    assert "applied to these rows alone" in out
    assert f"quarantined: {LINES // BAD_EVERY} records, the first 2:" in out
    assert "line does not match preset" in out


def test_cli_preview_bad_pipeline_file_and_bad_n_exit_2(tmp_path, capsys):
    (tmp_path / "p.yaml").write_text("version: 1\nname: x\nsource: {type: text, path: a.log}\nsink: {path: out}\n"
                                     "steps: [{nosuchstep: {}}]\n")
    with Surroundings()(tmp_path):
        assert main(["preview", str(tmp_path / "p.yaml")]) == 2
        assert "p.yaml" in capsys.readouterr().err
        with pytest.raises(SystemExit) as info:
            main(["preview", str(tmp_path / "p.yaml"), "-n", "0"])
    assert info.value.code == 2
    assert "1 or more" in capsys.readouterr().err


def test_preview_of_a_big_gzipped_file_reads_its_first_piece_only(tmp_path):
    samples.write_access_logs(tmp_path / "data" / "a.log.gz", lines=4000, gzip=True)
    spec = access_spec(path="data/*.gz", source={"type": "text", "path": "data/*.gz", "blocksize": "64KiB"})
    shown = Pipeline.from_dict(spec, base_dir=tmp_path).preview(n=2)
    assert shown.read.endswith(f"partition 1 of {len(Pipeline.from_dict(spec, base_dir=tmp_path).plan().partitions)}, whole")
    assert 0 < shown.stages[0].rows_in < 4000 and shown.stages[0].quarantined == 0
    adds_up(shown)


def test_preview_of_no_records_shows_empty_stages(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpuetl.backends import get_backend
    from gpuetl.runtime.preview import preview_plan

    pq.write_table(pa.table({"n": pa.array([], pa.int64())}), tmp_path / "e.parquet")
    spec = {"version": 1, "name": "e", "source": {"type": "parquet", "path": "e.parquet"},
            "steps": [{"dedupe": {"on": ["n"]}}], "sink": {"path": "out"}}
    pipeline = Pipeline.from_dict(spec, base_dir=tmp_path)
    shown = pipeline.preview()
    assert [(s.rows_in, s.rows_out, s.rows.num_rows) for s in shown.stages] == [(0, 0, 0), (0, 0, 0)]
    plan = pipeline.plan()
    plan.partitions = []                       # a plan with no partition at all
    shown = preview_plan(plan, get_backend("cpu"), 3)
    assert shown.read.startswith("nothing") and shown.stages[-1].rows.column_names == ["n"]
    assert shown.quarantined.num_rows == 0
