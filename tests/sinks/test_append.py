"""sink.mode: append: each run reads only the inputs no earlier dataset version holds and commits
them as the next version (sinks/versions.py); every version stays readable (--dataset-version,
Loader(dataset_version=)) and checkable (verify)."""

from __future__ import annotations

import builtins
import json
import os
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

import gpuetl
from gpuetl.cli import main
from gpuetl.errors import OutputError, SourceError, SpecError
from gpuetl.samples import write_access_logs

from hostile.conftest import Surroundings, snapshot

SPLITS = {"train": 0.8, "val": 0.2}


def spec(mode="append", source="in/*.log", **shard):
    return {"version": 1, "name": "days", "source": {"type": "text", "path": source, "blocksize": "32KiB"},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
            "shard": {"count": 2, "splits": SPLITS, **shard},
            "sink": {"path": "out", "mode": mode, "row_group_rows": 500}}


def day(base: Path, n: int, lines: int = 600) -> Path:
    (base / "in").mkdir(exist_ok=True)
    path = base / "in" / f"day{n}.log"
    write_access_logs(path, lines=lines, seed=n, bad_every=97)
    return path


def run(base: Path, data: dict | None = None, log=None):
    return gpuetl.Pipeline.from_dict(data or spec(), base_dir=base).run(backend="cpu", scheduler="sync", log=log)


def rows_by_split(out: Path, manifest: dict) -> dict[str, Counter]:
    """Each split's rows as a multiset, from the shards the manifest lists."""
    found: dict[str, Counter] = {}
    for shard in manifest["shards"]:
        table = pq.read_table(out / shard["path"])
        found.setdefault(shard["split"], Counter()).update(map(lambda r: tuple(sorted(r.items())), table.to_pylist()))
    return found


def identity_holds(counts: dict) -> bool:
    return counts["rows_in"] == counts["rows_out"] + counts["filtered"] + counts["deduplicated"] + counts["quarantined"]


@pytest.fixture
def surroundings():
    return Surroundings()


@pytest.fixture(scope="module")
def three_days(tmp_path_factory):
    """Day 1, then day 2, then day 3 appended (the tests only read it) → base folder."""
    base = tmp_path_factory.mktemp("days")
    for n in (1, 2, 3):
        day(base, n)
        run(base)
    return base


@pytest.mark.slow
def test_three_appended_days_equal_one_run_over_all_three_split_for_split(three_days, tmp_path):
    out = three_days / "out"
    manifest = json.loads((out / "_manifest.json").read_bytes())
    assert manifest["dataset_version"] == 3
    whole = run(three_days, {**spec("overwrite"), "sink": {**spec()["sink"], "mode": "overwrite",
                                                           "path": str(tmp_path / "whole")}})
    assert rows_by_split(out, manifest) == rows_by_split(tmp_path / "whole", whole.manifest)
    assert manifest["counts"] == whole.manifest["counts"] and identity_holds(manifest["counts"])
    assert [len(v["shards"]) for v in manifest["versions"]] == [2, 2, 2]
    assert sorted(s["path"] for s in manifest["shards"]) == sorted(
        f"{split}/part-v{v:05d}-00000.parquet" for v in (1, 2, 3) for split in SPLITS)
    assert [q["path"] for q in manifest["quarantine"]] == [f"_quarantine/part-v{v:05d}-00000.parquet" for v in (1, 2, 3)]


