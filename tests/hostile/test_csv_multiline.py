"""Hostile inputs to RFC 4180 CSV and multi-line records: broken and unterminated quotes, a huge
field, line endings (\\r\\n, a lone \\r), a header alone or in another order, binary garbage, a
multi-line record that never ends and lines before any start line. Each case checks the
quarantine row or the clear error, the accounting identity, and that nothing outside the
dataset changed."""

from __future__ import annotations

import pytest

from gpuetl.errors import SpecError

from .test_sources import quarantine, rows, run, spec

BLOCKSIZES = [1, 7, 1 << 20]


def csv_run(tmp_path, surroundings, data: bytes, blocksize: int, **source):
    (tmp_path / "a.csv").write_bytes(data)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        return run(tmp_path, spec({"type": "csv", "path": "a.csv", "blocksize": blocksize, **source}))


@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_csv_stray_quote_in_an_unquoted_field(tmp_path, surroundings, blocksize):
    """RFC 4180 has no quote inside an unquoted field: the record with one is bad (the quote
    opens a field that runs to the next quote), the records around it stay."""
    data = b'a,b\n1,x\n2,y"z\n3,w"\n4,v\n'
    result = csv_run(tmp_path, surroundings, data, blocksize)
    assert [(r["a"], r["b"]) for r in rows(result)] == [("1", "x"), ("4", "v")]
    [bad] = quarantine(result)
    assert (bad["_offset"], bad["_raw"]) == (data.index(b"2,"), b'2,y"z\n3,w"')
    assert "fields" in bad["_reason"] or "quote" in bad["_reason"]



@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_csv_a_quote_opened_after_a_stray_one_takes_nothing_of_the_next_record(tmp_path, surroundings, blocksize):
    """`1,5" disk,"Sony`: two quotes, so the framing ends the record at its newline, while the
    reader keeps the first quote literal and opens a field at the second. That record is bad; it
    used to be kept with the next record's bytes (or an invented newline) in its last value."""
    data = b'k,v,w\n1,a"b,"c\n2,d"e"\n4,p"q\n5,r"s\n6,ok,ok\n7,"q ""x""",ok\n'
    result = csv_run(tmp_path, surroundings, data, blocksize)
    assert [(r["k"], r["v"], r["w"]) for r in rows(result)] == [("6", "ok", "ok"), ("7", 'q "x"', "ok")]
    bad = {b["_raw"]: b["_reason"] for b in quarantine(result)}
    assert set(bad) == {b'1,a"b,"c', b'2,d"e"', b'4,p"q\n5,r"s'}
    assert "opens a quoted field it does not close" in bad[b'1,a"b,"c']
    alone = csv_run(tmp_path, surroundings, b'id,desc,brand\n1,5" disk,"Sony\n2,cable,Acme\n', blocksize)
    assert [(r["id"], r["brand"]) for r in rows(alone)] == [("2", "Acme")]
    assert result.counts["rows_in"] == 5 and alone.counts["quarantined"] == 1


@pytest.mark.parametrize("header", [b'item,size (")\n', b'"a\nb",c\n'])
def test_csv_a_header_whose_quote_does_not_close_on_its_line_is_a_clear_error(tmp_path, surroundings, header):
    """The framing would run the header record on past its line, and the records it took in were
    skipped with it: 0 rows, exit 0, no word."""
    with pytest.raises(SpecError, match="holds a quote that does not close on its line"):
        csv_run(tmp_path, surroundings, header + b'TV,55"\nphone,6\n', 1 << 20)


def test_csv_files_joined_with_cat_repeat_a_header_with_its_byte_order_mark(tmp_path, surroundings):
    one = "\ufeffid,name\n1,x\n".encode()
    result = csv_run(tmp_path, surroundings, one + one, 1 << 20)
    assert [(r["id"], r["name"]) for r in rows(result)] == [("1", "x"), ("1", "x")]
    [bad] = quarantine(result)
    assert "repeats the header" in bad["_reason"]

