"""Turn records (lines) into string or typed columns: raw lines, regex/preset/template, JSON, CSV.

Every parser has `schema` and `parse(text, backend, file_index)` (file_index: each record's
input file); it is handed a partition's records a piece at a time (sources/records.py: parse_piece, called by
the stage's `read`). `parse` gives (columns, ok, reasons), and the JSON parser a fourth item: the
extra fields it dropped ({field: records}, or None: not counted)."""

from __future__ import annotations

import csv
from dataclasses import dataclass

import numpy as np

from ..errors import SourceError, SpecError
from ..types import Schema
from .files import InputFile
from .json_fields import JsonRead


@dataclass(frozen=True)
class LineParser:
    """No parse section: one string column, the line."""

    column: str = "line"

    @property
    def schema(self) -> Schema:
        return {self.column: "string"}

    def parse(self, text, backend, file_index=None):
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

    def parse(self, text, backend, file_index=None):
        if self.strip:
            text = text.str.strip()
        cols, matched = backend.extract_fields(text, self.regex, self.names, kernel=self.kernel,
                                               dash_is_null=self.dash_is_null)
        return cols, matched, f"line does not match {self.describe}"


@dataclass(frozen=True)
class JsonParser:
    """One JSON object per line; what is read is the plan's JsonRead (declared or sampled
    columns, top-level keys or paths; sources/json_fields.py)."""

    read: JsonRead

    @property
    def schema(self) -> Schema:
        return self.read.schema

    def parse(self, text, backend, file_index=None):
        """(columns, ok, reasons), and under `extra_fields: drop` a fourth item: {field: records}
        of the top-level fields left out, or None where the backend does not count them."""
        if self.read.extra != "drop":
            return self._reasons_named(*backend.parse_json(text, self.read))
        if not backend.counts_dropped_fields:
            return (*self._reasons_named(*backend.parse_json(text, self.read)), None)
        dropped: dict[str, int] = {}
        return (*self._reasons_named(*backend.parse_json(text, self.read, dropped)), dropped)

    @staticmethod
    def _reasons_named(cols, ok, reasons):
        if reasons is None:     # the whole-block reader took every record: no per-record reasons
            reasons = "invalid JSON record"
        return cols, ok, reasons


@dataclass(frozen=True)
class CsvParser:
    """RFC 4180 CSV with a header record per file; every field a string until `columns` types
    it. Records come from sources/framing.CsvFraming (a quoted field may hold newlines).

    Fields are taken by each file's header names, not by position: the columns are the first
    file's header; a file whose header orders them differently is read by its own header; a
    column its header lacks is null in its records (an error for a declared column: csv_parser)
    and a column only its header has is not read (the plan notes both)."""

    names: tuple[str, ...]
    delimiter: str = ","
    null_values: tuple[str, ...] = ("",)
    layouts: tuple[tuple[str, ...], ...] = ()   # the other headers found, when some file's differs
    layout_of: tuple[int, ...] = ()            # per input file: -1 (the header is `names`) or a layout

    @property
    def schema(self) -> Schema:
        return {name: "string" for name in self.names}

    def parse(self, text, backend, file_index=None):
        if not self.layouts or file_index is None or not len(text):
            return _header_repeated(*backend.parse_csv(text, self.names, self.delimiter, self.null_values),
                                    self.names, backend, text.index)
        which = np.asarray(self.layout_of, dtype=np.int64)[np.asarray(backend.to_host(file_index), dtype=np.int64)]
        present = np.unique(which)
        if len(present) == 1:
            return self._by_header(text, int(present[0]), backend)
        parts = []
        for k in present:
            rows = backend.series(backend.xp.asarray(which == k), "bool", index=text.index)
            sub = text[rows]
            cols, ok, reason = self._by_header(sub, int(k), backend)
            part = backend.xd.DataFrame(cols, index=sub.index)
            part["__ok"] = ok
            part["__why"] = backend.series([reason] * len(sub), "string", index=sub.index) \
                if isinstance(reason, str) else reason
            parts.append(part)
        whole = backend.xd.concat(parts).sort_index()
        return ({name: whole[name] for name in self.names}, whole["__ok"], whole["__why"])

    def _by_header(self, text, layout: int, backend):
        """Records of files that share one header, read by it; declared columns it lacks are null."""
        header = self.names if layout < 0 else self.layouts[layout]
        cols, ok, reason = _header_repeated(*backend.parse_csv(text, header, self.delimiter, self.null_values),
                                            header, backend, text.index)
        return ({name: cols[name] if name in cols else backend.nulls(len(text), "string", index=text.index)
                 for name in self.names}, ok, reason)


def _header_repeated(cols: dict, ok, reason, header: tuple[str, ...], backend, index):
    """Records that repeat their file's header (`cat a.csv b.csv > all.csv`) made bad with that
    reason: as data they were kept silently wherever every column is a string. A joined file's
    header may start with its byte-order mark (Excel's "CSV UTF-8" writes one)."""
    first = cols[header[0]]
    repeat = (first == header[0]) | (first == "\ufeff" + header[0])
    if not bool(repeat.fillna(False).any()):
        return cols, ok, reason
    for name in header[1:]:
        repeat = repeat & (cols[name] == name)
    repeat = repeat.fillna(False).astype(bool)
    if not bool(repeat.any()):
        return cols, ok, reason
    why = "CSV record repeats the header (files joined with cat?); remove it, or give each file its own header once"
    if isinstance(reason, str):
        reason = backend.series([reason] * len(index), "string", index=index)
    return cols, ok & ~repeat, reason.where(~repeat, why)


