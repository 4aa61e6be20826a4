"""Load a pipeline file: safe YAML, --set overrides, typed validation, errors with file:line and key."""

from __future__ import annotations

import difflib
import hashlib
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel, ValidationError

from ..errors import SpecError
from ..steps.base import STEPS, Step, closest, step_class
from ..expr import ExprError
from .models import PipelineSpec
from .names import field_name_problem, new_name_problem
from .yamlio import MAX_FILE_BYTES, dotted, load_with_locations, parse_scalar


@dataclass(frozen=True)
class LoadedSpec:
    spec: PipelineSpec
    steps: tuple[Step, ...]
    path: str                  # the file as given ("<dict>" for Pipeline.from_dict)
    base_dir: Path
    sha256: str                # of the file's bytes, overrides included
    locations: dict = field(default_factory=dict, compare=False, repr=False)   # key path -> line or --set

    def where(self, *path) -> str:
        """'pipe.yaml:12: ' (or '(--set KEY=VALUE) ') for a key path such as ('steps', 0, 'filter')."""
        return _where(self.locations, path, self.path)

    def key(self, *path) -> str:
        """The located key, for messages: 'pipe.yaml:12: steps[0].filter'."""
        return self.where(*path) + dotted(path)


def load_spec(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> LoadedSpec:
    path = Path(path)
    try:
        with open(path, "rb") as fh:          # read no more than the cap (a FIFO or /dev/zero ends too)
            raw = fh.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise SpecError(f"{path}: the pipeline file is larger than the limit of {MAX_FILE_BYTES} bytes (1 MiB)",
                            hint="a pipeline file describes the work; it does not hold data")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such pipeline file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"{path}: cannot read the pipeline file: {err}") from None
    data, locations = load_with_locations(text, str(path))
    return build_spec(data, str(path), path.resolve().parent, overrides, locations, text.encode())


def build_spec(data: Any, filename: str, base_dir: Path, overrides=(), locations=None, raw: bytes | None = None) -> LoadedSpec:
    try:
        return _build_spec(data, filename, base_dir, overrides, locations, raw)
    except SpecError as err:             # storage_options' secrets are never written into a message
        from ..storage import redact

        secrets = _storage_option_values(data, overrides)
        message, hint = redact(err.message, secrets), err.hint and redact(err.hint, secrets)
        if (message, hint) == (err.message, err.hint):
            raise
        raise type(err)(message, hint=hint) from None


def _storage_option_values(data: Any, overrides) -> dict:
    """The storage_options of the file's source and sink and the values --set gives under any
    storage_options key (an error may quote a --set or a value it met): what storage.redact blots out."""
    values: list = []
    for part in ("source", "sink"):
        if isinstance(data, dict) and isinstance(data.get(part), dict):
            values.append(data[part].get("storage_options"))
    for item in overrides:
        key, _, value = str(item).partition("=")
        if "storage_options" in key:
            values.append(value)
            try:
                values.append(parse_scalar(value, "--set"))
            except SpecError:
                pass
    return {"values": values}


def _build_spec(data: Any, filename: str, base_dir: Path, overrides=(), locations=None,
                raw: bytes | None = None) -> LoadedSpec:
    locations = dict(locations or {})
    if not isinstance(data, dict):
        raise SpecError(f"{filename}: a pipeline file is a mapping (version, name, source, sink, ...)")
    _check_step_count(data, locations, filename)      # before copying them for the overrides
    data = apply_overrides(data, overrides, locations)
    listed = _check_step_count(data, locations, filename)
    problems: list[str] = []
    spec = None
    try:
        spec = PipelineSpec.model_validate(data)
    except ValidationError as err:
        # a malformed step item is reported below, at the item's own line
        errors = [e for e in err.errors() if not (tuple(e["loc"]) == ("steps",) and "exactly one key" in e["msg"])]
        problems += [m for e in errors if (m := _describe(e, data, locations, filename))]
        if errors and not problems:   # every error was a union branch not taken: say what pydantic said
            problems += [f"{_where(locations, _clean_loc(e['loc'], data), filename)}"
                         f"{dotted(_clean_loc(e['loc'], data)) or '(top level)'}: {e['msg']}" for e in errors]
    steps: list[tuple[int, Step]] = []    # (index in the file, step)
    for i, item in enumerate(listed):
        if not isinstance(item, dict) or len(item) != 1:
            problems.append(f"{_where(locations, ('steps', i), filename)}steps[{i}]: each step is a mapping with "
                            "exactly one key, the step's name (e.g. '- filter: \"status >= 200\"')")
            continue
        (name, raw_params), = item.items()
        where = _where(locations, ("steps", i, name), filename)
        try:
            cls = step_class(name)
        except KeyError as err:
            problems.append(f"{where}steps[{i}]: {err.args[0]}")
            continue
        try:
            steps.append((i, cls.from_raw(raw_params)))
        except ValidationError as err:
            for e in err.errors():
                loc = ("steps", i, name) + tuple(p for p in e["loc"] if p != "root")
                message = _describe({**e, "loc": loc}, data, locations, filename, model=cls.Params)
                problems.append(message or f"{where}steps[{i}].{name}: {e['msg']}")
        except ExprError as err:
            problems.append(f"{where}steps[{i}].{name}: {err}")
    problems += _reserved_names(spec, steps, locations, filename)
    if problems:
        unique = list(dict.fromkeys(problems))
        head = f"{filename}: {len(unique)} problem{'s' if len(unique) > 1 else ''} in the pipeline file"
        raise SpecError(head + "\n  " + "\n  ".join(unique))
    digest = hashlib.sha256(raw if raw is not None and not overrides else _canonical(data)).hexdigest()
    return LoadedSpec(spec, tuple(step for _, step in steps), filename, base_dir, digest, locations)


