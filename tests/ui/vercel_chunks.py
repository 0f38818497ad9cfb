"""JSON schemas of the Vercel AI SDK's UI message stream parts, written from the SDK's own
zod schema (``uiMessageChunkSchema``, packages/ai/src/ui-message-stream/ui-message-chunks.ts,
vercel/ai at 014f4437a9faabe3e62741158a43534ebb93cd7a — ai 6): one strict object per part type
(``z.strictObject``: no other keys), required and optional fields as there. There is no Python
validator of the protocol; these are the oracle the adapter's parts are checked against."""

from __future__ import annotations

from typing import Any

import jsonschema

STRING = {"type": "string"}
BOOLEAN = {"type": "boolean"}
ANY: dict[str, Any] = {}
PROVIDER_METADATA = {"type": "object", "additionalProperties": {"type": "object"}}
META = {"type": "object"}

FINISH_REASONS = ["stop", "length", "content-filter", "tool-calls", "error", "other"]


def strict(kind: str, required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    properties = {"type": {"const": kind}, **required, **(optional or {})}
    return {
        "type": "object",
        "properties": properties,
        "required": ["type", *required],
        "additionalProperties": False,
    }


# z.unknown() accepts a missing key too: such fields are listed as optional.
SCHEMAS: dict[str, dict[str, Any]] = {
    "text-start": strict("text-start", {"id": STRING}, {"providerMetadata": PROVIDER_METADATA}),
    "text-delta": strict(
        "text-delta", {"id": STRING, "delta": STRING}, {"providerMetadata": PROVIDER_METADATA}
    ),
    "text-end": strict("text-end", {"id": STRING}, {"providerMetadata": PROVIDER_METADATA}),
    "error": strict("error", {"errorText": STRING}),
    "tool-input-start": strict(
        "tool-input-start",
        {"toolCallId": STRING, "toolName": STRING},
        {
            "providerExecuted": BOOLEAN,
            "providerMetadata": PROVIDER_METADATA,
            "dynamic": BOOLEAN,
            "title": STRING,
            "_meta": META,
        },
    ),
    "tool-input-delta": strict("tool-input-delta", {"toolCallId": STRING, "inputTextDelta": STRING}),
    "tool-input-available": strict(
        "tool-input-available",
        {"toolCallId": STRING, "toolName": STRING},
        {
            "input": ANY,
            "providerExecuted": BOOLEAN,
            "providerMetadata": PROVIDER_METADATA,
            "dynamic": BOOLEAN,
            "title": STRING,
            "_meta": META,
        },
    ),
    "tool-input-error": strict(
        "tool-input-error",
        {"toolCallId": STRING, "toolName": STRING, "errorText": STRING},
        {
            "input": ANY,
            "providerExecuted": BOOLEAN,
            "providerMetadata": PROVIDER_METADATA,
            "dynamic": BOOLEAN,
            "title": STRING,
        },
    ),
    "tool-approval-request": strict("tool-approval-request", {"approvalId": STRING, "toolCallId": STRING}),
    "tool-output-available": strict(
        "tool-output-available",
        {"toolCallId": STRING},
        {"output": ANY, "providerExecuted": BOOLEAN, "dynamic": BOOLEAN, "preliminary": BOOLEAN},
    ),
    "tool-output-error": strict(
        "tool-output-error",
        {"toolCallId": STRING, "errorText": STRING},
        {"providerExecuted": BOOLEAN, "dynamic": BOOLEAN},
    ),
    "tool-output-denied": strict("tool-output-denied", {"toolCallId": STRING}),
    "start-step": strict("start-step", {}),
    "finish-step": strict("finish-step", {}),
    "start": strict("start", {}, {"messageId": STRING, "messageMetadata": ANY}),
    "finish": strict("finish", {}, {"finishReason": {"enum": FINISH_REASONS}, "messageMetadata": ANY}),
    "abort": strict("abort", {}, {"reason": STRING}),
    "message-metadata": strict("message-metadata", {"messageMetadata": ANY}),
}

DATA_PART = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "pattern": "^data-"},
        "id": STRING,
        "data": ANY,
        "transient": BOOLEAN,
    },
    "required": ["type"],
    "additionalProperties": False,
}


def validate_part(part: Any) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``part`` is a UI message stream part."""
    assert isinstance(part, dict) and isinstance(part.get("type"), str), part
    kind = part["type"]
    schema = DATA_PART if kind.startswith("data-") else SCHEMAS.get(kind)
    assert schema is not None, f"not a UI message stream part type: {kind!r}"
    jsonschema.validate(part, schema)
