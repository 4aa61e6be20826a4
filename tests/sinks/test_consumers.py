"""A committed dataset loads in the readers people use: pyarrow.dataset, pandas, polars, DuckDB,
with the row counts of the manifest and the declared column types (UTC timestamps, int16)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import gpuetl
from gpuetl import samples

SPLITS = {"train": 0.8, "val": 0.2}


def _spec(splits: bool) -> dict:
    return {
        "version": 1, "name": "consumers",
        "source": {"type": "text", "path": "access.log"},
        "parse": {"preset": "apache_combined"},
        "columns": {"status": "int16", "time": {"type": "timestamp", "format": "%d/%b/%Y:%H:%M:%S %z"}},
        "shard": {"count": 3, **({"splits": SPLITS} if splits else {})},
        "sink": {"path": "split" if splits else "flat"},
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("consumers")
    samples.write_access_logs(base / "access.log", lines=1500, bad_every=75)
    return {kind: gpuetl.Pipeline.from_dict(_spec(kind == "split"), base_dir=base).run(backend="cpu", scheduler="sync")
            for kind in ("flat", "split")}


def expected_rows(result, split: str | None = None) -> int:
    return sum(s["rows"] for s in result.shards if split is None or s["split"] == split)


def test_runs_are_as_expected(runs):
    for result in runs.values():
        assert result.counts["rows_in"] == 1500
        assert result.counts["quarantined"] == 20
        assert expected_rows(result) == result.counts["rows_out"] == 1480
    assert {s["split"] for s in runs["split"].shards} == set(SPLITS)
    assert all((runs["split"].out_dir / s["path"]).parent.name == s["split"] for s in runs["split"].shards)


@pytest.mark.parametrize("kind", ["flat", "split"])
def test_pyarrow_dataset(runs, kind):
    result = runs[kind]
    dataset = ds.dataset(result.out_dir, format="parquet")          # hides _quarantine/, _tmp/, _manifest.json
    assert sorted(str(Path(f).relative_to(result.out_dir)) for f in dataset.files) == sorted(
        s["path"] for s in result.shards)
    table = dataset.to_table()
    assert table.num_rows == expected_rows(result)
    assert table.schema.field("time").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("status").type == pa.int16()
    assert table.schema.field("size").type == pa.int64()
    assert table.schema.field("ip").type in (pa.string(), pa.large_string())
    assert [f["name"] for f in result.manifest["schema"]] == table.schema.names


@pytest.mark.parametrize("kind", ["flat", "split"])
def test_pandas(runs, kind):
    result = runs[kind]
    df = pd.read_parquet(result.out_dir)
    assert len(df) == expected_rows(result)
    assert str(df["time"].dtype) in ("datetime64[us, UTC]", "datetime64[ns, UTC]")
    assert df["status"].dtype == "int16"
    assert df["time"].min() >= pd.Timestamp("2026-10-01", tz="UTC")
    assert df["status"].between(100, 599).all()


def test_polars(runs):
    pl = pytest.importorskip("polars")
    flat, split = runs["flat"], runs["split"]
    frame = pl.read_parquet(f"{flat.out_dir}/*.parquet")
    assert frame.height == expected_rows(flat)
    assert frame.schema["time"] == pl.Datetime("us", "UTC")
    assert frame.schema["status"] == pl.Int16
    # split folders: name them, or exclude the hidden '_' folders (a plain '**' would take _quarantine/ too)
    assert pl.scan_parquet(f"{split.out_dir}/train/*.parquet").select(pl.len()).collect().item() == expected_rows(
        split, "train")
    assert pl.scan_parquet(f"{split.out_dir}/[!_]*/*.parquet").select(pl.len()).collect().item() == expected_rows(
        split)


def test_duckdb(runs):
    duckdb = pytest.importorskip("duckdb")
    flat, split = runs["flat"], runs["split"]
    con = duckdb.connect()
    flat_files = f"read_parquet('{flat.out_dir}/*.parquet')"
    assert con.sql(f"select count(*) from {flat_files}").fetchall() == [(expected_rows(flat),)]
    types = {row[0]: row[1] for row in con.sql(f"describe select * from {flat_files}").fetchall()}
    assert types["time"] == "TIMESTAMP WITH TIME ZONE"
    assert types["status"] == "SMALLINT"
    per_split = dict(con.sql(
        f"select regexp_extract(filename, '/([^/]+)/part-[0-9]+[.]parquet$', 1) as split, count(*) "
        f"from read_parquet('{split.out_dir}/[!_]*/*.parquet', filename=true) group by 1").fetchall())
    assert per_split == {name: expected_rows(split, name) for name in SPLITS}


def test_quarantine_is_readable(runs):
    result = runs["flat"]
    table = ds.dataset(result.out_dir / "_quarantine", format="parquet").to_table()
    assert table.num_rows == result.counts["quarantined"]
    assert {"_file", "_offset", "_raw", "_reason"} <= set(table.schema.names)
    assert table.schema.field("_offset").type == pa.int64()
    raw = (result.out_dir.parent / "access.log").read_bytes()
    for offset, line in zip(table["_offset"].to_pylist()[:5], table["_raw"].to_pylist()[:5]):
        assert raw[offset:offset + len(line)] == line        # _raw: the exact input bytes


def _docs_blocks(section: str | None) -> list[str]:
    """The python blocks of docs/consuming.md's opening (section None) or of a section."""
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "consuming.md").read_text()
    part = text.split("\n## ", 1)[0] if section is None else text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", part, flags=re.S)


