"""JSON Schema of pipeline files, for editors (yaml-language-server) and other tools."""

from __future__ import annotations

from ..steps.base import STEPS
from .models import PipelineSpec


def pipeline_json_schema() -> dict:
    schema = PipelineSpec.model_json_schema()
    defs = schema.setdefault("$defs", {})
    variants = []
    for name in sorted(STEPS):
        cls = STEPS[name]
        params = cls.Params.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(params.pop("$defs", {}))
        params.pop("title", None)
        params["description"] = cls.summary
        variants.append({"type": "object", "title": name, "properties": {name: params}, "required": [name],
                         "additionalProperties": False, "description": f"{cls.summary}  Example: {cls.example}"})
    schema["properties"]["steps"] = {"type": "array", "items": {"oneOf": variants},
                                     "description": "ordered; each item is a mapping with one key, the step's name"}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://gpuetl.dev/schema/pipeline-v1.json"
    schema["title"] = "gpuetl pipeline file, version 1"
    return schema
