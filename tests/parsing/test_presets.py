"""Built-in log presets: each regex applied with Python ``re`` AND pyarrow (RE2)."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gpuetl.parsing import PRESETS, ParseRule, preset

CLF_TIME = {"type": "timestamp", "format": "%d/%b/%Y:%H:%M:%S %z"}


def parse_both(regex: str, line: str) -> dict[str, str] | None:
    """Parse with Python re and with pyarrow; assert they agree.

    Python gives None for a group that did not participate, pyarrow gives "";
    both are normalised to "" here (the caller treats them as null).
    """
    m = re.fullmatch(regex, line)
    arrow = pc.extract_regex(pa.array([line], type=pa.string()), pattern=regex).to_pylist()[0]
    if m is None:
        assert arrow is None, f"pyarrow matched but re did not: {arrow}"
        return None
    py = {k: ("" if v is None else v) for k, v in m.groupdict().items()}
    assert arrow == py
    assert list(arrow) == list(m.re.groupindex)  # same column order
    return arrow


def parse(name: str, line: str) -> dict[str, str] | None:
    return parse_both(preset(name).regex, line)


# --------------------------------------------------------------------------- #
# API
# --------------------------------------------------------------------------- #


def test_preset_names_exact():
    assert set(PRESETS) == {"apache_common", "apache_combined", "nginx_combined", "syslog_rfc3164", "syslog_rfc5424"}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_compiles_in_re2_and_is_anchored(name):
    rule = preset(name)
    assert isinstance(rule, ParseRule)
    assert rule.regex.startswith("^") and rule.regex.endswith("$")
    compiled = re.compile(rule.regex)
    assert tuple(compiled.groupindex) == rule.columns
    assert compiled.groups == len(rule.columns)  # no unnamed capturing groups
    # RE2 accepts it and produces one struct field per column, in order
    out = pc.extract_regex(pa.array(["x"], type=pa.string()), pattern=rule.regex)
    assert [f.name for f in out.type] == list(rule.columns)
    assert rule.dash_is_null is True
    # portable subset: no lookarounds / backrefs / atomic / possessive
    for bad in ("(?=", "(?!", "(?<=", "(?<!", "(?>", "(?P=", "*+", "++", "?+"):
        assert bad not in rule.regex


def test_columns_and_types():
    clf = ("ip", "ident", "user", "time", "request", "method", "path", "protocol", "status", "size")
    assert preset("apache_common").columns == clf
    assert preset("apache_combined").columns == clf + ("referer", "user_agent")
    assert preset("nginx_combined").columns == clf + ("referer", "user_agent")
    for name in ("apache_common", "apache_combined", "nginx_combined"):
        assert preset(name).types == {"status": "int16", "size": "int64", "time": CLF_TIME}
    assert preset("syslog_rfc3164").columns == ("priority", "time", "host", "app", "pid", "message")
    assert preset("syslog_rfc3164").types == {"priority": "int16", "pid": "int64"}
    assert preset("syslog_rfc5424").columns == (
        "priority", "version", "time", "host", "app", "procid", "msgid", "structured_data", "message",
    )
    assert preset("syslog_rfc5424").types == {
        "priority": "int16", "version": "int16", "time": {"type": "timestamp"},
    }


def test_preset_returns_copy_of_types():
    rule = preset("apache_common")
    rule.types["status"] = "string"
    rule.types["time"]["format"] = "nope"
    assert preset("apache_common").types == {"status": "int16", "size": "int64", "time": CLF_TIME}


def test_unknown_preset_hint():
    with pytest.raises(ValueError, match="apache_combined"):
        preset("apache_combind")
    with pytest.raises(ValueError, match="syslog_rfc5424"):
        preset("syslog_rfc5242")
    with pytest.raises(ValueError, match="unknown log format preset 'zzz'"):
        preset("zzz")


def test_json_preset_has_no_regex():
    with pytest.raises(ValueError, match="no regex"):
        preset("json")


def test_preset_name_normalised():
    assert preset("Apache-Combined") == PRESETS["apache_combined"]


def test_parse_rule_checks_columns():
    with pytest.raises(ValueError, match="named groups"):
        ParseRule(regex=r"^(?P<a>\S+) (?P<b>\S+)$", columns=("b", "a"), types={})
    with pytest.raises(ValueError, match="unnamed"):
        ParseRule(regex=r"^(?P<a>\S+) (\S+)$", columns=("a",), types={})


# --------------------------------------------------------------------------- #
# Apache / nginx
# --------------------------------------------------------------------------- #


def test_apache_common_real_line():
    line = '127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326'
    assert parse("apache_common", line) == {
        "ip": "127.0.0.1", "ident": "-", "user": "frank", "time": "10/Oct/2000:13:55:36 -0700",
        "request": "GET /apache_pb.gif HTTP/1.0", "method": "GET", "path": "/apache_pb.gif",
        "protocol": "HTTP/1.0", "status": "200", "size": "2326",
    }


def test_apache_common_dash_size_and_ipv6():
    line = '::1 - - [29/Nov/2024:06:25:14 +0000] "OPTIONS * HTTP/1.0" 200 -'
    assert parse("apache_common", line) == {
        "ip": "::1", "ident": "-", "user": "-", "time": "29/Nov/2024:06:25:14 +0000",
        "request": "OPTIONS * HTTP/1.0", "method": "OPTIONS", "path": "*", "protocol": "HTTP/1.0",
        "status": "200", "size": "-",
    }


def test_apache_common_rejects_combined_line():
    # anchored: trailing referer/UA is not swallowed
    line = '1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 5 "-" "curl/8.0"'
    assert parse("apache_common", line) is None


def test_apache_combined_real_line():
    line = (
        '66.249.66.1 - - [17/May/2015:10:05:03 +0000] "GET /presentations/logstash-monitorama-2013/images/'
        'kibana-search.png HTTP/1.1" 200 203023 "http://semicomplete.com/presentations/logstash-monitorama-2013/" '
        '"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_1) AppleWebKit/537.36 (KHTML, like Gecko) '
        'Chrome/32.0.1700.77 Safari/537.36"'
    )
    assert parse("apache_combined", line) == {
        "ip": "66.249.66.1", "ident": "-", "user": "-", "time": "17/May/2015:10:05:03 +0000",
        "request": "GET /presentations/logstash-monitorama-2013/images/kibana-search.png HTTP/1.1",
        "method": "GET", "path": "/presentations/logstash-monitorama-2013/images/kibana-search.png",
        "protocol": "HTTP/1.1", "status": "200", "size": "203023",
        "referer": "http://semicomplete.com/presentations/logstash-monitorama-2013/",
        "user_agent": "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_1) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/32.0.1700.77 Safari/537.36",
    }


def test_apache_combined_ipv6_escaped_quote_in_user_agent():
    line = (
        '2001:db8::1 - alice [01/Dec/2024:23:59:59 +0100] "POST /api/v1/items?id=3&x=%22y%22 HTTP/2.0" 201 -'
        ' "https://example.com/a \\"b\\"" "Mozilla/5.0 \\"quoted\\" agent \\\\ end"'
    )
    got = parse("apache_combined", line)
    assert got["ip"] == "2001:db8::1"
    assert got["user"] == "alice"
    assert got["method"] == "POST"
    assert got["path"] == "/api/v1/items?id=3&x=%22y%22"
    assert got["protocol"] == "HTTP/2.0"
    assert got["status"] == "201"
    assert got["size"] == "-"
    assert got["referer"] == 'https://example.com/a \\"b\\"'
    assert got["user_agent"] == 'Mozilla/5.0 \\"quoted\\" agent \\\\ end'


def test_apache_combined_dash_request_line():
    # Apache logs "-" as the request line for a connection closed before a request (408)
    line = '192.0.2.7 - - [05/Jan/2025:08:00:01 +0000] "-" 408 - "-" "-"'
    got = parse("apache_combined", line)
    assert got == {
        "ip": "192.0.2.7", "ident": "-", "user": "-", "time": "05/Jan/2025:08:00:01 +0000",
        "request": "-", "method": "", "path": "", "protocol": "", "status": "408", "size": "-",
        "referer": "-", "user_agent": "-",
    }


def test_apache_combined_garbage_request_line():
    # TLS handshake sent to a plain-HTTP port: Apache escapes the bytes as \xNN
    line = (
        '203.0.113.9 - - [05/Jan/2025:08:00:02 +0000] "\\x16\\x03\\x01\\x02" 400 226 "-" "-"'
    )
    got = parse("apache_combined", line)
    assert got["request"] == "\\x16\\x03\\x01\\x02"
    assert (got["method"], got["path"], got["protocol"]) == ("", "", "")
    assert got["status"] == "400"
    # a request line with an escaped quote inside the path and lowercase method also still matches
    line2 = '203.0.113.9 - - [05/Jan/2025:08:00:02 +0000] "get /a\\"b HTTP/1.1 extra" 400 0 "-" "-"'
    got2 = parse("apache_combined", line2)
    assert got2["request"] == 'get /a\\"b HTTP/1.1 extra'
    assert got2["method"] == ""


def test_apache_escaped_quote_in_path_is_split():
    line = '10.0.0.1 - - [05/Jan/2025:08:00:02 +0000] "GET /a\\"b HTTP/1.1" 404 12 "-" "x"'
    got = parse("apache_combined", line)
    assert (got["method"], got["path"], got["protocol"]) == ("GET", '/a\\"b', "HTTP/1.1")


def test_pyarrow_non_participating_group_is_empty_string_not_null():
    """Documented behaviour the caller relies on: RE2/pyarrow give "" (not null)
    for an optional group that did not participate; Python re gives None; a
    non-matching line gives a null struct."""
    rule = preset("apache_combined")
    line = '192.0.2.7 - - [05/Jan/2025:08:00:01 +0000] "-" 408 - "-" "-"'
    out = pc.extract_regex(pa.array([line, "not a log line"]), pattern=rule.regex)
    first = out.to_pylist()[0]
    assert first["method"] == "" and first["path"] == "" and first["protocol"] == ""
    assert out.to_pylist()[1] is None
    assert out.is_null().to_pylist() == [False, True]
    assert re.fullmatch(rule.regex, line).group("method") is None


def test_nginx_combined_real_lines():
    lines = [
        '93.180.71.3 - - [17/May/2015:08:05:32 +0000] "GET /downloads/product_1 HTTP/1.1" 304 0 "-" '
        '"Debian APT-HTTP/1.3 (0.8.16~exp12ubuntu10.21)"',
        '2001:db8::1 - bob [08/Dec/2024:14:01:02 +0000] "HEAD /healthz HTTP/1.1" 200 0 "-" "kube-probe/1.29"',
        # nginx escapes a quote in the UA as \x22
        '172.17.0.1 - - [08/Dec/2024:14:01:03 +0000] "GET / HTTP/1.1" 200 615 "-" "evil\\x22agent"',
        # nginx logs a bare 400 with an empty request line
        '172.17.0.1 - - [08/Dec/2024:14:01:04 +0000] "" 400 0 "-" "-"',
    ]
    got = [parse("nginx_combined", line) for line in lines]
    assert got[0]["ip"] == "93.180.71.3"
    assert got[0]["path"] == "/downloads/product_1"
    assert got[0]["status"] == "304"
    assert got[0]["size"] == "0"
    assert got[0]["user_agent"] == "Debian APT-HTTP/1.3 (0.8.16~exp12ubuntu10.21)"
    assert got[1]["ip"] == "2001:db8::1"
    assert got[1]["user"] == "bob"
    assert got[1]["method"] == "HEAD"
    assert got[2]["user_agent"] == "evil\\x22agent"
    assert got[3]["request"] == "" and got[3]["method"] == "" and got[3]["status"] == "400"


def test_apache_batch_matches_python_row_by_row():
    rule = preset("apache_combined")
    lines = [
        '127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 1 "-" "a"',
        'garbage',
        '::1 - - [10/Oct/2000:13:55:36 -0700] "-" 408 - "-" "-"',
    ]
    out = pc.extract_regex(pa.array(lines), pattern=rule.regex).to_pylist()
    for line, row in zip(lines, out):
        m = re.fullmatch(rule.regex, line)
        if m is None:
            assert row is None
        else:
            assert row == {k: v or "" for k, v in m.groupdict().items()}


# --------------------------------------------------------------------------- #
# syslog RFC 3164
# --------------------------------------------------------------------------- #


def test_rfc3164_with_pri_no_pid():
    line = "<34>Oct 11 22:14:15 mymachine su: 'su root' failed for lonvick on /dev/pts/8"
    assert parse("syslog_rfc3164", line) == {
        "priority": "34", "time": "Oct 11 22:14:15", "host": "mymachine", "app": "su", "pid": "",
        "message": "'su root' failed for lonvick on /dev/pts/8",
    }


def test_rfc3164_rsyslog_file_line_padded_day_with_pid():
    line = "Oct  1 06:25:01 web01 CRON[12345]: (root) CMD (command -v debian-sa1 > /dev/null && debian-sa1 1 1)"
    assert parse("syslog_rfc3164", line) == {
        "priority": "", "time": "Oct  1 06:25:01", "host": "web01", "app": "CRON", "pid": "12345",
        "message": "(root) CMD (command -v debian-sa1 > /dev/null && debian-sa1 1 1)",
    }


def test_rfc3164_more_real_lines():
    got = parse("syslog_rfc3164", "Dec  3 10:00:00 host kernel: [  123.456] usb 1-1: new high-speed USB device")
    assert (got["app"], got["pid"], got["message"]) == (
        "kernel", "", "[  123.456] usb 1-1: new high-speed USB device",
    )
    got = parse("syslog_rfc3164", "<86>Dec 13 09:21:41 bastion sshd[2202]: Accepted publickey for ubuntu from 198.51.100.4 port 51514 ssh2")
    assert (got["priority"], got["host"], got["app"], got["pid"]) == ("86", "bastion", "sshd", "2202")
    assert got["message"].startswith("Accepted publickey")
    got = parse("syslog_rfc3164", "Jan 20 00:00:01 mail postfix/smtpd[777]: connect from unknown[192.0.2.1]")
    assert (got["app"], got["pid"], got["message"]) == ("postfix/smtpd", "777", "connect from unknown[192.0.2.1]")
    # no tag at all: rsyslog "-- MARK --"
    got = parse("syslog_rfc3164", "Jan 20 00:20:01 mail -- MARK --")
    assert (got["app"], got["pid"], got["message"]) == ("", "", "-- MARK --")
    assert parse("syslog_rfc3164", "not syslog at all") is None


# --------------------------------------------------------------------------- #
# syslog RFC 5424
# --------------------------------------------------------------------------- #


def test_rfc5424_nil_sd_with_message():
    line = "<34>1 2003-10-11T22:14:15.003Z mymachine.example.com su - ID47 - 'su root' failed for lonvick on /dev/pts/8"
    assert parse("syslog_rfc5424", line) == {
        "priority": "34", "version": "1", "time": "2003-10-11T22:14:15.003Z", "host": "mymachine.example.com",
        "app": "su", "procid": "-", "msgid": "ID47", "structured_data": "-",
        "message": "'su root' failed for lonvick on /dev/pts/8",
    }


def test_rfc5424_sd_with_message():
    line = (
        '<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 '
        '[exampleSDID@32473 iut="3" eventSource="Application" eventID="1011"] An application event log entry...'
    )
    got = parse("syslog_rfc5424", line)
    assert got["priority"] == "165"
    assert got["app"] == "evntslog"
    assert got["structured_data"] == '[exampleSDID@32473 iut="3" eventSource="Application" eventID="1011"]'
    assert got["message"] == "An application event log entry..."


def test_rfc5424_multiple_sd_no_message():
    line = (
        '<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 '
        '[exampleSDID@32473 iut="3" eventSource="Application" eventID="1011"][examplePriority@32473 class="high"]'
    )
    got = parse("syslog_rfc5424", line)
    assert got["structured_data"] == (
        '[exampleSDID@32473 iut="3" eventSource="Application" eventID="1011"][examplePriority@32473 class="high"]'
    )
    assert got["message"] == ""  # absent message: "" from pyarrow (None from re) -> null


def test_rfc5424_nil_everything_no_message():
    line = "<13>1 - - - - - -"
    assert parse("syslog_rfc5424", line) == {
        "priority": "13", "version": "1", "time": "-", "host": "-", "app": "-", "procid": "-",
        "msgid": "-", "structured_data": "-", "message": "",
    }


def test_rfc5424_escaped_bracket_and_quote_in_sd():
    line = (
        '<14>1 2024-12-01T10:00:00.123456+01:00 host1 app 4242 - '
        '[meta@32473 note="a \\] b" q="say \\"hi\\"" path="C:\\\\tmp"] done'
    )
    got = parse("syslog_rfc5424", line)
    assert got["time"] == "2024-12-01T10:00:00.123456+01:00"
    assert got["procid"] == "4242"
    assert got["msgid"] == "-"
    assert got["structured_data"] == '[meta@32473 note="a \\] b" q="say \\"hi\\"" path="C:\\\\tmp"]'
    assert got["message"] == "done"


def test_rfc5424_rejects_garbage():
    assert parse("syslog_rfc5424", "<34>Oct 11 22:14:15 mymachine su: hi") is None
    assert parse("syslog_rfc5424", "<34>1 2003-10-11T22:14:15Z h a p m [unterminated x") is None


# --------------------------------------------------------------------------- #
# property: RE2 and Python re agree on arbitrary (mostly malformed) lines
# --------------------------------------------------------------------------- #

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_PIECES = st.sampled_from(
    ['"', "\\", "\\\"", " ", "-", "[", "]", "<13>", "1", "GET", "/x", "HTTP/1.1", "200", ":", "a",
     "Oct  1 06:25:01", "[x=\"1\"]", "10/Oct/2000:13:55:36 -0700", "::1", "é"]
)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(PRESETS)), pieces=st.lists(_PIECES, max_size=25))
def test_re2_and_python_agree(name, pieces):
    parse(name, "".join(pieces))


@settings(max_examples=100, deadline=None)
@given(
    ip=st.sampled_from(["1.2.3.4", "2001:db8::1", "::1"]),
    user=st.sampled_from(["-", "bob"]),
    path=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters='"\\'), min_size=1),
    ua=st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126, exclude_characters='"\\')),
    size=st.one_of(st.just("-"), st.integers(0, 10**9).map(str)),
)
def test_apache_combined_roundtrip(ip, user, path, ua, size):
    line = f'{ip} - {user} [10/Oct/2000:13:55:36 -0700] "GET {path} HTTP/1.1" 200 {size} "-" "{ua}"'
    got = parse("apache_combined", line)
    assert (got["ip"], got["user"], got["path"], got["size"], got["user_agent"]) == (ip, user, path, size, ua)
