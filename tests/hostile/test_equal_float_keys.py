"""Dedupe keys that compare equal but differ in their bits (issue 30): `0.0` and `-0.0`, and NaNs
(a JSON string the text rules read as NaN). Exact dedupe finds its candidates by
Backend.row_hash, which makes them canonical on every backend (the CPU's polars row hash, and
the shared hash the GPU and a CPU without polars use), so each such group keeps its first row.
Checks the counts, the accounting identity and that nothing outside the dataset changed."""

from __future__ import annotations

import pytest

from gpuetl.backends import cpu

from .test_json_inputs import lines, rows, run, spec

RECORDS = [{"x": 0.0, "n": 0}, {"x": -0.0, "n": 1}, {"x": "nan", "n": 2}, {"x": 1.5, "n": 3},
           {"x": "NaN", "n": 4}, {"x": 0.0, "n": 5}, {"x": "-nan", "n": 6}]


@pytest.mark.parametrize("with_polars", [True, False])
def test_zero_and_minus_zero_and_nans_are_one_key_each(tmp_path, surroundings, monkeypatch, with_polars):
    if not with_polars:
        monkeypatch.setattr(cpu, "polars_available", lambda: False)
    (tmp_path / "a.jsonl").write_text(lines(*RECORDS))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"x": "float64", "n": "int64"}, steps=[{"dedupe": {"on": ["x"]}}]))
    assert result.counts["rows_in"] == 7 and result.counts["deduplicated"] == 4
    assert [r["n"] for r in rows(result)] == [0, 2, 3]
