"""Records that span lines (sources/framing.py): RFC 4180 CSV and `source.multiline`.

The property tests check the framing against a plain sequential model: every record exactly
once, in order, at its byte offset, whatever the blocksize (as tests/sources/test_ranges.py does
for lines); the pipeline tests check the values and the accounting."""

from __future__ import annotations

import csv
import io
import re
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuetl
from gpuetl.backends.cpu import CpuBackend
from gpuetl.errors import SpecError
from gpuetl.sources.files import resolve_inputs
from gpuetl.sources.framing import CsvFraming, MultilineFraming, first_start_lines, plan_csv_partitions
from gpuetl.sources.ranges import plan_partitions

BACKEND = CpuBackend()


def framed(framing, files, partitions):
    """(records as (file, offset, text), set-aside as (file, offset, raw, reason kind))."""
    records, aside = [], []
    for part in partitions:
        text, file_index, offsets, _bad, _exact, extra = framing.read(files, part.ranges, BACKEND)
        records += list(zip(file_index.tolist(), offsets.tolist(), text.tolist()))
        aside += [(fi, off, raw, why.split(":")[0]) for fi, off, raw, why in extra]
    return records, aside


def inputs(tmp: Path, contents: list[bytes], suffix: str):
    for i, data in enumerate(contents):
        (tmp / f"{i}{suffix}").write_bytes(data)
    return resolve_inputs([f"*{suffix}"], tmp, "infer", [])


# -- CSV -----------------------------------------------------------------------------------------

FIELD = st.text(alphabet=st.sampled_from(list('ab,"\n\r é')), max_size=6)


def csv_file(rows: list[list[str]], terminator: str) -> tuple[bytes, list[tuple[int, str]]]:
    """The file (a header, then the rows) and the model's records: (offset, text) of each row."""
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator=terminator)
    writer.writerow(["a", "b"])
    data = out.getvalue().encode()
    expected = []
    for row in rows:
        out = io.StringIO(newline="")
        # Python's writer leaves a lone \r unquoted unless the terminator holds one; a \r outside
        # quotes is a malformed record (tests/hostile/test_csv_multiline.py)
        quoting = csv.QUOTE_ALL if any("\r" in v for v in row) else csv.QUOTE_MINIMAL
        csv.writer(out, lineterminator=terminator, quoting=quoting).writerow(row)
        text = out.getvalue()
        expected.append((len(data), text[: -len(terminator)]))
        data += text.encode()
    return data, expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.lists(st.lists(FIELD, min_size=2, max_size=2), max_size=8), min_size=1, max_size=3),
       terminator=st.sampled_from(["\n", "\r\n"]), blocksize=st.integers(1, 80))
def test_csv_every_record_once_in_order_any_blocksize(files, terminator, blocksize):
    with tempfile.TemporaryDirectory() as tmp:
        built = [csv_file(rows, terminator) for rows in files]
        found = inputs(Path(tmp), [data for data, _ in built], ".csv")
        records, aside = framed(CsvFraming(), found, plan_csv_partitions(found, blocksize, limits()))
        want = [(i, off, text) for i, (_, expected) in enumerate(built) for off, text in expected]
        assert records == want and aside == []


def limits():
    from gpuetl.sources.compressed import Limits

    return Limits()


def test_csv_ranges_start_on_record_starts(tmp_path):
    """A quoted newline right at a range boundary: the range moves to the next record start."""
    data = b'a,b\n1,"x\ny\nz"\n2,w\n'
    [f] = inputs(tmp_path, [data], ".csv")
    for blocksize in range(1, len(data) + 1):
        starts = [r.offset for p in plan_csv_partitions([f], blocksize, limits()) for r in p.ranges]
        assert set(starts) <= {0, data.index(b"1,"), data.index(b"2,"), len(data)}


