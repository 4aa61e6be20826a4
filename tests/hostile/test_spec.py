"""Hostile pipeline files, --set values and expressions: each is a located error (file:line or the
--set, the key, a hint; exit 2) before any data is read, or, for values met while running, a
quarantined record or a clear error (exit 1); nothing outside the dataset changes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpuetl.cli import main

LOG_LINES = "alpha one\nbeta two\ngamma three\n"

BASE = """\
version: 1
name: hostile
source: {type: text, path: in/*.log}
parse:
  template: "<word> <rest>"
steps:
  - filter: "word != 'zzz'"
sink: {path: out}
"""


def folder(tmp_path: Path, pipeline: str = BASE, files: dict[str, str | bytes] | None = None) -> Path:
    """A pipeline file `pipe.yaml` with its inputs under in/."""
    (tmp_path / "in").mkdir(exist_ok=True)
    for name, data in (files or {"in/a.log": LOG_LINES}).items():
        path = tmp_path / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    file = tmp_path / "pipe.yaml"
    file.write_text(textwrap.dedent(pipeline))
    return file


def line_of(file: Path, needle: str) -> int:
    for number, line in enumerate(file.read_text().splitlines(), 1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {file}")


def gpuetl(capsys, *argv) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "internal error" not in captured.err, captured.err
    return code, captured.out + captured.err


def refused(capsys, file: Path, *extra) -> str:
    """`gpuetl validate` exits 2; the message."""
    code, message = gpuetl(capsys, "validate", file, *extra)
    assert code == 2, message
    return message


def run(capsys, file: Path, *extra) -> tuple[int, str]:
    return gpuetl(capsys, "run", file, "--backend", "cpu", "--scheduler", "sync", *extra)


def manifest_counts(out: Path) -> dict:
    counts = json.loads((out / "_manifest.json").read_text())["counts"]
    assert counts["rows_in"] == counts["rows_out"] + counts["filtered"] + counts["deduplicated"] + counts["quarantined"]
    return counts


def rows(out: Path, sub: str = "") -> list[dict]:
    return [r for f in sorted((out / sub).glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


# -- 7: names gpuetl keeps ----------------------------------------------------------------------

@pytest.mark.parametrize("old, new, needle, expected", [
    ("steps:\n", "shard: {splits: {_quarantine: 0.5, train: 0.5}}\nsteps:\n", "_quarantine",
     "shard.splits._quarantine: '_quarantine': names starting with '_' are reserved"),
    ("  - filter: \"word != 'zzz'\"", "  - derive: {__st: \"word\"}", "__st", "steps[0].derive.__st"),
    ("  - filter: \"word != 'zzz'\"", "  - derive: {_x: \"word\"}", "_x", "steps[0].derive._x"),
    ("  - filter: \"word != 'zzz'\"", "  - rename: {word: _tmp}", "_tmp", "steps[0].rename.word: '_tmp'"),
    ("steps:\n", "columns: {__fi: int32}\nsteps:\n", "__fi", "columns.__fi: '__fi': names starting with '__'"),
    ("steps:\n", "columns: {_file: string}\nsteps:\n", "_file", "columns._file: '_file' is a column gpuetl adds"),
])
def test_reserved_names_are_located_errors(tmp_path, capsys, old, new, needle, expected):
    file = folder(tmp_path, BASE.replace(old, new))
    message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, needle)}: {expected}" in message


@pytest.mark.parametrize("parse, expected", [
    ("regex: '^(?P<_w>\\S+) (?P<rest>.*)$'", "parse.regex: the group '_w'"),
    ("template: '<_w> <rest>'", "parse.template: field <_w>"),
])
def test_made_up_names_in_patterns_are_refused(tmp_path, capsys, parse, expected):
    file = folder(tmp_path, BASE.replace('template: "<word> <rest>"', parse))
    message = refused(capsys, file)
    assert expected in message and "reserved" in message
    assert f"pipe.yaml:{line_of(file, parse.split(':')[0])}:" in message


@pytest.mark.parametrize("kind, data, field, hint", [
    ("csv", "a,__st\n1,2\n", "__st", "rename that column in the CSV header"),
    ("jsonl", '{"a": 1, "_raw": "x"}\n', "_raw", "list the fields to read under `columns`"),
    ("jsonl", '{"a": 1, "__fi": 3}\n', "__fi", "list the fields to read under `columns`"),
    ("jsonl", '{"a": 1, "_file": "x"}\n', "_file", "list the fields to read under `columns`"),
])
def test_input_fields_that_clash_are_located_errors(tmp_path, capsys, kind, data, field, hint):
    file = folder(tmp_path, f"version: 1\nname: h\nsource: {{type: {kind}, path: in/x.{kind}}}\nsink: {{path: out}}\n",
                  {f"in/x.{kind}": data})
    message = refused(capsys, file)
    assert f"pipe.yaml:3: source.path: the input field '{field}'" in message and hint in message


def test_underscore_input_fields_are_kept_and_addressable(tmp_path, capsys, surroundings):
    """A MongoDB `_id` and a `_note` field: typed, filtered, deduped on, sharded by, masked."""
    records = [{"_id": i % 4, "_note": f"mail u{i}@example.com", "v": i} for i in range(8)]
    file = folder(tmp_path, """\
        version: 1
        name: ids
        source: {type: jsonl, path: in/x.jsonl}
        columns: {_id: int64, _note: string, v: int64}
        steps:
          - filter: "_id != 3"
          - dedupe: {on: [_id]}
          - mask: {kinds: [email]}
        shard: {count: 2, key: [_id]}
        sink: {path: out}
        """, {"in/x.jsonl": "".join(json.dumps(r) + "\n" for r in records)})
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        code, message = run(capsys, file)
    assert code == 0, message
    counts = manifest_counts(out)
    assert counts == {"rows_in": 8, "rows_out": 3, "filtered": 2, "deduplicated": 3, "quarantined": 0}
    kept = sorted(rows(out), key=lambda r: r["_id"])
    assert [r["_id"] for r in kept] == [0, 1, 2]
    assert all(r["_note"].startswith("mail <EMAIL>") for r in kept)   # a `_` field is masked too


# -- 12, 19: hostile YAML ----------------------------------------------------------------------

def test_billion_laughs_is_refused_at_once(tmp_path, capsys):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [{','.join(['*' + prev] * 9)}]")
    file = folder(tmp_path, "\n".join(lines) + "\n")
    assert file.stat().st_size < 400
    message = refused(capsys, file)
    assert "pipe.yaml:" in message and "expands to more than 100000 values" in message
    assert "hint:" in message


def test_alias_inside_itself_is_refused(tmp_path, capsys):
    file = folder(tmp_path, "version: 1\nname: n\nloop: &x [*x]\n")
    message = refused(capsys, file)
    assert "pipe.yaml:" in message


@pytest.mark.parametrize("text, expected", [
    ("a: " + "[" * 10_000 + "]" * 10_000 + "\n", "pipe.yaml:1:35: the YAML is nested more than 32 levels deep"),
    ("a: " + "{b: " * 10_000 + "1" + "}" * 10_000 + "\n", "nested more than 32 levels deep"),
])
def test_deep_yaml_is_refused(tmp_path, capsys, text, expected):
    assert expected in refused(capsys, folder(tmp_path, text))


def test_huge_pipeline_file_is_refused(tmp_path, capsys):
    file = folder(tmp_path, "version: 1\n# " + "x" * (1 << 20) + "\n")
    message = refused(capsys, file)
    assert "larger than the limit of 1048576 bytes" in message


@pytest.mark.parametrize("text, line", [
    ("version: 1\nname: !!python/name:os.system x\n", 2),
    ("version: 1\nname: n\nsource: !!python/object/apply:os.system {args: [ls]}\n", 3),
    ("version: 1\n!!python/name:os.system x: 1\n", 2),
])
def test_python_tags_are_located_errors(tmp_path, capsys, text, line):
    message = refused(capsys, folder(tmp_path, text))
    assert f"pipe.yaml:{line}" in message
    assert "python" in message


@pytest.mark.parametrize("old, new, needle, expected", [
    ("version: 1", "version: true", "version", "version: expected the whole number 1, got True"),
    ("steps:\n", "shard: {count: true}\nsteps:\n", "count", "shard.count: expected a whole number, got True"),
])
def test_booleans_are_not_numbers(tmp_path, capsys, old, new, needle, expected):
    file = folder(tmp_path, BASE.replace(old, new))
    assert f"pipe.yaml:{line_of(file, needle)}: {expected}" in refused(capsys, file)


# -- 18: sizes ---------------------------------------------------------------------------------

def test_tiny_blocksize_on_large_input_is_refused_before_planning(tmp_path, capsys):
    file = folder(tmp_path, BASE.replace("path: in/*.log}", "path: in/*.log, blocksize: 1}"),
                  {"in/a.log": "word rest\n" * 20_000})
    message = refused(capsys, file)
    assert "pipe.yaml:3: source.blocksize: 1 bytes cuts the inputs into about 200000 partitions" in message
    assert "raise source.blocksize to at least 2 bytes" in message


@pytest.mark.parametrize("old, new, expected", [
    ("path: in/*.log}", "path: in/*.log, blocksize: 2GiB}", "source.blocksize: '2GiB' is over the limit of 1GiB"),
    ("steps:\n", "shard: {target_bytes: 1}\nsteps:\n", "shard.target_bytes: 1 is under the minimum of 64KiB"),
])
def test_size_limits(tmp_path, capsys, old, new, expected):
    assert expected in refused(capsys, folder(tmp_path, BASE.replace(old, new)))


def test_two_million_steps_are_refused_before_any_work(tmp_path):
    from gpuetl import Pipeline, SpecError

    spec = {"version": 1, "name": "n", "source": {"type": "text", "path": "x"}, "sink": {"path": "o"},
            "steps": [{"filter": "a > 1"}] * 2_000_000}
    with pytest.raises(SpecError, match="steps: 2000000 steps; the limit is 1000"):
        Pipeline.from_dict(spec, base_dir=tmp_path, overrides=["sink.path=p"])


def test_too_many_steps_is_refused(tmp_path, capsys):
    file = folder(tmp_path, BASE.replace("  - filter: \"word != 'zzz'\"\n", "  - filter: \"word != 'zzz'\"\n" * 1001))
    message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, 'steps:')}: steps: 1001 steps; the limit is 1000" in message


# -- 24: --set --------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["steps[0].filter", "steps.0.filter"])
def test_set_reaches_list_items(tmp_path, capsys, surroundings, key):
    file = folder(tmp_path)
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        code, message = run(capsys, file, "--set", f"{key}=word == 'beta'")
    assert code == 0, message
    assert manifest_counts(out) == {"rows_in": 3, "rows_out": 1, "filtered": 2, "deduplicated": 0, "quarantined": 0}
    assert rows(out) == [{"word": "beta", "rest": "two"}]


@pytest.mark.parametrize("item, expected", [
    ("steps[0].filter=word &&& rest", "(--set steps[0].filter=word &&& rest) steps[0].filter: invalid expression"),
    ("steps[3].filter=word == 'a'", "steps[3].filter=word == 'a'\": steps has 1 item, so there is no steps[3]"),
    ("version.x=1", "--set 'version.x=1': version is 1, not a mapping or a list, so it has no key 'x'"),
    ("steps.filter=x", "--set 'steps.filter=x': steps is a list; name an item by its number"),
    ("shard.key[0]=x", "--set 'shard.key[0]=x': the file has no shard.key, so there is no item shard.key[0]"),
    ("steps[0]=3", "(--set steps[0]=3) steps[0]: each step is a mapping with exactly one key"),
    ("steps[0].filter=word + 1", "(--set steps[0].filter=word + 1) steps[0].filter: type error"),
    ("snk.path=/tmp/x", "(--set snk.path=/tmp/x) snk: unknown key; did you mean 'sink'?"),      # a typo'd key made
    ("sink.pth.x=1", "(--set sink.pth.x=1) sink.pth: unknown key; did you mean 'path'?"),       # on the way
])
def test_set_errors_name_the_set(tmp_path, capsys, item, expected):
    message = refused(capsys, folder(tmp_path), "--set", item)
    assert expected in message
    assert "pipe.yaml:" not in message.split("problem")[-1]


@pytest.mark.parametrize("value, expected", [
    ("[" * 5000 + "]" * 5000, "nested more than 32 levels deep"),
    ("!!python/name:os.system x", "the tag 'tag:yaml.org,2002:python/name:os.system' is not allowed"),
    ("{a: &a [1,1,1,1,1,1,1,1,1,1], b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b],"
     " d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c], e: [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]}",
     "expands to more than 100000 values"),
])
def test_set_values_have_the_file_limits(tmp_path, capsys, value, expected):
    message = refused(capsys, folder(tmp_path), "--set", f"parse.template={value}")
    assert "--set 'parse.template=" in message and expected in message


# -- 13: regexes checked with the engine that runs them ------------------------------------------

@pytest.mark.parametrize("step", [
    "filter: \"matches(word, '(?=a)')\"",
    "filter: \"matches(word, '(a)\\\\\\\\1')\"",
    "mask: {custom: {k: '(?<=a)b'}}",
])
def test_patterns_re2_cannot_run_fail_validate(tmp_path, capsys, step):
    file = folder(tmp_path, BASE.replace("filter: \"word != 'zzz'\"", step))
    message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, step[:6])}: steps[0]" in message
    assert "RE2 cannot run it" in message and "no lookarounds and no backreferences" in message


def test_gpu_backend_hook_can_refuse_a_pattern(tmp_path):
    """Backend.regex_error: a backend that cannot run a pattern at all is a located plan error."""
    from gpuetl import SpecError, load
    from gpuetl.backends.cpu import CpuBackend

    class Picky(CpuBackend):
        def regex_error(self, pattern):
            return "no classes here" if "[" in pattern else None

    file = folder(tmp_path, BASE.replace("word != 'zzz'", "matches(word, '[ab]')"))
    with pytest.raises(SpecError) as err:
        load(file).plan(Picky())
    assert f"pipe.yaml:{line_of(file, 'matches')}: steps[0].filter: the cpu backend cannot run '[ab]'" in str(err.value)


# -- 14, 19: values an expression cannot compute -------------------------------------------------

def test_growing_replace_quarantines_the_record(tmp_path, capsys, surroundings):
    x999, y999 = "X" * 999, "Y" * 999
    lines = "a" * 30 + " long\n" + "short line\n" + "b" * 5 + " a\n"
    file = folder(tmp_path, BASE.replace(
        "filter: \"word != 'zzz'\"", f"derive: {{big: \"replace(replace(word, 'a', '{x999}'), 'X', '{y999}')\"}}"),
        {"in/a.log": lines * 50})
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        code, message = run(capsys, file)
    assert code == 0, message
    assert manifest_counts(out) == {"rows_in": 150, "rows_out": 100, "filtered": 0, "deduplicated": 0,
                                    "quarantined": 50}
    bad = rows(out, "_quarantine")
    assert len(bad) == 50 and all("would make a value of more than 16777216 characters" in r["_reason"] for r in bad)
    assert {r["word"] for r in rows(out)} == {"short", "bbbbb"}


def test_a_partition_that_would_grow_past_the_limit_stops_before_growing(tmp_path, capsys, surroundings):
    """2,000 values of 600 characters, each to grow 999-fold: no one value passes the limit, the
    partition's column would (1.2 G characters); the run stops, asking for a smaller blocksize."""
    x999 = "X" * 999
    file = folder(tmp_path, BASE.replace("filter: \"word != 'zzz'\"", f"derive: {{big: \"replace(word, 'a', '{x999}')\"}}"),
                  {"in/a.log": ("a" * 600 + " x\n") * 2000})
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        code, message = run(capsys, file)
    assert code == 1
    assert "would make 1198800000 characters in one partition; the limit is 1073741824" in message
    assert "lower source.blocksize" in message
    assert not (out / "_SUCCESS").exists()


def test_replace_of_empty_text_is_refused(tmp_path, capsys):
    file = folder(tmp_path, BASE.replace("filter: \"word != 'zzz'\"", "derive: {w: \"replace(word, '', 'X')\"}"))
    assert "replace() needs a non-empty text to replace" in refused(capsys, file)


def test_int64_overflow_in_derive_is_quarantined(tmp_path, capsys, surroundings):
    file = folder(tmp_path, """\
        version: 1
        name: overflow
        source: {type: jsonl, path: in/x.jsonl}
        columns: {a: int64}
        steps:
          - derive: {b: "a * 3", c: "-a", d: "a + 1"}
        sink: {path: out}
        """, {"in/x.jsonl": '{"a": 9223372036854775807}\n{"a": -9223372036854775808}\n{"a": 5}\n'})
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        code, message = run(capsys, file)
    assert code == 0, message
    assert manifest_counts(out)["quarantined"] == 2
    assert rows(out) == [{"a": 5, "b": 15, "c": -5, "d": 6}]
    assert sorted(r["_reason"] for r in rows(out, "_quarantine")) == ["`a * 3` overflows int64"] * 2


def test_int64_overflow_in_filter_stops_with_a_clear_error(tmp_path, capsys, surroundings):
    file = folder(tmp_path, """\
        version: 1
        name: overflow
        source: {type: jsonl, path: in/x.jsonl}
        columns: {a: int64}
        steps:
          - filter: "a + 1 > 0"
        sink: {path: out}
        """, {"in/x.jsonl": '{"a": 9223372036854775807}\n{"a": 5}\n'})
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        code, message = run(capsys, file)
    assert code == 1
    assert "`a + 1` overflows int64 (1 record)" in message and "compute it in a derive step" in message
    assert not (out / "_SUCCESS").exists()


def test_overflow_in_a_row_an_earlier_filter_dropped_is_no_error(tmp_path, capsys, surroundings):
    file = folder(tmp_path, """\
        version: 1
        name: overflow
        source: {type: jsonl, path: in/x.jsonl}
        columns: {a: int64}
        steps:
          - filter: "a < 100"
          - filter: "a * 2 > 0"
        sink: {path: out}
        """, {"in/x.jsonl": '{"a": 9223372036854775807}\n{"a": 5}\n'})
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        code, message = run(capsys, file)
    assert code == 0, message
    assert manifest_counts(out) == {"rows_in": 2, "rows_out": 1, "filtered": 1, "deduplicated": 0, "quarantined": 0}


@pytest.mark.parametrize("expression, expected", [
    ("a + 18446744073709551615 > 0", "the integer 18446744073709551615 does not fit in int64"),
    ("a < 18446744073709551615", "does not fit in int64 column 'a''s type, int64"),
    ("a in [18446744073709551615, 1]", "the list element 18446744073709551615 does not fit"),
])
def test_integers_past_int64_are_type_errors(tmp_path, capsys, expression, expected):
    file = folder(tmp_path, f"version: 1\nname: n\nsource: {{type: jsonl, path: in/x.jsonl}}\ncolumns: {{a: int64}}\n"
                            f"steps:\n  - filter: \"{expression}\"\nsink: {{path: out}}\n", {"in/x.jsonl": '{"a": 1}\n'})
    assert f"pipe.yaml:6: steps[0].filter: type error in expression" in (message := refused(capsys, file))
    assert expected in message


def test_large_integers_compare_without_internal_errors(tmp_path, capsys, surroundings):
    """int64 values past 2**53 against a list with floats, a uint64 hash against 2**64-1."""
    file = folder(tmp_path, """\
        version: 1
        name: big
        source: {type: jsonl, path: in/x.jsonl}
        columns: {a: int64}
        steps:
          - filter: "a in [5, 2.5, 9223372036854775807, 9223372036854775808.0] or a == 7"
          - filter: "hash(a) < 18446744073709551615 and hash(a) not in [18446744073709551615, -1]"
        sink: {path: out}
        """, {"in/x.jsonl": '{"a": 9223372036854775807}\n{"a": 5}\n{"a": 6}\n'})
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        code, message = run(capsys, file)
    assert code == 0, message
    assert manifest_counts(out)["filtered"] == 1
    assert sorted(r["a"] for r in rows(out)) == [5, 9223372036854775807]


def test_modulo_and_rounding_at_the_edges_of_int64_and_float64(tmp_path, capsys, surroundings):
    file = folder(tmp_path, """\
        version: 1
        name: edges
        source: {type: jsonl, path: in/x.jsonl}
        columns: {a: int64, f: float64}
        steps:
          - derive: {m: "a % 3", n: "a % -7", g: "f % 2", r: "round(f, 30)", t: "round(a, -1)"}
        sink: {path: out}
        """, {"in/x.jsonl": '{"a": 9223372036854775807, "f": 1e308}\n{"a": -9223372036854775803, "f": -3.5}\n'
                            '{"a": 14, "f": 2.25}\n'})
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        code, message = run(capsys, file)
    assert code == 0, message
    assert manifest_counts(out)["quarantined"] == 1          # round(a, -1) of the largest int64
    assert [r["_reason"] for r in rows(out, "_quarantine")] == ["`round(a, -1)` overflows int64"]
    got = sorted(rows(out), key=lambda r: r["a"])
    a0, a1 = -9223372036854775803, 14
    assert [(r["m"], r["n"], r["g"], r["r"], r["t"]) for r in got] == [
        (a0 % 3, a0 % -7, -3.5 % 2, -3.5, -9223372036854775800), (a1 % 3, a1 % -7, 2.25 % 2, 2.25, 10)]


def test_huge_substr_arguments_are_refused(tmp_path, capsys):
    file = folder(tmp_path, BASE.replace(
        "filter: \"word != 'zzz'\"", "derive: {w: \"substr(word, 9223372036854775807, 99999999999999999999)\"}"))
    assert "substr() start and length must be between 0 and 2147483647" in refused(capsys, file)


# -- 25: located errors with hints -----------------------------------------------------------------

@pytest.mark.parametrize("expression, expected", [
    ("word == 'a' && rest == 'b'", "at column 12: syntax error: invalid syntax; use 'and' instead of '&&'"),
    ("word == 'a' || rest == 'b'", "use 'or' instead of '||'"),
    ("word = 'a'", "at column 5: syntax error: invalid syntax; use '==' to compare"),
    ("word != null", "unknown column 'null'; to test for a missing value write 'x is None' or 'x is not None'"),
    ("regexp(word, 'a')", "unknown function; use matches()"),
    ("word == 'a' and", "the expression ends in the middle"),
    ("word + 1", "type error in expression 'word + 1' at column 0: '+' needs numbers"),
])
def test_expression_errors_are_located_with_hints(tmp_path, capsys, expression, expected):
    file = folder(tmp_path, BASE.replace("word != 'zzz'", expression))
    message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, 'filter')}: steps[0].filter:" in message
    assert expected in message


def test_derive_type_error_names_the_line_of_its_column(tmp_path, capsys):
    file = folder(tmp_path, BASE.replace("  - filter: \"word != 'zzz'\"", "  - derive:\n      ok: \"len(word)\"\n"
                                                                          "      bad: \"word * 2\""))
    message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, 'bad:')}: steps[0].derive: bad: type error" in message


def test_mask_and_shard_key_errors_are_located(tmp_path, capsys):
    file = folder(tmp_path, BASE.replace("filter: \"word != 'zzz'\"", "mask: {columns: [wrod]}"))
    assert f"pipe.yaml:{line_of(file, 'mask')}: steps[0].mask:" in refused(capsys, file)
    file = folder(tmp_path, BASE.replace("steps:\n", "shard: {count: 2, key: [wrd]}\nsteps:\n"))
    message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, 'key')}: shard.key: no output column 'wrd'; did you mean 'word'?" in message


def test_template_bracket_gets_the_escape_hint(tmp_path, capsys):
    file = folder(tmp_path, BASE.replace('template: "<word> <rest>"', "template: '[<word>] <rest>'"))
    message = refused(capsys, file)
    assert f"pipe.yaml:{line_of(file, 'template')}: parse.template:" in message
    assert "write \\[ and \\] for literal brackets, in single-quoted YAML" in message
    file = folder(tmp_path, BASE.replace('template: "<word> <rest>"', 'template: "\\[<word>\\] <rest>"'))
    message = refused(capsys, file)
    assert "unknown escape character" in message and "write the value in single quotes" in message
    file = folder(tmp_path, BASE.replace('template: "<word> <rest>"', "template: '\\[<word>\\] <rest>'"),
                  {"in/a.log": "[x] y\n"})
    code, message = gpuetl(capsys, "validate", file)
    assert code == 0, message
