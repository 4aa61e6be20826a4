"""Records are their input bytes less the line ending, at every carriage return (#26 item 1).

A record ends at `\\n`; one `\\r` right before it belongs to the line ending; every other byte is
the record's: a lone `\\r` anywhere, a second `\\r` (`a\\r\\r\\n` is `a\\r`), and all of a file's last
line that has no `\\n`. Checked for text, JSON lines, CSV and multi-line records, kept rows and
quarantined `_raw`, at block sizes that cut between the two `\\r` of `\\r\\r\\n` and that pack
several files into one partition, and at piece sizes that cut a block anywhere. Each case
checks the accounting identity and that nothing outside the dataset changed."""

from __future__ import annotations

import pytest

from gpuetl.backends.cpu import CpuBackend

from .test_sources import quarantine, rows, run, spec

BLOCKSIZES = [2, 5, 1 << 20]


def by_the_rule(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, bytes) of each record of a file, by the rule alone: split at '\\n', one '\\r'
    before a '\\n' dropped, a last line without '\\n' whole, empty records skipped."""
    out, pos = [], 0
    parts = data.split(b"\n")
    for k, part in enumerate(parts):
        record = part[:-1] if k < len(parts) - 1 and part.endswith(b"\r") else part
        if record:
            out.append((pos, record))
        pos += len(part) + 1
    return out


def is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# a.log ends in a line without '\n' and is packed with b.log into one partition at the larger sizes
TEXT_FILES = {
    "a.log": (b"a\r\r\n"             # a second \r is the record's
              b"\xff\r\r\n"          # invalid UTF-8: quarantined, its \r in _raw
              b"x\ry\r\n"            # a lone \r inside a line
              b"plain\n"
              b"\r\n"                # a line ending only: not a record
              b"\r\r\n"              # a record of one \r
              b"tail\r"),            # no '\n': the \r is the record's
    "b.log": b"b1\r\r\nb2\r\n\xfe\r",
}


@pytest.mark.parametrize("blocksize, piece", [(b, None) for b in BLOCKSIZES] + [(1 << 20, 1), (1 << 20, 7)])
def test_text_records_keep_every_carriage_return_but_the_line_endings(tmp_path, surroundings, monkeypatch,
                                                                      blocksize, piece):
    """`piece`: the CPU backend's pieces of a block (runtime/partition.py), cut anywhere, the
    newline added after a.log's last line inside one of them."""
    if piece is not None:
        monkeypatch.setattr(CpuBackend, "piece_bytes", piece)
    (tmp_path / "in").mkdir()
    for name, data in TEXT_FILES.items():
        (tmp_path / "in" / name).write_bytes(data)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"type": "text", "path": "in/*.log", "blocksize": blocksize}))
    expected = [(f"in/{name}", at, record) for name, data in TEXT_FILES.items() for at, record in by_the_rule(data)]
    assert [(r["_file"], r["_offset"], r["line"].encode()) for r in rows(result)] == \
        [e for e in expected if is_utf8(e[2])]
    assert [(q["_file"], q["_offset"], q["_raw"]) for q in quarantine(result)] == \
        [e for e in expected if not is_utf8(e[2])]
    assert [r["line"] for r in rows(result)][:4] == ["a\r", "x\ry", "plain", "\r"]
    assert rows(result)[4]["line"] == "tail\r" and rows(result)[5]["line"] == "b1\r"
    assert [q["_raw"] for q in quarantine(result)] == [b"\xff\r", b"\xfe\r"]
    assert all(q["_reason"] == "invalid UTF-8" for q in quarantine(result))
    assert result.counts["rows_in"] == 9 and result.counts["quarantined"] == 2


@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_a_template_trims_for_matching_only(tmp_path, surroundings, blocksize):
    """A template matches the stripped line (its documented trimming), so `1 a\\r\\r\\n` parses;
    a record it does not match keeps its exact bytes, carriage returns and spaces included."""
    data = b"1 a\r\r\nnope \r\r\n2 b\r\n"
    (tmp_path / "a.log").write_bytes(data)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"type": "text", "path": "a.log", "blocksize": blocksize},
                                    parse={"template": "<n> <word>"}))
    assert [(r["n"], r["word"], r["_offset"]) for r in rows(result)] == [("1", "a", 0), ("2", "b", data.index(b"2 b"))]
    [bad] = quarantine(result)
    assert (bad["_offset"], bad["_raw"]) == (data.index(b"nope"), b"nope \r")


JSONL = (b'{"a":1}\r\r\n'         # \r is JSON white space: the object is read
         b'{bad\r\r\n'            # quarantined with one \r
         b'{"a":\r2}\r\n'          # a lone \r inside the object: white space too
         b'\r\r\n'                # a record of one \r: white space only, quarantined
         b'{"a":3}\n'
         b'{bad\r\r')             # no '\n': both \r are the record's