def run_csv(tmp_path, data: bytes, source=None, columns=None, blocksize=1 << 20):
    (tmp_path / "a.csv").write_bytes(data)
    spec = {"version": 1, "name": "c", "source": {"type": "csv", "path": "a.csv", "provenance": True,
                                                   "blocksize": blocksize, **(source or {})},
            "columns": columns or {}, "sink": {"path": "out", "mode": "overwrite"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    c = result.counts
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    rows = pq.read_table(tmp_path / "out" / "part-00000.parquet").to_pylist() if c["rows_out"] else []
    q = sorted((tmp_path / "out" / "_quarantine").glob("*.parquet"))
    bad = [r for p in q for r in pq.read_table(p).to_pylist()]
    return result, rows, bad


@pytest.mark.parametrize("blocksize", [1, 5, 1 << 20])
def test_csv_quoted_newlines_doubled_quotes_and_nulls(tmp_path, blocksize):
    data = b'id,n,s\r\n1,,""\r\n2,7,"two\r\nlines, ""quoted"""\r\n3,NULL,"NULL"\r\n4,-,x\r\n'
    _, rows, bad = run_csv(tmp_path, data, {"null_values": ["", "NULL"]}, {"id": "int32", "n": "int64"},
                           blocksize=blocksize)
    assert [(r["id"], r["n"], r["s"], r["_offset"]) for r in rows] == [
        (1, None, "", data.index(b"1,")), (2, 7, 'two\r\nlines, "quoted"', data.index(b"2,")),
        (3, None, "NULL", data.index(b"3,"))]
    assert [(r["_offset"], r["_raw"]) for r in bad] == [(data.index(b"4,"), b"4,-,x")]
    assert "int64" in bad[0]["_reason"]


def test_csv_empty_unquoted_field_is_null_for_every_type(tmp_path):
    data = b'a,b,c,d\n,,,\n"","","",""\n'
    _, rows, bad = run_csv(tmp_path, data, columns={"a": "int16", "b": "float64", "c": "bool", "d": "string"})
    assert [(r["a"], r["b"], r["c"], r["d"]) for r in rows] == [(None, None, None, None)]
    assert len(bad) == 1 and bad[0]["_raw"] == b'"","","",""'      # a quoted "" is text: not an int16


def test_csv_header_in_another_order_is_read_by_name(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "1.csv").write_bytes(b"a,b\n1,x\n")
    (tmp_path / "in" / "2.csv").write_bytes(b'b,a\n"y\nz",2\n')
    spec = {"version": 1, "name": "c", "source": {"type": "csv", "path": "in/*.csv"}, "columns": {"a": "int8"},
            "sink": {"path": "out"}}
    pipeline = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path)
    assert any("in/2.csv: the header orders the columns differently" in n for n in pipeline.plan().notes)
    pipeline.run(backend="cpu", scheduler="sync")
    assert pq.read_table(tmp_path / "out" / "part-00000.parquet").to_pylist() == [
        {"a": 1, "b": "x"}, {"a": 2, "b": "y\nz"}]


def test_csv_file_lacking_a_declared_column_is_a_located_error(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "1.csv").write_bytes(b"a,b\n1,x\n")
    (tmp_path / "in" / "2.csv").write_bytes(b"b\ny\n")
    spec = {"version": 1, "name": "c", "source": {"type": "csv", "path": "in/*.csv"}, "columns": {"a": "int8"},
            "sink": {"path": "out"}}
    with pytest.raises(SpecError, match=r"columns\.a: the CSV header of in/2\.csv lacks the column 'a'"):
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).plan()


# -- multi-line ----------------------------------------------------------------------------------

LINE = st.text(alphabet=st.sampled_from(list("ab é\t")), max_size=5)


def multiline_file(draw_records, leading: list[str]) -> bytes:
    lines = [" " + t for t in leading]
    for head, rest in draw_records:
        lines.append("S" + head)
        lines += [("" if t == "" else " " + t) for t in rest]
    return ("\n".join(lines) + "\n").encode()


def multiline_model(data: bytes, max_lines: int, max_bytes: int):
    """The sequential rule: a start line begins a record; a line joins the record before it
    while the record has at most max_lines lines and ends at most max_bytes after its start;
    other non-blank lines are set aside (no_start before the first start line)."""
    records, aside, pos, head = [], [], 0, None
    pieces = data.split(b"\n")[:-1]
    for piece in pieces:
        end = pos + len(piece) + 1
        text = piece.decode()
        if text.startswith("S"):
            head = [pos, 1, end]
            records.append(head)
        elif head is not None and head[1] + 1 <= max_lines and end - head[0] <= max_bytes:
            head[1] += 1
            head[2] = end
        else:
            if head is not None:
                head[1] = max_lines + 1              # the record is closed: later lines overflow too
            if text:
                aside.append((pos, piece, "no_start" if head is None else "multiline_overflow"))
        pos = end
    return [(a, data[a:b].decode().rstrip("\n")) for a, _, b in records], aside


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(recs=st.lists(st.tuples(LINE, st.lists(LINE, max_size=5)), max_size=6),
       leading=st.lists(LINE.filter(bool), max_size=2), max_lines=st.integers(1, 6),
       max_bytes=st.integers(1, 40), blocksize=st.integers(1, 90))
def test_multiline_every_record_once_in_order_any_blocksize(recs, leading, max_lines, max_bytes, blocksize):
    data = multiline_file(recs, leading)
    with tempfile.TemporaryDirectory() as tmp:
        found = inputs(Path(tmp), [data], ".log")
        framing = MultilineFraming("^S", max_lines, max_bytes, first_start_lines(found, "^S"))
        records, aside = framed(framing, found, plan_partitions(found, blocksize))
    want_records, want_aside = multiline_model(data, max_lines, max_bytes)
    assert records == [(0, off, text) for off, text in want_records]
    assert aside == [(0, off, raw, kind) for off, raw, kind in want_aside]


