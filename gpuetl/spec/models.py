"""Typed models of pipeline files, version 1 (docs/pipelines.md is the reference)."""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ..sources.registry import get_source, is_source, registered_names, source_names, unknown_source
from ..types import ColumnTypeValue
from .sizes import parse_size

# An object store's client options (source and sink alike): kept out of dumps, reprs and so out of
# manifests, reports and logs.
STORAGE_OPTIONS = Field(
    None, repr=False, exclude=True,
    description="object stores only: passed to the store's client (fsspec), e.g. {endpoint_url: ..., key: ...}; "
                "never written to a manifest, report or log")


class Model(BaseModel):
    # strict: `count: true` or `version: true` is a mistake, not the number 1
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


Size = int | str
MAX_BLOCKSIZE = 1 << 30        # 1 GiB
MIN_TARGET_BYTES = 64 << 10    # 64 KiB
MAX_SPLITS = 100               # shard.splits: a row's split index is an int8
MAX_SPLIT_NAME = 100           # characters of a split name (a folder's name)
SPLIT_NAME = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_SPLIT_NAME}}}")


def _size(value):
    return None if value is None else parse_size(value)


class Multiline(Model):
    """`source.multiline` (text sources): a record begins at a line matching `start`."""

    start: str = Field(description="a regex (RE2) searched in each line: a line that matches begins a record, "
                                   "the others continue the record before them")
    max_lines: int = Field(500, ge=1, le=1_000_000, description="lines past this many in one record are "
                           "quarantined (multiline_overflow)")
    max_bytes: Size = Field(1 << 20, description="lines that end more than this many bytes after their "
                            "record's first byte are quarantined (multiline_overflow)")

    @field_validator("max_bytes")
    @classmethod
    def _max_bytes(cls, v):
        size = parse_size(v)
        if not 1 <= size <= MAX_BLOCKSIZE:
            raise ValueError(f"{v!r}: between 1 byte and 1GiB (a record is held in memory whole)")
        return size


