"""The AgentCore emulator's input validation, with botocore's service models as the oracle.

An operation's input rebuilt from the query, headers, path labels and JSON body as botocore
would have built it, then checked with botocore's ``ParamValidator`` plus what it leaves out
(maximum lengths, full-match patterns, enums, ranges, booleans posing as numbers, nulls, the
command ``timeout`` range, a harness's lifecycle limits); a failure is the service's 400
``ValidationException`` with ``reason`` and ``fieldList``. Not the signature check (``sigv4``)
nor Bedrock's conversation rules (``conversation``).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping, Sized
from typing import Any

from rma_shell.testing._loopback import LoopbackHandler
from rma_shell.testing.agentcore._common import (
    _COMMAND_TIMEOUT_RANGE,
    _HARNESS_LIFECYCLE_MAX,
    _LIFECYCLE_SHAPE_MAX,
    SERVICE,
    JSONDict,
    _AwsError,
    _model,
)


def _params(
    operation: str,
    h: LoopbackHandler,
    query: list[tuple[str, str]],
    body: JSONDict,
    label: str | Mapping[str, str] | None,
    service: str = SERVICE,
) -> JSONDict:
    """The operation's input as botocore would have built it. ``label`` is the path label
    (a mapping by member name when the path has several); query strings are typed for
    integer and boolean members when they parse, so the validator judges the value."""
    shape = _model(service).operation_model(operation).input_shape
    params: JSONDict = {}
    payload_member = shape.serialization.get("payload")
    if payload_member:
        params[payload_member] = body
    else:
        params.update(body)
    query_map: dict[str, str] = {}
    for key, value in query:
        query_map.setdefault(key, value)
    for name, member in shape.members.items():
        location = member.serialization.get("location")
        wire_name = member.serialization.get("name", name)
        if location == "header" and h.headers.get(wire_name) is not None:
            params[name] = h.headers.get(wire_name)
        elif location == "querystring" and wire_name in query_map:
            params[name] = _typed_query(query_map[wire_name], member.type_name)
        elif location == "uri" and isinstance(label, str):
            params[name] = label
        elif location == "uri" and label is not None and name in label:
            params[name] = label[name]
    return params


def _validate(operation: str, params: JSONDict, service: str = SERVICE) -> None:
    from botocore.validate import ParamValidator  # type: ignore[import-untyped]

    shape = _model(service).operation_model(operation).input_shape
    payload_member = shape.serialization.get("payload")
    problems: list[tuple[str, str]] = []
    _constraints(params, shape, "", problems)
    report = ParamValidator().validate(params, shape)
    for reason, name, extra in getattr(report, "_errors", []):
        if reason in ("invalid length", "invalid range"):
            continue  # reported by _constraints, with the max side too
        if reason == "invalid type" and extra.get("param") is None:
            continue  # a null: reported by _constraints
        path = _dotted(name)
        if reason == "missing required field":
            path = f"{path}.{extra['required_name']}" if path else extra["required_name"]
            problems.append(
                (path, f"Value null at '{path}' failed to satisfy constraint: Member must not be null")
            )
        else:
            problems.append((path or "input", report._format_error((reason, name, extra))))
    if operation == "InvokeAgentRuntimeCommand":
        timeout = (params.get("body") or {}).get("timeout") if isinstance(params.get("body"), dict) else None
        low, high = _COMMAND_TIMEOUT_RANGE
        if isinstance(timeout, int) and not isinstance(timeout, bool) and not low <= timeout <= high:
            side = f"greater than or equal to {low}" if timeout < low else f"less than or equal to {high}"
            problems.append(
                (
                    "body.timeout",
                    f"Value '{timeout}' at 'body.timeout' failed to satisfy constraint: "
                    f"Member must have value {side}",
                )
            )
    if operation in ("CreateHarness", "UpdateHarness"):
        problems.extend(_harness_lifecycle_problems(params))
    if not problems:
        return
    if payload_member:
        prefix = f"{payload_member}."
        problems = [
            (name.removeprefix(prefix), message.replace(f"'{prefix}", "'")) for name, message in problems
        ]
    count = len(problems)
    summary = f"{count} validation error{'s' if count > 1 else ''} detected: " + "; ".join(
        m for _, m in problems
    )
    raise _AwsError(
        400,
        "ValidationException",
        summary,
        reason="FieldValidationFailed",
        fieldList=[{"name": name, "message": message} for name, message in problems],
    )


def _json_object(raw: bytes) -> JSONDict:
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise _AwsError(
            400,
            "ValidationException",
            f"Could not parse the request body as JSON: {exc}",
            reason="CannotParse",
        ) from None
    if not isinstance(body, dict):
        raise _AwsError(
            400, "ValidationException", "The request body must be a JSON object.", reason="CannotParse"
        )
    return body


def _dotted(name: str) -> str:
    return re.sub(r"\[(\d+)\]", r".\1", name.lstrip("."))


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _constraints(value: Any, shape: Any, path: str, problems: list[tuple[str, str]]) -> None:
    where = path or "input"
    if value is None:
        problems.append(
            (where, f"Value null at '{where}' failed to satisfy constraint: Member must not be null")
        )
        return
    meta = shape.metadata
    kind = shape.type_name

    def fail(constraint: str) -> None:
        problems.append(
            (where, f"Value '{_show(value)}' at '{where}' failed to satisfy constraint: {constraint}")
        )

    if kind == "structure":
        if getattr(shape, "is_document_type", False) or not isinstance(value, dict):
            return
        for name, member in shape.members.items():
            if name in value:
                _constraints(value[name], member, f"{path}.{name}" if path else name, problems)
    elif kind == "list" and isinstance(value, list):
        for i, item in enumerate(value):
            _constraints(item, shape.member, f"{where}.{i}", problems)
        _length(value, meta, fail)
    elif kind == "map" and isinstance(value, dict):
        for key, item in value.items():
            _constraints(item, shape.value, f"{where}.{key}", problems)
        _length(value, meta, fail)
    elif kind == "string" and isinstance(value, str):
        _length(value, meta, fail)
        if "pattern" in meta and re.fullmatch(meta["pattern"], value) is None:
            fail(f"Member must satisfy regular expression pattern: {meta['pattern']}")
        if shape.enum and value not in shape.enum:
            fail(f"Member must satisfy enum value set: [{', '.join(shape.enum)}]")
    elif kind in ("integer", "long", "float", "double"):
        if isinstance(value, bool):
            problems.append(
                (where, f"Value '{value}' at '{where}' failed to satisfy constraint: Member must be a number")
            )
            return
        if not isinstance(value, int | float):
            return
        if "min" in meta and value < meta["min"]:
            fail(f"Member must have value greater than or equal to {meta['min']}")
        if "max" in meta and value > meta["max"]:
            fail(f"Member must have value less than or equal to {meta['max']}")
    elif kind == "blob" and isinstance(value, str):
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            fail("Member must be valid base64")


def _length(value: Sized, meta: Mapping[str, Any], fail: Callable[[str], None]) -> None:
    if "min" in meta and len(value) < meta["min"]:
        fail(f"Member must have length greater than or equal to {meta['min']}")
    if "max" in meta and len(value) > meta["max"]:
        fail(f"Member must have length less than or equal to {meta['max']}")


def _typed_query(value: str, type_name: str) -> Any:
    """A query-string value as the member's type, when it parses (else left for the validator)."""
    if type_name in ("integer", "long") and re.fullmatch(r"-?[0-9]+", value):
        return int(value)
    if type_name == "boolean" and value in ("true", "false"):
        return value == "true"
    return value


