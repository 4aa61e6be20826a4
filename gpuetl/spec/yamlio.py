"""Safe YAML loading that remembers where each key came from, so errors can name the line."""

from __future__ import annotations

from typing import Any

import yaml

from ..errors import SpecError

Location = tuple[int, int]  # 1-based line, column

# A pipeline file is small and shallow. These caps turn a hostile file (an alias "billion laughs",
# thousands of nested brackets, a huge file) into a located error before any work is done.
MAX_FILE_BYTES = 1 << 20     # 1 MiB, checked by the loader as it reads the file
MAX_DEPTH = 32               # mappings and lists inside each other
MAX_VALUES = 100_000         # values after YAML aliases are expanded
_PLAIN_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp")}


class _Loader(yaml.SafeLoader):
    """SafeLoader: plain data only, no Python objects."""


class NotYaml(SpecError):
    """The text is not valid YAML (as opposed to valid YAML that gpuetl refuses)."""


def load_with_locations(text: str, filename: str) -> tuple[Any, dict[tuple, Location]]:
    """Parse YAML text into plain data plus a map from key path to (line, column)."""
    node = _compose(text, filename)
    if node is None:
        raise SpecError(f"{filename}: the pipeline file is empty", hint="start with `version: 1`")
    locations: dict[tuple, Location] = {}
    return _build(node, (), locations, _Loader(""), filename), locations


def _compose(text: str, filename: str):
    """The YAML node graph, once it is known to be shallow and to expand to few values."""
    try:
        _check_depth(text, filename)     # before composing, which recurses
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        hint = "YAML indents with spaces, not tabs" if "\\t" in str(err.problem) or "\t" in str(err.problem) else None
        if "unknown escape character" in str(err.problem):
            hint = ("inside double quotes YAML reads a backslash as an escape; write the value in single quotes, "
                    "e.g. template: '\\[<Level>\\] <Content>'")
        if "'`' that cannot start any token" in str(err.problem):
            hint = ("YAML does not let a plain value start with a backtick: quote the whole expression, "
                    "e.g. filter: \"`US Gross` > 0\"")
        raise NotYaml(f"{where}: not valid YAML: {err.problem}", hint=hint) from None
    except yaml.YAMLError as err:
        raise NotYaml(f"{filename}: not valid YAML: {err}") from None
    if node is not None:
        _check_expansion(node, filename)
    return node


def _check_depth(text: str, filename: str) -> None:
    """Refuse deep nesting while streaming the events (composing would recurse first)."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                raise SpecError(f"{filename}:{mark.line + 1}:{mark.column + 1}: the YAML is nested more than "
                                f"{MAX_DEPTH} levels deep")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _check_expansion(root, filename: str) -> None:
    """Refuse a file whose aliases expand past MAX_VALUES values or nest a node inside itself,
    from the composed graph (each aliased node is counted once, times its uses), before anything
    is expanded."""
    sizes: dict[int, int] = {}

    def size(node, depth: int) -> int:
        if depth > MAX_DEPTH:   # aliases can nest a node inside itself, or chain past the limit
            raise SpecError(f"{filename}:{node.start_mark.line + 1}: the YAML is nested more than {MAX_DEPTH} "
                            "levels deep (through aliases)")
        known = sizes.get(id(node))
        if known is None:
            if isinstance(node, yaml.MappingNode):
                known = 1 + sum(1 + size(v, depth + 1) for _, v in node.value)
            elif isinstance(node, yaml.SequenceNode):
                known = 1 + sum(size(v, depth + 1) for v in node.value)
            else:
                known = 1
            if known > MAX_VALUES:
                raise SpecError(f"{filename}:{node.start_mark.line + 1}: the YAML expands to more than {MAX_VALUES} "
                                "values (aliases such as *name repeat what they point to)",
                                hint="a pipeline file needs few aliases, if any; write the values out")
            sizes[id(node)] = known
        return known

    size(root, 0)


def _build(node, path, locations, loader, filename):
    line = node.start_mark.line + 1
    if node.tag not in _PLAIN_TAGS:
        raise SpecError(f"{filename}:{line}:{node.start_mark.column + 1}: the tag {node.tag!r} is not allowed: "
                        "a pipeline file holds plain values only (text, numbers, true/false, lists, mappings)")
    locations.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        for key_node, value_node in node.value:
            # Keys are names: YAML 1.1 would read `on:` or `yes:` as booleans (dedupe's `on`!).
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str) or key_node.tag not in _PLAIN_TAGS:
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
    try:
        return loader.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError) as err:
        raise SpecError(f"{filename}:{line}:{node.start_mark.column + 1}: cannot read the value "
                        f"{node.value!r:.60}: {getattr(err, 'problem', None) or err}") from None


def _dotted(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def dotted(path) -> str:
    """sink.path, steps[2].filter — how a key is named in messages and in --set."""
    return _dotted(tuple(path))


def parse_scalar(text: str, where: str = "--set") -> Any:
    """A --set value, read the way YAML reads it, with the pipeline file's limits. Text that is
    not valid YAML (`a: b: c`) is taken as it is."""
    if not text.strip():
        return ""
    try:
        node = _compose(text, where)
    except NotYaml:
        return text
    return None if node is None else _build(node, (), {}, _Loader(""), where)
