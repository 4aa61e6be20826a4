"""Calendar arithmetic written once against an array module `xp` (numpy on the CPU, CuPy on the
device): proleptic Gregorian dates to days and UTC microseconds, no Python loop. The CPU's CLF
time parser (cpu_clf.py) and the GPU's strict timestamp forms (gpu.py) both use it."""

from __future__ import annotations


def civil_to_days(xp, y, m, d):
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil)."""
    y = y - (m <= 2).astype(y.dtype)
    era = xp.floor_divide(y, 400)
    yoe = y - era * 400
    mp = (m + 9) % 12
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def days_in_month(xp, y, m):
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    table = xp.asarray([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=xp.int64)
    return table[m - 1] + (leap & (m == 2)).astype(xp.int64)


def civil_to_micros(xp, y, m, d, hh, mm, ss, micro, offset_minutes):
    """UTC microseconds since the epoch; every argument an int64 xp array."""
    days = civil_to_days(xp, y, m, d)
    seconds = days * 86400 + hh * 3600 + mm * 60 + ss - offset_minutes * 60
    return seconds * 1_000_000 + micro
