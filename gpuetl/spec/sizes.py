"""Byte sizes as people write them: 64MiB, 1GB, 512k, 1048576."""

from __future__ import annotations

import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: int | str) -> int:
    """Return a byte count; raise ValueError naming the accepted units."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 64MiB, got a boolean")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"a size must be positive, got {value}")
        return value
    match = _SIZE.match(str(value))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS:
        raise ValueError(f"cannot read {value!r} as a size; write e.g. 64MiB, 256MB, 1GiB or a byte count")
    size = int(float(match.group(1)) * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"a size must be positive, got {value!r}")
    return size


def format_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
