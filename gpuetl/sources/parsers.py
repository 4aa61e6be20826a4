"""Turn records (lines) into string or typed columns: raw lines, regex/preset/template, JSON, CSV.

Every parser has `schema`, `parse(text, backend)` and `whole_partition` (whether a partition's
batches are handed to it at once: plan/stages.py, read_partition)."""

from __future__ import annotations

from dataclasses import dataclass

from ..types import Schema


@dataclass(frozen=True)
class LineParser:
    """No parse section: one string column, the line."""

    column: str = "line"
    whole_partition = False

    @property
    def schema(self) -> Schema:
        return {self.column: "string"}

    def parse(self, text, backend):
        return {self.column: text}, None, None


@dataclass(frozen=True)
class RegexParser:
    """One whole-line regex with named groups (presets, templates, user regexes).

    Captures that are empty (a group that did not take part, in RE2 and cuDF alike) become null,
    and so does '-' where the preset says so (the log formats' "no value")."""

    regex: str
    names: tuple[str, ...]
    describe: str
    dash_is_null: bool = False
    strip: bool = False
    kernel: str | None = None     # a backend's faster equivalent of the regex, if it has one

    @property
    def schema(self) -> Schema:
        return {name: "string" for name in self.names}

    @property
    def whole_partition(self) -> bool:
        """With a kernel (the log presets'), a partition's batches are parsed at once: the kernel
        reads them one by one but hands back each column in one piece, so the partition's frame,
        its live rows and the Parquet row groups cut from them are not pieced together by copying
        (plan/stages.py: read_partition)."""
        return self.kernel is not None

    def parse(self, text, backend):
        if self.strip:
            text = text.str.strip()
        cols, matched = backend.extract_fields(text, self.regex, self.names, kernel=self.kernel,
                                               dash_is_null=self.dash_is_null)
        return cols, matched, f"line does not match {self.describe}"


@dataclass(frozen=True)
class JsonParser:
    """One JSON object per line; fields are the plan's columns (declared or sampled)."""

    fields: tuple[tuple[str, str], ...]
    whole_partition = False       # the JSON reader's temporaries stay batch-sized

    @property
    def schema(self) -> Schema:
        return {name: ("string" if t == "timestamp" else t) for name, t in self.fields}

    def parse(self, text, backend):
        cols, ok, reasons = backend.parse_json(text, dict(self.fields))
        if reasons is None:     # the whole-block reader took every record: no per-record reasons
            reasons = "invalid JSON record"
        return cols, ok, reasons


@dataclass(frozen=True)
class CsvParser:
    """CSV with a header line per file; every field a string until `columns` types it.
    Quoted fields must not contain newlines (a record is a line)."""

    names: tuple[str, ...]
    delimiter: str = ","
    whole_partition = False

    @property
    def schema(self) -> Schema:
        return {name: "string" for name in self.names}

    def parse(self, text, backend):
        return backend.parse_csv(text, self.names, self.delimiter)
