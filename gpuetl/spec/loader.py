"""Load a pipeline file: safe YAML, --set overrides, typed validation, errors with file:line and key."""

from __future__ import annotations

import difflib
import hashlib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel, ValidationError

from ..errors import SpecError
from ..steps.base import STEPS, Step, closest, step_class
from ..steps.expr import ExprError
from .models import PipelineSpec
from .yamlio import dotted, load_with_locations, parse_scalar


@dataclass(frozen=True)
class LoadedSpec:
    spec: PipelineSpec
    steps: tuple[Step, ...]
    path: str                  # the file as given ("<dict>" for Pipeline.from_dict)
    base_dir: Path
    sha256: str                # of the file's bytes, overrides included


def load_spec(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> LoadedSpec:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such pipeline file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"{path}: cannot read the pipeline file: {err}") from None
    data, locations = load_with_locations(text, str(path))
    return build_spec(data, str(path), path.resolve().parent, overrides, locations, text.encode())


def build_spec(data: Any, filename: str, base_dir: Path, overrides=(), locations=None, raw: bytes | None = None) -> LoadedSpec:
    locations = dict(locations or {})
    if not isinstance(data, dict):
        raise SpecError(f"{filename}: a pipeline file is a mapping (version, name, source, sink, ...)")
    data = apply_overrides(data, overrides, locations)
    problems: list[str] = []
    spec = None
    try:
        spec = PipelineSpec.model_validate(data)
    except ValidationError as err:
        problems += [m for e in err.errors() if (m := _describe(e, data, locations, filename))]
    steps: list[Step] = []
    for i, item in enumerate(data.get("steps") or [] if isinstance(data.get("steps"), list) else []):
        if not isinstance(item, dict) or len(item) != 1:
            continue
        (name, raw_params), = item.items()
        where = _where(locations, ("steps", i, name), filename)
        try:
            cls = step_class(name)
        except KeyError as err:
            problems.append(f"{where}steps[{i}]: {err.args[0]}")
            continue
        try:
            steps.append(cls.from_raw(raw_params))
        except ValidationError as err:
            for e in err.errors():
                loc = ("steps", i, name) + tuple(p for p in e["loc"] if p != "root")
                message = _describe({**e, "loc": loc}, data, locations, filename, model=cls.Params)
                problems.append(message or f"{where}steps[{i}].{name}: {e['msg']}")
        except ExprError as err:
            problems.append(f"{where}steps[{i}].{name}: {err}")
    problems += _not_yet(spec, data, locations, filename) if spec else []
    if problems:
        unique = list(dict.fromkeys(problems))
        head = f"{filename}: {len(unique)} problem{'s' if len(unique) > 1 else ''} in the pipeline file"
        raise SpecError(head + "\n  " + "\n  ".join(unique))
    digest = hashlib.sha256(raw if raw is not None and not overrides else _canonical(data)).hexdigest()
    return LoadedSpec(spec, tuple(steps), filename, base_dir, digest)


def _canonical(data) -> bytes:
    import json

    return json.dumps(data, sort_keys=True, default=str).encode()


# Features in the contract whose behaviour lands later: validate, then say so clearly.
NOT_YET: dict = {}


def _not_yet(spec: PipelineSpec, data, locations, filename) -> list[str]:
    out = []
    for (section, key, value), message in NOT_YET.items():
        if getattr(getattr(spec, section), key) == value:
            out.append(f"{_where(locations, (section, key), filename)}{section}.{key}: {message}")
    return out


def apply_overrides(data: dict, overrides, locations) -> dict:
    """--set a.b.c=VALUE: VALUE is read as YAML; the key path must name a mapping key."""
    import copy

    data = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise SpecError(f"--set {item!r}: expected KEY=VALUE, e.g. --set sink.path=/tmp/out")
        key, value = item.split("=", 1)
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise SpecError(f"--set {item!r}: the key is empty")
        node = data
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = parse_scalar(value)
        locations[tuple(parts)] = ("--set", item)
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
