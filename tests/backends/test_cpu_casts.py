"""Every contract type and timestamp rule on the CPU backend: values, nulls and bad values."""

import datetime as dt

import pyarrow as pa
import pytest

from gpuetl import Pipeline
from gpuetl.backends.cpu import CpuBackend

B = CpuBackend()
UTC = dt.timezone.utc


def cast(values, type_name, **kw):
    out, bad = B.cast(B.series(values, "string"), type_name, **kw)
    return pa.array(out).to_pylist(), bad.tolist()


@pytest.mark.parametrize("type_name, low, high", [
    ("int8", -128, 127), ("int16", -32768, 32767), ("int32", -2**31, 2**31 - 1), ("int64", -2**63, 2**63 - 1),
    ("uint8", 0, 255), ("uint16", 0, 65535), ("uint32", 0, 2**32 - 1), ("uint64", 0, 2**64 - 1),
])
def test_integers_keep_their_range(type_name, low, high):
    values = [str(low), str(high), str(low - 1), str(high + 1), " 7 ", "+7", "7.0", "x", "", None]
    got, bad = cast(values, type_name)
    assert got[:2] == [low, high] and got[4:6] == [7, 7]
    assert bad == [False, False, True, True, False, False, True, True, True, False]
    assert got[-1] is None


def test_integer_columns_arrow_reads_alone_follow_the_same_rules():
    """A column of plain digits is cast by Arrow alone; what Arrow reads beyond the contract
    ('0x' hex; '-0' as unsigned) still goes the careful way."""
    assert cast(["12", "-3", "007", None], "int16") == ([12, -3, 7, None], [False, False, False, False])
    assert cast(["0x1A", "12"], "int64") == ([None, 12], [True, False])
    assert cast(["0X1A", "12"], "int64") == ([None, 12], [True, False])
    assert cast(["-0", "5"], "uint8") == ([None, 5], [True, False])
    assert cast(["40000", "5"], "int16") == ([None, 5], [True, False])


def test_clf_timestamps_with_white_space_around_are_trimmed():
    got, bad = cast([" 10/Oct/2026:13:55:36 -0700 ", "10/Oct/2026:13:55:36 -0700", "\t10/Oct/2026:13:55:36 -0700"],
                    "timestamp", fmt="%d/%b/%Y:%H:%M:%S %z")
    assert got == [dt.datetime(2026, 10, 10, 20, 55, 36, tzinfo=UTC)] * 3 and bad == [False] * 3


def test_floats_bools_strings():
    got, bad = cast(["1.5", "-2e3", ".5", "nan", "inf", "1,5", None], "float64")
    assert got[:3] == [1.5, -2000.0, 0.5] and got[3] != got[3] and got[4] == float("inf")
    assert bad == [False] * 5 + [True, False]
    got, bad = cast(["true", "F", "yes", "0", "maybe", None], "bool")
    assert got == [True, False, True, False, None, None] and bad == [False] * 4 + [True, False]
    got, bad = cast(["a", "", None], "string")
    assert got == ["a", "", None] and bad == [False, False, False]


def test_timestamps_with_format_and_offset_are_utc():
    got, bad = cast(["10/Oct/2026:13:55:36 -0700", "10/Oct/2026:13:55:36 +0530", "32/Oct/2026:00:00:00 +0000"],
                    "timestamp", fmt="%d/%b/%Y:%H:%M:%S %z")
    assert got[:2] == [dt.datetime(2026, 10, 10, 20, 55, 36, tzinfo=UTC), dt.datetime(2026, 10, 10, 8, 25, 36, tzinfo=UTC)]
    assert bad == [False, False, True]


def test_naive_timestamps_are_read_in_the_given_zone():
    # Berlin is UTC+2 in summer (CEST) and UTC+1 in winter (CET)
    got, _ = cast(["2026-07-01 12:00:00", "2026-01-15 12:00:00"], "timestamp", fmt="%Y-%m-%d %H:%M:%S",
                  timezone="Europe/Berlin")
    assert got == [dt.datetime(2026, 7, 1, 10, tzinfo=UTC), dt.datetime(2026, 1, 15, 11, tzinfo=UTC)]
    got, _ = cast(["2026-07-01 12:00:00"], "timestamp", fmt="%Y-%m-%d %H:%M:%S")
    assert got == [dt.datetime(2026, 7, 1, 12, tzinfo=UTC)]           # default: UTC


