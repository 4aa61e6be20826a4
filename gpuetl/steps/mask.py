from __future__ import annotations

from dataclasses import dataclass

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ..spec.names import ADDED
from ..types import Schema
from .base import Binding, Params, RowStep, StepError, register
from ..expr import regex_problem
from .select import missing

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_H = r"[0-9A-Fa-f]{1,4}"

# Built-in patterns: the RE2 subset cuDF's regex engine also runs (no lookarounds, no \b, no
# backreferences). They are deliberately greedy: masking a little too much is the safe error.
PATTERNS: dict[str, str] = {
    # ':' is not valid in a local part, but an address written right before an '@' must go whole
    "email": r"[A-Za-z0-9._%+:-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+",
    "uuid": r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}",
    "ipv4": _OCTET + r"(?:\." + _OCTET + r"){3}",
    "ipv6": "|".join([
        rf"(?:{_H}:){{7}}{_H}",                 # full form
        rf"(?:{_H}:){{1,6}}(?::{_H}){{1,6}}",   # a::b, a:b::c:d, ...
        rf"::(?:{_H}:){{0,6}}{_H}",             # ::1, ::ffff:abcd
        rf"(?:{_H}:){{1,7}}:",                  # fe80::
        # what is left of an address whose first group went with an e-mail before it
        # (`x@y.e3e7:682:c209:...`): five or more groups joined by ':'
        rf":?(?:{_H}:){{4,6}}{_H}",
    ]),
    "hex": r"[0-9A-Fa-f]{16,}",
}
ORDER = ("email", "uuid", "ipv4", "ipv6", "hex")   # the order they run in (see the docstring)
Kind = Literal["email", "uuid", "ipv4", "ipv6", "hex"]


KIND = "{kind}"                              # the one field of a placeholder, substituted as text
STRAY_BRACE = re.compile(r"\{[^{}]*\}?|\}")    # a brace left once every {kind} is taken out
MAX_PLACEHOLDER = 1000                       # characters


def fill(placeholder: str, kind: str) -> str:
    """The placeholder with `{kind}` replaced by the kind's name: plain text replacement, never
    str.format (whose fields reach attributes and format specs pad to any width)."""
    return placeholder.replace(KIND, kind)


class MaskParams(Params):
    columns: list[str] | None = Field(None, description="string columns to mask; every string column when absent")
    kinds: list[Kind] = Field(list(ORDER), description="built-in kinds: email, uuid, ipv4, ipv6, hex (all when absent)")
    custom: dict[str, str] = Field({}, description="name -> regular expression (RE2 syntax, no lookarounds)")
    placeholder: str = Field("<{kind}>", description="replacement; {kind} becomes the kind's name in upper case")

    @field_validator("custom")
    @classmethod
    def _custom(cls, value: dict[str, str]):
        for name, pattern in value.items():
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
                raise ValueError(f"custom: name {name!r}: use letters, digits and '_' (it goes into the placeholder)")
            if name.lower() in PATTERNS:
                raise ValueError(f"custom: {name!r} is a built-in kind; list it under kinds instead")
            try:
                compiled = re.compile(pattern)
            except re.error as err:
                raise ValueError(f"custom.{name}: not a valid regular expression: {err}") from None
            if compiled.match(""):
                raise ValueError(f"custom.{name}: the pattern matches the empty string, so it would mask nothing useful")
            if why := regex_problem(pattern):
                raise ValueError(f"custom.{name}: {why}")
        return value

    @model_validator(mode="after")
    def _check(self):
        if not self.kinds and not self.custom:
            raise ValueError("nothing to mask: give kinds, custom, or both")
        if "\\" in self.placeholder:
            raise ValueError("placeholder: backslashes are not allowed")
        if stray := STRAY_BRACE.search(self.placeholder.replace(KIND, "")):
            shown = stray[0] if len(stray[0]) <= 40 else stray[0][:40] + "…"
            raise ValueError(f"placeholder: only {{kind}} may appear in braces, found {shown!r}; a placeholder is "
                             "text with {kind} where the kind's name goes (no other braces, no format specs)")
        if len(self.placeholder) > MAX_PLACEHOLDER:
            raise ValueError(f"placeholder: {len(self.placeholder):,} characters; at most {MAX_PLACEHOLDER}")
        if self.columns is not None and not self.columns:
            raise ValueError("columns: give at least one column, or leave it out to mask every string column")
        return self


@dataclass(frozen=True)
class MaskBinding(Binding):
    columns: tuple[str, ...]       # the string columns masked


@register
class Mask(RowStep):
    """Patterns run one after another on each value: the custom ones first, in the order written,
    then the built-in kinds that are listed, always in the order email, uuid, ipv4, ipv6, hex (an
    e-mail's domain is masked whole before its parts look like anything else; IPv4 runs before IPv6
    so an IPv4-mapped address such as `::ffff:10.0.0.1` leaves nothing behind). `hex` is any run of
    16 or more hexadecimal characters, so it also masks long digit runs (card numbers, nanosecond
    times, ...). Matches are not anchored to word edges: `x10.0.0.1` becomes `x<IPV4>`. Masking is
    meant to err on the side of masking: `std::vector` contains an IPv6-shaped `d::ec`, an
    e-mail's local part may hold ':' (so `from:bob@x.com` and an IPv6 address written right
    before an '@' go whole, instead of leaving most of the address behind), and non-ASCII e-mail
    addresses are not recognised. Nulls stay null; no row is dropped. `placeholder` is plain
    text in which each `{kind}` becomes the kind's name in upper case (`EMAIL`, `API_KEY`); any
    other brace, a format spec such as `{kind:>9}` included, is an error, as are backslashes and
    more than 1,000 characters."""

    name = "mask"
    summary = "Replace personal data in string columns (e-mail, UUID, IPv4, IPv6, long hex tokens, your regexes) with placeholders."
    example = "- mask: {columns: [message], kinds: [email, ipv4, ipv6, uuid, hex], custom: {api_key: 'sk-[A-Za-z0-9]{20,}'}, placeholder: '<{kind}>'}"
    Params = MaskParams

    @property
    def rules(self) -> list[tuple[str, str]]:
        """(pattern, replacement) in the order they run."""
        p = self.params
        rules = [(pattern, fill(p.placeholder, name.upper())) for name, pattern in p.custom.items()]
        rules += [(PATTERNS[k], fill(p.placeholder, k.upper())) for k in ORDER if k in p.kinds]
        return rules

    def regexes(self):
        return [(("custom", name), pattern) for name, pattern in self.params.custom.items()]

    def derive(self, schema: Schema) -> Binding:
        if self.params.columns is not None:
            missing(schema, self.params.columns)
            for name in self.params.columns:
                if schema[name] != "string":
                    raise StepError(f"mask: column {name!r} is {schema[name]}, not string")
            columns = tuple(self.params.columns)
        else:
            # every string column the input has (a `_comment` field too), not the _file gpuetl adds
            columns = tuple(n for n, t in schema.items() if t == "string" and n not in ADDED)
        return MaskBinding(dict(schema), columns)

    def transform(self, df, backend):
        df = df.copy()
        rules = self.rules
        for name in self.binding.columns:
            col = df[name]
            for pattern, replacement in rules:
                col = backend.replace_regex(col, pattern, replacement)
            df[name] = col
        return df