MAX_HEADER_BYTES = 1 << 20


def csv_parser(files: list[InputFile], delimiter: str, where: str, null_values: tuple[str, ...] = ("",),
               declared=(), locate=lambda name: f"columns.{name}") -> tuple[CsvParser, list[str]]:
    """The parser for these files (their headers read now) and the plan's notes about headers
    that differ from the first file's. A file whose header lacks a `declared` column is an
    error: the column would be null in all its records without a word."""
    headers = [read_csv_header(f, delimiter, where) for f in files]
    names = next((h for h in headers if h is not None), None)
    if names is None:
        raise SpecError(f"{where}: the CSV files have no header line")
    layouts: list[tuple[str, ...]] = []
    layout_of: list[int] = []
    for header in headers:
        if header is None or header == names:
            layout_of.append(-1)
            continue
        if header not in layouts:
            layouts.append(header)
        layout_of.append(layouts.index(header))
    notes = []
    for k, header in enumerate(layouts):
        users = [f.display for f, j in zip(files, layout_of) if j == k]
        shown = ", ".join(users[:3]) + (f" and {len(users) - 3} more" if len(users) > 3 else "")
        missing = [n for n in names if n not in header]
        extra = [n for n in header if n not in names]
        if lacked := [n for n in missing if n in declared]:
            raise SpecError(f"{locate(lacked[0])}: the CSV header of {shown} lacks the column {lacked[0]!r} "
                            f"(found in the header of {next(f.display for f, h in zip(files, headers) if h is not None)})",
                            hint="add the column to that file's header, or read those files with a pipeline "
                                 "of their own")
        if missing:
            notes.append(f"source: {shown}: the header lacks {', '.join(missing)} (of the first file's header): "
                         "null in these files' records")
        if extra:
            notes.append(f"source: {shown}: the header has {', '.join(extra)}, which the first file's header "
                         "lacks: not read")
        if not missing and not extra:
            notes.append(f"source: {shown}: the header orders the columns differently; read by name")
    if not layouts:
        return CsvParser(names, delimiter, tuple(null_values)), notes
    return CsvParser(names, delimiter, tuple(null_values), tuple(layouts), tuple(layout_of)), notes


def read_csv_header(f: InputFile, delimiter: str, where: str) -> tuple[str, ...] | None:
    """A file's header: its first record (the first line with more than a line ending), the
    record the source stage skips; None for a file without one."""
    line = first_record(f)
    if line is None:
        return None
    text = line.decode("utf-8", "replace").lstrip("\ufeff")
    if text.count('"') % 2:      # the framing would run the header record on past this line
        raise SpecError(f"{where}: the CSV header of {f.display}, {text[:200]!r}, holds a quote that does not "
                        "close on its line: the records after it would be read as part of the header",
                        hint='the first line of each file names the columns, on one line; quote a name that holds '
                             'a quote whole, doubling it ("size (""")")')
    try:
        names = tuple(n.strip() for n in next(csv.reader([text], delimiter=delimiter)))
    except csv.Error as err:
        raise SpecError(f"{where}: the CSV header of {f.display}, {text[:200]!r}, cannot be read: {err}",
                        hint="the first line of each file names the columns, on one line") from None
    if not all(n.isprintable() and "\ufffd" not in n for n in names):
        raise SpecError(f"{where}: the CSV header of {f.display}, {text[:200]!r}, is not UTF-8 text "
                        "(a UTF-16 file or binary data?)", hint="save the file as UTF-8")
    if len(set(names)) != len(names) or not all(names):
        raise SpecError(f"{where}: the CSV header of {f.display}, {text[:200]!r}, has empty or repeated names")
    return names


def first_record(f: InputFile) -> bytes | None:
    """The first line of a file (decompressed as a stream: only its start is read) less its
    line ending; lines that are only a line ending are skipped, as the source stage does (the
    first record that is not empty is the header it skips)."""
    import bz2
    import gzip

    def _zstd(path, mode):
        import zstandard

        return zstandard.open(path, mode)

    opener = {None: open, "gzip": gzip.open, "bz2": bz2.open, "zstd": _zstd}[f.compression]
    try:
        with opener(f.path, "rb") as fh:
            while True:
                line = fh.readline(MAX_HEADER_BYTES + 1)
                if not line:
                    return None
                if len(line) > MAX_HEADER_BYTES:
                    raise SourceError(f"{f.display}: the first line (the CSV header) is over {MAX_HEADER_BYTES} bytes")
                if line.endswith(b"\n"):          # less its line ending, as the records (sources/line_ends.py)
                    line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
                if line:
                    return line
    except SourceError:
        raise
    except Exception as err:         # unreadable or not the compression it claims
        raise SourceError(f"{f.display}: cannot read the CSV header: {err}") from None
