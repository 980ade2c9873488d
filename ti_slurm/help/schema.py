"""The spec's JSON Schema: ``ti-slurm schema`` prints it, so editors validate and complete job files.

Made from the spec's models (:mod:`ti_slurm.submitting.spec`), with their descriptions and examples.
"""

from __future__ import annotations

import json
from typing import Any

SCHEMA_ID = "https://ti-slurm.invalid/spec.schema.json"  # a name, not a place: the schema ships with ti-slurm


def spec_schema() -> dict[str, Any]:
    """The spec's JSON Schema, as a YAML editor should read it: a text field takes what YAML reads as a
    number or true/false too (ti-slurm keeps it as written), and ``mode``/``platform`` list their names."""
    from ti_slurm.job.modes import mode_names
    from ti_slurm.job.platforms import platform_names
    from ti_slurm.submitting.spec import JobSpec

    schema = JobSpec.model_json_schema()
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}
    schema["title"] = "ti-slurm job spec"
    props = schema["properties"]
    props["mode"]["enum"] = list(mode_names())
    props["platform"]["enum"] = list(platform_names())
    _text_as_written(schema)
    _shorthands(schema)
    return schema


def _shorthands(schema: dict[str, Any]) -> None:
    """The short forms the spec's readers take before validating (``train: /data`` for ``{path: /data}``, one
    ``notify`` mapping for a list of one, ``jobs: 5631001`` for a list of one)."""
    props, defs = schema["properties"], schema["$defs"]
    props["inputs"]["additionalProperties"] = {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/InputSpec"}]}
    notify = {k: props["notify"].pop(k) for k in ("items", "type")}
    props["notify"]["anyOf"] = [{"$ref": "#/$defs/NotifySpec"}, notify]
    jobs = defs["AfterSpec"]["properties"]["jobs"]
    listed = {k: jobs.pop(k) for k in ("items", "type", "minItems")}
    jobs["anyOf"] = [listed, {"type": ["string", "integer"]}]


def _text_as_written(node: object) -> None:
    """Free text (a string with no choices) accepts YAML's numbers and true/false, as the spec reader does."""
    if isinstance(node, dict):
        if node.get("type") == "string" and not {"enum", "const", "pattern"} & node.keys():
            node["type"] = ["string", "number", "boolean"]
        for value in node.values():
            _text_as_written(value)
    elif isinstance(node, list):
        for value in node:
            _text_as_written(value)


def schema_text() -> str:
    """The schema as ``ti-slurm schema`` prints it (and docs/reference/spec.schema.json holds it)."""
    return json.dumps(spec_schema(), indent=2, ensure_ascii=False) + "\n"
