"""Checking a tool call's arguments against its declared JSON schema (the ``jsonschema`` library).

Used for tools whose schema was written by hand (raw handlers) or came from a source (an MCP
server's ``inputSchema``): the model's arguments are checked before the tool runs, and what is
wrong comes back as one line per bad field — the same text format typed functions give. A
schema that is itself invalid is reported once, when the validator is built, not per call.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

_MAX_MESSAGE = 300
_MAX_ERRORS = 20


class InvalidSchema(ValueError):
    """A declared tool schema that is not valid JSON Schema."""


class SchemaValidator:
    """The validator of one tool's ``input_schema`` (draft chosen by its ``$schema``, else 2020-12)."""

    def __init__(self, tool: str, schema: Mapping[str, Any]) -> None:
        self.tool = tool
        schema = dict(schema)
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(schema)
        except jsonschema.exceptions.SchemaError as exc:
            raise InvalidSchema(
                f"tool {tool}: its input_schema is not valid JSON Schema: {exc.message}"
            ) from exc
        self._validator = cls(schema)

    def check(self, arguments: object) -> str | None:
        """None when ``arguments`` conform, else the text telling the model what is wrong."""
        if not isinstance(arguments, Mapping):
            return f"invalid arguments for {self.tool}:\n- (arguments): must be a JSON object"
        instance = dict(arguments)
        if self._validator.is_valid(instance):  # the common case: stops at no error, sorts nothing
            return None
        errors = sorted(self._validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
        lines = [f"invalid arguments for {self.tool}:"]
        for error in errors[:_MAX_ERRORS]:
            loc = ".".join(str(part) for part in error.absolute_path) or "(arguments)"
            # jsonschema's messages already quote the offending value ("'2' is not of type …").
            message = (
                error.message if len(error.message) <= _MAX_MESSAGE else error.message[:_MAX_MESSAGE] + "…"
            )
            lines.append(f"- {loc}: {message}")
        if len(errors) > _MAX_ERRORS:
            lines.append(f"- … and {len(errors) - _MAX_ERRORS} more")
        return "\n".join(lines)


def declared_schema(tool: object) -> tuple[str, Mapping[str, Any]] | None:
    """(name, input schema) of one declaration as ``tools=`` takes it: a flat dict
    (``input_schema``/``parameters``), an OpenAI-shaped ``{"type": "function", …}`` dict, or an
    object with ``name`` and ``input_schema`` (``ToolSpec``, ``FunctionTool``)."""
    if isinstance(tool, Mapping):
        inner = tool.get("function") if tool.get("type") == "function" else None
        source: Mapping[str, Any] = inner if isinstance(inner, Mapping) else tool
        name, schema = source.get("name"), source.get("input_schema") or source.get("parameters")
    else:
        name, schema = getattr(tool, "name", None), getattr(tool, "input_schema", None)
    if isinstance(name, str) and isinstance(schema, Mapping):
        return name, schema
    return None


def validators_for(tools: object) -> dict[str, SchemaValidator]:
    """A validator per declared tool with a usable schema. A schema that is not valid JSON
    Schema gets none (the host will refuse or ignore it; a run is not failed over it here).

    Validators are remembered by (name, schema): checking a schema against its metaschema
    costs milliseconds, and a process runs many sessions with the same tools."""
    out: dict[str, SchemaValidator] = {}
    if not isinstance(tools, list | tuple):
        return out
    for tool in tools:
        found = declared_schema(tool)
        if found is None:
            continue
        try:
            key = json.dumps(found[1], sort_keys=True, default=repr)
        except (TypeError, ValueError):
            continue
        validator = _validator(found[0], key)
        if validator is not None:
            out[found[0]] = validator
    return out


@functools.lru_cache(maxsize=1024)
def _validator(name: str, schema_json: str) -> SchemaValidator | None:
    try:
        return SchemaValidator(name, json.loads(schema_json))
    except InvalidSchema:
        return None