def test_iso_timestamps_with_and_without_offsets():
    got, bad = cast(["2026-10-10T13:55:36Z", "2026-10-10T13:55:36+02:00", "2026-10-10 13:55:36",
                     "2026-10-10", "not a date", None], "timestamp", timezone="America/New_York")
    assert got[:4] == [dt.datetime(2026, 10, 10, 13, 55, 36, tzinfo=UTC),
                       dt.datetime(2026, 10, 10, 11, 55, 36, tzinfo=UTC),
                       dt.datetime(2026, 10, 10, 17, 55, 36, tzinfo=UTC),      # EDT is UTC-4
                       dt.datetime(2026, 10, 10, 4, 0, tzinfo=UTC)]
    assert bad == [False, False, False, False, True, False]


def test_the_cast_step_quarantines_with_the_column_named(tmp_path):
    (tmp_path / "a.log").write_text("1 2026-01-01\n3 2026-02-30\nx 2026-03-01\n")
    spec = {"version": 1, "name": "c", "source": {"type": "text", "path": "a.log"},
            "parse": {"regex": r"^(?P<n>\S+) (?P<day>\S+)$"},
            "steps": [{"cast": {"n": "uint8", "day": {"type": "timestamp", "format": "%Y-%m-%d"}}}],
            "sink": {"path": "out"}}
    result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    assert result.counts["rows_out"] == 1 and result.counts["quarantined"] == 2
    assert result.stages[1]["quarantined"] == 2
    assert set(result.bad_records) == {"column 'n': value is not a valid uint8",
                                       "column 'day': value is not a valid timestamp with format '%Y-%m-%d'"}


def test_impossible_dates_are_bad_not_rolled_over():
    """Arrow's strptime reads 30 February as 2 March; gpuetl does not."""
    got, bad = cast(["29/Feb/2023:00:00:00 +0000", "29/Feb/2024:00:00:00 +0000"], "timestamp",
                    fmt="%d/%b/%Y:%H:%M:%S %z")
    assert bad == [True, False] and got[1] == dt.datetime(2024, 2, 29, tzinfo=UTC)
    _, bad = cast(["2026-02-30", "2026-04-31", "2026-04-30"], "timestamp", fmt="%Y-%m-%d")
    assert bad == [True, True, False]


def test_daylight_saving_edges_are_resolved_not_dropped():
    # 2026-10-25 02:30 happens twice in Berlin (first at UTC+2); 2026-03-29 02:30 never happens
    got, bad = cast(["2026-10-25 02:30:00", "2026-03-29 02:30:00"], "timestamp", fmt="%Y-%m-%d %H:%M:%S",
                    timezone="Europe/Berlin")
    assert bad == [False, False]
    assert got[0] == dt.datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert got[1] == dt.datetime(2026, 3, 29, 1, 0, tzinfo=UTC)          # moved to 03:00 local


def test_the_plain_integer_scan_reads_only_the_values_of_a_sliced_column():
    """The byte scan behind the fast path looks at the slice's own bytes, not its neighbours'."""
    from gpuetl.backends.cpu import _has_any_byte

    arr = pa.array(["0x1", "12", "-3", "x"])
    assert not _has_any_byte(arr.slice(1, 2), (b"x", b"X"))
    assert _has_any_byte(arr.slice(1, 2), (b"-",))
    assert _has_any_byte(pa.chunked_array([arr.slice(1, 1), arr.slice(3)]), (b"x",))
    assert not _has_any_byte(pa.array([], pa.string()), (b"x",))


_PIECES = (
    ["2026", "2024", "1969", "1677", "2262", "9999", "0001", "0000", "202"],            # year
    ["01", "02", "12", "13", "00", "1"],                                                 # month
    ["01", "28", "29", "30", "31", "32", "00"],                                          # day
    ["T", " ", "t", "_"],
    ["00:00:00", "23:59:59", "24:00:00", "23:59:60", "23:60:00", "12:30", "12", "1:02:03"],
    ["", ".5", ".123", ".123456", ".1234567", ".000000000", ".", ",5"],
    ["Z", "z", "+02:00", "-0230", "+02", "+14:00", "+24:00", "-00:30", "", " Z", "UTC"],  # zone
)


