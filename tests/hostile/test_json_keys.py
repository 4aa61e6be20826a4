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


def test_a_file_of_that_record_alone_says_why_nothing_was_learnt(tmp_path, surroundings):
    """JSONTestSuite's file is that one record: nothing to learn fields from, and the error
    says why (the hint it gave before was about struct columns)."""
    import gpuetl
    from gpuetl.errors import SpecError

    (tmp_path / "a.jsonl").write_text(LONE + "\n")
    with surroundings(tmp_path):
        with pytest.raises(SpecError, match=r"source\.path: found no JSON objects to learn the fields from \(1 "
                                            r"sampled line\(s\) .* a lone surrogate escape") as err:
            gpuetl.Pipeline.from_dict(spec(), base_dir=tmp_path).plan()
    assert err.value.hint == "declare the fields and their types under `columns`"
