"""A hostile user of `sink.mode: append` and dataset versions: every attack ends in a clear error
that leaves the dataset (and everything outside it) as it was, or in a version whose accounting
holds; never in rows read twice, nor in a version built on a truncated or edited one."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

import gpuetl
from gpuetl.cli import main
from gpuetl.errors import DataError, GpuetlError, OutputError, SourceError
from gpuetl.samples import write_access_logs

from .conftest import snapshot


def spec(delta: bool = False, **extra) -> dict:
    return {"version": 1, "name": "days", "source": {"type": "text", "path": "in/*.log", "blocksize": "32KiB"},
            "parse": {"preset": "apache_combined"}, "columns": {"status": "int16"},
            "shard": {"count": 2, "splits": {"train": 0.8, "val": 0.2}},
            "sink": {"path": "out", "mode": "append", "row_group_rows": 500, "delta_log": delta}, **extra}


def day(base: Path, n: int, lines: int = 300) -> Path:
    (base / "in").mkdir(exist_ok=True)
    path = base / "in" / f"day{n}.log"
    write_access_logs(path, lines=lines, seed=n, bad_every=97)
    return path


def run(base: Path, data: dict | None = None):
    return gpuetl.Pipeline.from_dict(data or spec(), base_dir=base).run(backend="cpu", scheduler="sync")


def manifest(base: Path) -> dict:
    return json.loads((base / "out" / "_manifest.json").read_bytes())


def identity_holds(c: dict) -> bool:
    return c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]


def refused(base: Path, surroundings, error, match: str, data: dict | None = None):
    """The append is refused with `error` matching `match`; nothing changed, the dataset included."""
    with surroundings(base), pytest.raises(error, match=match) as err:
        run(base, data)
    assert err.value.hint, "a refusal says what to do"
    return err.value


# -- the dataset appended to -----------------------------------------------------------------

def test_an_append_to_a_half_committed_dataset_is_refused(tmp_path, surroundings):
    day(tmp_path, 1)
    run(tmp_path)
    (tmp_path / "out" / "_SUCCESS").unlink()
    day(tmp_path, 2)
    refused(tmp_path, surroundings, OutputError, "holds an incomplete dataset")


@pytest.mark.parametrize("harm", ["deleted", "symlink", "folder_symlink"])
def test_a_version_manifest_deleted_or_replaced_by_a_link_is_refused(tmp_path, surroundings, harm):
    for n in (1, 2):
        day(tmp_path, n)
        run(tmp_path)
    kept = tmp_path / "out" / "_versions" / "00001.json"
    if harm == "deleted":
        kept.unlink()
    elif harm == "symlink":
        (tmp_path / "elsewhere.json").write_bytes(kept.read_bytes())
        kept.unlink()
        kept.symlink_to(tmp_path / "elsewhere.json")
    else:
        shutil.move(tmp_path / "out" / "_versions", tmp_path / "moved")
        (tmp_path / "out" / "_versions").symlink_to(tmp_path / "moved")
    day(tmp_path, 3)
    refused(tmp_path, surroundings, OutputError, "lacks _versions/00001.json" if harm == "deleted"
            else "did not write .*symbolic link")


def test_an_append_to_a_dataset_whose_version_manifest_was_edited_is_refused(tmp_path, surroundings):
    for n in (1, 2):
        day(tmp_path, n)
        run(tmp_path)
    kept = tmp_path / "out" / "_versions" / "00001.json"
    kept.write_bytes(kept.read_bytes().replace(b'"rows_out": ', b'"rows_out":  ', 1))
    day(tmp_path, 3)
    refused(tmp_path, surroundings, OutputError, r"_versions/00001.json does not hold the sha256")


@pytest.mark.parametrize("harm", ["deleted", "truncated"])
def test_an_append_to_a_dataset_with_an_old_shard_deleted_or_truncated_is_refused(tmp_path, surroundings, harm):
    day(tmp_path, 1)
    run(tmp_path)
    shard = tmp_path / "out" / manifest(tmp_path)["shards"][0]["path"]
    if harm == "deleted":
        shard.unlink()
    else:
        shard.write_bytes(shard.read_bytes()[:100])
    day(tmp_path, 2)
    refused(tmp_path, surroundings, OutputError, "lacks train/part-v00001-00000.parquet" if harm == "deleted"
            else r"part-v00001-00000.parquet holds 100 bytes, its manifest lists \d+")


def test_two_appends_racing_make_one_version_with_each_input_once(tmp_path):
    day(tmp_path, 1)
    run(tmp_path)
    day(tmp_path, 2)
    start, outcomes = threading.Barrier(2), []

    def racer():
        start.wait()
        try:
            outcomes.append(run(tmp_path).manifest["dataset_version"])
        except OutputError as err:            # the lock, or the dataset moved on under it
            assert "in use by another gpuetl run" in str(err) or "changed while this run" in str(err)
            outcomes.append("refused")

    threads = [threading.Thread(target=racer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 2 in outcomes and len(outcomes) == 2
    m = manifest(tmp_path)
    assert m["dataset_version"] == 2 and m["version_counts"]["rows_in"] == 300 and m["counts"]["rows_in"] == 600
    assert [i["path"] for i in m["inputs"]] == ["in/day1.log", "in/day2.log"] and identity_holds(m["counts"])
    assert main(["verify", str(tmp_path / "out")]) == 0


# -- the inputs between versions -------------------------------------------------------------

def test_a_renamed_input_is_not_read_again(tmp_path, surroundings):
    """A rename keeps the file (device, inode, size, mtime) but moves its ctime: its identity
    changed, so it is re-hashed against the version that read it, and not appended twice."""
    day(tmp_path, 1)
    run(tmp_path)
    (tmp_path / "in" / "day1.log").rename(tmp_path / "in" / "2026-10-01.log")
    with surroundings(tmp_path):
        result = run(tmp_path)
    assert result.nothing_to_append and manifest(tmp_path)["dataset_version"] == 1
    day(tmp_path, 2)
    m = run(tmp_path).manifest
    assert m["version_counts"]["rows_in"] == 300 and m["counts"]["rows_in"] == 600


def test_a_renamed_input_edited_in_place_is_refused(tmp_path, surroundings):
    first = day(tmp_path, 1)
    run(tmp_path)
    renamed = tmp_path / "in" / "2026-10-01.log"
    first.rename(renamed)
    with open(renamed, "r+b") as fh:            # the same size, other bytes, the same inode
        fh.seek(10)
        old = fh.read(3)
        fh.seek(10)
        fh.write(b"999" if old != b"999" else b"111")
    refused(tmp_path, surroundings, SourceError, r"2026-10-01.log is the file dataset version 1 read as "
                                                 r"in/day1.log .*changed since")


@pytest.mark.parametrize("harm", ["truncated", "grown", "symlink_to_other"])
def test_an_input_truncated_grown_or_replaced_by_a_link_to_other_bytes_is_refused(tmp_path, surroundings, harm):
    first = day(tmp_path, 1)
    run(tmp_path)
    raw = first.read_bytes()
    if harm == "truncated":
        first.write_bytes(raw[:1000])
    elif harm == "grown":
        first.write_bytes(raw + raw[:500])
    else:
        write_access_logs(tmp_path / "other.log", lines=300, seed=9, bad_every=97)
        first.unlink()
        first.symlink_to(tmp_path / "other.log")
    refused(tmp_path, surroundings, SourceError, "in/day1.log changed since dataset version 1 read it")


def test_an_input_replaced_by_a_link_to_the_same_bytes_is_not_read_again(tmp_path, surroundings):
    first = day(tmp_path, 1)
    run(tmp_path)
    (tmp_path / "copy.log").write_bytes(first.read_bytes())
    first.unlink()
    first.symlink_to(tmp_path / "copy.log")
    with surroundings(tmp_path):
        assert run(tmp_path).nothing_to_append


def test_changed_columns_between_versions_are_refused(tmp_path, surroundings):
    day(tmp_path, 1)
    run(tmp_path)
    day(tmp_path, 2)
    refused(tmp_path, surroundings, OutputError, "the pipeline file changed since dataset version 1",
            {**spec(), "columns": {"status": "int32"}})


def test_an_append_whose_every_record_is_quarantined_commits_nothing(tmp_path, surroundings):
    data = {**spec(), "on_error": "quarantine"}
    day(tmp_path, 1)
    run(tmp_path, data)
    (tmp_path / "in" / "day2.log").write_text("not an access log line\n" * 20)
    before = snapshot(tmp_path / "out")
    with surroundings(tmp_path, dataset=tmp_path / "out"), pytest.raises(DataError, match="no record was kept"):
        run(tmp_path, data)
    after = {k: v for k, v in snapshot(tmp_path / "out").items() if not k.startswith("_tmp")}
    assert after == {k: v for k, v in before.items() if not k.startswith("_tmp")}
    m = manifest(tmp_path)
    assert m["dataset_version"] == 1 and identity_holds(m["counts"])


# -- the Delta log -----------------------------------------------------------------------------

@pytest.mark.parametrize("plant", ["next_entry", "foreign_file", "symlink"])
def test_a_delta_log_planted_with_foreign_files_or_a_link_is_refused(tmp_path, surroundings, plant):
    pytest.importorskip("deltalake")
    day(tmp_path, 1)
    run(tmp_path, spec(delta=True))
    log = tmp_path / "out" / "_delta_log"
    if plant == "next_entry":
        (log / "00000000000000000001.json").write_text('{"commitInfo":{}}\n')
    elif plant == "foreign_file":
        (log / "notes.txt").write_text("mine")
    else:
        shutil.move(log, tmp_path / "log")
        log.symlink_to(tmp_path / "log")
    day(tmp_path, 2)
    refused(tmp_path, surroundings, OutputError, "holds 1 path gpuetl did not write", spec(delta=True))


# -- reading a version -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_versions(tmp_path_factory):
    base = tmp_path_factory.mktemp("two")
    for n in (1, 2):
        day(base, n)
        run(base)
    return base


@pytest.mark.parametrize("command", ["inspect", "verify", "report"])
@pytest.mark.parametrize("given", ["0", "-1", "x", "1.5"])
def test_a_dataset_version_that_is_no_number_is_a_usage_error_naming_a_version(two_versions, capsys, command,
                                                                               given):
    with pytest.raises(SystemExit) as exit_:
        main([command, str(two_versions / "out"), "--dataset-version", given])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"expected a dataset version's number, 1 or more, got {given!r}" in err and "rows" not in err


@pytest.mark.parametrize("command", ["inspect", "verify", "report"])
def test_a_dataset_version_the_dataset_lacks_is_named_with_the_ones_it_has(two_versions, capsys, command):
    assert main([command, str(two_versions / "out"), "--dataset-version", "999"]) == 2
    assert "no dataset version 999 (it has versions 1–2)" in capsys.readouterr().err


def test_the_loader_refuses_a_version_manifest_whose_sha_the_latest_does_not_list(two_versions, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(two_versions / "out", out)
    kept = json.loads((out / "_versions" / "00001.json").read_bytes())
    kept["shards"] = kept["shards"][:1]          # a smaller version 1, valid JSON
    (out / "_versions" / "00001.json").write_text(json.dumps(kept))
    with pytest.raises(DataError, match="does not hold the sha256 the latest manifest lists for dataset version 1"):
        gpuetl.Loader(str(out), split="train", dataset_version=1, output="arrow")
    for bad in (0, -1, "1", 1.0, True):
        with pytest.raises(GpuetlError, match="dataset_version must be a positive integer"):
            gpuetl.Loader(str(out), split="train", dataset_version=bad)


def test_a_lock_file_that_vanishes_while_leftovers_are_listed_is_no_error(tmp_path, monkeypatch):
    """Another run's lock file (`_lock.<pid>.<hex>`) lives for a moment while it takes the lock:
    listed, then gone before it is read, it is nothing to report (a race two appends met)."""
    from gpuetl.sinks import commit

    (tmp_path / "_tmp").mkdir()
    (tmp_path / "_tmp" / "_lock.1234.0123abcd").write_text("{}")
    tree = commit._Tree.open(tmp_path, False)
    tmp = tree.subtree("_tmp")

    def vanished(name, limit):
        raise FileNotFoundError(name)

    monkeypatch.setattr(tmp, "read_file", vanished)
    try:
        assert commit.find_leftovers(tmp) == []
    finally:
        tmp.close()
        tree.close()
