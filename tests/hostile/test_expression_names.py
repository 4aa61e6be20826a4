"""Column names an expression cannot write bare (spaces, dots, backticks, letters Python would
normalise) and literals Python accepts but a column cannot hold: quoted names reach their columns,
the rest are located errors at validate (exit 2), never an internal error at run time."""

from __future__ import annotations

import json

import pytest

from gpuetl.expr import ExprError, parse_expression

from .test_spec import BASE, folder, line_of, manifest_counts, refused, rows, run

RECORDS = [
    {"US Gross": 5, "connections": {"active": 3}, "a`b": "x"},
    {"US Gross": 0, "connections": {"active": 9}, "a`b": "y"},
    {"US Gross": 7, "connections": {"active": 1}, "a`b": "z"},
    {"US Gross": 8, "connections": {"active": 4}, "a`b": "w"},
]

QUOTED = """\
    version: 1
    name: quoted
    source: {type: jsonl, path: in/x.jsonl}
    columns: {"US Gross": int64, connections.active: int64, "a`b": string}
    steps:
      - filter: "`US Gross` > 0 and `connections.active` > 2"
      - derive: {total: "`US Gross` + `connections.active`", tick: "upper(`a``b`)"}
    sink: {path: out}
    """


def test_quoted_names_reach_columns_with_spaces_dots_and_backticks(tmp_path, capsys, surroundings):
    file = folder(tmp_path, QUOTED, {"in/x.jsonl": "".join(json.dumps(r) + "\n" for r in RECORDS)})
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        code, message = run(capsys, file)
    assert code == 0, message
    assert manifest_counts(out) == {"rows_in": 4, "rows_out": 2, "filtered": 2, "deduplicated": 0, "quarantined": 0}
    assert [(r["US Gross"], r["total"], r["tick"]) for r in rows(out)] == [(5, 8, "X"), (8, 12, "W")]


def test_quoted_names_keep_their_place_in_the_users_text():
    expr = parse_expression("len(`a b`) > 1 and `x``y` == 'q`r' and é > `z`")
    assert expr.columns() == {"a b", "x`y", "é", "z"}
    assert str(expr) == "len(`a b`) > 1 and `x``y` == 'q`r' and é > `z`"      # the text is the user's
    with pytest.raises(ExprError) as err:
        parse_expression("`é ü` + ) 1")
    assert err.value.col == 8                                             # where ')' is in what they wrote
    with pytest.raises(ExprError) as err:
        parse_expression("`a b` > 1").infer_type({"a_b": "int64"})
    assert err.value.col == 0 and "unknown column 'a b'" in str(err.value)
    with pytest.raises(ExprError) as err:
        parse_expression("x > 1 and `US Gros` > 0").infer_type({"x": "int64", "US Gross": "int64"})
    assert err.value.col == 10 and "did you mean `US Gross`?" in str(err.value)
    from gpuetl.expr import quote_name
    assert [quote_name(n) for n in ("ok", "US Gross", "a`b", "and", "lower", "ａ")] == \
        ["ok", "`US Gross`", "`a``b`", "`and`", "`lower`", "`ａ`"]


@pytest.mark.parametrize("expression, column, expected", [
    ("word == 'a' and connections.active > 2", 16,
     "attribute access ('.active'); a column whose name has dots, brackets or spaces is written in backticks: "
     "`connections.active`"),
    ("peers[0] == 'a'", 0, "written in backticks: `peers[0]`"),
    ("US Gross > 0", 0, "a column name with spaces is written in backticks: `US Gross`"),
    ("`word > 'a'", 0, "the quoted name opened by this backtick is not closed"),
    ("`` == 'a'", 0, "an empty quoted name"),
    ("`lower`(word) == 'a'", 0, "a column cannot be called"),
])
def test_names_that_need_quotes_get_the_quoted_form_as_hint(tmp_path, capsys, expression, column, expected):
    file = folder(tmp_path, BASE.replace("word != 'zzz'", expression.replace("\\", "\\\\")))
    message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, 'filter')}: steps[0].filter:" in message
    assert f"at column {column}:" in message and expected in message


@pytest.mark.parametrize("expression, expected", [
    # Python reads identifiers NFKC-normalised: a fullwidth 'ｗｏｒｄ' would silently be 'word'
    ("ｗｏｒｄ == 'a'", "at column 0: the name 'ｗｏｒｄ' is read by Python as 'word'"),
    ("ｌｏｗｅｒ(word) == 'a'", "at column 0: the name 'ｌｏｗｅｒ' is read by Python as 'lower'"),
    ("round(len(word), ｎdigits=1) > 1", "at column 17: the keyword 'ｎdigits' is read by Python as 'ndigits'"),
    ("word != 'a' or rest > 1e999", "at column 22: the number 1e999 is too large for a float64"),
    ("word in ['a', 1e999]", "at column 14: the number 1e999 is too large"),
    ("word != '\\ud800'", "at column 8: the string literal '\\ud800' holds '\\ud800', half of a UTF-16 surrogate"),
])
def test_literals_and_names_python_would_change_are_located_errors(tmp_path, capsys, expression, expected):
    file = folder(tmp_path, BASE.replace("\"word != 'zzz'\"", json.dumps(expression, ensure_ascii=False)))
    message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, 'filter')}: steps[0].filter:" in message
    assert expected in message


def test_fullwidth_name_can_be_quoted(tmp_path, capsys, surroundings):
    file = folder(tmp_path, BASE.replace("  - filter: \"word != 'zzz'\"",
                                         "  - rename: {word: ｗ}\n  - filter: \"`ｗ` != 'beta'\""))
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        code, message = run(capsys, file)
    assert code == 0, message
    assert [r["ｗ"] for r in rows(out)] == ["alpha", "gamma"]


def test_a_lone_surrogate_written_in_yaml_is_a_located_error(tmp_path, capsys):
    file = folder(tmp_path, BASE.replace("\"word != 'zzz'\"", "\"word != '\\ud800'\""))
    message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, 'filter')}: steps[0].filter:" in message
    assert "at column 9: it holds '\\ud800', half of a UTF-16 surrogate pair" in message


def test_a_column_selected_twice_is_a_located_error(tmp_path, capsys):
    file = folder(tmp_path, BASE.replace("  - filter: \"word != 'zzz'\"", "  - select: [word, rest, word]"))
    message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, 'select')}: steps[0].select: the column 'word' is listed twice" in message


def test_an_unquoted_expression_starting_with_a_backtick_gets_the_yaml_hint(tmp_path, capsys):
    file = folder(tmp_path, BASE.replace("\"word != 'zzz'\"", "`word` != 'zzz'"))
    message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, 'filter')}:" in message and "cannot start any token" in message
    assert "quote the whole expression, e.g. filter: \"`US Gross` > 0\"" in message