class Source(Model):
    type: str = Field(description="what the input files hold: a source format by name (sources/registry.py)",
                      json_schema_extra=lambda schema: schema.update(enum=source_names()))
    path: str | list[str] = Field(description="a glob or a list of globs; '**' allowed; relative to the pipeline file")
    blocksize: Size = Field(64 * 2**20, description="partition size: byte ranges; a record is never split")
    compression: Literal["infer", "none", "gzip", "zstd", "bz2"] = "infer"
    max_expand_ratio: float = Field(200, ge=1, description="a compressed file that decodes to more than this "
                                    "many times its size is refused as a decompression bomb (one quarantined record)")
    max_uncompressed_bytes: Size | None = Field(None, description="a compressed file that decodes to more than "
                                                "this (e.g. 10GiB) is refused likewise; no bound if unset")
    max_window_bytes: Size | None = Field(None, description="zstd inputs: a frame that needs a larger window "
                                          "(written with zstd --long) is quarantined; default zstd's own limit, 128MiB; "
                                          "at most 2GiB")
    max_record_bytes: Size = Field(64 * 2**20, description="text, jsonl, csv: a longer record (a line; a CSV "
                                   "record) is quarantined, never read whole: _raw holds its first 4KiB")
    provenance: bool = Field(False, description="add _file (string) and _offset (int64, byte offset) columns")
    delimiter: str = Field(",", description="csv only: the field separator")
    null_values: list[str] = Field([""], description="csv only: unquoted field texts that are null (a quoted "
                                   "field is always its text)")
    multiline: Multiline | None = Field(None, description="text only: records of several lines, each begun by a "
                                        "line matching `start`")
    # images only (sources/images.py)
    label: Literal["parent", "regex", "file", "none"] | None = Field(
        None, description="images: the label: parent folder (default), a regex on the path, a side file, or none")
    label_regex: str | None = Field(None, description="images, label: regex: searched in the key; group 'label' or 1")
    side_file: str | None = Field(None, description="images, label: file: csv or jsonl with a 'key' and a 'label' field")
    exif_transpose: bool = Field(True, description="images: apply the EXIF orientation when decoding")
    max_pixels: int = Field(89_478_485, ge=1, le=178_956_970, description="images: larger images are quarantined, "
                            "read from the header (Pillow refuses images over 178,956,970 pixels on its own)")
    extensions: list[str] | None = Field(None, description="images: file suffixes read (default jpg jpeg png webp tar)")
    storage_options: dict[str, Any] | None = STORAGE_OPTIONS

    @field_validator("type")
    @classmethod
    def _type(cls, v):
        if not is_source(v):
            raise ValueError(unknown_source(v))
        return v

    @field_validator("blocksize")
    @classmethod
    def _blocksize(cls, v):
        size = parse_size(v)
        if size > MAX_BLOCKSIZE:
            raise ValueError(f"{v!r} is over the limit of 1GiB: a partition is held in memory whole")
        return size

    @field_validator("max_uncompressed_bytes")
    @classmethod
    def _max_uncompressed_bytes(cls, v):
        return _size(v)

    @field_validator("max_record_bytes")
    @classmethod
    def _max_record_bytes(cls, v):
        size = parse_size(v)
        if not 1 <= size <= MAX_BLOCKSIZE:
            raise ValueError(f"{v!r}: between 1 byte and 1GiB")
        return size

    @field_validator("max_window_bytes")
    @classmethod
    def _max_window_bytes(cls, v):
        size = _size(v)
        if size is not None and not 1 << 10 <= size <= 1 << 31:
            raise ValueError(f"{v!r}: between 1KiB and 2GiB (zstd's largest window)")
        return size

    @field_validator("path")
    @classmethod
    def _path(cls, v):
        if (isinstance(v, str) and not v.strip()) or (isinstance(v, list) and not v):
            raise ValueError("give at least one path or glob")
        return v

    @field_validator("delimiter")
    @classmethod
    def _delimiter(cls, v):
        if len(v) != 1 or v in "\r\n\"" or not v.isascii():
            raise ValueError("the delimiter is one ASCII character (a byte, as the CSV reader takes it), "
                             "not a quote or newline")
        return v

    @model_validator(mode="after")
    def _image_options(self):
        given = [k for k in ("label", "label_regex", "side_file", "extensions") if getattr(self, k) is not None]
        if self.type != "images" and given:
            raise ValueError(f"{', '.join(given)}: for images sources only")
        if self.type == "images":
            if self.label == "regex" and not self.label_regex:
                raise ValueError("label: regex needs label_regex, e.g. '^(?P<label>[^/]+)/'")
            if self.label == "file" and not self.side_file:
                raise ValueError("label: file needs side_file (csv or jsonl with 'key' and 'label' fields)")
        return self

    @model_validator(mode="after")
    def _format_options(self):
        """An option of another format (delimiter on a jsonl source) would be ignored: refuse it."""
        mine = set(get_source(self.type).options)
        theirs = {option for name in registered_names() for option in get_source(name).options}
        stray = sorted((self.model_fields_set & theirs) - mine)
        if stray:
            readers = [name for name in registered_names() if set(stray) & set(get_source(name).options)]
            raise ValueError(f"{', '.join(stray)}: not read by {self.type} sources (only by {', '.join(readers)})")
        return self

    @property
    def paths(self) -> list[str]:
        """The patterns, a leading `~` expanded as in sink.path and cache.path."""
        from ..storage import scheme

        raw = [self.path] if isinstance(self.path, str) else list(self.path)
        return [p if scheme(p) else os.path.expanduser(p) for p in raw]


