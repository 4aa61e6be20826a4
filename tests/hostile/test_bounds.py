"""Hostile values that used to end in an internal error (exit 1, "this is a bug") or in text the
user never meant: each is a located error at validate (exit 2) or runs within a documented bound.
A time zone that is no zone (or a path), more splits than a row's split byte holds, a split name
too long for a folder, a `**` glob over a tree deeper than Python's recursion limit, and a mask
placeholder with format fields beyond `{kind}`."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from .test_spec import BASE, folder, gpuetl, line_of, manifest_counts, refused, run


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../../../../etc/passwd", "/etc/localtime", "utc"])
def test_a_time_zone_that_is_no_zone_is_a_located_error(tmp_path, capsys, surroundings, zone):
    file = folder(tmp_path, BASE.replace("steps:\n", f"columns:\n  word: {{type: timestamp, timezone: '{zone}'}}\n"
                                                     "steps:\n"))
    with surroundings(tmp_path):
        message = refused(capsys, file)
        assert f"pipe.yaml:{line_of(file, 'timezone')}: columns.word" in message
        assert f"timezone {zone!r}: not a known IANA time zone" in message
        code, message = run(capsys, file)
        assert code == 2 and "not a known IANA time zone" in message


def test_a_time_zone_in_a_cast_step_is_checked_the_same_way(tmp_path, capsys, surroundings):
    file = folder(tmp_path, BASE.replace("steps:\n", "steps:\n  - cast: {word: {type: timestamp, timezone: "
                                                     "Mars/Olympus}}\n"))
    with surroundings(tmp_path):
        message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, 'Mars')}: steps[0].cast" in message
    assert "timezone 'Mars/Olympus': not a known IANA time zone" in message


def test_known_zones_and_fixed_offsets_are_taken(tmp_path, capsys, surroundings):
    pipeline = """\
    version: 1
    name: zones
    source: {type: csv, path: in/t.csv}
    columns:
      paris: {type: timestamp, timezone: Europe/Paris}
      plus: {type: timestamp, timezone: '+05:30'}
    sink: {path: out}
    """
    file = folder(tmp_path, pipeline, {"in/t.csv": "paris,plus\n2026-01-01T12:00:00,2026-01-01T12:00:00\n"})
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        code, message = run(capsys, file)
    assert code == 0, message
    row = pq.read_table(next((tmp_path / "out").glob("*.parquet"))).to_pylist()[0]
    assert (row["paris"].hour, row["plus"].hour, row["plus"].minute) == (11, 6, 30)
    assert manifest_counts(tmp_path / "out")["rows_out"] == 1


def splits_of(n: int, width: int = 1) -> str:
    names = [f"s{i:0{width}d}" for i in range(n)]
    return "{" + ", ".join(f"{name}: {1 / n!r}" for name in names) + "}"


def test_more_splits_than_the_bound_is_a_located_error(tmp_path, capsys, surroundings):
    """129 splits wrapped a row's int8 split index (KeyError: -128)."""
    file = folder(tmp_path, BASE.replace("steps:\n", f"shard: {{splits: {splits_of(129)}}}\nsteps:\n"))
    with surroundings(tmp_path):
        message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, 'splits')}: shard.splits: 129 splits: at most 100" in message


@pytest.mark.slow
def test_a_hundred_splits_run(tmp_path, capsys, surroundings):
    lines = "".join(f"w{i} rest of line {i}\n" for i in range(400))
    file = folder(tmp_path, BASE.replace("steps:\n", f"shard: {{splits: {splits_of(100, 3)}}}\nsteps:\n"),
                  {"in/a.log": lines})
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        code, message = run(capsys, file, "--quiet")
    assert code == 0, message
    counts = manifest_counts(tmp_path / "out")
    assert counts["rows_in"] == 400 and counts["rows_out"] == 400
    assert len([p for p in (tmp_path / "out").iterdir() if p.name.startswith("s")]) == 100


@pytest.mark.parametrize("name, why", [
    ("s" * 300, "(300 characters): ASCII letters, digits, '-' and '_' only, at most 100 characters"),
    ("s" * 101, "(101 characters)"),
    ("tr/ain", "ASCII letters, digits"),
    ("trâin", "ASCII letters, digits"),
    ("²", "ASCII letters, digits"),
])
def test_a_split_name_a_folder_cannot_take_is_a_located_error(tmp_path, capsys, surroundings, name, why):
    """A 300-character split name failed at the end of the run as 'free space on that disk'."""
    file = folder(tmp_path, BASE.replace("steps:\n", f"shard:\n  splits: {{'{name}': 0.5, val: 0.5}}\nsteps:\n"))
    with surroundings(tmp_path):
        message = refused(capsys, file)
        code, _ = run(capsys, file)
    assert code == 2 and f"pipe.yaml:{line_of(file, 'splits:')}: shard.splits" in message and why in message