MAX_STEPS = 1000


def _check_step_count(data: dict, locations, filename) -> list:
    listed = data.get("steps") if isinstance(data.get("steps"), list) else []
    if len(listed) > MAX_STEPS:
        raise SpecError(f"{_where(locations, ('steps',), filename)}steps: {len(listed)} steps; the limit is {MAX_STEPS}",
                        hint="split the work into several pipelines")
    return listed


def _canonical(data) -> bytes:
    import json

    return json.dumps(data, sort_keys=True, default=str).encode()


_OVERRIDE_PIECE = re.compile(r"([^\[\]]*)((?:\[\d+\])*)")


def _override_path(item: str, key: str) -> list:
    """'steps[0].filter' and 'steps.0.filter' -> ['steps', 0, 'filter'] (digits may index a list)."""
    parts: list = []
    for piece in key.strip().split("."):
        match = _OVERRIDE_PIECE.fullmatch(piece.strip())
        if not match or not piece.strip():
            raise SpecError(f"--set {item!r}: cannot read the key {key.strip()!r}",
                            hint="name keys with dots and list items with [N], e.g. --set 'steps[0].filter=x > 1'")
        name, indices = match.groups()
        if name:
            parts.append(int(name) if name.isdigit() else name)
        parts += [int(i) for i in re.findall(r"\[(\d+)\]", indices)]
    return parts


def _reserved_names(spec: PipelineSpec | None, steps: list[tuple[int, Step]], locations, filename) -> list[str]:
    """Names that would replace gpuetl's own columns or folders (spec/names.py)."""
    out = []

    def refuse(path, problem, hint):
        out.append(f"{_where(locations, path, filename)}{dotted(path)}: {problem}; {hint}")

    if spec is not None:
        for name in spec.columns:
            if problem := field_name_problem(name):
                refuse(("columns", name), problem, "such a field cannot be read as a column")
        for name in spec.shard.splits or {}:
            if problem := new_name_problem(name):
                refuse(("shard", "splits", name), problem, "name the split without a leading '_'")
    for index, step in steps:
        for path, name in step.new_names():
            if problem := new_name_problem(name):
                refuse(("steps", index, step.name) + path, problem, "choose a name without a leading '_'")
    return out


def apply_overrides(data: dict, overrides, locations) -> dict:
    """--set a.b.c=VALUE or --set 'steps[0].filter=VALUE': VALUE is read as YAML. Missing mapping
    keys are created; a list item must exist; errors name the --set, not the file."""
    import copy

    data = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise SpecError(f"--set {item!r}: expected KEY=VALUE, e.g. --set sink.path=/tmp/out")
        key, value = item.split("=", 1)
        if not key.strip():
            raise SpecError(f"--set {item!r}: the key is empty")
        parts = _override_path(item, key)
        node, path, made = data, [], []
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            if isinstance(node, list):
                if not isinstance(part, int):
                    raise SpecError(f"--set {item!r}: {dotted(path)} is a list; name an item by its number, "
                                    f"e.g. {dotted(path)}[0]")
                if part >= len(node):
                    raise SpecError(f"--set {item!r}: {dotted(path)} has {len(node)} item"
                                    f"{'s' if len(node) != 1 else ''}, so there is no {dotted(path + [part])}")
            elif isinstance(node, dict):
                part = str(part)
                if not last and node.get(part) is None:
                    if isinstance(parts[depth + 1], int):
                        raise SpecError(f"--set {item!r}: the file has no {dotted(path + [part])}, so there is no "
                                        f"item {dotted(path + [part, parts[depth + 1]])} to change")
                    node[part] = {}
                    made.append(tuple(path + [part]))      # an error about this key names the --set
            else:
                raise SpecError(f"--set {item!r}: {dotted(path)} is {node!r}, not a mapping or a list, "
                                f"so it has no key {str(part)!r}")
            path.append(part)
            if last:
                node[part] = parse_scalar(value, f"--set {item!r}")
            else:
                node = node[part]
        for known in [k for k in locations if k[:len(path)] == tuple(path)]:
            del locations[known]       # what the file said below this key is gone
        for key_path in made + [tuple(path)]:
            locations[key_path] = ("--set", item)
    return data