def test_iso_timestamps_read_by_arrow_are_the_instants_pandas_reads():
    """Arrow's ISO 8601 cast takes a column only when it reads every value; then each value is
    the instant pandas' parser (the path it replaces) gives. 3,000 forms drawn from the pieces
    above (valid, impossible, odd), each cast alone by Arrow, all at once by pandas (which must
    not fail on the mix)."""
    import random

    import gpuetl.backends.cpu as cpu

    rng = random.Random(15)
    texts = sorted({"{}-{}-{}{}{}{}{}".format(*(rng.choice(p) if rng.random() < 0.3 else p[0] for p in _PIECES))
                    for _ in range(3000)})
    fast = {t: cpu._zoned_iso_timestamps(pa.array([t])) for t in texts}
    with pytest.MonkeyPatch.context() as m:
        m.setattr(cpu, "_zoned_iso_timestamps", lambda values: None)
        careful = CpuBackend._parse_timestamps(pa.array(texts), None, None).cast(pa.int64()).to_pylist()
    read = [(t, fast[t].cast(pa.int64())[0].as_py(), c) for t, c in zip(texts, careful) if fast[t] is not None]
    assert len(read) > 100 and len(read) < len(texts)          # both ways taken
    assert [(t, f) for t, f, _ in read] == [(t, c) for t, _, c in read]


def test_timestamps_past_the_microsecond_are_bad_not_rounded():
    got, bad = cast(["2026-12-01T10:00:00.1234567Z", "2026-12-01T10:00:00.1234560Z", "2026-12-01T10:00:00.123456789",
                     "2026-12-01T10:00:00Z"], "timestamp")
    assert got[1] == dt.datetime(2026, 12, 1, 10, 0, 0, 123456, tzinfo=UTC)
    assert got[3] == dt.datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert bad == [True, False, True, False]


def test_timestamps_with_a_format_past_the_microsecond_are_bad_not_a_crash():
    got, bad = cast(["2026-01-01 00:00:00.1234567", "2026-01-01 00:00:00.123456", "2026-01-01 00:00:00.1234560"],
                    "timestamp", fmt="%Y-%m-%d %H:%M:%S.%f")
    assert bad == [True, False, False]
    assert got[1] == got[2] == dt.datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
    _, bad = cast(["2026-01-01 00:00:00.1234567 +0100"], "timestamp", fmt="%Y-%m-%d %H:%M:%S.%f %z")
    assert bad == [True]


@pytest.mark.parametrize("fmt, values", [
    ("%d/%b/%Y:%H:%M:%S %z", ["30/Jun/2026:10:00:60 +0000", "31/Dec/2026:23:59:61 +0000", "30/Jun/2026:10:01:00 +0000",
                              "01/Jan/2027:00:00:01 +0600"]),
    ("%Y-%m-%d %H:%M:%S", ["2026-06-30 10:00:60", "2026-12-31 23:59:61", "2026-06-30 10:01:00", "2027-01-01 00:00:01"]),
])
def test_a_sixtieth_or_sixty_first_second_is_bad_not_the_next_minute(fmt, values):
    """pandas' strptime, like C's, takes %S up to 61 and rolls it into the next minute (23:59:61
    became the next day's 00:00:01); the GPU and the ISO form refuse it."""
    got, bad = cast(values, "timestamp", fmt=fmt, timezone="Asia/Dhaka")
    assert bad == [True, True, False, False]
    assert got[2] is not None and got[2].minute == 1 and got[2].second == 0


@pytest.mark.parametrize("fmt, zone, value", [
    ("%Y-%m-%d %H:%M:%S", "Africa/Monrovia", "1970-06-30 23:59:60"),     # an offset with seconds (LMT)
    ("%Y-%m-%d %H:%M:%S", "Europe/Amsterdam", "1930-06-30 23:59:60"),
    ("%Y-%m-%d %X", None, "2026-06-30 23:59:60"),                          # seconds without a literal %S
    ("%Y-%m-%d %H:%M:%S %Z", None, "2026-06-30 23:59:60 EST"),             # a zone name Python's strptime lacks
    ("%Y-%m-%d %H:%M:%S.%f", None, "2060-06-30 23:59:60.600"),             # 60s elsewhere in the value too
])
def test_a_sixtieth_second_is_bad_wherever_the_wall_time_lies(fmt, zone, value):
    got, bad = cast([value, value.replace(":60", ":59")], "timestamp", fmt=fmt, timezone=zone)
    assert bad == [True, False] and got[1] is not None