class Parse(Model):
    preset: Literal["apache_common", "apache_combined", "nginx_combined", "syslog_rfc3164",
                    "syslog_rfc5424", "json"] | None = None
    template: str | None = Field(None, description="'<Field>' log format, e.g. '<Date> <Time> <Level>: <Content>'")
    regex: str | None = Field(None, description="a whole-line regex with named groups (RE2 syntax)")

    @model_validator(mode="after")
    def _exactly_one(self):
        given = [k for k in ("preset", "template", "regex") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of preset, template or regex"
                             + (f" (got {', '.join(given)})" if given else ""))
        return self


class Shard(Model):
    count: int | None = Field(None, ge=1, le=100_000)
    target_bytes: Size | None = None
    key: list[str] | None = Field(None, description="rows with equal keys land in the same shard and split")
    shuffle: bool = False
    seed: int = Field(0, ge=0, le=2**63 - 1)
    splits: dict[str, float] | None = None

    @field_validator("target_bytes")
    @classmethod
    def _target(cls, v):
        size = _size(v)
        if size is not None and size < MIN_TARGET_BYTES:
            raise ValueError(f"{v!r} is under the minimum of 64KiB (shards that small are mostly overhead; "
                             "use count for a fixed number of shards)")
        return size

    @field_validator("key", mode="before")
    @classmethod
    def _key(cls, v):
        return [v] if isinstance(v, str) else v

    @field_validator("splits")
    @classmethod
    def _splits(cls, v):
        if v is None:
            return v
        if not v:
            raise ValueError("give at least one split, e.g. {train: 0.98, val: 0.02}")
        if len(v) > MAX_SPLITS:
            raise ValueError(f"{len(v)} splits: at most {MAX_SPLITS} (a row's split is kept in one byte)")
        for name, share in v.items():
            if not SPLIT_NAME.fullmatch(name):
                shown = name if len(name) <= 40 else name[:40] + "…"
                raise ValueError(f"split name {shown!r} ({len(name)} characters): ASCII letters, digits, '-' and '_' "
                                 f"only, at most {MAX_SPLIT_NAME} characters (it names a folder)")
            if not 0 < share <= 1:
                raise ValueError(f"split {name!r}: the share must be in (0, 1], got {share}")
        if abs(sum(v.values()) - 1.0) > 1e-6:
            raise ValueError(f"the split shares must add up to 1, they add up to {sum(v.values()):g}")
        return v

    @model_validator(mode="after")
    def _one_size(self):
        if self.count is not None and self.target_bytes is not None:
            raise ValueError("give at most one of count and target_bytes")
        return self


def _sink_names() -> list[str]:
    from ..sinks.base import sink_names

    return sink_names()


class Sink(Model):
    type: str = Field("parquet", description="the sink by name (sinks/base.py)",
                      json_schema_extra=lambda schema: schema.update(enum=_sink_names()))
    path: str = Field(description="the dataset folder; relative to the pipeline file")
    compression: Literal["zstd", "snappy", "gzip", "lz4", "none"] = "zstd"
    row_group_rows: int | None = Field(None, ge=1)
    row_group_bytes: Size | None = None
    mode: Literal["error", "overwrite", "resume", "append"] = Field(
        "error", description="error | overwrite | resume | append (new inputs become a new dataset version)")
    delta_log: bool = Field(False, description="also write a Delta Lake log (_delta_log/, one commit per dataset "
                                               "version); needs the deltalake package (pip install gpuetl[delta])")
    durable: bool = Field(True, description="flush every file to the disk before it is published (fsync), so a "
                                            "power cut never leaves a dataset naming empty files; false: scratch output")
    storage_options: dict[str, Any] | None = STORAGE_OPTIONS

    @field_validator("type")
    @classmethod
    def _type(cls, v):
        from ..sinks.base import is_sink, unknown_sink

        if not is_sink(v):
            raise ValueError(unknown_sink(v))
        return v

    @field_validator("row_group_bytes")
    @classmethod
    def _rg_bytes(cls, v):
        return _size(v)

    @field_validator("path")
    @classmethod
    def _sink_path(cls, v):
        from ..storage import is_remote, sink_url

        return sink_url(v) if is_remote(v) else v

    @model_validator(mode="after")
    def _one_row_group(self):
        if self.row_group_rows is not None and self.row_group_bytes is not None:
            raise ValueError("give at most one of row_group_rows and row_group_bytes")
        return self

    @model_validator(mode="after")
    def _delta_log(self):
        if self.delta_log:
            from ..sinks.delta import check_delta_sink

            check_delta_sink(self)
        return self


