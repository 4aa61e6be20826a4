"""The CLF tokenizer must give exactly what RE2's extract_regex gives for the preset regexes."""

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings, strategies as st

from gpuetl.backends.cpu_clf import extract_clf
from gpuetl.parsing import preset
from gpuetl.samples import write_access_logs

EDGE_LINES = [
    '::1 - - [10/Oct/2026:13:55:36 -0700] "-" 400 - "-" "-"',
    '2001:db8::1 - frank [10/Oct/2026:13:55:36 +0000] "GET /a?b=c HTTP/2.0" 200 10 "-" "curl/8.0"',
    '1.2.3.4 a b [t] "GET /x\\" HTTP/1.1" 200 5 "r" "u\\"a"',
    '1.2.3.4 a b [t] "GET /x HTTP/1.1" 200 5 "r\\\\" "ua"',
    '1.2.3.4 a b [t] "GET  /x HTTP/1.1" - - "" ""',
    '1.2.3.4 a b [t] "\\x16\\x03\\x01" 400 0 "-" "-"',
    'a b c [x]] "y" 1 2 "" "" ',
    "garbage",
    '1.2.3.4\u00a0x - - [t] "GET / HTTP/1.1" 200 5 "r" "u"',       # RE2's \\S is ASCII: NBSP is not a space
    '1.2.3.4 - - [t] "GET / HTTP/1.1" \u0662\u0660\u0660 5 "r" "u"',  # nor are Arabic-Indic digits \\d
    '1.2.3.4 - - [t] "GET /\u2003x HTTP/1.1" 200 5 "r" "u"',
    "",
    '1.2.3.4 - - [10/Oct/2026:13:55:36 -0700] "GET / HTTP/1.1" 200 2326',
]


def _check(lines, name, nulls=False):
    """With `nulls`, as the CPU backend calls it: "" and "-" become null (the presets' no value)."""
    rule = preset(name)
    arr = pa.array(lines, pa.string())
    cols, matched = extract_clf(arr, rule.regex, tuple(rule.columns), null_empty=nulls, null_dash=nulls)
    expected = pc.extract_regex(arr, pattern=rule.regex)
    assert list(matched) == expected.is_valid().to_pylist()
    for column in rule.columns:
        want = pc.struct_field(expected, column).to_pylist()
        if nulls:
            want = [None if v in ("", "-") else v for v in want]
        assert cols[column].to_pylist() == want, column
        assert cols[column].type == pa.string()
        cols[column].validate(full=True)


@pytest.mark.parametrize("nulls", [False, True])
@pytest.mark.parametrize("name", ["apache_combined", "apache_common", "nginx_combined"])
def test_edge_lines_equal_regex(name, nulls):
    _check(EDGE_LINES, name, nulls)


def test_generated_logs_equal_regex(tmp_path):
    path = tmp_path / "a.log"
    write_access_logs(path, lines=5000, seed=3, bad_every=97)
    _check(path.read_text().splitlines(), "apache_combined")
    _check(path.read_text().splitlines(), "apache_combined", nulls=True)


def test_lines_the_single_pass_leaves_are_put_back_in_their_places():
    """extract_clf reads usual requests in one pass and hands the other lines to the two-regex
    path: their values must land on their own rows, with the presets' nulls ('' and '-')."""
    rule = preset("apache_combined")
    usual = '1.2.3.4 - u{} [10/Oct/2026:13:55:36 -0700] "GET /p{} HTTP/1.1" 200 {} "-" "ua"'
    odd = ['::1 - - [t] "-" 400 - "-" "-"', "garbage", '1.2.3.4 a b [t] "\\x16\\x03" 400 0 "r" ""']
    lines = [usual.format(i, i, i) for i in range(40)]
    for at, line in zip((0, 17, 39), odd):
        lines[at] = line
    arr = pa.array(lines, pa.string())
    cols, matched = extract_clf(arr, rule.regex, tuple(rule.columns), null_empty=True, null_dash=True)
    expected = pc.extract_regex(arr, pattern=rule.regex)
    assert list(matched) == expected.is_valid().to_pylist() and matched.sum() == 39
    for column in rule.columns:
        want = [None if v in ("", "-") else v for v in pc.struct_field(expected, column).to_pylist()]
        assert cols[column].to_pylist() == want, column
    assert cols["user"][5].as_py() == "u5" and cols["method"][0].as_py() is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet='ab\\" []-1/\tÄ\u00a0\u0663', max_size=40).map(
    lambda s: '1.2.3.4 - - [t] "' + s + '" 200 3 "' + s[::-1] + '" "' + s + '"'), max_size=20))
def test_random_quoted_fields_equal_regex(lines):
    _check(lines, "apache_combined")
    _check(lines, "apache_combined", nulls=True)


from gpuetl.backends.cpu_clf import CLF_TIME_FORMAT, parse_clf_time  # noqa: E402

