"""The AgentCore emulator's script: ``Frame``, the turn types and the frame and turn builders.

A turn is a list of ``Frame`` (nested lists are flattened) or a callable
``(SessionView, request_body) -> frames``; the builders make the event-stream frames
``InvokeHarness`` sends (``text_turn``, ``tool_turn``, ``stop_turn`` …, single frames such as
``message_start`` or ``metadata``, raw bytes and pauses). Not how a turn is played (``invoke``)
nor faults (``faults``).
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import attrs

from rma.wire.eventstream import encode_error, encode_event, encode_exception

JSONDict = dict[str, Any]

STOP_REASONS = frozenset(
    {
        "end_turn",
        "tool_use",
        "tool_result",
        "max_tokens",
        "stop_sequence",
        "content_filtered",
        "malformed_model_output",
        "malformed_tool_use",
        "interrupted",
        "partial_turn",
        "model_context_window_exceeded",
        "max_iterations_exceeded",
        "max_output_tokens_exceeded",
        "timeout_exceeded",
        "hook_stopped",
    }
)
"""botocore 1.44.5's ``HarnessStopReason`` enum."""
_HOOK_TYPES = frozenset({"before_tool_call", "after_tool_call", "before_invocation", "after_invocation"})

# --------------------------------------------------------------------------------------------
# Frames and script builders
# --------------------------------------------------------------------------------------------

FrameKind = Literal["event", "exception", "error", "raw", "pause"]


@attrs.frozen
class Frame:
    """One item of a scripted turn: an event-stream message, raw bytes, or a pause.

    ``kind`` "event" (``name`` is the ``:event-type``, ``payload`` its JSON), "exception"
    (``name`` is the ``:exception-type``), "error" (``name`` is the ``:error-code``,
    ``payload`` the ``:error-message``), "raw" (``data`` written as is) or "pause" (wait
    ``seconds``; nothing is written and it does not count as a frame for faults).
    """

    kind: FrameKind
    name: str = ""
    payload: Any = None
    data: bytes = b""
    seconds: float = 0.0

    def encode(self) -> bytes:
        """The bytes that go on the wire (empty for a pause)."""
        if self.kind == "event":
            return encode_event(self.name, self.payload)
        if self.kind == "exception":
            return encode_exception(self.name, self.payload)
        if self.kind == "error":
            return encode_error(self.name, str(self.payload or ""))
        if self.kind == "raw":
            return self.data
        return b""


FrameItem = Frame | Iterable[Any]
"""A ``Frame`` or a (nested) iterable of frames."""


@attrs.frozen
class SessionView:
    """A snapshot of one runtime session (what ``sessions`` returns and a callable turn sees)."""

    id: str
    messages: tuple[JSONDict, ...]
    """The conversation the service keeps. A callable turn sees it with this request's
    messages appended (what the model would see)."""
    received: tuple[JSONDict, ...]
    """Every message of every invoke that passed validation, in arrival order."""
    pending_tool_uses: tuple[JSONDict, ...]
    """``{toolUseId, name, input}`` of the tool uses the last turn stopped on (``tool_use``)."""
    turns_played: int
    """Scripted turns consumed; for a callable turn, the 0-based index of the turn being played."""
    invocations: int
    """``InvokeHarness`` requests for this session that passed validation."""
    commands: tuple[str, ...]
    """Commands run, as sent (before the mount rewrite)."""
    workdir: str | None
    """The commands' working directory (None until a command ran or ``storage_dir`` was called)."""
    storage_dir: str | None
    """The directory ``mount_path`` is rewritten to."""
    user_id: str | None
    """The last ``X-Amzn-Bedrock-AgentCore-Runtime-User-Id`` received."""
    stops: int = 0
    """``StopRuntimeSession`` requests served for this session (``AgentCoreEmulator.stops``)."""


TurnFunction = Callable[[SessionView, JSONDict], Iterable[FrameItem]]
Turn = Sequence[FrameItem] | TurnFunction
"""A list of frames (nested lists allowed) or a callable ``(session, request_body) -> frames``."""

_tool_ids = itertools.count(1)


def new_tool_use_id() -> str:
    """A fresh ``toolUseId`` shaped like Bedrock's (``tooluse_`` + 22 characters)."""
    return f"tooluse_emu{next(_tool_ids):019d}"


def frame(event_type: str, payload: Any) -> Frame:
    """Any event: ``:event-type`` = ``event_type``, payload = ``payload`` as JSON (bytes verbatim)."""
    return Frame("event", event_type, payload)


def stream_exception(exception_type: str, message: str, **fields: Any) -> Frame:
    """A scripted exception frame (``runtimeClientError``, ``validationException``, …):
    payload ``{"message": message, **fields}``."""
    return Frame("exception", exception_type, {"message": message, **fields})


def stream_error(code: str, message: str) -> Frame:
    """A scripted ``error`` frame (``:error-code`` / ``:error-message``, empty payload)."""
    return Frame("error", code, message)


def raw_frame(data: bytes) -> Frame:
    """Bytes written as they are (a hand-made or deliberately broken frame)."""
    return Frame("raw", data=bytes(data))