class Cache(Model):
    path: str = Field(description="a local folder; gpuetl keeps its entries under <path>/gpuetl/")
    max_bytes: Size | None = Field(None, description="least-recently-used entries are evicted past this (e.g. 50GiB)")

    @field_validator("max_bytes")
    @classmethod
    def _max_bytes(cls, v):
        return _size(v)

    @field_validator("path")
    @classmethod
    def _path(cls, v):
        from ..storage import is_remote

        if not v.strip() or is_remote(v):
            raise ValueError("the cache is a local folder")
        return v


class PipelineSpec(Model):
    version: Literal[1] = Field(description="the pipeline file format version")
    name: str = Field(pattern=r"^[A-Za-z0-9_-]+$", max_length=128)
    source: Source
    parse: Parse | None = None
    columns: dict[str, ColumnTypeValue] = Field(default_factory=dict)
    strict: bool = Field(False, description="true: no lossless string-to-number coercion of JSON values, and a "
                         "declared field that no record has is an error")
    extra_fields: Literal["drop", "keep", "error"] = Field(
        "drop", description="JSON sources: fields not in `columns`: drop (counted), keep (one `_extra` column "
        "of JSON object text) or error (the record is quarantined)")
    steps: list[dict[str, Any]] = Field(default_factory=list, description="ordered; each item maps one step name to its parameters")
    on_error: Literal["fail", "drop", "quarantine"] = "quarantine"
    max_error_ratio: float | None = Field(None, ge=0, le=1)
    allow_empty_output: bool = Field(False, description="true: a run that keeps no row while records were "
                                     "quarantined (or dropped as bad) still commits its empty dataset")
    shard: Shard = Field(default_factory=Shard)
    sink: Sink
    cache: Cache | None = Field(None, description="remote inputs are fetched once into this local folder and reused")

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, v):
        if isinstance(v, bool):   # a bool equals 1 to Python; not to a reader of the file
            raise ValueError(f"expected the whole number 1, got {v!r}")
        return v

    @field_validator("steps", mode="before")
    @classmethod
    def _steps_shape(cls, v):
        if v is None:
            return []
        if not isinstance(v, list):
            raise ValueError("steps is a list: each item a mapping with one key, the step's name")
        for i, item in enumerate(v):
            if not isinstance(item, dict) or len(item) != 1:
                raise ValueError(f"item {i} must be a mapping with exactly one key, the step's name "
                                 f"(e.g. '- filter: \"status >= 200\"')")
        return v

    @field_validator("extra_fields")
    @classmethod
    def _extra_fields_for_json(cls, v, info: ValidationInfo):
        source, parse = info.data.get("source"), info.data.get("parse")
        is_json = source is not None and (source.type == "jsonl" or (parse is not None and parse.preset == "json"))
        if v != "drop" and source is not None and not is_json:
            raise ValueError(f"extra_fields is for JSON sources (jsonl, or parse: {{preset: json}}), not {source.type}")
        return v

    @field_validator("parse")
    @classmethod
    def _parse_fits_source(cls, v, info: ValidationInfo):
        # A field validator (not a model validator) so the error points at the `parse:` line.
        source = info.data.get("source")
        if v is not None and source is not None and source.type != "text":
            raise ValueError(f"parse is for text sources only; a {source.type} source is parsed by its type")
        return v
