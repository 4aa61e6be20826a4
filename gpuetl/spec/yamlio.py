"""Safe YAML loading that remembers where each key came from, so errors can name the line."""

from __future__ import annotations

from typing import Any

import yaml

from ..errors import SpecError

Location = tuple[int, int]  # 1-based line, column


class _Loader(yaml.SafeLoader):
    """SafeLoader: plain data only, no Python objects."""


def load_with_locations(text: str, filename: str) -> tuple[Any, dict[tuple, Location]]:
    """Parse YAML text into plain data plus a map from key path to (line, column)."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        hint = "YAML indents with spaces, not tabs" if "\\t" in str(err.problem) or "\t" in str(err.problem) else None
        raise SpecError(f"{where}: not valid YAML: {err.problem}", hint=hint) from None
    except yaml.YAMLError as err:
        raise SpecError(f"{filename}: not valid YAML: {err}") from None
    if node is None:
        raise SpecError(f"{filename}: the pipeline file is empty", hint="start with `version: 1`")
    locations: dict[tuple, Location] = {}
    loader = _Loader("")
    data = _build(node, (), locations, loader, filename)
    return data, locations


def _build(node, path, locations, loader, filename):
    locations.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        for key_node, value_node in node.value:
            # Keys are names: YAML 1.1 would read `on:` or `yes:` as booleans (dedupe's `on`!).
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str):
                raise SpecError(f"{filename}:{key_node.start_mark.line + 1}: keys must be plain names")
            if key in out:
                raise SpecError(
                    f"{filename}:{key_node.start_mark.line + 1}: key {_dotted(path + (key,))!r} is given twice"
                )
            locations[path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            out[key] = _build(value_node, path + (key,), locations, loader, filename)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, path + (i,), locations, loader, filename) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def _dotted(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def dotted(path) -> str:
    """sink.path, steps[2].filter — how a key is named in messages and in --set."""
    return _dotted(tuple(path))


def parse_scalar(text: str) -> Any:
    """A --set value, read the way YAML reads it (safe)."""
    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text