def test_a_split_name_of_a_hundred_characters_runs(tmp_path, capsys, surroundings):
    name = "a" * 100
    file = folder(tmp_path, BASE.replace("steps:\n", f"shard: {{splits: {{{name}: 0.5, val: 0.5}}}}\nsteps:\n"))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        code, message = run(capsys, file, "--quiet")
    assert code == 0, message
    assert manifest_counts(tmp_path / "out")["rows_in"] == 3 and (tmp_path / "out" / name).is_dir()


@pytest.fixture
def deep_tree(tmp_path):
    """tmp_path/in/d/d/…/d, a thousand folders deep (os.makedirs and Path.mkdir(parents=True)
    recurse), removed bottom up after the test: pytest's own clean-up of old temporary folders
    (shutil.rmtree) recurses too, and would fail in a later session."""
    root = tmp_path / "in"
    path = str(root)
    os.mkdir(path)
    for _ in range(1000):
        path += "/d"
        os.mkdir(path)
    yield Path(path)
    while path != str(root):
        for entry in os.scandir(path):
            os.unlink(entry.path)
        os.rmdir(path)
        path = os.path.dirname(path)


def _tree(root: Path, skip: Path) -> dict[str, tuple]:
    """Every entry under root but `skip`: (kind, size, mtime). Walked with a stack, as the
    surroundings check's os.walk recurses once a folder (Python 3.11)."""
    state, stack = {}, [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.path == str(skip):
                    continue
                st = entry.stat(follow_symlinks=False)
                state[entry.path] = (entry.is_dir(follow_symlinks=False), st.st_size, st.st_mtime_ns)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return state


@pytest.mark.slow
def test_a_double_star_glob_over_a_tree_a_thousand_folders_deep(tmp_path, capsys, deep_tree):
    """The glob walk recursed once a folder: RecursionError past ~1,000 levels."""
    deepest = deep_tree
    (deepest / "a.log").write_text("deep one\ndeep two\n")
    (tmp_path / "in" / "b.log").write_text("top one\n")
    file = folder(tmp_path, BASE.replace("in/*.log", "in/**/*.log"))        # and in/a.log, 3 lines
    before = _tree(tmp_path, skip=tmp_path / "out")
    code, message = run(capsys, file, "--quiet")
    assert code == 0, message
    assert _tree(tmp_path, skip=tmp_path / "out") == before
    counts = manifest_counts(tmp_path / "out")
    assert counts["rows_in"] == 6 and counts["rows_out"] == 6


@pytest.mark.parametrize("placeholder, found", [
    ("{kind.__class__.__mro__[1].__subclasses__}", "found '{kind.__class__.__mro__[1].__subclasses_"),
    ("{kind:>100000000}", "found '{kind:>100000000}'"),
    ("<{0}>", "found '{0}'"),
    ("<{kind!r}>", "found '{kind!r}'"),
    ("<{}>", "found '{}'"),
    ("<{{kind}}>", "found '{}'"),
    ("<kind}>", "found '}'"),
])
def test_a_mask_placeholder_with_fields_beyond_kind_is_a_located_error(tmp_path, capsys, surroundings,
                                                                     placeholder, found):
    """The placeholder went through str.format: attribute lookups wrote a bound method's repr
    (with a memory address) into the data, and a width of 10^8 ran out of memory."""
    file = folder(tmp_path, BASE.replace("steps:\n", f"steps:\n  - mask: {{placeholder: '{placeholder}'}}\n"))
    with surroundings(tmp_path):
        message = refused(capsys, file)
        code, _ = run(capsys, file)
    assert code == 2 and f"pipe.yaml:{line_of(file, 'mask')}: steps[0].mask" in message
    assert "only {kind} may appear in braces" in message and found in message


def test_kind_in_a_placeholder_is_replaced_as_text(tmp_path, capsys, surroundings):
    pipeline = BASE.replace("steps:\n", "steps:\n  - mask: {placeholder: '[{kind}|{kind}] 100%'}\n")
    file = folder(tmp_path, pipeline, {"in/a.log": "ip 10.0.0.1\nmail bob@example.com\nnothing here\n"})
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        code, message = run(capsys, file, "--quiet")
    assert code == 0, message
    rows = pq.read_table(next((tmp_path / "out").glob("*.parquet"))).to_pylist()
    assert [r["rest"] for r in rows] == ["[IPV4|IPV4] 100%", "[EMAIL|EMAIL] 100%", "here"]
    counts = manifest_counts(tmp_path / "out")
    assert counts["rows_in"] == 3 and counts["rows_out"] == 3


CSV_FILE = """\
version: 1
name: hostile
source: {type: csv, path: in/*.csv}
sink: {path: out}
"""


@pytest.mark.parametrize("columns, needle, said", [
    ("  word: {type: timestamp, format: '%Q'}\n", "%Q", "'Q' is a bad directive"),
    ("  word: {type: timestamp, format: '%Y-%m-%d %'}\n", "%Y-%m-%d %", "stray %"),
    ("  word: {type: timestamp, format: ' '}\n", "format: ' '", "format: empty"),
    ("  word: {type: timestamp, format: '%Y %Y'}\n", "%Y %Y", "a directive appears twice"),
    ("  word: {type: timestamp, format: mixed}\n", "mixed", "is not a strptime format"),
    ("  word: {type: timestamp, format: ISO8601}\n", "ISO8601", "or no format for ISO 8601"),
    ("  word: {type: timestamp, format: '%Y %W'}\n", "%Y %W", "Cannot use '%W' or '%U' without day and year"),
    ("  word: {type: timestamp, format: '%H %Z%z'}\n", "%Z%z", "Cannot parse both %Z and %z"),
    ("  rest: \"list<int64>\"\n", "list<int64>", "list<int64> is a type for nested values"),
    ("  rest: \"struct<x: int64>\"\n", "struct<", "is a type for nested values (JSON's, Parquet's)"),
])
def test_a_column_type_the_source_cannot_give_is_a_located_error_not_a_crash(tmp_path, capsys, surroundings,
                                                                            columns, needle, said):
    """Each of these passed validate and failed the run at its first value ("internal error")."""
    file = folder(tmp_path, BASE.replace("steps:\n", "columns:\n" + columns + "steps:\n"))
    with surroundings(tmp_path):
        message = refused(capsys, file)
        assert f"pipe.yaml:{line_of(file, needle)}:" in message and said in message, message
        code, message = run(capsys, file)
        assert code == 2 and said in message


@pytest.mark.parametrize("delimiter", ["§", "→", "¦"])
def test_a_delimiter_that_is_not_one_byte_is_a_located_error(tmp_path, capsys, surroundings, delimiter):
    file = folder(tmp_path, CSV_FILE.replace("csv,", f"csv, delimiter: '{delimiter}',"),
                  {"in/a.csv": f"a{delimiter}b\n1{delimiter}2\n"})
    with surroundings(tmp_path):
        message = refused(capsys, file)
    assert "pipe.yaml:3: source.delimiter: the delimiter is one ASCII character" in message


def test_a_json_list_index_past_any_list_is_a_located_error(tmp_path, capsys, surroundings):
    file = folder(tmp_path, CSV_FILE.replace("csv, path: in/*.csv", "jsonl, path: in/*.jsonl")
                  + "columns:\n  a[99999999999999999999]: int64\n", {"in/a.jsonl": '{"a": [1]}\n'})
    with surroundings(tmp_path):
        message = refused(capsys, file)
    assert "pipe.yaml:6: columns.a[99999999999999999999]: the list index 99999999999999999999 is past" in message


def regex_file(regex: str) -> str:
    return BASE.replace('  template: "<word> <rest>"', f"  regex: '{regex}'")


def test_parse_regex_takes_re2s_own_syntax(tmp_path, capsys, surroundings):
    """parse.regex is RE2's dialect: its Unicode classes ran in filters but were refused here,
    where the pattern was read by Python's re ("bad escape \\p")."""
    file = folder(tmp_path, regex_file(r"^(?P<word>\p{L}+) (?P<rest>[[:alpha:]]+)\z"),
                  {"in/a.log": "héllo world\nalpha one\n12 x\n"})
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        code, _ = run(capsys, file)
    assert code == 0 and manifest_counts(tmp_path / "out")["quarantined"] == 1
    kept = [r for f in sorted((tmp_path / "out").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert [r["word"] for r in kept] == ["héllo", "alpha"]


@pytest.mark.parametrize("regex, said", [
    (r"^(?P<word>\w+) (\w+)", "every group must be named"),
    (r"^(?P<word>\w+)(?= )", "RE2 cannot run this pattern"),
    (r"^\w+ \w+", "name the fields with (?P<name>...) groups"),
    (r"^(?P<_word>\w+)", "name the group without a leading '_'"),
])
def test_parse_regex_mistakes_are_located_errors(tmp_path, capsys, surroundings, regex, said):
    file = folder(tmp_path, regex_file(regex))
    with surroundings(tmp_path):
        message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, 'regex')}: parse.regex" in message and said in message, message
