"""Values, quarantined lines, field and file names are the user's data: what the command prints
for a person shows their control characters escaped (an ESC sequence would set the terminal's
title or clear it, a NUL or a carriage return rewrite what is shown); JSON outputs keep JSON's
own escaping."""

from __future__ import annotations

import json

import pytest

from gpuetl.cli import main

from .test_spec import folder, manifest_counts

# an ESC sequence that sets the window title, one that clears the screen, NUL, BEL, CR, a C1 CSI,
# and a right-to-left override
HOSTILE = ["\x1b]0;pwned\x07", "\x1b[2J", "\x00", "\r", "\x9b", "\u202e"]
SHOWN = ["\\x1b]0;pwned\\x07", "\\x1b[2J", "\\x00", "\\x0d", "\\x9b", "\\u202e"]


def assert_escaped(text: str) -> None:
    for raw in HOSTILE:
        assert raw not in text, f"{raw!r} reached the terminal"


def test_printable_escapes_what_a_terminal_would_act_on():
    from gpuetl.cli import printable

    assert [printable(raw) for raw in HOSTILE] == SHOWN
    assert printable("tab\tand\nnewline é ü 漢") == "tab\tand\nnewline é ü 漢"
    assert printable("a\tb\nc", keep_newlines=False) == "a\\tb\\nc"
    assert printable("half \ud800") == "half \\ud800"


NAME = "".join(HOSTILE) + "name"
LINES = "".join(json.dumps({NAME: f"{raw}x", "plain": i}) + "\n" for i, raw in enumerate(HOSTILE)) + \
    '{"unclosed \x1b[2J\n'

PIPELINE = """\
    version: 1
    name: terminal
    source: {type: jsonl, path: in/x.jsonl}
    sink: {path: out}
    """


@pytest.mark.parametrize("command", ["preview", "plan", "validate"])
def test_values_quarantined_lines_and_field_names_are_printed_escaped(tmp_path, capsys, surroundings, command):
    # validate prints the fields where a step names one they do not have
    pipeline = PIPELINE.replace("sink:", "steps: [{select: [name]}]\n    sink:") if command == "validate" else PIPELINE
    file = folder(tmp_path, pipeline, {"in/x.jsonl": LINES})
    with surroundings(tmp_path):
        code = main([command, str(file)])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert code == (2 if command == "validate" else 0), text
    assert_escaped(text)
    assert "".join(SHOWN) + "name" in text                    # the field's name, escaped
    if command == "preview":
        for shown in SHOWN:
            assert f"{shown}x" in text                        # each value, escaped
        assert "quarantined: 1 record" in text and '{"unclosed \\x1b[2J' in text


def test_file_names_in_errors_are_printed_escaped(tmp_path, capsys, surroundings):
    file = folder(tmp_path, PIPELINE.replace("in/x.jsonl", '"in/\\e[2J\\anope.jsonl"'), {"in/x.jsonl": LINES})
    with surroundings(tmp_path):
        code = main(["validate", str(file)])
    err = capsys.readouterr().err
    assert code == 2
    assert_escaped(err)
    assert "\\x1b[2J\\x07nope.jsonl" in err


def test_run_summary_is_escaped_and_json_keeps_json_escaping(tmp_path, capsys, surroundings):
    file = folder(tmp_path, PIPELINE, {"in/x.jsonl": LINES})
    out = tmp_path / "out"
    (out / "_tmp" / "\x1b]0;pwned\x07").mkdir(parents=True)     # not gpuetl's: the run notes it and leaves it
    with surroundings(tmp_path, dataset=out):
        code = main(["run", str(file), "--backend", "cpu", "--scheduler", "sync", "--set", "max_error_ratio=1"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert_escaped(captured.out + captured.err)
    assert "_tmp/\\x1b]0;pwned\\x07 alone" in captured.err
    assert manifest_counts(out)["quarantined"] == 1
    code = main(["inspect", str(out), "--json"])
    shown = capsys.readouterr().out
    assert code == 0
    assert_escaped(shown)
    names = [f["name"] for f in json.loads(shown)["manifest"]["schema"]]
    assert NAME in names                # JSON's escaping gives back the exact name
    code = main(["inspect", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert_escaped(text)