def pause(seconds: float) -> Frame:
    """Wait before the next frame (a slow model). Ends early when the emulator closes."""
    return Frame("pause", seconds=seconds)


def message_start(role: Literal["user", "assistant"] = "assistant") -> Frame:
    """``messageStart``."""
    return frame("messageStart", {"role": role})


def text_delta(text: str, *, index: int = 0) -> Frame:
    """``contentBlockDelta`` with a text piece (text blocks need no start event)."""
    return frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": text}})


def tool_use_start(
    tool_use_id: str,
    name: str,
    *,
    index: int,
    type: Literal["tool_use", "server_tool_use", "mcp_tool_use"] | None = "tool_use",
    server_name: str | None = None,
) -> Frame:
    """``contentBlockStart`` of a ``toolUse`` block (``type=None`` leaves the type out)."""
    tool_use: JSONDict = {"toolUseId": tool_use_id, "name": name}
    if type is not None:
        tool_use["type"] = type
    if server_name is not None:
        tool_use["serverName"] = server_name
    return frame("contentBlockStart", {"contentBlockIndex": index, "start": {"toolUse": tool_use}})


def tool_input_delta(fragment: str, *, index: int) -> Frame:
    """``contentBlockDelta`` carrying a piece of a tool's input JSON text."""
    return frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolUse": {"input": fragment}}})


def tool_result_start(
    tool_use_id: str, *, index: int, status: Literal["success", "error"] | None = None
) -> Frame:
    """``contentBlockStart`` of a ``toolResult`` block (a tool the harness ran itself)."""
    start: JSONDict = {"toolUseId": tool_use_id}
    if status is not None:
        start["status"] = status
    return frame("contentBlockStart", {"contentBlockIndex": index, "start": {"toolResult": start}})


def tool_result_delta(content: Sequence[Mapping[str, Any]], *, index: int) -> Frame:
    """``contentBlockDelta`` with ``toolResult`` items (``{"text": …}`` or ``{"json": …}``)."""
    items = [dict(item) for item in content]
    return frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {"toolResult": items}})


def block_stop(index: int) -> Frame:
    """``contentBlockStop``."""
    return frame("contentBlockStop", {"contentBlockIndex": index})


def message_stop(stop_reason: str) -> Frame:
    """``messageStop`` (any string: the builders that take a reason check it against the enum)."""
    return frame("messageStop", {"stopReason": stop_reason})


def metadata(usage: Mapping[str, Any] | None = None, *, latency_ms: int = 120) -> Frame:
    """``metadata``: ``usage`` merged over ``{inputTokens: 10, outputTokens: 5}``, with
    ``totalTokens`` their sum unless given, and ``metrics.latencyMs``."""
    merged: JSONDict = {"inputTokens": 10, "outputTokens": 5, **(usage or {})}
    merged.setdefault("totalTokens", int(merged["inputTokens"]) + int(merged["outputTokens"]))
    return frame("metadata", {"usage": merged, "metrics": {"latencyMs": latency_ms}})


def hook_event(
    name: str,
    type: str,
    *,
    decision: Literal["allow", "deny"] | None = None,
    reason: str | None = None,
    hook_event_id: str | None = None,
) -> Frame:
    """``hookEvent`` (``type``: before_tool_call, after_tool_call, before_invocation,
    after_invocation)."""
    if type not in _HOOK_TYPES:
        raise ValueError(f"unknown hook event type {type!r}; expected one of {sorted(_HOOK_TYPES)}")
    payload: JSONDict = {"hookEventId": hook_event_id or str(uuid.uuid4()), "name": name, "type": type}
    if decision is not None:
        payload["decision"] = decision
    if reason is not None:
        payload["reason"] = reason
    return frame("hookEvent", payload)


def reasoning(text: str, *, index: int = 0, signature: str | None = None, chunks: int = 2) -> list[Frame]:
    """A reasoning block: ``reasoningContent`` text deltas, an optional signature delta, a stop."""
    frames = [
        frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {"reasoningContent": {"text": p}}})
        for p in _split(text, chunks)
    ]
    if signature is not None:
        frames.append(
            frame(
                "contentBlockDelta",
                {"contentBlockIndex": index, "delta": {"reasoningContent": {"signature": signature}}},
            )
        )
    frames.append(block_stop(index))
    return frames


def _split(text: str, pieces: int) -> list[str]:
    if not text:
        return []
    pieces = max(1, min(pieces, len(text)))
    size = -(-len(text) // pieces)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _text_block(text: str | Sequence[str], chunks: int, index: int) -> list[Frame]:
    parts = _split(text, chunks) if isinstance(text, str) else [t for t in text if t]
    if not parts:
        return []
    return [*(text_delta(p, index=index) for p in parts), block_stop(index)]


def _check_reason(reason: str) -> str:
    if reason not in STOP_REASONS:
        raise ValueError(f"unknown stopReason {reason!r}; the model's enum is {sorted(STOP_REASONS)}")
    return reason


def text_turn(
    text: str | Sequence[str],
    *,
    usage: Mapping[str, Any] | None = None,
    chunks: int = 3,
    latency_ms: int = 120,
) -> list[Frame]:
    """A plain answer: messageStart, the text as ``chunks`` deltas (or the given pieces when
    ``text`` is a sequence), contentBlockStop, messageStop ``end_turn``, metadata."""
    return [
        message_start(),
        *_text_block(text, chunks, 0),
        message_stop("end_turn"),
        metadata(usage, latency_ms=latency_ms),
    ]


ToolCall = tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], str]


