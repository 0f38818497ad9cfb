"""Pure helpers for the OpenAI chat-completions wire: request bodies and stream assembly.

- ``tool_declaration`` turns a tool spec into the ``{"type": "function", ...}`` shape (L-5).
- ``build_request_body`` builds a request body as a dict; ``RequestTemplate`` builds the
  same body as bytes from messages that were JSON-encoded once, when they were added to a
  conversation, so a long history is never re-encoded on every call.
- ``ChunkAssembler`` folds streamed ``chat.completion.chunk`` objects into the shape of a
  non-streamed ``chat.completion`` response.

Malformed input never raises out of here: it comes back as ``Failure`` carrying
``rma.errors.MalformedResponse`` (or ``ProviderError`` for an error object the server put
in the stream). This module does no I/O and knows nothing about a conversation's rules.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
from returns.result import Failure, Result, Success

from rma.errors import MalformedResponse, ProviderError, SessionError
from rma.vocabulary import JSON

RESERVED_BODY_KEYS = frozenset({"model", "messages", "tools", "stream", "stream_options"})
"""Body keys the request builders own; extra params may not set them."""


def encode_json(value: JSON) -> bytes:
    """Compact, strict JSON (no NaN) as ASCII bytes.

    ASCII escapes keep any string — even one holding a lone surrogate a model produced —
    encodable; the wire is JSON, so the escapes are lossless.
    """
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


def tool_declaration(
    name: str, description: str | None = None, input_schema: JSON = None, *, strict: bool | None = None
) -> JSON:
    """A function-tool declaration: description defaults to "", parameters to an object (L-5).

    ``strict`` (when given) is the API's own flag: servers hold a call's arguments to the
    schema only for strict tools.
    """
    function: dict[str, JSON] = {
        "name": name,
        "description": description or "",
        "parameters": input_schema or {"type": "object"},
    }
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


def build_request_body(
    model: str | None,
    messages: Sequence[JSON],
    tools: Sequence[JSON] = (),
    *,
    stream: bool = False,
    params: Mapping[str, JSON] | None = None,
) -> dict[str, JSON]:
    """A chat-completions request body. ``model`` None leaves the key out (a gateway picks).

    ``tools`` are declarations (see ``tool_declaration``); an empty list is left out, since
    some servers reject ``"tools": []``. Streaming asks for usage in the final chunk.
    ``params`` (temperature, max_tokens, …) pass through; reserved keys are ignored.
    """
    body: dict[str, JSON] = {}
    if model is not None:
        body["model"] = model
    body["messages"] = list(messages)
    if tools:
        body["tools"] = list(tools)
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    for key, value in (params or {}).items():
        if key not in RESERVED_BODY_KEYS:
            body[key] = value
    return body


@attrs.frozen
class RequestTemplate:
    """The fixed parts of a request body, pre-encoded; messages are spliced in as bytes.

    ``body_bytes(encoded_messages, stream=s)`` decodes to exactly
    ``build_request_body(model, messages, tools, stream=s, params=params)``.
    """

    head: bytes
    """``{"model":…,"messages":[``"""
    tools: bytes
    """``],"tools":[…]`` (or just ``]``)."""
    params: bytes
    """``,"temperature":…`` — the pass-through params, after the stream flag."""

    @classmethod
    def build(
        cls, model: str | None, tools: Sequence[JSON] = (), params: Mapping[str, JSON] | None = None
    ) -> RequestTemplate:
        head = b"{"
        if model is not None:
            head += b'"model":' + encode_json(model) + b","
        head += b'"messages":['
        tools_part = b"]"
        if tools:
            tools_part += b',"tools":' + encode_json(list(tools))
        extras = b"".join(
            b"," + encode_json(k) + b":" + encode_json(v)
            for k, v in (params or {}).items()
            if k not in RESERVED_BODY_KEYS
        )
        return cls(head=head, tools=tools_part, params=extras)

    def body_bytes(self, encoded_messages: Iterable[bytes], *, stream: bool) -> bytes:
        flag = b',"stream":true,"stream_options":{"include_usage":true}' if stream else b',"stream":false'
        return b"".join((self.head, b",".join(encoded_messages), self.tools, flag, self.params, b"}"))


# --- stream assembly -------------------------------------------------------------------


def _malformed(detail: str, response: JSON) -> Failure[SessionError]:
    return Failure(MalformedResponse(detail=detail, response=response))


def error_from_body(body: JSON) -> SessionError | None:
    """A ``ProviderError`` for an OpenAI-shaped ``{"error": {...}}`` body, else None."""
    if not isinstance(body, Mapping) or "error" not in body or "choices" in body:
        return None
    err = body["error"]
    if isinstance(err, Mapping):
        message = err.get("message")
        kind = err.get("type") or err.get("code")
        return ProviderError(
            detail=str(message) if message is not None else json.dumps(err, default=str),
            error_type=str(kind) if kind is not None else None,
            payload=body,
        )
    return ProviderError(detail=str(err), payload=body)


class _ToolCallSlot:
    __slots__ = ("arguments", "extra", "id", "name", "type")

    def __init__(self) -> None:
        self.id: str | None = None
        self.type: str = "function"
        self.name: str | None = None
        self.arguments: list[str] = []
        self.extra: dict[str, Any] = {}


class ChunkAssembler:
    """Folds ``chat.completion.chunk`` objects into one ``chat.completion``-shaped dict.

    Only choice 0 is assembled (the Local provider never asks for ``n > 1``; L-8 reads the
    first choice). String fields of the delta (``content``, ``refusal``,
    ``reasoning_content``, …) are concatenated; tool-call fragments are keyed by their
    ``index`` — ``id`` and ``name`` arrive once, ``arguments`` in pieces. A fragment with
    a *different* id at an index already holding one starts a new call (some servers
    number every call 0). Fragments are collected in lists and joined once in
    ``finish``, so each chunk costs O(its own size).

    ``feed`` returns the chunk's content delta (possibly ""), or a Failure; after a
    Failure the assembler should be dropped.
    """

    def __init__(self) -> None:
        self._meta: dict[str, JSON] = {}
        self._role: str | None = None
        self._strings: dict[str, list[str]] = {}
        self._other: dict[str, JSON] = {}
        self._slots: list[_ToolCallSlot] = []
        self._slot_by_index: dict[int, int] = {}
        self._finish_reason: str | None = None
        self._usage: JSON = None
        self._saw_choice = False
        self._chunks = 0
        self._fragments: list[tuple[int, str]] = []

    @property
    def chunks(self) -> int:
        return self._chunks

    @property
    def finish_reason(self) -> str | None:
        return self._finish_reason

    @property
    def fragments(self) -> tuple[tuple[int, str], ...]:
        """The tool-call fragments of the chunk fed last: (call position, arguments text), the
        position being the call's place in the assembled ``tool_calls``."""
        return tuple(self._fragments)

    def call(self, position: int) -> tuple[str | None, str | None]:
        """The (id, name) the call at ``position`` holds so far."""
        slot = self._slots[position]
        return slot.id, slot.name

    def feed(self, chunk: JSON) -> Result[str, SessionError]:
        self._chunks += 1
        if self._fragments:
            self._fragments = []
        if not isinstance(chunk, Mapping):
            return _malformed("stream chunk is not a JSON object", chunk)
        error = error_from_body(chunk)
        if error is not None:
            return Failure(error)
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return _malformed("stream chunk has no 'choices' list", chunk)
        for key in ("id", "model", "created", "system_fingerprint"):
            if key not in self._meta and chunk.get(key) is not None:
                self._meta[key] = chunk[key]
        usage = chunk.get("usage")
        if usage is not None:
            if not isinstance(usage, Mapping):
                return _malformed("stream chunk 'usage' is not an object", chunk)
            self._usage = dict(usage)
        content = ""
        for choice in choices:
            if not isinstance(choice, Mapping):
                return _malformed("stream chunk choice is not an object", chunk)
            index = choice.get("index", 0)
            if not isinstance(index, int) or isinstance(index, bool):
                return _malformed("stream chunk choice 'index' is not an integer", chunk)
            if index != 0:
                continue
            self._saw_choice = True
            result = self._feed_choice(choice, chunk)
            if isinstance(result, Failure):
                return result
            content = result.unwrap()
        return Success(content)

    def _feed_choice(self, choice: Mapping[str, JSON], chunk: JSON) -> Result[str, SessionError]:
        finish = choice.get("finish_reason")
        if finish is not None:
            if not isinstance(finish, str):
                return _malformed("stream chunk 'finish_reason' is not a string", chunk)
            self._finish_reason = finish
        delta = choice.get("delta")
        if delta is None:
            return Success("")
        if not isinstance(delta, Mapping):
            return _malformed("stream chunk 'delta' is not an object", chunk)
        content = ""
        for key, value in delta.items():
            if key == "role":
                if value is not None:
                    if not isinstance(value, str):
                        return _malformed("stream chunk 'role' is not a string", chunk)
                    self._role = self._role or value
            elif key == "tool_calls":
                if value is None:
                    continue
                if not isinstance(value, list):
                    return _malformed("stream chunk 'tool_calls' is not a list", chunk)
                for fragment in value:
                    failure = self._feed_tool_call(fragment, chunk)
                    if failure is not None:
                        return failure
            elif isinstance(value, str):
                self._strings.setdefault(key, []).append(value)
                if key == "content":
                    content = value
            elif value is not None:
                self._other[key] = value
        return Success(content)

    def _feed_tool_call(self, fragment: JSON, chunk: JSON) -> Failure[SessionError] | None:
        if not isinstance(fragment, Mapping):
            return _malformed("tool_calls fragment is not an object", chunk)
        index = fragment.get("index")
        frag_id = fragment.get("id")
        if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
            return _malformed("tool_calls fragment 'index' is not an integer", chunk)
        if frag_id is not None and not isinstance(frag_id, str):
            return _malformed("tool_calls fragment 'id' is not a string", chunk)
        function = fragment.get("function")
        if function is not None and not isinstance(function, Mapping):
            return _malformed("tool_calls fragment 'function' is not an object", chunk)
        position, slot = self._slot_for(index, frag_id or None)
        if frag_id and slot.id is None:
            slot.id = frag_id
        kind = fragment.get("type")
        if isinstance(kind, str) and kind:
            slot.type = kind
        for key, value in fragment.items():
            if key not in ("index", "id", "type", "function") and value is not None:
                slot.extra[key] = value
        if function is None:
            self._fragments.append((position, ""))
            return None
        name = function.get("name")
        if name is not None:
            if not isinstance(name, str):
                return _malformed("tool_calls fragment 'name' is not a string", chunk)
            # First non-empty name wins: servers that repeat the name on every fragment
            # must not produce "get_weatherget_weather".
            if name and not slot.name:
                slot.name = name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            piece = arguments
        elif isinstance(arguments, Mapping):
            # Some servers send the decoded object instead of a JSON string.
            piece = json.dumps(arguments, separators=(",", ":"))
        elif arguments is not None:
            return _malformed("tool_calls fragment 'arguments' is not a string", chunk)
        else:
            piece = ""
        if piece:
            slot.arguments.append(piece)
        self._fragments.append((position, piece))
        return None

    def _slot_for(self, index: int | None, frag_id: str | None) -> tuple[int, _ToolCallSlot]:
        if index is None:
            # No index: find the call by id, else continue the last call (or start one).
            if frag_id is not None:
                for position, slot in enumerate(self._slots):
                    if slot.id == frag_id:
                        return position, slot
                return self._new_slot(None)
            return (len(self._slots) - 1, self._slots[-1]) if self._slots else self._new_slot(None)
        at = self._slot_by_index.get(index)
        if at is None:
            return self._new_slot(index)
        slot = self._slots[at]
        if frag_id is not None and slot.id is not None and frag_id != slot.id:
            return self._new_slot(index)
        return at, slot

    def _new_slot(self, index: int | None) -> tuple[int, _ToolCallSlot]:
        slot = _ToolCallSlot()
        self._slots.append(slot)
        position = len(self._slots) - 1
        if index is not None:
            self._slot_by_index[index] = position
        return position, slot

    def finish(self) -> Result[dict[str, JSON], SessionError]:
        """The assembled response. Fails when no choice or no finish_reason ever arrived."""
        if not self._saw_choice:
            return _malformed("stream carried no choice", self._summary())
        if self._finish_reason is None:
            return _malformed("stream ended without a finish_reason", self._summary())
        message: dict[str, JSON] = {"role": self._role or "assistant"}
        strings = {key: "".join(parts) for key, parts in self._strings.items()}
        message["content"] = strings.pop("content", None)
        message.update(strings)
        message.update(self._other)
        if self._slots:
            message["tool_calls"] = [
                {
                    **slot.extra,
                    "id": slot.id,
                    "type": slot.type,
                    "function": {"name": slot.name or "", "arguments": "".join(slot.arguments)},
                }
                for slot in self._slots
            ]
        response: dict[str, JSON] = {
            "id": self._meta.get("id"),
            "object": "chat.completion",
            "created": self._meta.get("created"),
            "model": self._meta.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish_reason}],
            "usage": self._usage,
        }
        if "system_fingerprint" in self._meta:
            response["system_fingerprint"] = self._meta["system_fingerprint"]
        return Success(response)

    def _summary(self) -> JSON:
        return {"chunks": self._chunks, **self._meta}
