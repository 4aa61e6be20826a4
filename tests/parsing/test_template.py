"""``<Field>`` templates -> regex; applied with Python ``re`` AND pyarrow (RE2)."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gpuetl.parsing import template_to_regex

HDFS = "<Date> <Time> <Pid> <Level> <Component>: <Content>"
LINUX = r"<Month> <Date> <Time> <Level> <Component>(\[<PID>\])?: <Content>"


def both(regex: str, line: str) -> dict[str, str] | None:
    line = line.strip()  # the caller strips the line (contract)
    m = re.fullmatch(regex, line)
    arrow = pc.extract_regex(pa.array([line], type=pa.string()), pattern=regex).to_pylist()[0]
    if m is None:
        assert arrow is None
        return None
    py = {k: ("" if v is None else v) for k, v in m.groupdict().items()}
    assert arrow == py
    return arrow


def test_hdfs_template():
    regex, cols = template_to_regex(HDFS)
    assert cols == ("Date", "Time", "Pid", "Level", "Component", "Content")
    assert regex == (
        r"^(?P<Date>.*?)\s+(?P<Time>.*?)\s+(?P<Pid>.*?)\s+(?P<Level>.*?)\s+(?P<Component>.*?):\s+(?P<Content>.*)$"
    )
    line = "081109 203615 148 INFO dfs.DataNode$PacketResponder: PacketResponder 1 for block blk_38865049064139660 terminating"
    assert both(regex, line) == {
        "Date": "081109", "Time": "203615", "Pid": "148", "Level": "INFO",
        "Component": "dfs.DataNode$PacketResponder",
        "Content": "PacketResponder 1 for block blk_38865049064139660 terminating",
    }


def test_hdfs_extra_inner_spaces_and_crlf():
    regex, _ = template_to_regex(HDFS)
    line = "081109   203518  143 INFO  dfs.DataNode$DataXceiver: Receiving block blk_-1608999687919862906 src: /10.250.19.102:54106\r\n"
    assert both(regex, line) == {
        "Date": "081109", "Time": "203518", "Pid": "143", "Level": "INFO",
        "Component": "dfs.DataNode$DataXceiver",
        "Content": "Receiving block blk_-1608999687919862906 src: /10.250.19.102:54106",
    }


def test_linux_template_with_and_without_pid():
    regex, cols = template_to_regex(LINUX)
    assert cols == ("Month", "Date", "Time", "Level", "Component", "PID", "Content")
    # user's capturing group became non-capturing; only fields capture
    assert r"(?:\[(?P<PID>.*?)\])?" in regex
    assert re.compile(regex).groups == len(cols)

    with_pid = "Jun 14 15:16:01 combo sshd(pam_unix)[19939]: authentication failure; logname= uid=0 euid=0 tty=NODEVssh ruser= rhost=218.188.2.4"
    assert both(regex, with_pid) == {
        "Month": "Jun", "Date": "14", "Time": "15:16:01", "Level": "combo", "Component": "sshd(pam_unix)",
        "PID": "19939",
        "Content": "authentication failure; logname= uid=0 euid=0 tty=NODEVssh ruser= rhost=218.188.2.4",
    }
    # space-padded day, no [pid]: PID is None in re, "" in pyarrow
    without = "Jun  9 06:06:20 combo syslogd 1.4.1: restart."
    assert both(regex, without) == {
        "Month": "Jun", "Date": "9", "Time": "06:06:20", "Level": "combo", "Component": "syslogd 1.4.1",
        "PID": "", "Content": "restart.",
    }
    assert re.fullmatch(regex, without).group("PID") is None
    kernel = "Jun  9 06:06:20 combo kernel: Linux version 2.6.5-1.358 (bhcompile@bugs.build.redhat.com)"
    got = both(regex, kernel)
    assert (got["Component"], got["PID"]) == ("kernel", "")
    assert got["Content"] == "Linux version 2.6.5-1.358 (bhcompile@bugs.build.redhat.com)"


def test_bgl_template():
    tmpl = "<Label> <Timestamp> <Date> <Node> <Time> <NodeRepeat> <Type> <Component> <Level> <Content>"
    regex, cols = template_to_regex(tmpl)
    line = "- 1117838570 2005.06.03 R02-M1-N0-C:J12-U11 2005-06-03-15.42.50.675872 R02-M1-N0-C:J12-U11 RAS KERNEL INFO instruction cache parity error corrected"
    got = both(regex, line)
    assert got["Label"] == "-"
    assert got["Node"] == "R02-M1-N0-C:J12-U11"
    assert got["Level"] == "INFO"
    assert got["Content"] == "instruction cache parity error corrected"
    assert len(cols) == 10


def test_non_matching_line():
    regex, _ = template_to_regex(HDFS)
    assert both(regex, "no colon-space separated content here") is None


def test_escaped_parens_and_special_groups_untouched():
    regex, cols = template_to_regex(r"\(<A>\) (?:x|y)<B> [(]<C>")
    assert regex == r"^\((?P<A>.*?)\)\s+(?:x|y)(?P<B>.*?)\s+[(](?P<C>.*)$"
    assert cols == ("A", "B", "C")
    assert both(regex, "(1) y2 (3") == {"A": "1", "B": "2", "C": "3"}


def test_space_quantifier_and_literal_angle_brackets():
    regex, cols = template_to_regex("<<PRI>> ?<Msg>")
    assert regex == r"^<(?P<PRI>.*?)>\s?(?P<Msg>.*)$"
    assert both(regex, "<13>hello world") == {"PRI": "13", "Msg": "hello world"}
    assert both(regex, "<13> hello") == {"PRI": "13", "Msg": "hello"}


def test_single_field():
    regex, cols = template_to_regex("<Content>")
    assert (regex, cols) == ("^(?P<Content>.*)$", ("Content",))
    assert both(regex, "  anything at all  ") == {"Content": "anything at all"}


@pytest.mark.parametrize(
    "template, needle",
    [
        ("<Date> <Time> <Date>", "duplicate field <Date>"),
        ("<Date> <1Time>", "<1Time>"),
        ("<Date> <Ti me>", "<Ti me>"),
        ("<Date> <Time-x>", "<Time-x>"),
        ("no fields here", "no <Field>"),
        ("", "no <Field>"),
        (r"<Component>(\[<PID>\]?: <Content>", "never closed"),
        (r"<Component>\[<PID>\])?: <Content>", "never opened"),
        (r"<A> (?=x)<B>", "lookahead"),
        (r"<A> (?P<x>y)<B>", "named group"),
        (r"<A> (a)\1<B>", "backreference"),
        (r"<A> [abc<B>", "character class"),
        ("<A> x*+<B>", "RE2"),  # possessive: Python 3.11+ accepts it, RE2 does not
        ("<A> x**<B>", "invalid regex"),
    ],
)
def test_invalid_templates(template, needle):
    with pytest.raises(ValueError) as info:
        template_to_regex(template)
    assert needle in str(info.value)


def test_unbalanced_paren_names_the_fragment():
    frag = "(\\["  # the fragment between <Component> and <PID>
    with pytest.raises(ValueError) as info:
        template_to_regex("<Component>" + frag + "<PID>\\]?: <Content>")
    assert repr(frag) in str(info.value)
    assert "never closed" in str(info.value)


MULTI = "<Date> <Time> <Level>: <Content>"


@pytest.mark.parametrize("record, fields", [
    ("2026-01-01 12:00 INFO: a\n  at b\n  at c", ("2026-01-01", "12:00", "INFO", "a\n  at b\n  at c")),
    ("2026-01-01 12:00 INFO:\nmessage on the next line", ("2026-01-01", "12:00", "INFO", "message on the next line")),
    ("2026-01-01\t12:00  INFO: a\r\nb", ("2026-01-01", "12:00", "INFO", "a\r\nb")),
    ("2026-01-01\n12:00 INFO: the time is on the second line", None),
    ("2026-01-01 12:00\nINFO: the level is on the second line", None),
    ("2026-01-01 12:00 INFO\n: a", None),
])
def test_multiline_separators_stay_on_the_first_line_but_before_the_last_field(record, fields):
    """In a multi-line record only the last field, and the spaces right before it, may cross a
    line break: a first line that lacks a field does not match (it would otherwise take the
    field from a later line of the stack trace)."""
    regex, cols = template_to_regex(MULTI, multiline=True)
    got = both(regex, record)
    assert (None if got is None else tuple(got[c] for c in cols)) == fields


def test_multiline_space_quantifiers_stay_on_the_line():
    regex, _ = template_to_regex("<A> ?- <B>", multiline=True)
    assert both(regex, "x- y\nz") == {"A": "x", "B": "y\nz"}
    assert both(regex, "x\n- y") is None
    assert template_to_regex("<A> ?- <B>")[0] == r"^(?P<A>.*?)\s?-\s+(?P<B>.*)$"    # one line: as before


def test_multiline_template_on_both_cpu_engines():
    """The same captures from RE2 and from polars' engine (the CPU backend's two)."""
    from gpuetl.backends.cpu_text import extract_groups_polars, polars_regex

    regex, cols = template_to_regex(MULTI, multiline=True)
    records = ["2026-01-01 12:00 INFO: a\n  at b", "2026-01-01\n12:00 INFO: x", "2026-01-01 12:00 WARN:\nm"]
    on_polars = polars_regex(regex)
    if on_polars is None:
        pytest.skip("polars is not installed or does not take this regex")
    got, matched = extract_groups_polars(pa.array(records), on_polars, cols, dash_is_null=False)
    assert matched.tolist() == [True, False, True]
    assert got["Content"].to_pylist() == ["a\n  at b", None, "m"]


def test_a_multiline_record_whose_first_line_lacks_a_field_is_quarantined(tmp_path):
    import pyarrow.parquet as pq

    import gpuetl

    (tmp_path / "a.log").write_bytes(b"2026-01-01 12:00 INFO: a\n  at b\n2026-01-02\n12:00 WARN: c\n"
                                     b"2026-01-03 13:00 ERROR:\nboom\n")
    spec = {"version": 1, "name": "t", "source": {"type": "text", "path": "a.log", "multiline": {"start": "^2026-"}},
            "parse": {"template": MULTI}, "sink": {"path": "out"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    c = result.counts
    assert c["rows_in"] == 3 and c["rows_out"] == 2 and c["quarantined"] == 1
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    rows = pq.read_table(tmp_path / "out" / "part-00000.parquet").to_pylist()
    assert [(r["Date"], r["Level"], r["Content"]) for r in rows] == [("2026-01-01", "INFO", "a\n  at b"),
                                                                     ("2026-01-03", "ERROR", "boom")]
    assert result.bad_records == {"line does not match the template": 1}
