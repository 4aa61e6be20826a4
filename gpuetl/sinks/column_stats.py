"""What a shard's Parquet footer says of its columns, taken where the shard is written: per leaf
column its rows, nulls and min/max (pyarrow's `FileMetaData`, from the writer at close or, for
an encoder that cannot hand it over, from the footer of the file it just wrote, on the worker).
It travels back in the shard's `ShardResult.columns` (sinks/shard_writer.py), JSON-ready (a
resumed run reads it from the saved result), so the process that commits the run opens no shard
file to profile the columns (the run report) or to find declared columns no row filled."""

from __future__ import annotations

import base64
import datetime
import decimal
from typing import Any

from ..types import ARROW_TYPES


def file_columns(meta) -> list[dict]:
    """One entry per Parquet leaf column of a file, in the file's order, from its
    `pyarrow.parquet.FileMetaData`: {"column": its path in the schema, "field": the top-level
    field whose first leaf it is (else None), "type": the dataset's type as a person reads it,
    "rows": values, "nulls": nulls counted, "counted": every row group has a null count, "min",
    "max" (encoded: `encode`), "bounded": every row group holding values has a min and a max}."""
    schema = meta.schema.to_arrow_schema()
    logical = dict(_leaves(schema))
    first_leaf, leaf = {}, 0
    for f in schema:
        first_leaf[leaf] = f.name
        leaf += _leaf_count(f.type)
    entries: dict[str, dict] = {}
    bounds: dict[str, list] = {}
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            path = chunk.path_in_schema
            entry = entries.setdefault(path, {"column": path, "field": first_leaf.get(c),
                                              "type": logical.get(path, str(chunk.physical_type)), "rows": 0,
                                              "nulls": 0, "counted": True, "min": None, "max": None,
                                              "bounded": True})
            low_high = bounds.setdefault(path, [None, None])
            entry["rows"] += chunk.num_values
            stats = chunk.statistics
            if stats is None or not stats.has_null_count:
                entry["counted"] = False
            else:
                entry["nulls"] += stats.null_count
            if stats is not None and stats.has_min_max:
                low_high[0] = lower(low_high[0], stats.min)
                low_high[1] = lower(low_high[1], stats.max, higher=True)
            elif chunk.num_values:
                entry["bounded"] = False
    for path, entry in entries.items():
        entry["min"], entry["max"] = (encode(v) for v in bounds[path])
    return list(entries.values())


def _leaf_count(arrow_type) -> int:
    import pyarrow as pa

    if pa.types.is_struct(arrow_type):
        return sum(_leaf_count(f.type) for f in arrow_type) or 1
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return _leaf_count(arrow_type.value_type)
    return 1


def footer_columns(path: str, filesystem=None) -> list[dict] | None:
    """`file_columns` of a Parquet file read from its footer (no data read); None where it is not
    one. For a shard whose writer handed over no statistics (an older run's saved result, another
    sink's writer): called in a task, where the shards are written."""
    import pyarrow.parquet as pq

    try:
        return file_columns(pq.read_metadata(path, filesystem=filesystem))
    except (OSError, ValueError):
        return None


def profile(per_shard: list[list[dict] | None]) -> list[dict]:
    """Per output column, over every shard (in order): {"column", "type", "rows", "nulls", "min",
    "max", "complete"}, min and max decoded (the run report shows them). Shards without
    statistics are left out."""
    columns: dict[str, dict] = {}
    for shard in per_shard:
        for leaf in shard or ():
            entry = columns.setdefault(leaf["column"], {"column": leaf["column"], "type": leaf["type"], "rows": 0,
                                                        "nulls": 0, "min": None, "max": None, "complete": True})
            entry["rows"] += leaf["rows"]
            entry["nulls"] += leaf["nulls"]
            entry["complete"] = entry["complete"] and leaf["counted"] and leaf["bounded"]
            if leaf["min"] is not None:
                entry["min"] = lower(entry["min"], decode(leaf["min"]))
            if leaf["max"] is not None:
                entry["max"] = lower(entry["max"], decode(leaf["max"]), higher=True)
    return list(columns.values())


def null_in_every_row(names: list[str], shards: list) -> list[str]:
    """Which of the top-level, non-nested columns `names` are null in every row of the shards
    (ShardResults); [] where a shard with rows carries no null counts (a writer without
    statistics: nothing to say)."""
    total = sum(s.rows for s in shards)
    if not names or not total:
        return []
    nulls = dict.fromkeys(names, 0)
    for shard in shards:
        if not shard.rows:
            continue
        if shard.columns is None:
            return []
        by_field = {leaf["field"]: leaf for leaf in shard.columns}
        for name in names:
            leaf = by_field.get(name)
            if leaf is None or not leaf["counted"]:
                return []
            nulls[name] += leaf["nulls"]
    return [name for name in names if nulls[name] == total]


def _leaves(fields, prefix: str = ""):
    """(Parquet column path, the dataset's type as a person reads it) for each leaf of Arrow
    fields: `string`, `int16`, `timestamp[us, UTC]`, not the storage types (BYTE_ARRAY, INT32
    for an int16, INT64 for a timestamp) the footer's column chunks carry."""
    import pyarrow as pa

    for field in fields:
        path, t = f"{prefix}{field.name}", field.type
        if pa.types.is_struct(t):
            yield from _leaves([t.field(i) for i in range(t.num_fields)], path + ".")
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            yield from _leaves([t.value_field], path + ".list.")
        elif pa.types.is_timestamp(t):
            yield path, f"timestamp[{t.unit}, {t.tz}]" if t.tz else f"timestamp[{t.unit}]"
        else:
            yield path, next((name for name, known in ARROW_TYPES.items() if known == t), str(t))


def lower(current, value, higher: bool = False):
    """The lower (or higher) of two statistics; values that do not compare keep the first."""
    if current is None:
        return value
    try:
        return max(current, value) if higher else min(current, value)
    except TypeError:
        return current


# -- statistics as JSON -------------------------------------------------------------------------

def encode(value):
    """A footer statistic (what pyarrow's Statistics.min gives) as JSON: numbers and text as
    they are, the rest tagged ({"bytes": base64}, {"datetime": iso}, ...); `decode` gives it back."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode()}
    if isinstance(value, datetime.datetime):
        text = value.isoformat()
        # pandas' Timestamp (what pyarrow gives for nanoseconds) writes the digits past the
        # microsecond that datetime cannot hold: those come back as a Timestamp
        seconds = text[:19] + text[19:].split("+")[0].split("-")[0]
        return {"timestamp" if len(seconds.partition(".")[2]) > 6 else "datetime": text}
    if isinstance(value, datetime.date):
        return {"date": value.isoformat()}
    if isinstance(value, datetime.time):
        return {"time": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    return {"text": str(value)}


def decode(value):
    if not isinstance(value, dict):
        return value
    (kind, text), = value.items()
    if kind == "bytes":
        return base64.b64decode(text)
    if kind == "timestamp":
        import pandas as pd

        return pd.Timestamp(text)
    if kind == "datetime":
        return datetime.datetime.fromisoformat(text)
    if kind == "date":
        return datetime.date.fromisoformat(text)
    if kind == "time":
        return datetime.time.fromisoformat(text)
    if kind == "decimal":
        return decimal.Decimal(text)
    return text
