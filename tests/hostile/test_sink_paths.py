"""Hostile sink paths, on an object store and on disk alike: glob characters, `..`, queries and
control characters in an s3:// sink are located errors at validate (exit 2, nothing written);
`./out`, `//out`, `out/.` name the prefix `out`; a sink inside another gpuetl dataset (its `_tmp`,
its `_quarantine/`, a split, a new folder in it) is refused before anything is written, on S3 as
on disk."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import gpuetl
from gpuetl.cli import main
from gpuetl.samples import write_access_logs

LINES = 60


def spec(sink: str, splits: bool = False) -> dict:
    data = {"version": 1, "name": "sinks", "source": {"type": "text", "path": "in/*.log"},
            "parse": {"preset": "apache_combined"}, "sink": {"path": sink, "mode": "overwrite"}}
    if splits:
        data["shard"] = {"count": 2, "splits": {"train": 0.5, "val": 0.5}}
    return data


@pytest.fixture
def base(tmp_path) -> Path:
    (tmp_path / "in").mkdir()
    write_access_logs(tmp_path / "in" / "a.log", lines=LINES, bad_every=10)
    return tmp_path


def write(base: Path, data: dict) -> None:
    """The pipeline file, written before a guard is set."""
    (base / "p.yaml").write_text(yaml.safe_dump(data))


def cli(capsys, command: str, base: Path) -> tuple[int, str]:
    code = main([command, str(base / "p.yaml")] + (["--backend", "cpu", "--scheduler", "sync", "--quiet"]
                                                     if command == "run" else []))
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err, err
    return code, err


def identity(result) -> None:
    c = result.counts
    assert c["rows_in"] == LINES
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    assert c["quarantined"] > 0 and sum(s["rows"] for s in result.shards) == c["rows_out"]


@pytest.mark.parametrize("rel, why", [
    ("o?t", "holds ?: an object-store sink path takes no glob characters"),
    ("o*t", "holds *: an object-store sink path takes no glob characters"),
    ("[o]ut", "holds [ ]: an object-store sink path takes no glob characters"),
    ("out?versionId=x", "a query such as ?versionId= is not part of a sink path"),
    ("out\n", "holds the control character '\\n'"),
    ("out/..", "'..' in an object-store sink path is not followed"),
    ("a/../out", "'..' in an object-store sink path is not followed"),
])
def test_a_sink_url_a_store_would_take_literally_is_a_located_error(s3, base, capsys, surroundings, rel, why):
    s3.put("keep/x", b"x")
    write(base, spec(s3.url(rel)))
    with surroundings(base):
        code, err = cli(capsys, "validate", base)
        assert code == 2 and "sink.path" in err and why in err, err
        code, err = cli(capsys, "run", base)
        assert code == 2 and why in err, err
    assert s3.keys() == ["keep/x"]                   # nothing written: no lock, no journal, no shard


@pytest.mark.slow
@pytest.mark.parametrize("rel", ["./out", "//out", "out/./", "out//"])
def test_dot_and_empty_parts_of_a_sink_url_name_the_prefix_itself(s3, base, surroundings, rel):
    with surroundings(base, dataset=base / "tmp"):          # the s3 fixture's TMPDIR: the sink's staging
        result = gpuetl.Pipeline.from_dict(spec(s3.url(rel)), base_dir=base).run(backend="cpu", scheduler="sync")
    identity(result)
    assert result.out_dir == s3.url("out")
    keys = s3.keys()
    assert keys and all(k.startswith("out/") and "/./" not in k and "//" not in k for k in keys), keys
    assert main(["verify", s3.url("out")]) == 0


INSIDE = ["first/_tmp", "first/_tmp/x", "first/_quarantine/y", "first/train", "first/new", "first/train/deeper"]


@pytest.mark.slow
def test_a_sink_inside_another_dataset_is_refused_on_a_store(s3, base, capsys, surroundings):
    first = gpuetl.Pipeline.from_dict(spec(s3.url("first"), splits=True), base_dir=base).run(
        backend="cpu", scheduler="sync")
    identity(first)
    before = {k: s3.get(k) for k in s3.keys()}
    for rel in INSIDE:
        write(base, spec(s3.url(rel)))
        with surroundings(base):
            code, err = cli(capsys, "run", base)
        assert code == 2 and f"lies inside the gpuetl dataset {s3.url('first')}" in err, (rel, err)
        assert {k: s3.get(k) for k in s3.keys()} == before, rel
    assert main(["verify", s3.url("first")]) == 0
    write(base, spec(s3.url("first-beside")))
    code, _ = cli(capsys, "run", base)     # a prefix beside it is fine
    assert code == 0


@pytest.mark.slow
def test_a_sink_inside_another_dataset_is_refused_on_disk(base, capsys, surroundings):
    first = gpuetl.Pipeline.from_dict(spec("first", splits=True), base_dir=base).run(backend="cpu", scheduler="sync")
    identity(first)
    for rel in INSIDE:
        write(base, spec(rel))
        with surroundings(base):                   # the dataset `first` included: nothing changes
            code, err = cli(capsys, "run", base)
        assert code == 2 and "lies inside" in err and str(base / "first") in err, (rel, err)
    assert main(["verify", str(base / "first")]) == 0