@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_csv_unterminated_quote_at_end_of_file(tmp_path, surroundings, blocksize):
    data = b'a,b\n1,x\n2,"never\nclosed,3\n'
    result = csv_run(tmp_path, surroundings, data, blocksize)
    assert [(r["a"], r["b"]) for r in rows(result)] == [("1", "x")]
    [bad] = quarantine(result)
    assert (bad["_offset"], bad["_raw"]) == (data.index(b"2,"), b'2,"never\nclosed,3')
    assert "unterminated quote" in bad["_reason"]


def test_csv_huge_quoted_field_with_newlines(tmp_path, surroundings):
    field = ("line\n" * 200_000) + 'say ""hi""'
    data = b'a,b\n1,"' + field.encode() + b'"\n2,y\n'
    result = csv_run(tmp_path, surroundings, data, 1 << 16)
    got = rows(result)
    assert [r["a"] for r in got] == ["1", "2"] and got[0]["b"] == field.replace('""', '"')
    assert result.counts["quarantined"] == 0


@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_csv_crlf_and_lone_carriage_return(tmp_path, surroundings, blocksize):
    """\\r\\n ends a record; a lone \\r inside quotes is text; outside quotes the record is
    quarantined with its bytes, never dropped."""
    data = b'a,b\r\n1,"x\ry"\r\n2,p\rq\r\n3,z\r\n'
    result = csv_run(tmp_path, surroundings, data, blocksize)
    assert [(r["a"], r["b"]) for r in rows(result)] == [("1", "x\ry"), ("3", "z")]
    [bad] = quarantine(result)
    assert (bad["_offset"], bad["_raw"]) == (data.index(b"2,"), b"2,p\rq")
    assert "carriage return" in bad["_reason"]


def test_csv_old_mac_line_endings_are_a_clear_error(tmp_path, surroundings):
    data = b"a,b\r1,x\r2,y\r"
    with pytest.raises(SpecError, match="CSV header"):
        csv_run(tmp_path, surroundings, data, 1 << 20)


def test_csv_header_only_file(tmp_path, surroundings):
    result = csv_run(tmp_path, surroundings, b"a,b\r\n", 1)
    assert result.counts["rows_in"] == 0 and quarantine(result) == []


@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_csv_header_in_another_order_and_an_extra_column(tmp_path, surroundings, blocksize):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "1.csv").write_bytes(b"a,b\n1,x\n")
    (tmp_path / "in" / "2.csv").write_bytes(b'extra,b,a\nE,"y\nz",2\n')
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"type": "csv", "path": "in/*.csv", "blocksize": blocksize}))
    assert [(r["a"], r["b"]) for r in rows(result)] == [("1", "x"), ("2", "y\nz")]
    manifest_notes = (result.out_dir / "_manifest.json").read_text()
    assert "extra" in manifest_notes and "not read" in manifest_notes


@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_csv_binary_garbage(tmp_path, surroundings, blocksize):
    data = b'a,b\n1,x\n\xff\xfe\x00"\x9c,\x01\n2,y\n'
    result = csv_run(tmp_path, surroundings, data, blocksize)
    assert [(r["a"], r["b"]) for r in rows(result)] == [("1", "x")]
    [bad] = quarantine(result)
    # the garbage's quote opens a field that never closes: one bad record, its exact bytes
    assert bad["_offset"] == data.index(b"\xff") and bad["_raw"] == data[data.index(b"\xff"):-1]
    assert bad["_reason"] == "invalid UTF-8"


def text_run(tmp_path, surroundings, data: bytes, blocksize: int, over=None, **multiline):
    (tmp_path / "a.log").write_bytes(data)
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        return run(tmp_path, spec({"type": "text", "path": "a.log", "blocksize": blocksize,
                                   "multiline": {"start": "^START", **multiline}}, **(over or {})))