TIMES = ["10/Oct/2026:13:55:36 -0700", "29/Feb/2024:00:00:00 +0000", "29/Feb/2023:00:00:00 +0000",
         "31/Apr/2026:00:00:00 +0000", "01/Jan/1970:00:00:00 +0000", "31/Dec/1969:23:59:59 -0930",
         "10/oct/2026:13:55:36 -0700", "10/Oct/2026:24:00:00 +0000", "10/Oct/2026:13:55:60 +0000",
         "10/Oct/2026:13:55:36 +2400", None, "", "garbage", "1/Oct/2026:13:55:36 -0700",
         "10/Oct/2026:13:55:36 +05:30", "10/Oct/0001:00:00:00 +0000", "10/Oct/9999:23:59:59 -1200"]


def _strptime(values):
    arr = pa.array(values, pa.string())
    return pc.strptime(arr, format=CLF_TIME_FORMAT, unit="us", error_is_null=True).cast(
        pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()


def _fast(values):
    return parse_clf_time(pa.array(values, pa.string())).cast(pa.int64()).to_pylist()


def test_clf_time_fast_path_equals_strptime_on_edge_values():
    assert _fast(TIMES) == _strptime(TIMES)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 39), st.sampled_from(["Jan", "Feb", "Jun", "Dec", "Foo"]),
                          st.integers(0, 9999), st.integers(0, 29), st.integers(0, 69), st.integers(0, 69),
                          st.sampled_from("+- "), st.integers(0, 2999)), max_size=30))
def test_clf_time_fast_path_equals_strptime(parts):
    values = [f"{d:02d}/{m}/{y:04d}:{h:02d}:{mi:02d}:{s:02d} {sign}{z:04d}" for d, m, y, h, mi, s, sign, z in parts]
    assert _fast(values) == _strptime(values)
    sliced = pa.array(["01/Jan/2000:00:00:00 +0000", *values], pa.string()).slice(1)   # an array with an offset
    assert parse_clf_time(sliced).cast(pa.int64()).to_pylist() == _strptime(values)


def test_extract_fields_nulls_equal_the_shared_definition(tmp_path):
    """The CPU's Arrow-native extract_fields (tokenizer and regex paths) gives what the shared
    pandas/cuDF definition (common.extract_fields, the GPU's) gives."""
    from gpuetl.backends import common
    from gpuetl.backends.cpu import CpuBackend

    backend = CpuBackend()
    path = tmp_path / "a.log"
    write_access_logs(path, lines=3000, seed=5, bad_every=50)
    text = backend.series(path.read_text().splitlines() + EDGE_LINES, "string")
    rule = preset("apache_combined")
    for kernel in ("combined", None):
        for dash in (True, False):
            fast, matched = backend.extract_fields(text, rule.regex, tuple(rule.columns), kernel=kernel,
                                                   dash_is_null=dash)
            slow, matched_slow = common.extract_fields(backend, text, rule.regex, tuple(rule.columns),
                                                       dash_is_null=dash)
            assert matched.tolist() == matched_slow.tolist()
            for name in rule.columns:
                assert pa.array(fast[name]).to_pylist() == pa.array(slow[name]).to_pylist(), (kernel, dash, name)


@pytest.mark.parametrize("pieces", [1, 3])
def test_without_polars_the_backend_runs_the_preset_regex_itself(tmp_path, monkeypatch, pieces):
    """A bare image without polars (the GPU machine's host side) gets the same columns from RE2,
    also from a partition's batches handed over together (a text of several chunks)."""
    from gpuetl.backends import cpu
    from gpuetl.backends.cpu import CpuBackend

    write_access_logs(tmp_path / "a.log", lines=800, seed=5, bad_every=50)
    rule = preset("apache_combined")
    backend = CpuBackend()
    lines = pa.array(tmp_path.joinpath("a.log").read_text().splitlines() + EDGE_LINES)
    cuts = [len(lines) * k // pieces for k in range(pieces + 1)]
    text = backend.series(pa.chunked_array([lines[a:b] for a, b in zip(cuts, cuts[1:])]), "string")
    fast, fast_ok = backend.extract_fields(text, rule.regex, tuple(rule.columns), kernel="combined", dash_is_null=True)
    monkeypatch.setattr(cpu, "polars_available", lambda: False)
    slow, slow_ok = backend.extract_fields(text, rule.regex, tuple(rule.columns), kernel="combined", dash_is_null=True)
    assert fast_ok.tolist() == slow_ok.tolist()
    assert 700 < sum(fast_ok) == pc.sum(pc.match_substring_regex(lines, rule.regex)).as_py() < len(lines)
    for name in rule.columns:
        assert fast[name].tolist() == slow[name].tolist(), name


def test_validity_is_laid_over_the_strings_without_moving_them():
    """_with_validity: a sliced large-string column keeps its own values; a mask with nulls (or
    an empty column) takes the copying path and gives the same answer."""
    from gpuetl.backends.cpu_clf import _with_validity

    values = pa.array(["a", "-", "c", "dd"], pa.large_string()).slice(1)
    got = _with_validity(values, pa.array([False, True, True]))
    assert got.type == pa.string() and got.to_pylist() == [None, "c", "dd"]
    assert _with_validity(values, pa.array([True, None, True])).to_pylist() == ["-", None, "dd"]
    assert _with_validity(pa.array([], pa.large_string()), pa.array([], pa.bool_())).to_pylist() == []
