"""Text: one record per line, kept whole (`line`) or parsed by `parse:` (a preset, a template or
a regex; the `json` preset reads each line as a JSON object, like jsonl)."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from ...errors import SpecError
from ...parsing import preset as preset_rule
from ...parsing import template_to_regex
from ...spec.names import new_name_problem
from ...types import ColumnSpec, column_spec
from ..parsers import LineParser, RegexParser
from ..stage import declared_columns, plan_byte_ranges, source_stage
from .jsonl import FIELD_HINT, json_stage

PRESET_KERNELS = {"apache_common": "clf", "apache_combined": "combined", "nginx_combined": "combined"}
TEMPLATE_HINT = ("in a template, '[' starts a regular-expression character class; write \\[ and \\] for "
                 "literal brackets, in single-quoted YAML: template: '\\[<Level>\\] <Content>'")


class TextFormat:
    name = "text"
    options = ()

    def plan(self, loaded, files, notes, backend=None):
        partitions = plan_byte_ranges(loaded, files)
        return partitions, self.stage(loaded, files, notes), {}

    def stage(self, loaded, files, notes):
        return text_stage(loaded, files)


def text_stage(loaded, files):
    parse = loaded.spec.parse
    if parse is not None and parse.preset == "json":
        return json_stage(loaded, files)
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
            regex, names = template_to_regex(parse.template)
        except ValueError as err:
            raise SpecError(f"{loaded.key('parse', 'template')}: {err}",
                            hint=TEMPLATE_HINT if "character class" in str(err) else None) from None
        parser = RegexParser(regex, tuple(names), "the template", strip=True)
    else:
        parser = RegexParser(*user_regex(loaded, parse.regex), "the regex")
    return source_stage(loaded, files, parser, casts=casts, declared=declared_columns(loaded), field_hint=FIELD_HINT)


def user_regex(loaded, regex: str) -> tuple[str, tuple[str, ...]]:
    try:
        compiled = re.compile(regex)
    except re.error as err:
        raise SpecError(f"{loaded.key('parse', 'regex')}: not a valid regular expression: {err}") from None
    names = tuple(sorted(compiled.groupindex, key=compiled.groupindex.get))
    if not names:
        raise SpecError(f"{loaded.key('parse', 'regex')}: name the fields with (?P<name>...) groups")
    if compiled.groups != len(names):
        raise SpecError(f"{loaded.key('parse', 'regex')}: every group must be named; use (?:...) for groups that only group")
    for name in names:
        if problem := new_name_problem(name):
            raise SpecError(f"{loaded.key('parse', 'regex')}: the group {problem}; name the group without a leading '_'")
    try:
        pc.extract_regex(pa.array(["x"]), pattern=regex)
    except pa.ArrowInvalid as err:
        raise SpecError(f"{loaded.key('parse', 'regex')}: RE2 cannot run this pattern ({err}); "
                        "lookarounds and backreferences are not available") from None
    return regex, names