def _where(locations, path, filename) -> str:
    for end in range(len(path), -1, -1):
        loc = locations.get(tuple(path[:end]))
        if loc:
            if loc[0] == "--set":
                return f"(--set {loc[1]}) "
            return f"{filename}:{loc[0]}: "
    return f"{filename}: "


def _describe(error: dict, data, locations, filename, model: type[BaseModel] = PipelineSpec) -> str | None:
    loc = _clean_loc(error["loc"], data)
    kind = error["type"]
    # A union of a name and a mapping (a column's type): report only the branch the value took.
    tags = [p for p in error["loc"] if isinstance(p, str) and p.startswith("literal[")]
    if isinstance(error.get("input"), dict) and kind == "literal_error":
        return None
    if tags and kind == "literal_error" and isinstance(error.get("input"), dict):
        return None
    if kind == "model_type" and isinstance(error.get("input"), str) and len(loc) > 1:
        return None
    key = dotted(loc) or "(top level)"
    where = _where(locations, loc, filename)
    if kind == "extra_forbidden":
        known = _known_keys(model, loc[:-1] if model is PipelineSpec else loc[3:-1])
        hint = closest(loc[-1], known)
        return (f"{where}{key}: unknown key" + (f"; did you mean {hint!r}?" if hint else "")
                + (f" (known here: {', '.join(known)})" if known else ""))
    if kind == "missing":
        return f"{where}{key}: required key is missing"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        options = [o.strip().strip("'") for o in expected.replace(" or ", ", ").split(",")]
        hint = closest(str(error.get("input")), options)
        return (f"{where}{key}: {error.get('input')!r} is not one of {', '.join(options)}"
                + (f"; did you mean {hint!r}?" if hint else ""))
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    if kind in ("model_type", "dict_type"):
        message = "expected a mapping of keys to values"
    elif kind == "string_type":
        message = f"expected text, got {type(error.get('input')).__name__} {error.get('input')!r}"
    elif kind in ("int_type", "int_parsing"):
        message = f"expected a whole number, got {error.get('input')!r}"
    elif kind == "string_pattern_mismatch":
        message = f"{error.get('input')!r} is not allowed here: use letters, digits, '-' and '_' only"
    return f"{where}{key}: {message}"


def _clean_loc(loc, data) -> tuple:
    """Keep the part of pydantic's location that names keys in the file (drop union member tags)."""
    out, node = [], data
    for part in loc:
        if isinstance(node, dict) and part in node:
            out.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            out.append(part)
            node = node[part]
        elif isinstance(part, str) and (part.startswith(("literal[", "function-", "union[")) or part[:1].isupper()
                                        or part in ("str", "int", "float", "list[str]", "bool")):
            continue
        else:
            out.append(part)
            node = None
    return tuple(out)


def _known_keys(model: type[BaseModel], path: tuple) -> list[str]:
    current: Any = model
    skip_key = False
    for part in path:
        if skip_key or isinstance(part, int):   # a key of a mapping of models, or a list index
            skip_key = False
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = current.model_fields.get(part)
        if field is None:
            return []
        skip_key = typing.get_origin(field.annotation) is dict
        current = _model_in(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel) and not issubclass(current, pydantic.RootModel):
        return list(current.model_fields)
    return []


def _model_in(annotation):
    for arg in (typing.get_args(annotation) or (annotation,)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
        inner = _model_in(arg) if typing.get_args(arg) else None
        if inner is not None:
            return inner
    return None


__all__ = ["LoadedSpec", "load_spec", "build_spec", "STEPS", "difflib"]
