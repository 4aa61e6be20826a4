"""Text: one record per line, kept whole (`line`) or parsed by `parse:` (a preset, a template or
a regex; the `json` preset reads each line as a JSON object, like jsonl). With
`source.multiline`, a record is a start line and the lines that continue it (sources/framing.py);
regexes and templates then see the whole record, newlines inside."""

from __future__ import annotations


import pyarrow as pa
import pyarrow.compute as pc

from ...errors import SpecError
from ...parsing import preset as preset_rule
from ...parsing import template_to_regex
from ...spec.names import new_name_problem
from ...types import ColumnSpec, column_spec
from ..compressed import Limits
from ..framing import MultilineFraming, first_start_lines
from ..ranges import plain_long_records
from ..parsers import LineParser, RegexParser
from ..stage import declared_columns, plan_byte_ranges, source_stage
from .jsonl import FIELD_HINT, json_stage, json_stage_and_metadata

PRESET_KERNELS = {"apache_common": "clf", "apache_combined": "combined", "nginx_combined": "combined"}
TEMPLATE_HINT = ("in a template, '[' starts a regular-expression character class; write \\[ and \\] for "
                 "literal brackets, in single-quoted YAML: template: '\\[<Level>\\] <Content>'")


class TextFormat:
    name = "text"
    options = ("multiline", "max_record_bytes")

    def reads_ranges_in_store(self, spec) -> bool:
        """Lines: each range finds its records from its own bytes and a little past its end, so an
        object in the store is read in ranges. Multi-line records need the plan's scan of each
        whole file: those objects are fetched."""
        return spec.source.multiline is None

    def plan(self, loaded, files, notes, backend=None):
        partitions = plan_byte_ranges(loaded, files, whole_compressed=loaded.spec.source.multiline is not None)
        if _json_preset(loaded):           # read as jsonl: its notes and manifest entries too
            stage, metadata = json_stage_and_metadata(loaded, files, notes)
            return partitions, stage, metadata
        return partitions, self.stage(loaded, files, notes), {}

    def stage(self, loaded, files, notes):
        return text_stage(loaded, files, notes)


def _json_preset(loaded) -> bool:
    parse = loaded.spec.parse
    if parse is None or parse.preset != "json":
        return False
    if loaded.spec.source.multiline is not None:
        raise SpecError(f"{loaded.key('source', 'multiline')}: not read with the json preset (one JSON "
                        "object per line)", hint="remove source.multiline, or parse the records with a regex")
    return True


def text_stage(loaded, files, notes=None):
    parse = loaded.spec.parse
    multiline = loaded.spec.source.multiline
    if _json_preset(loaded):
        return json_stage(loaded, files, notes)
    casts: dict[str, ColumnSpec] = {}
    if parse is None:
        parser = LineParser()
    elif parse.preset:
        rule = preset_rule(parse.preset)
        parser = RegexParser(rule.regex, tuple(rule.columns), f"preset {parse.preset}",
                             dash_is_null=rule.dash_is_null, kernel=PRESET_KERNELS.get(parse.preset))
        casts = {name: column_spec(ColumnSpec.model_validate(t) if isinstance(t, dict) else t)
                 for name, t in rule.types.items()}
    elif parse.template:
        try:
            regex, names = template_to_regex(parse.template, multiline=multiline is not None)
        except ValueError as err:
            raise SpecError(f"{loaded.key('parse', 'template')}: {err}",
                            hint=TEMPLATE_HINT if "character class" in str(err) else None) from None
        parser = RegexParser(regex, tuple(names), "the template", strip=True)
    else:
        parser = RegexParser(*user_regex(loaded, parse.regex), "the regex")
    return source_stage(loaded, files, parser, casts=casts, declared=declared_columns(loaded), field_hint=FIELD_HINT,
                        framing=multiline_framing(loaded, files) if multiline is not None else None)


def multiline_framing(loaded, files) -> MultilineFraming:
    """The framing of `source.multiline`, its start regex checked and each file's first start
    line found (a scan of each file's head: sources/framing.py)."""
    option = loaded.spec.source.multiline
    where = loaded.key("source", "multiline", "start")
    try:
        pc.match_substring_regex(pa.array(["x"]), pattern=option.start)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise SpecError(f"{where}: not a regular expression RE2 can run: {err}",
                        hint="e.g. start: '^\\d{4}-\\d{2}-\\d{2}' (a line that begins with a date)") from None
    if pc.match_substring_regex(pa.array([""]), pattern=option.start)[0].as_py():
        raise SpecError(f"{where}: {option.start!r} matches an empty line, so every line would start a record",
                        hint="anchor it to what a record's first line begins with, e.g. '^\\d{4}-'")
    limits = Limits.of(loaded.spec.source)
    return MultilineFraming(option.start, option.max_lines, option.max_bytes, first_start_lines(files, option.start),
                            tuple(tuple(plain_long_records(f, limits)) if not f.compression else () for f in files))


def user_regex(loaded, regex: str) -> tuple[str, tuple[str, ...]]:
    """The pattern and its group names, as RE2 (the dialect parse.regex is written in) reads
    them: its Unicode classes (`\\p{L}`), `\\z` and `[[:alpha:]]` are fine, lookarounds and
    backreferences are not. The names are the fields of the struct RE2's extraction gives."""
    key = loaded.key("parse", "regex")
    try:
        fields = pc.extract_regex(pa.array(["x"]), pattern=regex).type
    except pa.ArrowInvalid as err:
        if "unnamed groups" in str(err):
            raise SpecError(f"{key}: every group must be named; use (?:...) for groups that only group") from None
        raise SpecError(f"{key}: RE2 cannot run this pattern ({err}); "
                        "lookarounds and backreferences are not available") from None
    names = tuple(f.name for f in fields)
    if not names:
        raise SpecError(f"{key}: name the fields with (?P<name>...) groups")
    for name in names:
        if problem := new_name_problem(name):
            raise SpecError(f"{key}: the group {problem}; name the group without a leading '_'")
    return regex, names