@pytest.mark.parametrize("blocksize", [13, 1 << 20])      # (a range per byte is slow here: 450 bytes)
def test_multiline_record_that_never_ends(tmp_path, surroundings, blocksize):
    data = b"START a\n" + b"".join(b" more %d\n" % i for i in range(50))
    result = text_run(tmp_path, surroundings, data, blocksize, max_lines=5, max_bytes=10_000)
    [record] = rows(result)
    assert record["line"] == "START a\n more 0\n more 1\n more 2\n more 3"
    bad = quarantine(result)
    assert len(bad) == 46 and {b["_reason"].split(":")[0] for b in bad} == {"multiline_overflow"}
    assert bad[0]["_raw"] == b" more 4" and bad[0]["_offset"] == data.index(b" more 4")


def test_multiline_max_bytes_bound(tmp_path, surroundings):
    data = b"START\n" + b" " + b"x" * 100 + b"\n START again? no\nSTART 2\n"
    result = text_run(tmp_path, surroundings, data, 1 << 20, max_bytes=64)
    assert [r["line"] for r in rows(result)] == ["START", "START 2"]
    assert [(b["_offset"], b["_reason"].split(":")[0]) for b in quarantine(result)] == [
        (6, "multiline_overflow"), (108, "multiline_overflow")]


@pytest.mark.parametrize("blocksize", BLOCKSIZES)
def test_multiline_lines_before_the_first_start(tmp_path, surroundings, blocksize):
    data = b"\n orphan 1\n\n orphan 2\nSTART x\n y\n"
    result = text_run(tmp_path, surroundings, data, blocksize)
    assert [r["line"] for r in rows(result)] == ["START x\n y"]
    assert [(b["_offset"], b["_raw"], b["_reason"].split(":")[0]) for b in quarantine(result)] == [
        (1, b" orphan 1", "no_start"), (12, b" orphan 2", "no_start")]


def test_multiline_no_start_line_at_all(tmp_path, surroundings):
    # every line is bad, which is what is tested: the empty dataset is committed all the same
    result = text_run(tmp_path, surroundings, b"a\nb\nc\n", 2, over={"allow_empty_output": True})
    assert result.counts["rows_out"] == 0 and result.counts["quarantined"] == 3
    assert {b["_reason"].split(":")[0] for b in quarantine(result)} == {"no_start"}


def test_multiline_binary_garbage_in_a_record(tmp_path, surroundings):
    data = b"START a\n \xff\xfe\nSTART b\n"
    result = text_run(tmp_path, surroundings, data, 1 << 20)
    assert [r["line"] for r in rows(result)] == ["START b"]
    [bad] = quarantine(result)
    assert (bad["_offset"], bad["_raw"], bad["_reason"]) == (0, b"START a\n \xff\xfe", "invalid UTF-8")


def test_multiline_gzip_file_is_read_whole(tmp_path, surroundings):
    import gzip

    (tmp_path / "a.log.gz").write_bytes(gzip.compress(b" orphan\nSTART 1\n c\nSTART 2\n"))
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        result = run(tmp_path, spec({"type": "text", "path": "a.log.gz", "blocksize": 4,
                                     "multiline": {"start": "^START"}}))
    assert [r["line"] for r in rows(result)] == ["START 1\n c", "START 2"]
    assert [b["_reason"].split(":")[0] for b in quarantine(result)] == ["no_start"]


def test_csv_quote_that_runs_past_the_record_bound_is_a_clear_error(tmp_path, monkeypatch):
    from gpuetl.errors import SourceError
    from gpuetl.sources import framing

    monkeypatch.setattr(framing, "MAX_CSV_RECORD", 64)
    monkeypatch.setattr(framing, "SCAN_CHUNK", 16)
    (tmp_path / "a.csv").write_bytes(b'a,b\n1,"open\n' + b"2,x\n" * 100)
    with pytest.raises(SourceError, match=r"a\.csv: no CSV record starts within .* after byte 32"):
        run(tmp_path, spec({"type": "csv", "path": "a.csv", "blocksize": 32}))