def test_multiline_model_agrees_on_a_line_past_the_window():
    """The model's closing rule: once a line overflows, later lines of that record overflow."""
    data = b"Sa\n b\n c\n"
    assert multiline_model(data, 2, 100) == ([(0, "Sa\n b")], [(6, b" c", "multiline_overflow")])
    assert re.search("^S", "Sa")


JAVA = (b"2024-05-01 12:00:00,001 INFO  [main] App: started\n"
        b"2024-05-01 12:00:01,002 ERROR [worker-1] Job: failed\n"
        b"java.lang.IllegalStateException: bad state\n"
        b"\tat com.example.Job.run(Job.java:42)\n"
        b"\tat java.base/java.lang.Thread.run(Thread.java:833)\n"
        b"Caused by: java.io.IOException: disk\n"
        b"\t... 2 more\n"
        b"2024-05-01 12:00:02,003 WARN  [main] App: slow\n")


@pytest.mark.parametrize("blocksize", [9, 50, 1 << 20])
def test_multiline_java_stack_traces_stay_with_their_record(tmp_path, blocksize):
    (tmp_path / "app.log").write_bytes(b"orphan line\n" + JAVA)
    spec = {"version": 1, "name": "j",
            "source": {"type": "text", "path": "app.log", "blocksize": blocksize, "provenance": True,
                       "multiline": {"start": r"^\d{4}-\d{2}-\d{2} "}},
            "parse": {"regex": r"(?s)^(?P<date>\S+) (?P<time>\S+) (?P<level>[A-Z]+) +\[(?P<thread>[^\]]+)\] "
                               r"(?P<logger>[^:]+): (?P<message>.*)$"},
            "sink": {"path": "out"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    c = result.counts
    assert (c["rows_in"], c["rows_out"], c["quarantined"]) == (4, 3, 1)
    rows = pq.read_table(tmp_path / "out" / "part-00000.parquet").to_pylist()
    assert [r["level"] for r in rows] == ["INFO", "ERROR", "WARN"]
    assert rows[1]["message"].startswith("failed\njava.lang.IllegalStateException") and rows[1]["message"].endswith(
        "\t... 2 more")
    [bad] = pq.read_table(next((tmp_path / "out" / "_quarantine").glob("*.parquet"))).to_pylist()
    assert (bad["_offset"], bad["_raw"], bad["_reason"].split(":")[0]) == (0, b"orphan line", "no_start")


def test_multiline_dot_matches_newline_only_under_s_flag(tmp_path):
    (tmp_path / "a.log").write_bytes(b"S one\n two\n")

    def run(regex):
        spec = {"version": 1, "name": "d", "source": {"type": "text", "path": "a.log", "multiline": {"start": "^S"}},
                "parse": {"regex": regex}, "sink": {"path": "out", "mode": "overwrite"},
                "allow_empty_output": True}           # the one record may be bad: that is what is tested
        return gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync").counts

    assert run(r"^S (?P<rest>.*)$")["quarantined"] == 1
    assert run(r"(?s)^S (?P<rest>.*)$")["rows_out"] == 1


def test_multiline_template_last_field_takes_the_rest(tmp_path):
    (tmp_path / "a.log").write_bytes(b"2024 INFO: a\nb\n  c\n2024 WARN: d\n")
    spec = {"version": 1, "name": "t", "source": {"type": "text", "path": "a.log", "multiline": {"start": "^2024 "}},
            "parse": {"template": "<Year> <Level>: <Content>"}, "sink": {"path": "out"}}
    gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    rows = pq.read_table(tmp_path / "out" / "part-00000.parquet").to_pylist()
    assert rows == [{"Year": "2024", "Level": "INFO", "Content": "a\nb\n  c"},
                    {"Year": "2024", "Level": "WARN", "Content": "d"}]


@pytest.mark.parametrize("start, message", [("(", "not a regular expression"), ("^x*", "matches an empty line")])
def test_multiline_bad_start_is_a_located_error(tmp_path, start, message):
    (tmp_path / "a.log").write_bytes(b"x\n")
    spec = {"version": 1, "name": "t", "source": {"type": "text", "path": "a.log", "multiline": {"start": start}},
            "sink": {"path": "out"}}
    with pytest.raises(SpecError, match=message):
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).plan()


def test_multiline_is_a_text_option_only(tmp_path):
    (tmp_path / "a.csv").write_bytes(b"a\n1\n")
    spec = {"version": 1, "name": "t", "source": {"type": "csv", "path": "a.csv", "multiline": {"start": "^"}},
            "sink": {"path": "out"}}
    with pytest.raises(SpecError, match="multiline"):
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).plan()


