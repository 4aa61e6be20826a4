"""Smaller hostile cases: `~` in source.path as in sink.path; a `*.jpg` pattern beside `.JPG`
files (case-sensitive, and the plan says so); library warnings under `--quiet`; a shard.count
far past the rows."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from PIL import Image

from gpuetl.cli import main
from gpuetl.samples import write_access_logs

ROOT = Path(__file__).resolve().parents[2]


def access_spec(source: str, sink: str = "out", **extra) -> dict:
    return {"version": 1, "name": "small", "source": {"type": "text", "path": source},
            "parse": {"preset": "apache_combined"}, "sink": {"path": sink}, **extra}


def write(base: Path, data: dict) -> Path:
    (base / "p.yaml").write_text(yaml.safe_dump(data))
    return base / "p.yaml"


def counts(out: Path) -> dict:
    c = json.loads((out / "_manifest.json").read_text())["counts"]
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    return c


@pytest.mark.slow
def test_a_tilde_is_expanded_in_source_path_as_in_sink_path(tmp_path, monkeypatch, capsys, surroundings):
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    write_access_logs(home / "logs" / "a.log", lines=50, bad_every=10)
    monkeypatch.setenv("HOME", str(home))
    base = tmp_path / "pipes"
    base.mkdir()
    file = write(base, access_spec("~/logs/*.log", "~/out"))
    with surroundings(tmp_path, dataset=home / "out"):
        assert main(["run", str(file), "--backend", "cpu", "--scheduler", "sync", "--quiet"]) == 0, \
            capsys.readouterr().err
    c = counts(home / "out")
    assert c["rows_in"] == 50 and c["quarantined"] == 5
    assert not (base / "~").exists()


def test_a_pattern_is_case_sensitive_and_the_plan_names_what_case_alone_left_out(tmp_path, capsys, surroundings):
    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "a.log", lines=30)
    write_access_logs(tmp_path / "in" / "b.LOG", lines=20, seed=1)
    write_access_logs(tmp_path / "in" / "c.Log", lines=10, seed=2)
    file = write(tmp_path, access_spec("in/*.log"))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        assert main(["plan", str(file)]) == 0
        out = capsys.readouterr().out
        assert "note: source: 2 file(s) such as in/b.LOG match 'in/*.log' only when case is ignored and are not " \
               "read (patterns are case-sensitive); add 'in/*.LOG' to source.path to read them" in out
        assert main(["run", str(file), "--backend", "cpu", "--scheduler", "sync", "--no-progress"]) == 0
    assert "only when case is ignored" in capsys.readouterr().err
    assert counts(tmp_path / "out")["rows_in"] == 30


def test_a_pattern_that_matches_by_case_alone_says_so_in_its_error(tmp_path, capsys, surroundings):
    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "b.LOG", lines=20)
    file = write(tmp_path, access_spec("in/*.log"))
    with surroundings(tmp_path):
        assert main(["run", str(file), "--backend", "cpu", "--scheduler", "sync"]) == 2
    err = capsys.readouterr().err
    assert "the pattern 'in/*.log' matches no file" in err and "in/b.LOG match 'in/*.log' only when case" in err


def _jpeg_with_broken_exif(path: Path) -> None:
    """A JPEG whose EXIF tag points past its data: Pillow warns (UserWarning) while reading it."""
    ifd = struct.pack("<I", 8) + struct.pack("<H", 1) + struct.pack("<HHII", 0x010F, 2, 100, 0x1000) + b"\0" * 4
    Image.new("RGB", (16, 12), (200, 10, 10)).save(path, "JPEG", exif=b"Exif\0\0II*\0" + ifd)


@pytest.mark.slow
def test_quiet_prints_no_library_warnings(tmp_path, surroundings):
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    for i in range(3):
        _jpeg_with_broken_exif(tmp_path / "photos" / "cat" / f"{i}.jpg")
    file = write(tmp_path, {"version": 1, "name": "quiet", "source": {"type": "images", "path": "photos/**/*.jpg"},
                            "steps": [{"decode": {}}, {"resize": {"size": 8}}, {"encode": {"format": "jpeg"}}],
                            "sink": {"path": "out"}})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "default"}
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        quiet = subprocess.run([sys.executable, "-m", "gpuetl", "run", str(file), "--backend", "cpu", "--quiet"],
                               capture_output=True, text=True, timeout=300, env=env)
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == "", quiet.stderr
    c = counts(tmp_path / "out")
    assert c["rows_in"] == 3 and c["rows_out"] == 3
    # the same run without --quiet shows the warning: the one above was there to silence
    loud = subprocess.run([sys.executable, "-m", "gpuetl", "run", str(file), "--backend", "cpu", "--no-progress",
                           "--set", "sink.mode=overwrite"], capture_output=True, text=True, timeout=300, env=env)
    assert loud.returncode == 0 and "UserWarning" in loud.stderr, loud.stderr


def test_a_shard_count_far_past_the_rows_is_warned_about_before_the_shards_are_written(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "a.log", lines=60)
    file = write(tmp_path, access_spec("in/*.log", shard={"count": 40, "splits": {"train": 0.5, "val": 0.5}}))
    assert main(["run", str(file), "--backend", "cpu", "--scheduler", "sync", "--no-progress"]) == 0
    err = capsys.readouterr().err
    warning = ("warning: shard.count: 40 shards for 60 rows, about 1.5 rows a shard (fewer than 100 rows a shard: "
               "each is a file, a footer and a task of its own)")
    assert warning in err, err
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert any(n.startswith("shard.count: 40 shards for 60 rows") for n in manifest["notes"])
    assert counts(tmp_path / "out")["rows_out"] == 60 and len(manifest["shards"]) == 40


def test_the_plan_notes_a_shard_count_past_what_the_input_bytes_can_hold(tmp_path, capsys):
    """2,000 lines of about 200 bytes cannot fill 10,000 shards of 100 rows: said before any
    data is read (`gpuetl plan`, and the run's first notes)."""
    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "a.log", lines=2000)
    size = (tmp_path / "in" / "a.log").stat().st_size
    file = write(tmp_path, access_spec("in/*.log", shard={"count": 10000}))
    assert main(["plan", str(file)]) == 0
    out = capsys.readouterr().out
    assert f"note: shard.count: 10,000 shards, but the inputs hold {size:,} bytes: fewer than 100 records a " \
           "shard" in out, out
    file = write(tmp_path, access_spec("in/*.log", shard={"count": 4}))
    assert main(["plan", str(file)]) == 0
    assert "shard.count" not in capsys.readouterr().out


def test_no_warning_for_shards_of_a_hundred_rows_or_more(tmp_path, capsys):
    """The bound: 400 rows in 4 shards is 100 rows a shard."""
    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "a.log", lines=400)
    file = write(tmp_path, access_spec("in/*.log", shard={"count": 4}))
    assert main(["run", str(file), "--backend", "cpu", "--scheduler", "sync", "--no-progress"]) == 0
    assert "shard.count" not in capsys.readouterr().err
    assert counts(tmp_path / "out")["rows_out"] == 400