def test_each_version_has_its_own_counts_beside_the_cumulative_ones_and_its_manifest_kept(three_days):
    out = three_days / "out"
    latest_raw = (out / "_manifest.json").read_bytes()
    latest = json.loads(latest_raw)
    per_version = [v["counts"] for v in latest["versions"]]
    assert all(identity_holds(c) for c in per_version) and all(c["rows_in"] > 0 for c in per_version)
    assert {k: sum(c[k] for c in per_version) for k in per_version[0]} == latest["counts"]
    assert latest["version_counts"] == per_version[-1]
    assert (out / "_versions/00003.json").read_bytes() == latest_raw      # the latest: the same bytes
    import hashlib
    for entry in latest["versions"][:-1]:
        raw = (out / entry["path"]).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == entry["sha256"]
        older = json.loads(raw)
        assert older["dataset_version"] == entry["version"]
        assert len(older["shards"]) == 2 * entry["version"]           # version N: the shards of 1..N
    assert [i["dataset_version"] for i in latest["inputs"]] == [1, 2, 3]
    assert [i["path"] for i in latest["inputs"]] == ["in/day1.log", "in/day2.log", "in/day3.log"]


def test_dataset_version_reads_each_version_in_inspect_verify_report_and_the_loader(three_days, capsys):
    out = three_days / "out"
    latest = json.loads((out / "_manifest.json").read_bytes())
    for v in (1, 2, 3):
        assert main(["inspect", str(out), "--dataset-version", str(v), "--json"]) == 0
        info = json.loads(capsys.readouterr().out)
        assert info["manifest"]["dataset_version"] == v
        assert info["manifest"]["counts"]["rows_out"] == sum(e["counts"]["rows_out"] for e in latest["versions"][:v])
        assert main(["verify", str(out), "--dataset-version", str(v)]) == 0
        assert f"of dataset version {v}" in capsys.readouterr().out
        assert main(["report", str(out), "--dataset-version", str(v), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["counts"] == latest["versions"][v - 1]["counts"]        # that run's own report
        loader = gpuetl.Loader(str(out), split="val", dataset_version=v, output="arrow")
        val = [s for s in latest["versions"][:v] for s in s["shards"] if s.startswith("val/")]
        assert sorted(s.path for s in loader.data.shards) == sorted(val)
    assert main(["verify", str(out), "--dataset-version", "4"]) == 2
    assert "no dataset version 4 (it has versions 1–3)" in capsys.readouterr().err


def test_a_tampered_version_manifest_is_refused_by_the_loader_and_verify(three_days, tmp_path, capsys):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(three_days / "out", out)
    raw = (out / "_versions/00001.json").read_bytes()
    (out / "_versions/00001.json").write_bytes(raw.replace(b'"rows_out": ', b'"rows_out":  ', 1))
    assert main(["verify", str(out)]) == 1
    assert "BAD _versions/00001.json: size 5" in capsys.readouterr().out
    with pytest.raises(gpuetl.errors.DataError, match="does not hold the sha256"):
        gpuetl.Loader(str(out), split="train", dataset_version=1)
    assert main(["verify", str(out), "--dataset-version", "1"]) == 1
    assert "does not hold the sha256 the latest manifest lists for dataset version 1" in capsys.readouterr().err


class Reads:
    """Every file opened for reading in this process (builtins.open and os.open), by path."""

    def __init__(self, monkeypatch):
        self.paths: list[str] = []
        real_open, real_os_open = builtins.open, os.open

        def opened(file, *args, **kw):
            if isinstance(file, (str, os.PathLike)):
                self.paths.append(os.path.abspath(os.fspath(file)))
            return real_open(file, *args, **kw)

        def os_opened(path, flags, *args, **kw):
            if isinstance(path, (str, os.PathLike)) and kw.get("dir_fd") is None:
                self.paths.append(os.path.abspath(os.fspath(path)))
            return real_os_open(path, flags, *args, **kw)

        monkeypatch.setattr(builtins, "open", opened)
        monkeypatch.setattr(os, "open", os_opened)

    def of(self, path: Path) -> int:
        return self.paths.count(str(path))


def test_an_unchanged_input_is_not_read_again_and_no_new_input_makes_no_version(tmp_path, monkeypatch, capsys,
                                                                               surroundings):
    first = day(tmp_path, 1)
    run(tmp_path)
    second = day(tmp_path, 2)
    reads = Reads(monkeypatch)
    result = run(tmp_path)
    assert result.manifest["dataset_version"] == 2
    assert reads.of(second) > 0 and reads.of(first) == 0, "day 1 is held by version 1: not opened again"
    monkeypatch.undo()
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(spec()))
    with surroundings(tmp_path):           # nothing changes, the dataset included
        assert main(["run", str(tmp_path / "p.yaml"), "--backend", "cpu", "--scheduler", "sync"]) == 0
    said = capsys.readouterr()
    assert "nothing to append" in said.err
    assert json.loads((tmp_path / "out/_manifest.json").read_bytes())["dataset_version"] == 2


def test_a_changed_input_is_refused_naming_it_and_the_dataset_is_unchanged(tmp_path):
    first = day(tmp_path, 1)
    run(tmp_path)
    day(tmp_path, 2)
    before = snapshot(tmp_path / "out")
    data = bytearray(first.read_bytes())
    data[10:13] = b"999" if data[10:13] != b"999" else b"111"        # the same size, other bytes
    first.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=r"in/day1.log changed since dataset version 1 read it"):
        run(tmp_path)
    first.write_bytes(bytes(data) + b"1.2.3.4 - - [01/Oct/2026:00:00:00 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"\n")
    with pytest.raises(SourceError, match=r"in/day1.log changed since dataset version 1 read it \(\d+ -> \d+ bytes"):
        run(tmp_path)
    assert snapshot(tmp_path / "out") == before


def test_an_input_touched_but_holding_the_same_bytes_is_rehashed_not_read_as_new(tmp_path):
    first = day(tmp_path, 1)
    run(tmp_path)
    os.utime(first, ns=(1_000_000_000, 1_000_000_000))       # another mtime (and ctime): the identity changed
    notes = []
    result = run(tmp_path, log=notes.append)
    assert result.nothing_to_append and result.manifest["dataset_version"] == 1
    plan = gpuetl.Pipeline.from_dict(spec(), base_dir=tmp_path).plan()
    assert any("in/day1.log" in n and "the same bytes as dataset version 1 read" in n for n in plan.notes)


def test_source_path_may_change_between_versions_any_other_change_is_refused_with_a_hint(tmp_path):
    day(tmp_path, 1)
    run(tmp_path, spec(source="in/day1.log"))
    day(tmp_path, 2)
    assert run(tmp_path, spec(source=["in/day1.log", "in/day2.log"])).manifest["dataset_version"] == 2
    day(tmp_path, 3)
    before = snapshot(tmp_path / "out")
    with pytest.raises(OutputError, match="the pipeline file changed since dataset version 2") as err:
        run(tmp_path, spec(shuffle=True))
    assert "only source.path, sink.mode and sink.path may change between versions, and source.blocksize where" \
        in str(err.value) and err.value.hint
    assert "a version whose fingerprint holds its source.blocksize takes that blocksize" in err.value.hint
    assert snapshot(tmp_path / "out") == before


def test_source_blocksize_may_change_between_versions(tmp_path):
    """Each version cuts its own partitions (the backends' default blocksizes differ); the rows
    are those of one run over every input, as with any blocksize."""
    day(tmp_path, 1)
    run(tmp_path)
    day(tmp_path, 2)
    second = run(tmp_path, {**spec(), "source": {**spec()["source"], "blocksize": "8KiB"}})
    assert second.manifest["dataset_version"] == 2 and identity_holds(second.counts)
    whole = tmp_path / "whole"
    (whole / "in").mkdir(parents=True)
    for n in (1, 2):
        (whole / "in" / f"day{n}.log").write_bytes((tmp_path / "in" / f"day{n}.log").read_bytes())
    one = run(whole, spec("overwrite"))
    assert sum(rows_by_split(tmp_path / "out", second.manifest).values(), Counter()) \
        == sum(rows_by_split(whole / "out", one.manifest).values(), Counter())


@pytest.mark.parametrize("source", [{"blocksize": "32KiB"}, {}], ids=["the files blocksize", "no blocksize"])
def test_a_version_whose_fingerprint_holds_its_blocksize_is_appended_to(tmp_path, monkeypatch, source):
    """A manifest whose pipeline fingerprint kept source.blocksize in (the run's, or the pipeline
    file's default where the file sets none) is this pipeline's: the next version appends."""
    from gpuetl.runtime.phases import resume

    data = {**spec(), "source": {"type": "text", "path": "in/*.log", **source}}
    digest = resume.pipeline_digest
    kept = source.get("blocksize") and 32 * 1024 or 64 << 20
    day(tmp_path, 1)
    with monkeypatch.context() as m:
        m.setattr(resume, "pipeline_digest", lambda plan, blocksize=None: digest(plan, kept))
        first = run(tmp_path, data)
    plan = gpuetl.Pipeline.from_dict(data, base_dir=tmp_path).plan("cpu")
    assert first.manifest["fingerprint"]["pipeline"] == digest(plan, kept) != digest(plan)
    day(tmp_path, 2)
    assert run(tmp_path, data).manifest["dataset_version"] == 2
    day(tmp_path, 3)
    with pytest.raises(OutputError, match="the pipeline file changed since dataset version 2"):
        run(tmp_path, {**data, "columns": {"status": "int32"}})


def test_a_damaged_copy_of_the_latest_versions_manifest_is_refused_and_repair_writes_it_again(tmp_path, capsys):
    """The next version records the sha256 of the latest's manifest as that version's: an append
    over a damaged _versions/ copy made the version unreadable for good. Refused, nothing
    changed; verify --repair writes the copy again from _manifest.json (_SUCCESS vouches for it)."""
    day(tmp_path, 1)
    run(tmp_path)
    out = tmp_path / "out"
    copy = out / "_versions/00001.json"
    copy.write_bytes(copy.read_bytes()[:-100])
    day(tmp_path, 2)
    before = snapshot(out)
    with pytest.raises(OutputError, match=r"_versions/00001.json does not hold the bytes of _manifest.json") as err:
        run(tmp_path)
    assert "gpuetl verify --repair" in err.value.hint
    assert snapshot(out) == before
    assert main(["verify", str(out), "--repair"]) == 0
    assert copy.read_bytes() == (out / "_manifest.json").read_bytes()
    assert run(tmp_path).manifest["dataset_version"] == 2
    gpuetl.Loader(str(out), split="train", dataset_version=1)
    assert main(["verify", str(out), "--dataset-version", "1"]) == 0


def test_verify_says_a_killed_appends_files_go_with_the_next_append_not_resume(tmp_path, capsys):
    """verify's note on a killed run's files said sink.mode: resume continues that run; on an
    append dataset resume refuses (a dataset of other inputs): the next append removes them."""
    import subprocess
    import sys

    from gpuetl.sinks.commit import OWNER, RUN_FORMAT
    from gpuetl.sinks.lock import this_process

    day(tmp_path, 1)
    run(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    name = "20261203T000000Z-0a1b2c3d"
    killed = tmp_path / "out/_tmp" / name
    (killed / "maps").mkdir(parents=True)
    (killed / "maps/p00000.json").write_text("{}")
    (killed / OWNER).write_text(json.dumps({**this_process(RUN_FORMAT), "run": name, "pid": gone.pid}))
    assert main(["verify", str(tmp_path / "out")]) == 0
    said = capsys.readouterr().out
    assert f"LEFTOVER _tmp/{name}: the temporary files of a run that did not finish" in said
    assert "run it again with sink.mode: append" in said and "resume" not in said
    day(tmp_path, 2)
    assert run(tmp_path).manifest["dataset_version"] == 2 and not killed.exists()


def test_appending_to_a_dataset_another_mode_wrote_is_refused(tmp_path):
    day(tmp_path, 1)
    run(tmp_path, spec("overwrite"))
    day(tmp_path, 2)
    with pytest.raises(OutputError, match="written in another sink.mode"):
        run(tmp_path)


def test_an_append_whose_new_records_are_all_filtered_is_a_version_not_an_error(tmp_path):
    day(tmp_path, 1)
    data = {**spec(), "steps": [{"filter": "status != 418"}]}
    run(tmp_path, data)
    teapots = "".join(f'10.0.0.{i} - - [02/Oct/2026:00:00:{i:02d} +0000] "GET /t HTTP/1.1" 418 5 "-" "-"\n'
                      for i in range(20))
    (tmp_path / "in" / "day2.log").write_text(teapots)
    result = run(tmp_path, data)
    m = result.manifest
    assert m["dataset_version"] == 2
    assert m["version_counts"] == {"rows_in": 20, "rows_out": 0, "filtered": 20, "deduplicated": 0, "quarantined": 0}
    assert identity_holds(m["counts"]) and main(["verify", str(tmp_path / "out")]) == 0


def test_an_unknown_dataset_version_and_a_bad_loader_argument_are_usage_errors(three_days):
    with pytest.raises(SpecError, match="no dataset version 9"):
        gpuetl.Loader(str(three_days / "out"), split="train", dataset_version=9)
    with pytest.raises(SpecError, match="dataset_version must be a positive integer"):
        gpuetl.Loader(str(three_days / "out"), split="train", dataset_version=0)


def test_a_journal_that_keeps_files_the_dataset_did_not_hold_or_creates_other_than_a_delta_entry_is_untrusted():
    from gpuetl.sinks.commit import JOURNAL_FORMAT, check_journal

    manifest = {"shards": [{"path": "train/part-v00001-00000.parquet"}, {"path": "train/part-v00002-00000.parquet"}]}
    journal = {"format": JOURNAL_FORMAT, "run": "r", "previous": ["_manifest.json", "train/part-v00001-00000.parquet"],
               "moves": ["train/part-v00002-00000.parquet"], "keep": ["train/part-v00001-00000.parquet"],
               "created": [], "manifest": manifest}
    assert check_journal(journal, "r", lambda rel: True, {"train/part-v00001-00000.parquet"}) is journal
    with pytest.raises(ValueError, match="keeps files the dataset before it did not hold"):
        check_journal({**journal, "keep": ["train/other.parquet"]}, "r", lambda rel: True, set())
    with pytest.raises(ValueError, match="no Delta log entries"):
        check_journal({**journal, "created": ["train/part-v00003-00000.parquet"]}, "r", lambda rel: True, set())
    with pytest.raises(ValueError, match="lists files the commit does not move"):
        check_journal({**journal, "keep": []}, "r", lambda rel: True, set())


def test_a_held_file_named_another_way_is_not_read_again(tmp_path):
    day(tmp_path, 1)
    run(tmp_path)
    (tmp_path / "logs").symlink_to(tmp_path / "in")            # the same files by another path
    day(tmp_path, 2)
    result = run(tmp_path, spec(source=["logs/day1.log", "in/day2.log"]))
    assert [i["path"] for i in result.manifest["inputs"]] == ["in/day1.log", "in/day2.log"]
    assert result.manifest["version_counts"]["rows_in"] == 600


@pytest.mark.slow
def test_shuffled_shards_cut_by_count_are_written_per_version_and_split_as_one_run_would(tmp_path):
    data = spec(count=4, shuffle=True)
    for n in (1, 2):
        day(tmp_path, n, lines=400)
        result = run(tmp_path, data)
    names = sorted(s["path"] for s in result.manifest["shards"])
    assert names == sorted(f"{split}/part-v{v:05d}-{k:05d}.parquet" for v in (1, 2)
                           for split, shards in (("train", 3), ("val", 1)) for k in range(shards))
    whole = run(tmp_path, {**data, "sink": {**data["sink"], "mode": "overwrite", "path": str(tmp_path / "whole")}})
    assert rows_by_split(tmp_path / "out", result.manifest) == rows_by_split(tmp_path / "whole", whole.manifest)
    assert main(["verify", str(tmp_path / "out")]) == 0