@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_jsonl_records_keep_every_carriage_return_but_the_line_endings(tmp_path, surroundings, blocksize):
    (tmp_path / "a.jsonl").write_bytes(JSONL)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"type": "jsonl", "path": "a.jsonl", "blocksize": blocksize},
                                    columns={"a": "int64"}))
    records = dict(by_the_rule(JSONL))
    assert [(r["a"], r["_offset"]) for r in rows(result)] == [
        (1, 0), (2, JSONL.index(b'{"a":\r2}')), (3, JSONL.index(b'{"a":3}'))]
    q = quarantine(result)
    assert [(r["_offset"], r["_raw"]) for r in q] == [
        (JSONL.index(b"{bad"), b"{bad\r"), (JSONL.index(b'\r\r\n{"a":3}'), b"\r"), (JSONL.rindex(b"{bad"), b"{bad\r\r")]
    assert all(records[r["_offset"]] == r["_raw"] for r in q)
    assert result.counts["rows_in"] == 6


CSV = (b"x,y\r\n"
       b"1,a\r\r\n"               # a \r outside quotes that is not the line ending's: a bad record
       b"2,b\r\n"
       b'"3","c\r"\r\n'            # a \r inside quotes is a value
       b"4,d\re\r\n"              # a lone \r outside quotes, mid-record
       b"5,f\r")                  # no '\n': the \r is the record's, outside quotes


@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_csv_carriage_returns_outside_quotes_are_bad_records_with_their_bytes(tmp_path, surroundings, blocksize):
    (tmp_path / "a.csv").write_bytes(CSV)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"type": "csv", "path": "a.csv", "blocksize": blocksize}))
    assert [(r["x"], r["y"], r["_offset"]) for r in rows(result)] == [
        ("2", "b", CSV.index(b"2,b")), ("3", "c\r", CSV.index(b'"3"'))]
    q = quarantine(result)
    assert [(r["_offset"], r["_raw"]) for r in q] == [
        (CSV.index(b"1,a"), b"1,a\r"), (CSV.index(b"4,d"), b"4,d\re"), (CSV.index(b"5,f"), b"5,f\r")]
    assert all("carriage return" in r["_reason"] for r in q)
    assert result.counts["rows_in"] == 5 and result.counts["quarantined"] == 3


MULTILINE = (b"1 first\r\r\n"        # the second \r is the record's, inside it
             b"  more\r\n"
             b"\r\n"                 # a blank line at the record's end: not part of it
             b"2 second\r\r\n"       # ... and at its end
             b"\xff\r\r\n"           # a continuation line that is not UTF-8
             b"3 last\r")            # no '\n'


@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_multiline_records_keep_their_inner_bytes_and_lose_only_their_last_line_ending(
        tmp_path, surroundings, blocksize):
    (tmp_path / "a.log").write_bytes(MULTILINE)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"type": "text", "path": "a.log", "blocksize": blocksize,
                                     "multiline": {"start": r"^\d "}}))
    assert [(r["line"], r["_offset"]) for r in rows(result)] == [
        ("1 first\r\r\n  more", 0), ("3 last\r", MULTILINE.index(b"3 last"))]
    [bad] = quarantine(result)
    assert (bad["_offset"], bad["_raw"], bad["_reason"]) == (
        MULTILINE.index(b"2 second"), b"2 second\r\r\n\xff\r", "invalid UTF-8")


@pytest.mark.parametrize("source, data", [({"type": "text"}, TEXT_FILES["a.log"]),
                                          ({"type": "text", "multiline": {"start": r"^\d "}}, MULTILINE),
                                          ({"type": "csv"}, CSV), ({"type": "jsonl"}, JSONL)],
                         ids=["text", "multiline", "csv", "jsonl"])
def test_a_compressed_file_gives_the_records_of_the_plain_one(tmp_path, surroundings, source, data):
    """A compressed file is decoded on the host (another reader than a plain file's): the same
    records, the same bytes, the last line's `\\r` included."""
    import gzip

    (tmp_path / "plain").mkdir()
    (tmp_path / "packed").mkdir()
    (tmp_path / "plain" / "a.in").write_bytes(data)
    (tmp_path / "packed" / "a.in.gz").write_bytes(gzip.compress(data))
    got = []
    for folder in ("plain", "packed"):
        with surroundings(tmp_path, dataset=tmp_path / folder / "out"):
            result = run(tmp_path / folder, spec({**source, "path": "a.in*", "blocksize": 5, "provenance": False}))
        got.append((rows(result), [(q["_offset"], q["_raw"], q["_reason"]) for q in quarantine(result)]))
    assert got[0] == got[1]
    last = by_the_rule(data)[-1][1]                  # the line without '\n', its '\r' kept
    kept, quarantined = got[1]
    assert last.endswith(b"\r") and last in [r.get("line", "").encode() for r in kept] + [q[1] for q in quarantined]
