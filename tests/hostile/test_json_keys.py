"""A key JSON can write but UTF-8 cannot hold (#27.8): JSONTestSuite's
`i_object_key_lone_2nd_surrogate` (`{"\\uDFAA":0}`) is one bad record, whether the fields are
learnt from a sample or declared: it is quarantined and the run goes on."""

from __future__ import annotations

import pytest

from .test_json_inputs import quarantined, rows, run, spec

LONE = '{"\\uDFAA": 0}'
REASON = "invalid JSON: a \\u escape is half of a surrogate pair, not a character"


@pytest.mark.parametrize("columns", [None, {"a": "int64"}], ids=["inferred", "declared"])
def test_a_lone_surrogate_key_is_quarantined_not_a_failed_inference(tmp_path, surroundings, columns):
    (tmp_path / "a.jsonl").write_text(f'{{"a": 1}}\n{LONE}\n{{"a": 2, "b\\uDFAA": 3}}\n{{"a": 3}}\n')
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec(columns))
    assert [r["a"] for r in rows(result)] == [1, 3]
    assert list(quarantined(result).values()) == [REASON, REASON]
    assert set(rows(result)[0]) == {"a", "_file", "_offset"}
