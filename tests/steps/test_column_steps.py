"""select, drop, rename, cast, filter, derive inside whole runs: values, schemas and counts, in the
first segment and after a global step (whose rows have been shuffled)."""

import pyarrow.parquet as pq
import pytest

from gpuetl import Pipeline
from gpuetl.errors import SpecError

CSV = "id,name,amount\n1,alice,10.5\n2,bob,x\n1,alice,10.5\n3,carol,7\n4,dave,0.5\n"


def run(tmp_path, steps, **extra):
    (tmp_path / "a.csv").write_text(CSV)
    spec = {"version": 1, "name": "s", "source": {"type": "csv", "path": "a.csv", "blocksize": 24},
            "columns": {"id": "int32", "amount": "float64"}, "steps": steps,
            "sink": {"path": "out", "mode": "overwrite"}, **extra}
    result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    table = pq.read_table(tmp_path / "out" / "part-00000.parquet")
    return result, table


@pytest.mark.parametrize("before", [[], [{"dedupe": {}}]])
def test_select_drop_rename_keep_every_row_accounted(tmp_path, before):
    steps = before + [{"select": ["name", "id", "amount"]}, {"drop": ["amount"]}, {"rename": {"name": "who"}}]
    result, table = run(tmp_path, steps)
    assert table.column_names == ["who", "id"]
    expected_out = 3 if before else 4
    assert result.counts["rows_out"] == expected_out == table.num_rows
    c = result.counts
    assert c["rows_in"] == 5 == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    expected = ["alice", "carol", "dave"] if before else ["alice", "alice", "carol", "dave"]
    assert table.column("who").to_pylist() == expected          # input order, duplicates gone


def test_filter_derive_cast_values_and_counts(tmp_path):
    steps = [{"filter": "amount > 1"}, {"derive": {"big": "amount * 2", "upper": "upper(name)"}},
             {"cast": {"big": "int64"}}]
    result, table = run(tmp_path, steps)
    assert table.column("upper").to_pylist() == ["ALICE", "ALICE", "CAROL"]
    assert table.column("big").to_pylist() == [21, 21, 14]
    assert result.counts == {"rows_in": 5, "rows_out": 3, "filtered": 1, "deduplicated": 0, "quarantined": 1}
    assert [s["filtered"] for s in result.stages] == [0, 1, 0, 0]


def test_steps_check_columns_at_plan_time(tmp_path):
    with pytest.raises(SpecError, match=r"steps\[0\]\.select: no column 'nme'; did you mean 'name'"):
        run(tmp_path, [{"select": ["nme"]}])
    with pytest.raises(SpecError, match=r"steps\[1\]\.rename: no column 'amount'"):
        run(tmp_path, [{"drop": ["amount"]}, {"rename": {"amount": "x"}}])


def test_expression_functions_run_on_the_real_backend(tmp_path):
    """The expression tests use a stub backend; here every function family runs on the CPU one."""
    steps = [{"derive": {"h": "hash(name, id)", "h2": "hash(name, id)", "hs": "hash(name, seed=1)",
                         "c": "coalesce(amount, 0.0)", "size": "if_else(amount > 5, 'big', 'small')",
                         "r": "round(amount / 3, 1)", "f": "floor(amount)", "s": "substr(upper(name), 0, 2)",
                         "m": "matches(name, '^a')", "n": "len(strip(name)) + abs(id - 10)"}}]
    result, table = run(tmp_path, steps)
    rows = table.to_pylist()
    assert all(r["h"] == r["h2"] and r["h"] != r["hs"] for r in rows)
    assert rows[0]["h"] == rows[1]["h"]                      # the two identical alice rows
    assert [r["size"] for r in rows] == ["big", "big", "big", "small"]
    assert [r["s"] for r in rows] == ["AL", "AL", "CA", "DA"]
    assert [r["m"] for r in rows] == [True, True, False, False]
    assert [r["n"] for r in rows] == [14, 14, 12, 10]
    assert rows[2]["r"] == 2.3 and rows[3]["f"] == 0.0
    assert str(table.schema.field("h").type) == "uint64"


@pytest.mark.parametrize("before", [[], [{"dedupe": {}}]])
def test_a_step_rejecting_a_row_keeps_its_values_and_names_its_place(tmp_path, before):
    from gpuetl.errors import DataError

    (tmp_path / "a.csv").write_text(CSV)
    spec = {"version": 1, "name": "s", "source": {"type": "csv", "path": "a.csv"},
            "steps": before + [{"cast": {"amount": "float64"}}], "sink": {"path": "out", "mode": "overwrite"}}
    result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    bad = pq.read_table(tmp_path / "out" / "_quarantine").to_pylist()
    assert [(b["_file"], b["_offset"]) for b in bad] == [("a.csv", 28)]
    assert b'"amount": "x"' in bad[0]["_raw"] and bad[0]["_stage"].endswith(":cast")
    assert result.stages[-1]["quarantined"] == 1
    with pytest.raises(DataError, match=r"a\.csv, byte offset 28: column 'amount'"):
        Pipeline.from_dict({**spec, "on_error": "fail"}, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