def test_java_sample_pipeline_runs(tmp_path, capsys):
    """pipelines/java_app.yaml as shipped, on the sample generator's Java log (fewer records)."""
    import shutil

    from gpuetl import samples

    samples.write_java_log(tmp_path / "data" / "java" / "app-000.log", records=400, seed=500)
    shutil.copy(Path(__file__).resolve().parents[2] / "pipelines" / "java_app.yaml", tmp_path / "java_app.yaml")
    pipeline = gpuetl.Pipeline.from_file(tmp_path / "java_app.yaml")
    result = pipeline.run(backend="cpu", scheduler="sync")
    c = result.counts
    assert (c["rows_in"], c["rows_out"], c["quarantined"]) == (402, 400, 2)     # the banner's two lines
    table = pq.read_table(next((tmp_path / "out" / "java-app").glob("*.parquet")))
    assert str(table.schema.field("time").type) == "timestamp[us, tz=UTC]"
    errors = [r for r in table.to_pylist() if r["level"] == "ERROR"]
    assert len(errors) == 40 and all(r["has_trace"] and "\n\tat " in r["message"] for r in errors)
    assert not any(r["has_trace"] for r in table.to_pylist() if r["level"] != "ERROR")
    from gpuetl.cli import main

    assert main(["plan", str(tmp_path / "java_app.yaml")]) == 0          # plan names the record rule
    assert "records: multi-line, each starting at a line matching" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["java", "csv"])
def test_gpu_gives_the_cpu_records(tmp_path, kind):
    """Framed partitions on the GPU backend: records framed on the host (counted), the (?s)
    regex on the device with DOTALL (no regex fallback); rows equal to the CPU's."""
    from gpuetl import samples

    if kind == "java":
        samples.write_java_log(tmp_path / "app.log", records=300, seed=1)
        spec = {"version": 1, "name": "g",
                "source": {"type": "text", "path": "app.log", "blocksize": 4096,
                           "multiline": {"start": r"^\d{4}-\d{2}-\d{2} "}},
                "parse": {"regex": r"(?s)^(?P<time>\S+ \S+) (?P<level>[A-Z]+) +\[(?P<thread>[^\]]+)\] "
                                   r"(?P<logger>\S+) - (?P<message>.*)$"}}
    else:
        (tmp_path / "a.csv").write_bytes(b'a,b\n' + b"".join(b'%d,"x\ny ""%d"""\n' % (i, i) for i in range(300)))
        spec = {"version": 1, "name": "g", "source": {"type": "csv", "path": "a.csv", "blocksize": 512},
                "columns": {"a": "int32"}}
    results = {}
    for backend in ("cpu", "gpu"):
        s = {**spec, "sink": {"path": f"out-{backend}"}}
        results[backend] = gpuetl.Pipeline.from_dict(s, base_dir=tmp_path).run(backend=backend, scheduler="sync")
    assert results["gpu"].counts == results["cpu"].counts
    fallbacks = results["gpu"].manifest["fallbacks"]
    assert "records framed on the host (csv, multiline)" in fallbacks
    assert not any(k.startswith("regex") for k in fallbacks), fallbacks
    for backend in ("cpu", "gpu"):
        results[backend] = pq.read_table(tmp_path / f"out-{backend}" / "part-00000.parquet").to_pylist()
    assert results["gpu"] == results["cpu"]


def test_csv_range_cut_short_is_finished_to_its_record_end(tmp_path):
    """A range that ends inside a record (a preview's shortened range) still reads it whole."""
    from gpuetl.sources.ranges import ByteRange

    data = b'a,b\n1,"x\ny ""q""\nz"\n2,w\n'
    [f] = inputs(tmp_path, [data], ".csv")
    for cut in range(5, len(data)):
        text, _, offsets, *_ = CsvFraming().read([f], (ByteRange(0, 0, cut),), BACKEND)
        want = [(4, '1,"x\ny ""q""\nz"')] + ([(data.index(b"2,"), "2,w")] if cut > data.index(b"2,") else [])
        assert list(zip(offsets.tolist(), text.tolist())) == want, cut


@pytest.mark.parametrize("source, parse, message", [
    ({"type": "text", "multiline": {"start": "^{"}}, {"preset": "json"}, "not read with the json preset"),
    ({"type": "text", "null_values": ["NULL"]}, None, "null_values: not read by text sources"),
    ({"type": "text", "multiline": {"start": "^S", "max_bytes": "2GiB"}}, None, "between 1 byte and 1GiB"),
])
def test_misplaced_options_are_located_errors(tmp_path, source, parse, message):
    (tmp_path / "a.log").write_bytes(b"S\n")
    spec = {"version": 1, "name": "t", "source": {"path": "a.log", **source}, "sink": {"path": "out"}}
    if parse:
        spec["parse"] = parse
    with pytest.raises(SpecError, match=message):
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).plan()