def _tool_block(
    call: ToolCall,
    index: int,
    fragments: int,
    *,
    type: Literal["tool_use", "server_tool_use", "mcp_tool_use"] | None = "tool_use",
    server_name: str | None = None,
) -> list[Frame]:
    name, tool_input = call[0], call[1]
    tool_use_id = call[2] if len(call) > 2 else new_tool_use_id()
    text = json.dumps(dict(tool_input), separators=(",", ":"))
    return [
        tool_use_start(tool_use_id, name, index=index, type=type, server_name=server_name),
        *(tool_input_delta(piece, index=index) for piece in _split(text, fragments)),
        block_stop(index),
    ]


def tool_turn(
    *calls: ToolCall,
    text: str | None = None,
    usage: Mapping[str, Any] | None = None,
    fragments: int = 3,
) -> list[Frame]:
    """A turn asking the client to run tools: messageStart, optional text at index 0, then per
    call (``(name, input)`` or ``(name, input, tool_use_id)``) a ``toolUse`` start with
    ``type: tool_use`` at its own index, the input JSON over ``fragments`` deltas and a
    stop; messageStop ``tool_use``, metadata."""
    frames = [message_start()]
    index = 0
    if text:
        frames += _text_block(text, 2, 0)
        index = 1
    for offset, call in enumerate(calls):
        frames += _tool_block(call, index + offset, fragments)
    return [*frames, message_stop("tool_use"), metadata(usage)]


def server_tool_turn(
    name: str,
    tool_input: Mapping[str, Any],
    result: str | Mapping[str, Any],
    *,
    text: str | None = "Done.",
    tool_use_id: str | None = None,
    server_name: str | None = None,
    type: Literal["server_tool_use", "mcp_tool_use"] = "server_tool_use",
    status: Literal["success", "error"] = "success",
    usage: Mapping[str, Any] | None = None,
) -> list[Frame]:
    """A tool the harness runs itself, then its answer: an assistant message with a
    ``server_tool_use`` block (messageStop ``tool_use``), a user message with the
    ``toolResult`` block (start, a ``text`` or ``json`` delta, stop; messageStop
    ``tool_result``), then the assistant's ``text`` (messageStop ``end_turn``) and metadata.
    ``text=None`` ends the turn after the result (stop ``tool_result``). This layout is an
    assumption (wire §11 open items)."""
    tool_use_id = tool_use_id or new_tool_use_id()
    item: JSONDict = {"text": result} if isinstance(result, str) else {"json": dict(result)}
    frames = [
        message_start(),
        *_tool_block((name, tool_input, tool_use_id), 0, 2, type=type, server_name=server_name),
        message_stop("tool_use"),
        message_start("user"),
        tool_result_start(tool_use_id, index=0, status=status),
        tool_result_delta([item], index=0),
        block_stop(0),
        message_stop("tool_result"),
    ]
    if text is not None:
        frames += [message_start(), *_text_block(text, 2, 0), message_stop("end_turn")]
    return [*frames, metadata(usage)]


def reused_index_tool_turn(
    *calls: ToolCall,
    indices: Sequence[int] | None = None,
    usage: Mapping[str, Any] | None = None,
    fragments: int = 2,
) -> list[Frame]:
    """B-22: several client tools started at the same ``contentBlockIndex`` (all at 0 unless
    ``indices`` says otherwise, e.g. ``(0, 0, 1)`` as observed live); each start is followed
    by its own input deltas and stop. messageStop ``tool_use``, metadata."""
    chosen = list(indices) if indices is not None else [0] * len(calls)
    if len(chosen) != len(calls):
        raise ValueError("indices must have one entry per call")
    frames = [message_start()]
    for call, index in zip(calls, chosen, strict=True):
        frames += _tool_block(call, index, fragments)
    return [*frames, message_stop("tool_use"), metadata(usage)]


def stop_turn(reason: str, *, text: str | None = None, usage: Mapping[str, Any] | None = None) -> list[Frame]:
    """A turn ending with any ``stopReason`` of the model's enum (``max_tokens``,
    ``max_iterations_exceeded``, ``hook_stopped`` …), with optional text."""
    body = _text_block(text, 2, 0) if text else []
    return [message_start(), *body, message_stop(_check_reason(reason)), metadata(usage)]


def _flatten(items: Iterable[Any]) -> Iterator[Frame]:
    for item in items:
        if isinstance(item, Frame):
            yield item
        elif isinstance(item, Iterable) and not isinstance(item, str | bytes | Mapping):
            yield from _flatten(item)
        else:
            raise TypeError(f"a scripted turn must yield Frame values, got {type(item).__name__}")
