"""JSON numbers that are not finite (issue 15): JSON has no NaN or infinity, so a number past a
float column's range (`1e400` as float64, `1e39` as float32) and the literals Python's json and
pyarrow's block reader both take (`NaN`, `Infinity`, `-Infinity`) make the record bad, naming
the field, at the top level, in a struct, in a list or on a path. Each case checks the reason, the
accounting identity, and that nothing outside the dataset changed."""

from __future__ import annotations

import pytest

from .test_json_inputs import lines, quarantined, rows, run, spec

COLUMNS = {"x": "float64", "y": "float32", "s": "struct<a: float64>", "l": "list<float64>", "n": "int64",
           "p.q": "float64"}
GOOD = {"x": 1.5, "y": 2.5, "s": {"a": 1.0}, "l": [1.0, 2.0], "n": 1, "p": {"q": 0.5}}

# what the block reader reads (as NaN or infinity): found by the finiteness check on its table
READ_AS_NOT_FINITE = {
    '{"x": NaN}': "field 'x': NaN is not JSON (it has no NaN or infinity)",
    '{"x": -Infinity}': "field 'x': -Infinity is not JSON (it has no NaN or infinity)",
    '{"y": 1e39}': "field 'y': 1e+39 is out of float32's range",
    '{"s": {"a": Infinity}}': "field 's': a: Infinity is not JSON (it has no NaN or infinity)",
    '{"l": [1.0, NaN]}': "field 'l': [1]: NaN is not JSON (it has no NaN or infinity)",
    '{"p": {"q": Infinity}}': "field 'p.q': Infinity is not JSON (it has no NaN or infinity)",
}
# what the block reader refuses (`Number too big to be stored in double`): the careful reader decides
REFUSED = {
    '{"x": 1e400}': "field 'x': 1e400 is out of float64's range",
    '{"x": -1e400}': "field 'x': -1e400 is out of float64's range",
    '{"s": {"a": 1e400}}': "field 's': a: 1e400 is out of float64's range",
    '{"l": [2.0, -1E400]}': "field 'l': [1]: -1E400 is out of float64's range",
    '{"n": 1e400}': "field 'n': expected int64, got 1e400",
    '{"n": 1e19}': "field 'n': expected int64, got 1e+19",
    '{"p": {"q": 1e400}}': "field 'p.q': 1e400 is out of float64's range",
}
# kept: the largest finite values, and text that says infinity (the text rules take "inf")
KEPT = ['{"x": 1e308, "y": 3.4e38, "l": [-1.7976931348623157e308]}', '{"x": "inf", "y": "-Infinity"}']


@pytest.mark.parametrize("bad", [READ_AS_NOT_FINITE, REFUSED, {**READ_AS_NOT_FINITE, **REFUSED}],
                         ids=["read-by-block", "refused-by-block", "both"])
def test_a_number_that_is_not_finite_makes_the_record_bad(tmp_path, surroundings, bad):
    (tmp_path / "a.jsonl").write_text(lines(GOOD, *bad, *KEPT))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec(COLUMNS))
    assert result.counts["quarantined"] == len(bad) and result.counts["rows_out"] == 1 + len(KEPT)
    assert quarantined(result) == bad
    kept = rows(result)
    assert kept[0]["x"] == 1.5 and kept[1]["x"] == 1e308 and kept[1]["l"] == [-1.7976931348623157e308]
    assert (kept[2]["x"], kept[2]["y"]) == (float("inf"), float("-inf"))


def test_among_many_clean_records_only_the_affected_ones_leave_the_block_reader(tmp_path, surroundings):
    """Past the careful reader's small runs (64 records): the bad records are named, the others
    keep their order."""
    records = [{"x": float(i), "y": 0.5, "n": i} for i in range(300)]
    records[0].update(s={"a": 0.0}, p={"q": 0.0})
    text = lines(*records).splitlines()
    text[10], text[150], text[299] = '{"x": NaN, "n": 10}', '{"y": 1e39, "n": 150}', '{"l": [Infinity], "n": 299}'
    (tmp_path / "a.jsonl").write_text("\n".join(text) + "\n")
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec(COLUMNS))
    assert result.counts["quarantined"] == 3 and result.counts["rows_out"] == 297
    assert [r["n"] for r in rows(result)] == [i for i in range(300) if i not in (10, 150, 299)]
    assert sorted(quarantined(result).values()) == [
        "field 'l': [0]: Infinity is not JSON (it has no NaN or infinity)",
        "field 'x': NaN is not JSON (it has no NaN or infinity)",
        "field 'y': 1e+39 is out of float32's range"]


@pytest.mark.parametrize("extra_fields", ["drop", "keep"])
def test_a_not_finite_number_no_column_reads(tmp_path, surroundings, extra_fields):
    """Dropped, nothing of it is kept, so the record stays; kept as `_extra` text, which JSON
    cannot write (`NaN`), the record is bad naming the field. A number past the range in a
    string column is kept as the text it was written as."""
    (tmp_path / "a.jsonl").write_text(lines({"x": 1.0, "t": 1}, '{"x": 2.0, "z": NaN, "t": 2}',
                                            '{"x": 3.0, "z": 1e400, "t": 3}', '{"x": 4.0, "t": 1e400}'))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"x": "float64", "t": "string"}, extra_fields=extra_fields))
    if extra_fields == "drop":
        assert [(r["x"], r["t"]) for r in rows(result)] == [(1.0, "1"), (2.0, "2"), (3.0, "3"), (4.0, "1e400")]
        assert result.counts["quarantined"] == 0
    else:
        assert [(r["x"], r["t"]) for r in rows(result)] == [(1.0, "1"), (4.0, "1e400")]
        assert quarantined(result) == {
            '{"x": 2.0, "z": NaN, "t": 2}':
                "field 'z' (an extra field, kept in _extra): NaN is not JSON (it has no NaN or infinity)",
            '{"x": 3.0, "z": 1e400, "t": 3}':
                "field 'z' (an extra field, kept in _extra): 1e400 is out of float64's range"}


def test_a_number_in_a_string_column_is_kept_as_written(tmp_path, surroundings):
    """A string column takes a JSON number as its text: `19.990` stays `19.990` (prices, IDs), not
    the float's shortest form (`19.99`, `1e-07`, `1.2345678901234568e+29`)."""
    written = ["19.990", "1E-7", "123456789012345678901234567890.0", "1e400", "2.50", "-0.0", "7"]
    (tmp_path / "a.jsonl").write_text("".join(f'{{"v": {w}}}\n' for w in written) + '{"v": "s"}\n')
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"v": "string"}))
    assert [r["v"] for r in rows(result)] == written + ["s"]


def test_a_float_where_a_path_expects_an_object_or_array_is_named_a_number(tmp_path, surroundings):
    """The careful reader's floats keep their text (a float subclass): the reasons still call them
    numbers (they said "a value")."""
    (tmp_path / "a.jsonl").write_text('{"user": 1.5, "tags": 2.50}\n{"user": {"id": 4}, "tags": ["x"]}\n')
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"user.id": "int64", "tags[0]": "string"}))
    assert [r["user.id"] for r in rows(result)] == [4]
    [reason] = quarantined(result).values()
    assert "user is a number, not an object" in reason or "tags is a number, not an array" in reason