def _training_loop_examples() -> list[str]:
    return _docs_blocks("Feeding a training loop")


def _checks() -> dict:
    """The names docs/consuming.md's first block defines (complete_manifest, shard_files, IncompleteDataset)."""
    scope: dict = {}
    exec(compile(_docs_blocks(None)[0], "docs/consuming.md", "exec"), scope)
    return scope


def test_docs_shard_stream_example_runs(runs):
    """The documented reader runs as written and yields every row of the split, once."""
    result = runs["split"]
    stream_block = _training_loop_examples()[0]
    code = stream_block.replace('"pipelines/out/web-access"', repr(str(result.out_dir)))
    code = code.replace("    ...\n", "    seen.append(row)\n")
    scope: dict = {**_checks(), "seen": []}
    exec(compile(code, "docs/consuming.md", "exec"), scope)
    assert len(scope["seen"]) == expected_rows(result, "train")
    assert set(scope["seen"][0]) == {"ip", "path", "status"}
    # two ranks read disjoint shards that together are the split
    halves = [list(scope["ShardStream"](result.out_dir, rank=r, world=2, columns=["ip"])) for r in (0, 1)]
    assert sum(map(len, halves)) == expected_rows(result, "train")


def test_docs_torch_example_names_only_defined_classes(runs):
    """The PyTorch block uses the ShardStream defined above it (no undefined names); it runs
    where torch is installed."""
    stream_block, torch_block = _training_loop_examples()[:2]
    assert "class ShardDataset(ShardStream, IterableDataset)" in torch_block
    torch = pytest.importorskip("torch")
    code = stream_block.split("for row in ShardStream(")[0] + torch_block.replace(
        '"pipelines/out/web-access"', repr(str(runs["split"].out_dir))).replace("num_workers=4", "num_workers=0")
    scope: dict = _checks()
    exec(compile(code, "docs/consuming.md", "exec"), scope)
    assert sum(len(batch["ip"]) for batch in scope["loader"]) == expected_rows(runs["split"], "train")


# -- the documented readers check _SUCCESS and the manifest's sha256 in it ---------------------------

def _reader_statements(root: Path) -> list[str]:
    """Each reading statement of docs/consuming.md's reader block, on `root`, with the imports before it."""
    import ast

    block = _docs_blocks(None)[1].replace('"out/web-access"', repr(str(root)))
    tree = ast.parse(block)
    imports = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return ["\n".join(imports + [ast.unparse(n)]) for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))]


