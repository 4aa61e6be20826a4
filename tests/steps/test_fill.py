import datetime as dt

import pytest

from gpuetl.errors import SpecError
from gpuetl.steps.base import StepError
from textdata import CPU, frame, make_step, run_jsonl, write_jsonl

SCHEMA = {"s": "string", "i": "int16", "f": "float64", "b": "bool", "t": "timestamp"}


def test_fill_replaces_nulls_only_and_keeps_types():
    df = frame(s=("string", ["a", None]), i=("int16", [None, 7]), f=("float64", [None, 1.5]),
               b=("bool", [None, False]), t=("timestamp", [None, dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)]))
    step = make_step("fill", {"s": "-", "i": 0, "f": 2, "b": True, "t": "2024-01-01T00:00:00Z"}, SCHEMA)
    out = step.transform(df, CPU)
    assert out["s"].tolist() == ["a", "-"]
    assert out["i"].tolist() == [0, 7] and out["i"].dtype == CPU.dtype("int16")
    assert out["f"].tolist() == [2.0, 1.5]
    assert out["b"].tolist() == [True, False]
    assert out["t"].iloc[0] == dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    assert all(out[c].dtype == CPU.dtype(t) for c, t in SCHEMA.items())


@pytest.mark.parametrize("raw, message", [
    ({"i": "zero"}, "int16: give a whole number"),
    ({"i": 70000}, "out of range"),
    ({"i": True}, "whole number"),
    ({"s": 5}, "give a string"),
    ({"b": 1}, "true or false"),
    ({"f": "x"}, "give a number"),
    ({"t": "yesterday"}, "not an ISO 8601"),
    ({"nope": 1}, "no column 'nope'"),
])
def test_fill_values_are_type_checked_at_plan_time(raw, message):
    with pytest.raises(StepError, match=message):
        make_step("fill", raw, SCHEMA)


def test_fill_in_a_pipeline(tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"name": "x", "n": 1}, {"name": None, "n": None}, {"n": 3}])
    result, rows = run_jsonl(tmp_path, [{"fill": {"name": "unknown", "n": -1}}], {"name": "string", "n": "int32"})
    assert [(r["name"], r["n"]) for r in rows] == [("x", 1), ("unknown", -1), ("unknown", 3)]
    assert result.counts["rows_out"] == 3


def test_a_bad_fill_value_is_a_located_spec_error(tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"n": 1}])
    with pytest.raises(SpecError, match=r"steps\[0\]\.fill: .*'n' is int32"):
        run_jsonl(tmp_path, [{"fill": {"n": "x"}}], {"n": "int32"})