def _harness_lifecycle_problems(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The harness's own lifecycle limits (wire §8.2): each value 60–28800 s, idle <= max
    (the shape itself allows up to 1209600)."""
    environment = params.get("environment")
    runtime = environment.get("agentCoreRuntimeEnvironment") if isinstance(environment, dict) else None
    lifecycle = runtime.get("lifecycleConfiguration") if isinstance(runtime, dict) else None
    if not isinstance(lifecycle, dict):
        return []
    base = "environment.agentCoreRuntimeEnvironment.lifecycleConfiguration"
    problems: list[tuple[str, str]] = []
    values: dict[str, int] = {}
    for key in ("idleRuntimeSessionTimeout", "maxLifetime"):
        value = lifecycle.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        values[key] = value
        if _HARNESS_LIFECYCLE_MAX < value <= _LIFECYCLE_SHAPE_MAX:
            problems.append(
                (
                    f"{base}.{key}",
                    f"Value '{value}' at '{base}.{key}' failed to satisfy constraint: Member must have value "
                    f"less than or equal to {_HARNESS_LIFECYCLE_MAX}",
                )
            )
    idle, most = values.get("idleRuntimeSessionTimeout"), values.get("maxLifetime", _HARNESS_LIFECYCLE_MAX)
    if idle is not None and idle > most and not problems:
        problems.append(
            (
                f"{base}.idleRuntimeSessionTimeout",
                f"Value '{idle}' at '{base}.idleRuntimeSessionTimeout' failed to satisfy constraint: Member "
                f"must have value less than or equal to maxLifetime ({most})",
            )
        )
    return problems