def _copy(result, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(result.out_dir, tmp_path / "copy"))


def test_docs_readers_read_the_complete_dataset(runs):
    """pyarrow, pandas, polars and DuckDB as the docs write them: the rows of the split the manifest lists."""
    pytest.importorskip("polars")
    pytest.importorskip("duckdb")
    result = runs["split"]
    code = _docs_blocks(None)[1].replace('"out/web-access"', repr(str(result.out_dir)))
    scope = _checks()
    exec(compile(code, "docs/consuming.md", "exec"), scope)
    train = expected_rows(result, "train")
    assert scope["train"].count_rows() == len(scope["df"]) == train
    assert scope["lf"].select(scope["pl"].len()).collect().item() == train
    assert scope["rows"] == [(train,)]
    assert len(_reader_statements(result.out_dir)) == 4


@pytest.mark.parametrize("damage", ["no _SUCCESS", "_SUCCESS names another manifest", "no manifest"])
def test_docs_readers_refuse_an_incomplete_dataset(runs, tmp_path, damage):
    """A dataset whose commit did not finish (no _SUCCESS; the old _SUCCESS beside a new manifest;
    no manifest) is refused by every documented reader with IncompleteDataset saying why,
    before a row is read; the folder is left as it was."""
    pytest.importorskip("polars")
    pytest.importorskip("duckdb")
    import hashlib
    import json

    out = _copy(runs["split"], tmp_path)
    if damage == "no _SUCCESS":
        (out / "_SUCCESS").unlink()
        said = "no _SUCCESS: the dataset is incomplete"
    elif damage == "no manifest":
        (out / "_manifest.json").unlink()
        said = "no _manifest.json"
    else:
        other = hashlib.sha256(b"the manifest of another commit").hexdigest()
        (out / "_SUCCESS").write_text(json.dumps({"manifest_sha256": other}) + "\n")
        said = "_manifest.json is not the manifest _SUCCESS names"
    before = sorted((p.name, p.read_bytes()) for p in out.rglob("*") if p.is_file())
    checks = _checks()
    refusals = []
    for statement in _reader_statements(out):
        with pytest.raises(checks["IncompleteDataset"]) as refused:
            exec(compile(statement, "docs/consuming.md", "exec"), dict(checks))
        refusals.append(str(refused.value))
    scope = dict(checks)
    exec(compile(_training_loop_examples()[0].split("for row in ShardStream(")[0], "docs/consuming.md", "exec"), scope)
    with pytest.raises(checks["IncompleteDataset"]) as refused:
        scope["ShardStream"](out)
    refusals.append(str(refused.value))
    assert len(refusals) == 5 and all(said in text and str(out) in text for text in refusals), refusals
    assert sorted((p.name, p.read_bytes()) for p in out.rglob("*") if p.is_file()) == before


def test_shard_stream_checks_again_each_epoch_and_each_shards_size(runs, tmp_path):
    """A stream opened on a complete dataset refuses the next epoch once the commit is undone
    (_SUCCESS gone), and a shard whose bytes are not the manifest's."""
    out = _copy(runs["split"], tmp_path)
    scope = _checks()
    exec(compile(_training_loop_examples()[0].split("for row in ShardStream(")[0], "docs/consuming.md", "exec"), scope)
    stream = scope["ShardStream"](out, columns=["ip"])
    assert len(list(stream)) == expected_rows(runs["split"], "train")
    success = (out / "_SUCCESS").read_bytes()
    (out / "_SUCCESS").unlink()
    with pytest.raises(scope["IncompleteDataset"], match="no _SUCCESS"):
        list(stream)
    (out / "_SUCCESS").write_bytes(success)
    shard = out / next(s["path"] for s in runs["split"].shards if s["split"] == "train")
    shard.write_bytes(shard.read_bytes() + b"\0")
    with pytest.raises(scope["IncompleteDataset"], match="not the .* bytes the manifest lists"):
        list(stream)
