"""A loopback Bedrock AgentCore: the data plane (``InvokeHarness``, ``InvokeAgentRuntimeCommand``)
and the control plane's harness and endpoint operations, on one loopback server.

``AgentCoreEmulator`` runs a real HTTP/1.1 server on 127.0.0.1 (an OS-chosen port) in
background threads and speaks the wire of botocore 1.44.5's ``bedrock-agentcore`` model, so
any client — boto3, raw httpx with a SigV4 signer, rma's provider — talks to it over its
ordinary HTTP stack::

    with AgentCoreEmulator(script=[tool_turn(("lookup", {"id": "c9"})), text_turn("Done.")]) as emu:
        client = boto3.client(
            "bedrock-agentcore", endpoint_url=emu.base_url, region_name=emu.region,
            aws_access_key_id=emu.access_key_id, aws_secret_access_key=emu.secret_access_key,
        )
        reply = client.invoke_harness(harnessArn=emu.harness_arn, runtimeSessionId=sid, messages=[...])
        for event in reply["stream"]: ...

It is as strict as the service on what clients get wrong, and stricter where the service's
behaviour is unknown. What it checks, in order, on every request:

1. **SigV4**, recomputed with botocore's ``SigV4Auth`` over what arrived: the method, the
   ``Host`` header, the raw path and query (so the path label of the command operation is
   checked double-encoded, as botocore signs it), exactly the headers named in
   ``SignedHeaders`` and the body bytes, at the time of ``X-Amz-Date``. Failures are 403s
   with the service's codes: ``MissingAuthenticationTokenException`` (no Authorization),
   ``IncompleteSignatureException`` (a malformed one, no ``X-Amz-Date``, ``host`` not
   signed; stricter than AWS may be: an ``X-Amz-Date`` or ``X-Amz-Security-Token`` sent
   but not signed), ``UnrecognizedClientException`` (unknown access key, or a session token that
   is missing, unexpected or wrong), ``InvalidSignatureException`` (a credential scope for
   another date, region or service; ``X-Amz-Date`` more than 5 minutes from the emulator's
   clock — "Signature expired: …" / "Signature not yet current: …"; an
   ``x-amz-content-sha256`` that is not the body's hash; or a signature mismatch, whose
   message carries the canonical request and string to sign the emulator computed).
2. **The body's media type**: a body must be ``Content-Type: application/json`` (else 415
   ``UnsupportedMediaTypeException``; an emulator strictness, botocore always sends it).
3. **The operation's input**, rebuilt from the query, headers, path label and JSON body and
   checked with botocore's ``ParamValidator`` (types, required members, unknown members,
   unions) plus what that validator leaves out: maximum lengths, patterns (full match),
   enums, numeric ranges, booleans posing as integers, ``null`` anywhere (rejected, even for
   optional members) and the documented command ``timeout`` range 1–3600. A failure is a
   400 ``ValidationException`` in the service's wording ("1 validation error detected:
   Value … at 'runtimeSessionId' failed to satisfy constraint: …") with ``reason``
   (``FieldValidationFailed``; ``CannotParse`` for a body that is not a JSON object) and
   ``fieldList``.
4. **The target**: the harness ARN (and ``qualifier``, an endpoint name; ``DEFAULT`` when
   absent) must exist, else a 404 ``ResourceNotFoundException``; the harness and that
   endpoint must be READY or UPDATING, else a 400 ``ValidationException`` with reason
   ``ResourceConflict`` (see the control plane below). The command operation accepts the
   harness ARN, the runtime ARN behind it, or either id (with ``accountId`` when given).

Error responses are what the service sends: the status, ``x-amzn-ErrorType: <Code>``,
``x-amzn-RequestId`` and a JSON body ``{"message": …}`` (plus ``reason``/``fieldList``).

**InvokeHarness** answers 200 ``application/vnd.amazon.eventstream``, chunked, one frame per
HTTP chunk, each written (and flushed) as the scripted turn produces it. The runtime
session keeps the conversation (wire §5.3, B-6): the messages the client sent and the
assistant messages the turns produced — except an assistant turn that stopped with
``tool_use``, which the harness does not persist. The next invoke must then carry the
assistant ``toolUse`` echo (the same ids, names and inputs — the emulator checks this
exactly) followed by the user ``toolResult`` blocks matched by id. The conversation rules
Bedrock applies are checked over the whole conversation (stored + new), and a violation is
answered as the live service does: 200 with one ``runtimeClientError`` exception frame
carrying Bedrock's ``ValidationException`` text, e.g. "An error occurred
(ValidationException) when calling the ConverseStream operation: The number of toolResult
blocks at messages.1.content exceeds the number of toolUse blocks of previous turn."
(``messages.N`` counts the whole conversation). Rules: no empty ``content``; no duplicate
ids in one message ("duplicate Ids at messages.N.content"); no more results than the
previous assistant message's tool uses; every tool use answered in the next message
("Expected toolResult blocks at messages.N.content for the following Ids: …"); roles start
with ``user``, alternate and end with ``user``. Two invokes on one session at once get a 424
``RuntimeClientError`` (the emulator plays one turn at a time per session). Whatever a turn
changes in the session (conversation, pending tool uses, script position, the busy mark) is
settled before the client can see the stream end, so a client may invoke again at once.

**The script** is a list of turns; every runtime session plays it from its first turn
(``script_session`` gives one session its own). A turn is a list of ``Frame`` (nested lists
are flattened) or a callable ``(SessionView, request_body) -> frames`` — a generator is
consumed lazily, so its frames go out as it yields them. Builders: ``text_turn``,
``tool_turn``, ``server_tool_turn``, ``reused_index_tool_turn``, ``stop_turn`` and the
single frames ``message_start``, ``text_delta``, ``tool_use_start``, ``tool_input_delta``,
``tool_result_start``, ``tool_result_delta``, ``block_stop``, ``message_stop``,
``metadata``, ``hook_event``, ``reasoning``, ``frame`` (any event), ``stream_exception``,
``stream_error``, ``raw_frame`` and ``pause``. Whole-turn builders end with ``messageStop``
then ``metadata`` (usage with input/output/total tokens and ``metrics.latencyMs``); raw
frames go out exactly as given. A turn is consumed only when all its frames were delivered
to a client still connected and no fault fired; the conversation changes only if the turn
also ended with a ``messageStop`` and no exception or error frame. So a faulted or failed
invoke can be retried with the same messages (an invoke refused by the conversation rules
consumes neither a turn nor a stream fault). A session past the end of its script gets a
400 ``EmulatorScriptExhausted`` saying so.

How a server-side tool looks on the stream is not documented (wire §11, open items); the
emulator's ``server_tool_turn`` shape is an assumption: an assistant message with a
``server_tool_use`` block stopping with ``tool_use``, a ``user`` message with the
``toolResult`` block stopping with ``tool_result``, then the assistant's answer.

**InvokeAgentRuntimeCommand** (``POST /runtimes/{agentRuntimeArn}/commands``) really runs
the command: ``/bin/sh -c <command>`` in a subprocess (its own process group, a minimal
environment: ``PATH``, ``HOME``, ``LANG``) whose working directory is a temporary directory
of the runtime session. Every literal occurrence of ``mount_path`` (default ``/mnt/data``)
in the command is rewritten to that session's storage directory: this emulates the
harness's ``sessionStorage`` mount, which persists for the session across commands (see
``storage_dir``). stdout and stderr stream as they are produced, as ``chunk`` events:
``{"contentStart": {}}``, ``{"contentDelta": {"stdout"|"stderr": …}}``, ``{"contentStop":
{"exitCode": N, "status": "COMPLETED"}}`` (a signal death reports 128 + the signal). Past
``timeout`` (default 300 s) the process group is killed and the stop says ``"TIMED_OUT"``
with exit code -1. A client that goes away, or the emulator closing, kills the command
too. A missing session header starts a fresh session (botocore always fills one in).
Every directory is removed on ``close``.

**Faults** (``faults=`` or ``inject``; global or for one session; each for ``times``
requests; ``operation`` narrows them to ``"InvokeHarness"``, ``"InvokeAgentRuntimeCommand"``
or a control operation — there only the status faults apply): ``throttle_once`` (429 ``ThrottlingException``),
``server_error_once`` (``InternalServerException``), ``error_once`` (any status and code),
and, inside a 200 stream after ``n`` frames: ``drop_after`` (close the connection),
``truncate_frame_after`` (half a frame, then close), ``bad_crc_after`` (that frame with a
corrupted message CRC, the stream then goes on), ``exception_frame`` (an exception frame,
then the stream ends cleanly) and ``stall`` (silence for a while, then the stream goes on;
it never holds up ``close``). A stream fault asked for past the last frame happens at the
end of the stream (truncate and bad CRC then use a filler event). Note that
``throttlingException`` is not a member of the ``InvokeHarness`` stream union: botocore
raises ``EventStreamError`` with an empty code for it there.

**The control plane** (botocore's ``bedrock-agentcore-control`` 2023-06-05) is served on the
same ``base_url`` (AWS uses another host; both sign as ``bedrock-agentcore``): CreateHarness
(201), GetHarness, ListHarnesses, UpdateHarness, DeleteHarness, CreateHarnessEndpoint (201),
GetHarnessEndpoint, ListHarnessEndpoints, DeleteHarnessEndpoint; any other path is a 404
``UnknownOperationException``. Requests pass the same checks 1–3 (query strings are typed
for integer and boolean members first) plus the harness's own lifecycle limits (each value
60–28800 s, idle <= maxLifetime), and errors have the same form. Answers follow the model's
output shapes: ``{"harness": Harness}`` with ``environment.agentCoreRuntimeEnvironment``
(runtime ARN, name, id, lifecycle and network configuration), emulator defaults for what
the request left out (model ``global.anthropic.claude-sonnet-4-6`` on Bedrock, ``allowedTools``
``["*"]``, truncation ``sliding_window``, PUBLIC network, 900/28800 s), ISO-8601 timestamps.
Its state and test controls are ``emu.control`` (a ``ControlPlane``).

Lifecycles run on ``lifecycle_clock`` (seconds; default ``time.monotonic``; a trio
``MockClock`` works: ``lambda: mock_clock.current_time()``), and every status is computed from
it when asked — no background thread. A new harness is CREATING for ``ready_after_s``, then
READY. Its ``DEFAULT`` endpoint does not exist (GetHarnessEndpoint 404) until
``endpoint_appear_after_s`` after the harness is READY, is CREATING until
``endpoint_ready_after_s`` after the harness is READY, then READY. UpdateHarness (READY or
UPDATE_FAILED only) makes version N+1: the harness is UPDATING for ``update_after_s``; DEFAULT
is UPDATING (``liveVersion`` still the old one, ``targetVersion`` the new) until
``endpoint_ready_after_s`` after that, then follows. DeleteHarness answers 200 on acceptance;
the harness (and its endpoints) are DELETING for ``delete_after_s``, then gone: 404, absent
from listings, the name free. A named endpoint (harness READY only) is CREATING for
``endpoint_ready_after_s``, DELETING for ``delete_after_s``. The answer to a create, update or
delete shows the transition it started (CREATING, UPDATING, DELETING).
``control.script_harness(name, create=…, endpoint=…, update=…, delete=…, <timings>)`` ends a
phase in another status (CREATE_FAILED, CREATING for ever, DELETE_FAILED, a status the model
does not know…); ``math.inf`` as a timing never ends the phase.

409 ``ConflictException``: CreateHarness while a harness of that name exists in any status
(DELETING and the failed ones too); UpdateHarness of a harness not READY/UPDATE_FAILED;
DeleteHarness of one already DELETING (a DELETE_FAILED one may be deleted again);
CreateHarnessEndpoint on a harness not READY, or with a name in use or ``DEFAULT``;
DeleteHarnessEndpoint of ``DEFAULT`` or of an endpoint already DELETING. A ``clientToken``
seen before with the same request replays it (the same harness, no new version or deletion;
the resource as it is now, or the first answer once it is gone); with a different request it
is a 400 ``ValidationException`` with reason ``IdempotentParameterMismatchException``.
Listings return ``min(maxResults, page_size)`` items in creation order (DEFAULT first for
endpoints) with an opaque ``nextToken`` that remembers the last item, so nothing is skipped or
repeated when others come or go between pages; a token not issued for that listing is a 400
``ValidationException``.

The data plane serves every harness the control plane holds (the constructor's one is READY
from the start, with READY endpoints named by ``endpoints``). An invoke or command for a
harness that is gone, or for an endpoint that does not exist (yet), is a 404
``ResourceNotFoundException``; for a harness or endpoint that exists but is not READY or
UPDATING it is a 400 ``ValidationException`` with reason ``ResourceConflict`` whose message
names the status. The service's answer there is not documented (only that such invokes fail,
wire §8.5): this one is modeled for ``InvokeHarness``, final (botocore does not retry it) and
says why.

It is not a model, not a microVM and not the rest of the control plane: no harness versions
listing, no endpoint updates, no memory, no credential providers, no costs, no TLS.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import contextlib
import copy
import hashlib
import hmac
import itertools
import json
import math
import os
import re
import select
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs

from rma.wire.eventstream import encode_error, encode_event, encode_exception
from rma_shell.testing._loopback import LoopbackEmulator, LoopbackHandler
from rma_shell.testing.openai_emulator import RecordedRequest

__all__ = [
    "CONTROL_SERVICE",
    "DEFAULT_ACCESS_KEY_ID",
    "DEFAULT_ENDPOINT",
    "DEFAULT_SECRET_ACCESS_KEY",
    "GONE",
    "HARNESS_STATUSES",
    "INVOKABLE_STATUSES",
    "SESSION_HEADER",
    "STOP_REASONS",
    "AgentCoreEmulator",
    "AgentCoreFault",
    "ControlCall",
    "ControlOperation",
    "ControlPlane",
    "Frame",
    "HarnessView",
    "SessionView",
    "Turn",
    "bad_crc_after",
    "block_stop",
    "drop_after",
    "error_once",
    "exception_frame",
    "frame",
    "hook_event",
    "message_start",
    "message_stop",
    "metadata",
    "new_tool_use_id",
    "pause",
    "raw_frame",
    "reasoning",
    "reused_index_tool_turn",
    "server_error_once",
    "server_tool_turn",
    "stall",
    "stop_turn",
    "stream_error",
    "stream_exception",
    "text_delta",
    "text_turn",
    "throttle_once",
    "tool_input_delta",
    "tool_result_delta",
    "tool_result_start",
    "tool_turn",
    "tool_use_start",
    "truncate_frame_after",
]

JSONDict = dict[str, Any]

SERVICE = "bedrock-agentcore"
SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
EVENT_STREAM = "application/vnd.amazon.eventstream"
DEFAULT_ACCESS_KEY_ID = "AKIDEMULATOR"
DEFAULT_SECRET_ACCESS_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEMULATORKEY"
MAX_CLOCK_SKEW = timedelta(minutes=5)

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

CONTROL_SERVICE = "bedrock-agentcore-control"
"""The control plane's botocore model (it signs as ``bedrock-agentcore`` too)."""
DEFAULT_ENDPOINT = "DEFAULT"
HARNESS_STATUSES = frozenset(
    {"CREATING", "CREATE_FAILED", "UPDATING", "UPDATE_FAILED", "READY", "DELETING", "DELETE_FAILED"}
)
"""botocore 1.44.5's ``HarnessStatus`` enum (``HarnessEndpointStatus`` is the same)."""
INVOKABLE_STATUSES = frozenset({"READY", "UPDATING"})
"""The harness and endpoint statuses the data plane serves (UPDATING serves the live version)."""
GONE = "GONE"
"""The normal end of a deletion in ``ControlPlane.script_harness``: the harness is removed."""

_DEFAULT_MODEL: JSONDict = {"bedrockModelConfig": {"modelId": "global.anthropic.claude-sonnet-4-6"}}
_DEFAULT_LIFECYCLE: JSONDict = {"idleRuntimeSessionTimeout": 900, "maxLifetime": 28800}
_HARNESS_LIFECYCLE_MAX = 28800
_LIFECYCLE_SHAPE_MAX = 1209600
_REQUEST_ONLY = frozenset({"harnessName", "harnessId", "clientToken", "tags"})
_OPTIONAL_VALUE = frozenset({"environmentArtifact", "authorizerConfiguration", "memory"})
"""UpdateHarness members wrapped in ``{"optionalValue": …}`` (absent: clear the member)."""
_ECHOED = (
    "environmentArtifact",
    "environmentVariables",
    "authorizerConfiguration",
    "memory",
    "hooks",
    "maxIterations",
    "maxTokens",
    "timeoutSeconds",
)
_HOOK_TYPES = frozenset({"before_tool_call", "after_tool_call", "before_invocation", "after_invocation"})
_SIGV4_TIME = "%Y%m%dT%H%M%SZ"
_DEFAULT_COMMAND_TIMEOUT = 300
_COMMAND_TIMEOUT_RANGE = (1, 3600)

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


# --------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------

FaultKind = Literal["status", "drop", "truncate", "bad_crc", "exception", "stall"]
ControlOperation = Literal[
    "CreateHarness",
    "GetHarness",
    "ListHarnesses",
    "UpdateHarness",
    "DeleteHarness",
    "CreateHarnessEndpoint",
    "GetHarnessEndpoint",
    "ListHarnessEndpoints",
    "DeleteHarnessEndpoint",
]
Operation = Literal[
    "InvokeHarness",
    "InvokeAgentRuntimeCommand",
    "CreateHarness",
    "GetHarness",
    "ListHarnesses",
    "UpdateHarness",
    "DeleteHarness",
    "CreateHarnessEndpoint",
    "GetHarnessEndpoint",
    "ListHarnessEndpoints",
    "DeleteHarnessEndpoint",
]


@attrs.frozen
class AgentCoreFault:
    """A fault; build with ``throttle_once``, ``server_error_once``, ``error_once``,
    ``drop_after``, ``truncate_frame_after``, ``bad_crc_after``, ``exception_frame`` or
    ``stall``."""

    kind: FaultKind
    times: int = 1
    operation: Operation | None = None
    status: int = 0
    code: str = ""
    message: str = ""
    fields: Mapping[str, Any] = attrs.Factory(dict)
    after: int = 0
    seconds: float = 0.0
    echo_authorization: bool = False
    retry_after: str | None = None
    """A ``Retry-After`` header (seconds, or an HTTP-date) on the error answer."""


def error_once(
    status: int,
    code: str,
    message: str | None = None,
    *,
    fields: Mapping[str, Any] | None = None,
    times: int = 1,
    operation: Operation | None = None,
    echo_authorization: bool = False,
    retry_after: float | str | None = None,
) -> AgentCoreFault:
    """Answer the next matching request(s) with HTTP ``status`` and error ``code``
    (``RetryableConflictException`` 409, ``AccessDeniedException`` 403, …), with a
    ``Retry-After`` header when ``retry_after`` is given. ``echo_authorization`` appends
    `` Authorization=<the request's header>`` to the message, as AWS does in some signature
    errors (it carries ``Credential=<access key id>/…``)."""
    return AgentCoreFault(
        "status",
        times=times,
        operation=operation,
        status=status,
        code=code,
        message=message or f"{code} (injected by the agentcore emulator)",
        fields=dict(fields or {}),
        echo_authorization=echo_authorization,
        retry_after=None if retry_after is None else str(retry_after),
    )


def _fault_message(fault: AgentCoreFault, h: LoopbackHandler) -> str:
    if not fault.echo_authorization:
        return fault.message
    return f"{fault.message} Authorization={h.headers.get('Authorization', '')}"


def throttle_once(
    *,
    times: int = 1,
    operation: Operation | None = None,
    message: str = "Rate exceeded",
    retry_after: float | str | None = None,
) -> AgentCoreFault:
    """429 ``ThrottlingException`` (botocore retries it)."""
    return error_once(
        429, "ThrottlingException", message, times=times, operation=operation, retry_after=retry_after
    )


def server_error_once(
    status: int = 500,
    *,
    times: int = 1,
    operation: Operation | None = None,
    message: str = "An internal error occurred. Try again.",
    retry_after: float | str | None = None,
) -> AgentCoreFault:
    """``status`` (500 by default) ``InternalServerException`` (botocore retries it)."""
    return error_once(
        status, "InternalServerException", message, times=times, operation=operation, retry_after=retry_after
    )


def drop_after(n_frames: int, *, times: int = 1, operation: Operation | None = None) -> AgentCoreFault:
    """Close the connection after ``n_frames`` frames of a 200 stream (no terminating chunk)."""
    return AgentCoreFault("drop", times=times, operation=operation, after=max(0, n_frames))


def truncate_frame_after(n: int, *, times: int = 1, operation: Operation | None = None) -> AgentCoreFault:
    """After ``n`` frames, write the first half of the next frame, then close the connection."""
    return AgentCoreFault("truncate", times=times, operation=operation, after=max(0, n))


def bad_crc_after(n: int, *, times: int = 1, operation: Operation | None = None) -> AgentCoreFault:
    """Send frame number ``n`` (0-based) with a corrupted message CRC; the stream goes on."""
    return AgentCoreFault("bad_crc", times=times, operation=operation, after=max(0, n))


def exception_frame(
    exception_type: str,
    message: str,
    *,
    after: int = 0,
    fields: Mapping[str, Any] | None = None,
    times: int = 1,
    operation: Operation | None = None,
) -> AgentCoreFault:
    """After ``after`` frames, an exception frame (``internalServerException``,
    ``runtimeClientError``, ``throttlingException`` …) with ``{"message", **fields}``;
    the stream then ends cleanly."""
    return AgentCoreFault(
        "exception",
        times=times,
        operation=operation,
        code=exception_type,
        message=message,
        fields=dict(fields or {}),
        after=max(0, after),
    )


def stall(
    seconds: float, *, after: int = 0, times: int = 1, operation: Operation | None = None
) -> AgentCoreFault:
    """After ``after`` frames, go silent for ``seconds`` (the connection stays open), then go
    on. Ends early when the client goes away or the emulator closes."""
    return AgentCoreFault("stall", times=times, operation=operation, after=max(0, after), seconds=seconds)


@attrs.define
class _Armed:
    fault: AgentCoreFault
    remaining: int
    session_id: str | None


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class _AwsError(Exception):
    def __init__(self, status: int, code: str, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields
        self.headers: dict[str, str] = {}


def _fault_error(fault: AgentCoreFault, h: LoopbackHandler) -> _AwsError:
    error = _AwsError(fault.status, fault.code, _fault_message(fault, h), **fault.fields)
    if fault.retry_after is not None:
        error.headers["Retry-After"] = fault.retry_after
    return error


def _forbidden(code: str, message: str) -> _AwsError:
    return _AwsError(403, code, message)


def _not_found(message: str) -> _AwsError:
    return _AwsError(404, "ResourceNotFoundException", message)


class _StreamEnded(Exception):
    """The 200 stream ended early (a fault, a gone client, the emulator closing)."""


_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


def _client_gone(connection: socket.socket) -> bool:
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


# --------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------


@attrs.define
class _Session:
    id: str
    number: int
    script: list[Turn] | None = None
    conversation: list[JSONDict] = attrs.Factory(list)
    received: list[JSONDict] = attrs.Factory(list)
    pending: list[JSONDict] = attrs.Factory(list)
    turns_played: int = 0
    invocations: int = 0
    commands: list[str] = attrs.Factory(list)
    busy: str | None = None
    user_id: str | None = None
    workdir: Path | None = None
    storage: Path | None = None

    def view(self, messages: Sequence[JSONDict] | None = None) -> SessionView:
        return SessionView(
            id=self.id,
            messages=tuple(copy.deepcopy(list(messages if messages is not None else self.conversation))),
            received=tuple(copy.deepcopy(self.received)),
            pending_tool_uses=tuple(copy.deepcopy(self.pending)),
            turns_played=self.turns_played,
            invocations=self.invocations,
            commands=tuple(self.commands),
            workdir=str(self.workdir) if self.workdir else None,
            storage_dir=str(self.storage) if self.storage else None,
            user_id=self.user_id,
        )


_service_model_lock = threading.Lock()
_service_models: dict[str, Any] = {}


def _model(service: str = SERVICE) -> Any:
    """botocore's ``bedrock-agentcore`` (or ``bedrock-agentcore-control``) service model, the
    oracle, loaded once."""
    with _service_model_lock:
        if service not in _service_models:
            import botocore.session  # type: ignore[import-untyped]

            _service_models[service] = botocore.session.get_session().get_service_model(service)
        return _service_models[service]


def _partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    if region.startswith("eusc-"):
        return "aws-eusc"
    return "aws"


def _suffix(seed: str) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    number = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
    out = []
    for _ in range(10):
        number, digit = divmod(number, len(alphabet))
        out.append(alphabet[digit])
    return "".join(out)


# --------------------------------------------------------------------------------------------
# The control plane: harnesses and endpoints on a lifecycle clock
# --------------------------------------------------------------------------------------------


@attrs.frozen
class HarnessView:
    """A snapshot of one harness of the control plane (what ``ControlPlane.harnesses`` holds)."""

    id: str
    name: str
    arn: str
    runtime_arn: str
    status: str
    """The status GetHarness would show now (any string a script asked for)."""
    version: str
    """The latest ``harnessVersion``."""
    endpoints: Mapping[str, str]
    """Endpoint name -> status, for the endpoints that exist now (``DEFAULT`` first)."""
    config: JSONDict
    """The latest version's configuration as received (no ``harnessName``, ``clientToken``, ``tags``)."""
    created_at: float
    """On the lifecycle clock (``-inf`` for the constructor's harness)."""
    deleting_since: float | None
    """When the last accepted DeleteHarness arrived, on the lifecycle clock."""
    delete_managed_memory: bool | None
    """What the last accepted DeleteHarness said (``deleteManagedMemory``, default true)."""


@attrs.frozen
class ControlCall:
    """One control-plane request that passed SigV4 (``ControlPlane.calls``)."""

    operation: str
    http_status: int
    harness_id: str | None
    """The path's harnessId, or the id CreateHarness made."""
    endpoint_name: str | None
    status: str | None
    """The harness or endpoint status the answer showed (None for listings and errors)."""
    error: str | None
    """The error code of a failed request."""
    at: float
    """On the lifecycle clock."""


@attrs.frozen
class _Plan:
    create: str
    endpoint: str
    update: str
    delete: str
    ready_after_s: float
    endpoint_appear_after_s: float
    endpoint_ready_after_s: float
    update_after_s: float
    delete_after_s: float
    failure_reason: str | None


_ALWAYS_READY = _Plan(
    create="READY",
    endpoint="READY",
    update="READY",
    delete=GONE,
    ready_after_s=0.0,
    endpoint_appear_after_s=0.0,
    endpoint_ready_after_s=0.0,
    update_after_s=0.0,
    delete_after_s=0.0,
    failure_reason=None,
)


@attrs.frozen
class _EpState:
    status: str
    since: float
    created: float
    live: str | None
    target: str | None


@attrs.define
class _Version:
    number: int
    config: JSONDict
    started: float
    after: float = 0.0
    outcome: str = "READY"
    endpoint_after: float = 0.0


@attrs.define
class _NamedEndpoint:
    name: str
    seq: int
    created: float
    target: str
    plan: _Plan
    description: str | None = None
    deleting: float | None = None
    delete_after: float = 0.0

    def _base(self, t: float) -> _EpState:
        done = self.created + self.plan.endpoint_ready_after_s
        if t < done:
            return _EpState("CREATING", self.created, self.created, None, self.target)
        outcome = self.plan.endpoint
        if outcome != "READY":
            since = self.created if outcome == "CREATING" else done
            return _EpState(outcome, since, self.created, None, self.target)
        return _EpState("READY", done, self.created, self.target, self.target)

    def state(self, t: float) -> _EpState | None:
        if self.deleting is not None and t >= self.deleting:
            if t >= self.deleting + self.delete_after:
                return None
            before = self._base(self.deleting)
            return _EpState("DELETING", self.deleting, self.created, before.live, before.target)
        return self._base(t)


@attrs.define
class _Harness:
    seq: int
    id: str
    name: str
    arn: str
    runtime_id: str
    runtime_arn: str
    created: float
    plan: _Plan
    versions: list[_Version]
    has_default: bool = True
    endpoints: dict[str, _NamedEndpoint] = attrs.Factory(dict)
    failure_reason: str | None = None
    deleting: float | None = None
    delete_outcome: str = GONE
    delete_after: float = 0.0
    delete_managed_memory: bool | None = None

    def state(self, t: float) -> tuple[str | None, float]:
        """(status, since when) at ``t``; status None once the harness is gone."""
        if self.deleting is not None and t >= self.deleting:
            end = self.deleting + self.delete_after
            if t < end:
                return "DELETING", self.deleting
            return (None if self.delete_outcome == GONE else self.delete_outcome), end
        plan = self.plan
        ready_at = self.created + plan.ready_after_s
        if t < ready_at:
            return "CREATING", self.created
        if plan.create != "READY":
            return plan.create, (self.created if plan.create == "CREATING" else ready_at)
        status, since = "READY", ready_at
        for version in self.versions[1:]:
            if t < version.started:
                break
            done = version.started + version.after
            if t < done:
                return "UPDATING", version.started
            status, since = version.outcome, done
        return status, since

    def _default(self, t: float) -> _EpState | None:
        plan = self.plan
        if not self.has_default or plan.create != "READY":
            return None
        ready_at = self.created + plan.ready_after_s
        appear = ready_at + plan.endpoint_appear_after_s
        if t < appear:
            return None
        done = max(appear, ready_at + plan.endpoint_ready_after_s)
        if t < done:
            return _EpState("CREATING", appear, appear, None, "1")
        if plan.endpoint != "READY":
            since = appear if plan.endpoint == "CREATING" else done
            return _EpState(plan.endpoint, since, appear, None, "1")
        state = _EpState("READY", done, appear, "1", "1")
        for version in self.versions[1:]:
            if t < version.started:
                break
            number = str(version.number)
            if version.outcome == "READY":
                finish = version.started + version.after + version.endpoint_after
                if t < finish:
                    return _EpState("UPDATING", version.started, appear, state.live, number)
                state = _EpState("READY", finish, appear, number, number)
            else:
                finish = version.started + version.after
                if t < finish:
                    return _EpState("UPDATING", version.started, appear, state.live, number)
                state = _EpState("READY", finish, appear, state.live, state.live)
        return state

    def endpoint(self, name: str, t: float) -> _EpState | None:
        """The endpoint at ``t`` (None: it does not exist). While the harness is being deleted
        its endpoints show the harness's status."""
        named = self.endpoints.get(name)
        if name == DEFAULT_ENDPOINT:
            base: Callable[[float], _EpState | None] = self._default
        elif named is not None:
            base = named.state
        else:
            return None
        if self.deleting is None or t < self.deleting:
            return base(t)
        before = base(self.deleting)
        status, since = self.state(t)
        if before is None or status is None:
            return None
        return _EpState(status, since, before.created, before.live, before.target)

    def endpoint_names(self) -> list[str]:
        names = [DEFAULT_ENDPOINT] if self.has_default else []
        return names + sorted(self.endpoints, key=lambda n: self.endpoints[n].seq)


def _not_ready(message: str) -> _AwsError:
    # The service's answer to an invoke of a harness or endpoint that is not READY is not
    # documented; ValidationException is modeled for InvokeHarness, and botocore does not retry it.
    return _AwsError(400, "ValidationException", message, reason="ResourceConflict")


def _conflict(message: str) -> _AwsError:
    return _AwsError(409, "ConflictException", message)


_HARNESS_PATH = r"/harnesses/(?P<harnessId>[^/]+)"
_ENDPOINT_PATH = _HARNESS_PATH + r"/endpoints/(?P<endpointName>[^/]+)"
_CONTROL_ROUTES: tuple[tuple[str, re.Pattern[str], ControlOperation], ...] = (
    ("POST", re.compile(r"/harnesses"), "CreateHarness"),
    ("GET", re.compile(r"/harnesses"), "ListHarnesses"),
    ("GET", re.compile(_HARNESS_PATH), "GetHarness"),
    ("PATCH", re.compile(_HARNESS_PATH), "UpdateHarness"),
    ("DELETE", re.compile(_HARNESS_PATH), "DeleteHarness"),
    ("POST", re.compile(_HARNESS_PATH + "/endpoints"), "CreateHarnessEndpoint"),
    ("GET", re.compile(_HARNESS_PATH + "/endpoints"), "ListHarnessEndpoints"),
    ("GET", re.compile(_ENDPOINT_PATH), "GetHarnessEndpoint"),
    ("DELETE", re.compile(_ENDPOINT_PATH), "DeleteHarnessEndpoint"),
)


def _control_route(method: str, path: str) -> tuple[ControlOperation, dict[str, str]] | None:
    for route_method, pattern, operation in _CONTROL_ROUTES:
        match = pattern.fullmatch(path)
        if method == route_method and match:
            return operation, {k: unquote(v) for k, v in match.groupdict().items()}
    return None


def _check_timing(name: str, value: float | None) -> None:
    if value is not None and (math.isnan(value) or value < 0):
        raise ValueError(f"{name} must be a non-negative number of seconds (math.inf: never), got {value!r}")


class ControlPlane:
    """The control plane's state and test controls: ``emu.control``.

    Thread-safe (it shares the emulator's lock). Statuses are computed from the lifecycle
    clock whenever something asks, so reading a view or calling ``script_harness`` never
    moves anything along.
    """

    def __init__(
        self,
        emulator: AgentCoreEmulator,
        *,
        lifecycle_clock: Callable[[], float],
        ready_after_s: float,
        endpoint_appear_after_s: float,
        endpoint_ready_after_s: float,
        update_after_s: float,
        delete_after_s: float,
        page_size: int,
        harness_name: str,
        endpoints: frozenset[str],
    ) -> None:
        for name, value in (
            ("ready_after_s", ready_after_s),
            ("endpoint_appear_after_s", endpoint_appear_after_s),
            ("endpoint_ready_after_s", endpoint_ready_after_s),
            ("update_after_s", update_after_s),
            ("delete_after_s", delete_after_s),
        ):
            _check_timing(name, value)
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        self._emu = emulator
        self._lifecycle_clock = lifecycle_clock
        self._defaults = attrs.evolve(
            _ALWAYS_READY,
            ready_after_s=ready_after_s,
            endpoint_appear_after_s=endpoint_appear_after_s,
            endpoint_ready_after_s=endpoint_ready_after_s,
            update_after_s=update_after_s,
            delete_after_s=delete_after_s,
        )
        self.page_size = page_size
        self._scripts: dict[str, dict[str, Any]] = {}
        self._seq = itertools.count(1)
        self._harnesses: dict[str, _Harness] = {}
        self._gone: list[str] = []
        self._calls: list[ControlCall] = []
        self._create_bodies: list[JSONDict] = []
        self._tokens: dict[tuple[str, str], tuple[str, JSONDict, str | None, str | None]] = {}
        self._page_tokens: dict[str, tuple[str, str, int]] = {}
        self._anchor: tuple[datetime, float] | None = None
        partition = _partition(emulator.region)
        role = f"arn:{partition}:iam::{emulator.account}:role/emulated_harness_role"
        existing = _Harness(
            seq=0,
            id=emulator.harness_id,
            name=harness_name,
            arn=emulator.harness_arn,
            runtime_id=emulator.runtime_id,
            runtime_arn=emulator.runtime_arn,
            created=-math.inf,
            plan=_ALWAYS_READY,
            versions=[_Version(1, {"executionRoleArn": role}, -math.inf)],
            has_default=DEFAULT_ENDPOINT in endpoints,
        )
        for name in sorted(endpoints - {DEFAULT_ENDPOINT}):
            existing.endpoints[name] = _NamedEndpoint(name, next(self._seq), -math.inf, "1", _ALWAYS_READY)
        self._harnesses[existing.id] = existing

    # -- test controls --

    def now(self) -> float:
        """The lifecycle clock's reading."""
        return float(self._lifecycle_clock())

    def script_harness(
        self,
        name: str,
        *,
        create: str = "READY",
        endpoint: str = "READY",
        update: str = "READY",
        delete: str = GONE,
        ready_after_s: float | None = None,
        endpoint_appear_after_s: float | None = None,
        endpoint_ready_after_s: float | None = None,
        update_after_s: float | None = None,
        delete_after_s: float | None = None,
        failure_reason: str | None = None,
    ) -> None:
        """Script the harnesses named ``name``: each phase ends in the status given instead
        of the normal one, after the given time (the emulator's default when None;
        ``math.inf`` never ends it).

        ``create``: the harness's status once ``ready_after_s`` has passed ("CREATE_FAILED";
        "CREATING" stays CREATING for ever; any other string is shown as it is — only
        "READY" brings the DEFAULT endpoint). ``endpoint``: every endpoint's status once
        created ("CREATE_FAILED", "CREATING" for ever, any string); ``endpoint_appear_after_s``
        = ``math.inf`` keeps DEFAULT absent (404) for ever. ``update``: "UPDATE_FAILED"
        keeps DEFAULT on its live version. ``delete``: "GONE" (removed), "DELETE_FAILED"
        (stays listed; a new DeleteHarness may be accepted), "DELETING" for ever, any string.
        ``failure_reason`` is the ``failureReason`` a ``*_FAILED`` status carries.

        A phase takes the script in force when it starts: creation (``create``,
        ``endpoint``, ``ready_after_s``, the endpoint timings) at CreateHarness, an update
        at UpdateHarness, a deletion at DeleteHarness. Calling again replaces the script;
        ``script_harness(name)`` restores the defaults.
        """
        for label, outcome in (
            ("create", create),
            ("endpoint", endpoint),
            ("update", update),
            ("delete", delete),
        ):
            if not isinstance(outcome, str) or not outcome:
                raise ValueError(f"{label} must be a non-empty status string, got {outcome!r}")
        for label, value in (
            ("ready_after_s", ready_after_s),
            ("endpoint_appear_after_s", endpoint_appear_after_s),
            ("endpoint_ready_after_s", endpoint_ready_after_s),
            ("update_after_s", update_after_s),
            ("delete_after_s", delete_after_s),
        ):
            _check_timing(label, value)
        script = {
            "create": create,
            "endpoint": endpoint,
            "update": update,
            "delete": delete,
            "ready_after_s": ready_after_s,
            "endpoint_appear_after_s": endpoint_appear_after_s,
            "endpoint_ready_after_s": endpoint_ready_after_s,
            "update_after_s": update_after_s,
            "delete_after_s": delete_after_s,
            "failure_reason": failure_reason,
        }
        with self._emu._lock:
            self._scripts[name] = {k: v for k, v in script.items() if v is not None}

    def add_harness(self, name: str, *, execution_role_arn: str | None = None, **config: Any) -> HarnessView:
        """A harness created as if CreateHarness had just arrived (``config``: its other
        members, e.g. ``model=…``), without a request: for a harness "someone else" made.
        Raises ``ValueError`` when the name is invalid or taken."""
        if not re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]{0,39}", name):
            raise ValueError(f"invalid harness name {name!r}")
        emu = self._emu
        role = (
            execution_role_arn
            or f"arn:{_partition(emu.region)}:iam::{emu.account}:role/emulated_harness_role"
        )
        with emu._lock:
            now = self.now()
            self._prune(now)
            if self._by_name(name) is not None:
                raise ValueError(f"a harness named {name!r} exists")
            harness = self._new(name, {"executionRoleArn": role, **copy.deepcopy(config)}, now)
            return self._view(harness, now)

    @property
    def harnesses(self) -> dict[str, HarnessView]:
        """Every harness that exists now (gone ones are not), by id, in creation order."""
        with self._emu._lock:
            now = self.now()
            self._prune(now)
            return {h.id: self._view(h, now) for h in self._ordered()}

    def harness(self, id_or_name: str) -> HarnessView | None:
        """The harness with this id (or else this name) that exists now."""
        with self._emu._lock:
            now = self.now()
            self._prune(now)
            found = self._harnesses.get(id_or_name) or self._by_name(id_or_name)
            return self._view(found, now) if found is not None else None

    @property
    def deleted(self) -> tuple[str, ...]:
        """Ids of the harnesses whose deletion completed, in the order they went."""
        with self._emu._lock:
            self._prune(self.now())
            return tuple(self._gone)

    @property
    def calls(self) -> tuple[ControlCall, ...]:
        """Every control-plane request that passed SigV4, in arrival order."""
        with self._emu._lock:
            return tuple(self._calls)

    def count(
        self,
        operation: str,
        *,
        harness_id: str | None = None,
        endpoint_name: str | None = None,
        status: str | None = None,
        http_status: int | None = None,
    ) -> int:
        """How many ``operation`` requests arrived (e.g. GetHarness polls), optionally only
        those for one harness or endpoint, showing one status, or answered with one HTTP
        status (404: a GetHarnessEndpoint before the endpoint existed)."""
        return sum(
            1
            for call in self.calls
            if call.operation == operation
            and (harness_id is None or call.harness_id == harness_id)
            and (endpoint_name is None or call.endpoint_name == endpoint_name)
            and (status is None or call.status == status)
            and (http_status is None or call.http_status == http_status)
        )

    @property
    def create_bodies(self) -> tuple[JSONDict, ...]:
        """The JSON body of every CreateHarness request that passed SigV4 (valid or not)."""
        with self._emu._lock:
            return tuple(copy.deepcopy(self._create_bodies))

    # -- the data plane asks --

    def _serving(
        self,
        matches: Callable[[_Harness], bool],
        missing: str,
        qualifier: str | None,
        where: Callable[[_Harness], str],
    ) -> _Harness:
        """The harness a data-plane request targets, if it and its endpoint can serve it."""
        with self._emu._lock:
            now = self.now()
            self._prune(now)
            harness = next((h for h in self._ordered() if matches(h)), None)
            if harness is None:
                raise _not_found(missing)
            status, _ = harness.state(now)
            if status not in INVOKABLE_STATUSES:
                raise _not_ready(f"Harness {harness.id} is {status}; it can be invoked once it is READY.")
            name = qualifier or DEFAULT_ENDPOINT
            endpoint = harness.endpoint(name, now)
            if endpoint is None:
                raise _not_found(f"Endpoint '{name}' not found for {where(harness)}")
            if endpoint.status not in INVOKABLE_STATUSES:
                raise _not_ready(
                    f"Endpoint '{name}' of harness {harness.id} is {endpoint.status}; "
                    "it can be invoked once it is READY."
                )
            return harness

    # -- request handling (server threads) --

    def _serve(
        self,
        h: LoopbackHandler,
        operation: ControlOperation,
        labels: dict[str, str],
        query: list[tuple[str, str]],
        raw: bytes,
        request_id: str,
    ) -> None:
        emu = self._emu
        harness_id, endpoint_name = labels.get("harnessId"), labels.get("endpointName")
        try:
            body = emu._json_object(raw)
            if operation == "CreateHarness":
                with emu._lock:
                    self._create_bodies.append(copy.deepcopy(body))
            params = emu._params(operation, h, query, body, labels, service=CONTROL_SERVICE)
            if operation == "CreateHarnessEndpoint" and isinstance(params.get("endpointName"), str):
                endpoint_name = params["endpointName"]
            emu._validate(operation, params, service=CONTROL_SERVICE)
            with emu._lock:
                injected = emu._take(("status",), None, operation)
                if injected:
                    fault = injected[0]
                    raise _fault_error(fault, h)
                now = self.now()
                self._prune(now)
                status, payload = self._dispatch(operation, params, now)
        except _AwsError as error:
            self._record(operation, error.status, harness_id, endpoint_name, None, error.code)
            raise
        resource = payload.get("harness") or payload.get("endpoint")
        shown = None
        if isinstance(resource, dict):
            harness_id, shown = resource.get("harnessId"), resource.get("status")
        self._record(operation, status, harness_id, endpoint_name, shown, None)
        data = json.dumps(payload).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.send_header("x-amzn-RequestId", request_id)
            h.end_headers()
            h.wfile.write(data)
        except _DISCONNECTS:
            h.close_connection = True

    def _record(
        self,
        operation: str,
        http_status: int,
        harness_id: str | None,
        endpoint_name: str | None,
        status: str | None,
        error: str | None,
    ) -> None:
        with self._emu._lock:
            self._calls.append(
                ControlCall(operation, http_status, harness_id, endpoint_name, status, error, self.now())
            )

    def _dispatch(self, operation: ControlOperation, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        token = params.get("clientToken")
        fingerprint = json.dumps({k: v for k, v in params.items() if k != "clientToken"}, sort_keys=True)
        if isinstance(token, str):
            seen = self._tokens.get((operation, token))
            if seen is not None:
                return self._replay(operation, token, fingerprint, seen, now)
        handler = {
            "CreateHarness": self._create_harness,
            "GetHarness": self._get_harness,
            "ListHarnesses": self._list_harnesses,
            "UpdateHarness": self._update_harness,
            "DeleteHarness": self._delete_harness,
            "CreateHarnessEndpoint": self._create_endpoint,
            "GetHarnessEndpoint": self._get_endpoint,
            "ListHarnessEndpoints": self._list_endpoints,
            "DeleteHarnessEndpoint": self._delete_endpoint,
        }[operation]
        status, payload = handler(params, now)
        if isinstance(token, str):
            resource = payload.get("harness") or payload.get("endpoint") or {}
            self._tokens[(operation, token)] = (
                fingerprint,
                copy.deepcopy(payload),
                resource.get("harnessId"),
                resource.get("endpointName"),
            )
        return status, payload

    def _replay(
        self,
        operation: str,
        token: str,
        fingerprint: str,
        seen: tuple[str, JSONDict, str | None, str | None],
        now: float,
    ) -> tuple[int, JSONDict]:
        first, payload, harness_id, endpoint_name = seen
        if first != fingerprint:
            raise _AwsError(
                400,
                "ValidationException",
                f"The client token {token} was already used for a {operation} request with different "
                "parameters.",
                reason="IdempotentParameterMismatchException",
            )
        status = 201 if operation.startswith("Create") else 200
        harness = self._harnesses.get(harness_id or "")
        if harness is None:
            return status, copy.deepcopy(payload)  # gone since: the first answer
        if endpoint_name is not None:
            state = harness.endpoint(endpoint_name, now)
            if state is None:
                return status, copy.deepcopy(payload)
            return status, {"endpoint": self._endpoint_json(harness, endpoint_name, state)}
        return status, {"harness": self._harness_json(harness, now)}

    # -- operations (under the lock) --

    def _create_harness(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        name: str = params["harnessName"]
        clash = self._by_name(name)
        if clash is not None:
            status, _ = clash.state(now)
            raise _conflict(f"Harness with name '{name}' already exists ({clash.id}, status {status}).")
        config = {k: copy.deepcopy(v) for k, v in params.items() if k not in _REQUEST_ONLY}
        harness = self._new(name, config, now)
        return 201, {"harness": self._harness_json(harness, now, status="CREATING", since=now)}

    def _get_harness(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        harness = self._find(params["harnessId"])
        wanted = params.get("harnessVersion")
        version = None
        if wanted is not None:
            version = next((v for v in harness.versions if str(v.number) == wanted), None)
            if version is None:
                raise _not_found(f"Version {wanted} of harness {harness.id} not found")
        return 200, {"harness": self._harness_json(harness, now, version=version)}

    def _list_harnesses(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        items = [(h.seq, self._summary_json(h, now)) for h in self._ordered()]
        page, token = self._page("ListHarnesses", "", items, params)
        payload: JSONDict = {"harnesses": page}
        if token is not None:
            payload["nextToken"] = token
        return 200, payload

    def _update_harness(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        harness = self._find(params["harnessId"])
        status, _ = harness.state(now)
        if status not in ("READY", "UPDATE_FAILED"):
            raise _conflict(f"Harness {harness.id} cannot be updated while it is {status}.")
        config = copy.deepcopy(harness.versions[-1].config)
        for key, value in params.items():
            if key in _REQUEST_ONLY:
                continue
            if key in _OPTIONAL_VALUE:
                if isinstance(value, dict) and "optionalValue" in value:
                    config[key] = copy.deepcopy(value["optionalValue"])
                else:
                    config.pop(key, None)
            else:
                config[key] = copy.deepcopy(value)
        plan = self._plan(harness.name)
        harness.versions.append(
            _Version(
                len(harness.versions) + 1,
                config,
                now,
                plan.update_after_s,
                plan.update,
                plan.endpoint_ready_after_s,
            )
        )
        harness.failure_reason = plan.failure_reason
        return 200, {"harness": self._harness_json(harness, now, status="UPDATING", since=now)}

    def _delete_harness(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        harness = self._find(params["harnessId"])
        status, _ = harness.state(now)
        if status == "DELETING":
            raise _conflict(f"Harness {harness.id} is already being deleted.")
        plan = self._plan(harness.name)
        harness.deleting = now
        harness.delete_after = plan.delete_after_s
        harness.delete_outcome = plan.delete
        harness.failure_reason = plan.failure_reason
        harness.delete_managed_memory = bool(params.get("deleteManagedMemory", True))
        return 200, {"harness": self._harness_json(harness, now, status="DELETING", since=now)}

    def _create_endpoint(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        harness = self._find(params["harnessId"])
        status, _ = harness.state(now)
        if status != "READY":
            raise _conflict(f"Harness {harness.id} is {status}; endpoints can be created once it is READY.")
        name: str = params["endpointName"]
        if name == DEFAULT_ENDPOINT or harness.endpoint(name, now) is not None:
            raise _conflict(f"Endpoint '{name}' already exists for harness {harness.id}.")
        target = params.get("targetVersion") or str(harness.versions[-1].number)
        if int(target) > len(harness.versions):
            message = (
                f"Value '{target}' at 'targetVersion' failed to satisfy constraint: no such harness version"
            )
            raise _AwsError(
                400,
                "ValidationException",
                f"1 validation error detected: {message}",
                reason="FieldValidationFailed",
                fieldList=[{"name": "targetVersion", "message": message}],
            )
        endpoint = _NamedEndpoint(
            name, next(self._seq), now, target, self._plan(harness.name), params.get("description")
        )
        harness.endpoints[name] = endpoint
        state = harness.endpoint(name, now)
        assert state is not None
        return 201, {"endpoint": self._endpoint_json(harness, name, state, status="CREATING", since=now)}

    def _get_endpoint(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        harness = self._find(params["harnessId"])
        name: str = params["endpointName"]
        state = harness.endpoint(name, now)
        if state is None:
            raise _not_found(f"Endpoint '{name}' not found for harness {harness.id}")
        return 200, {"endpoint": self._endpoint_json(harness, name, state)}

    def _list_endpoints(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        harness = self._find(params["harnessId"])
        items = []
        for name in harness.endpoint_names():
            state = harness.endpoint(name, now)
            if state is not None:
                seq = 0 if name == DEFAULT_ENDPOINT else harness.endpoints[name].seq
                items.append((seq, self._endpoint_json(harness, name, state)))
        page, token = self._page("ListHarnessEndpoints", harness.id, items, params)
        payload: JSONDict = {"endpoints": page}
        if token is not None:
            payload["nextToken"] = token
        return 200, payload

    def _delete_endpoint(self, params: JSONDict, now: float) -> tuple[int, JSONDict]:
        harness = self._find(params["harnessId"])
        name: str = params["endpointName"]
        state = harness.endpoint(name, now)
        if state is None:
            raise _not_found(f"Endpoint '{name}' not found for harness {harness.id}")
        if name == DEFAULT_ENDPOINT:
            raise _conflict(
                f"The DEFAULT endpoint of harness {harness.id} goes with the harness; delete the harness."
            )
        if state.status == "DELETING":
            raise _conflict(f"Endpoint '{name}' of harness {harness.id} is already being deleted.")
        endpoint = harness.endpoints[name]
        endpoint.deleting = now
        endpoint.delete_after = self._plan(harness.name).delete_after_s
        return 200, {"endpoint": self._endpoint_json(harness, name, state, status="DELETING", since=now)}

    # -- helpers (under the lock) --

    def _plan(self, name: str) -> _Plan:
        return attrs.evolve(self._defaults, **self._scripts.get(name, {}))

    def _new(self, name: str, config: JSONDict, now: float) -> _Harness:
        emu = self._emu
        seq = next(self._seq)
        partition = _partition(emu.region)
        harness_id = f"{name}-{_suffix(f'{name}#{seq}')}"
        runtime_id = f"harness_{name}-{_suffix(f'runtime:{name}#{seq}')}"
        plan = self._plan(name)
        harness = _Harness(
            seq=seq,
            id=harness_id,
            name=name,
            arn=f"arn:{partition}:bedrock-agentcore:{emu.region}:{emu.account}:harness/{harness_id}",
            runtime_id=runtime_id,
            runtime_arn=f"arn:{partition}:bedrock-agentcore:{emu.region}:{emu.account}:runtime/{runtime_id}",
            created=now,
            plan=plan,
            versions=[_Version(1, config, now)],
            failure_reason=plan.failure_reason,
        )
        self._harnesses[harness_id] = harness
        return harness

    def _ordered(self) -> list[_Harness]:
        return sorted(self._harnesses.values(), key=lambda h: h.seq)

    def _by_name(self, name: str) -> _Harness | None:
        return next((h for h in self._ordered() if h.name == name), None)

    def _find(self, harness_id: str) -> _Harness:
        harness = self._harnesses.get(harness_id)
        if harness is None:
            raise _not_found(f"Harness not found: {harness_id}")
        return harness

    def _prune(self, now: float) -> None:
        for harness in self._ordered():
            if harness.state(now)[0] is None:
                del self._harnesses[harness.id]
                self._gone.append(harness.id)
                continue
            for name, endpoint in list(harness.endpoints.items()):
                if endpoint.state(now) is None:
                    del harness.endpoints[name]

    def _page(
        self, operation: str, scope: str, items: list[tuple[int, JSONDict]], params: JSONDict
    ) -> tuple[list[JSONDict], str | None]:
        after = -1
        token = params.get("nextToken")
        if token is not None:
            entry = self._page_tokens.get(token)
            if entry is None or entry[:2] != (operation, scope):
                message = (
                    f"Value '{_show(token)}' at 'nextToken' failed to satisfy constraint: "
                    "unknown pagination token"
                )
                raise _AwsError(
                    400,
                    "ValidationException",
                    f"1 validation error detected: {message}",
                    reason="FieldValidationFailed",
                    fieldList=[{"name": "nextToken", "message": message}],
                )
            after = entry[2]
        wanted = params.get("maxResults")
        size = self.page_size if wanted is None else min(int(wanted), self.page_size)
        rest = [(seq, item) for seq, item in items if seq > after]
        page = rest[:size]
        if len(rest) <= size:
            return [item for _, item in page], None
        issued = base64.urlsafe_b64encode(uuid.uuid4().bytes + uuid.uuid4().bytes).decode().rstrip("=")
        self._page_tokens[issued] = (operation, scope, page[-1][0])
        return [item for _, item in page], issued

    def _iso(self, t: float) -> str:
        if self._anchor is None:
            wall = self._emu._clock()
            self._anchor = (wall if wall.tzinfo else wall.replace(tzinfo=UTC), self.now())
        wall, at = self._anchor
        stamp = wall + timedelta(seconds=t - at) if math.isfinite(t) else wall - timedelta(days=1)
        return stamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    def _harness_json(
        self,
        harness: _Harness,
        now: float,
        *,
        status: str | None = None,
        since: float | None = None,
        version: _Version | None = None,
    ) -> JSONDict:
        current, changed = harness.state(now)
        shown = status or current or "DELETING"
        chosen = version or harness.versions[-1]
        config = chosen.config
        requested = (config.get("environment") or {}).get("agentCoreRuntimeEnvironment") or {}
        runtime: JSONDict = {
            "agentRuntimeArn": harness.runtime_arn,
            "agentRuntimeName": harness.runtime_id.rsplit("-", 1)[0],
            "agentRuntimeId": harness.runtime_id,
            "lifecycleConfiguration": {
                **_DEFAULT_LIFECYCLE,
                **(requested.get("lifecycleConfiguration") or {}),
            },
            "networkConfiguration": requested.get("networkConfiguration") or {"networkMode": "PUBLIC"},
        }
        if "filesystemConfigurations" in requested:
            runtime["filesystemConfigurations"] = requested["filesystemConfigurations"]
        out: JSONDict = {
            "harnessId": harness.id,
            "harnessName": harness.name,
            "arn": harness.arn,
            "status": shown,
            "harnessVersion": str(chosen.number),
            "executionRoleArn": config["executionRoleArn"],
            "createdAt": self._iso(harness.created),
            "updatedAt": self._iso(since if since is not None else changed),
            "model": config.get("model", _DEFAULT_MODEL),
            "systemPrompt": config.get("systemPrompt", []),
            "tools": config.get("tools", []),
            "skills": config.get("skills", []),
            "allowedTools": config.get("allowedTools", ["*"]),
            "truncation": config.get("truncation", {"strategy": "sliding_window"}),
            "environment": {"agentCoreRuntimeEnvironment": runtime},
        }
        for key in _ECHOED:
            if key in config:
                out[key] = config[key]
        if shown.endswith("_FAILED"):
            out["failureReason"] = harness.failure_reason or f"agentcore emulator: scripted {shown}"
        return copy.deepcopy(out)

    def _summary_json(self, harness: _Harness, now: float) -> JSONDict:
        status, since = harness.state(now)
        return {
            "harnessId": harness.id,
            "harnessName": harness.name,
            "arn": harness.arn,
            "status": status or "DELETING",
            "createdAt": self._iso(harness.created),
            "updatedAt": self._iso(since),
            "harnessVersion": str(harness.versions[-1].number),
        }

    def _endpoint_json(
        self,
        harness: _Harness,
        name: str,
        state: _EpState,
        *,
        status: str | None = None,
        since: float | None = None,
    ) -> JSONDict:
        shown = status or state.status
        out: JSONDict = {
            "harnessId": harness.id,
            "harnessName": harness.name,
            "endpointName": name,
            "arn": f"{harness.arn}/harness-endpoint/{name}",
            "status": shown,
            "createdAt": self._iso(state.created),
            "updatedAt": self._iso(since if since is not None else state.since),
        }
        if state.live is not None:
            out["liveVersion"] = state.live
        if state.target is not None:
            out["targetVersion"] = state.target
        named = harness.endpoints.get(name)
        if named is not None and named.description is not None:
            out["description"] = named.description
        if shown.endswith("_FAILED"):
            out["failureReason"] = harness.failure_reason or f"agentcore emulator: scripted {shown}"
        return out

    def _view(self, harness: _Harness, now: float) -> HarnessView:
        status, _ = harness.state(now)
        endpoints: dict[str, str] = {}
        for name in harness.endpoint_names():
            state = harness.endpoint(name, now)
            if state is not None:
                endpoints[name] = state.status
        return HarnessView(
            id=harness.id,
            name=harness.name,
            arn=harness.arn,
            runtime_arn=harness.runtime_arn,
            status=status or GONE,
            version=str(harness.versions[-1].number),
            endpoints=endpoints,
            config=copy.deepcopy(harness.versions[-1].config),
            created_at=harness.created,
            deleting_since=harness.deleting,
            delete_managed_memory=harness.delete_managed_memory,
        )


# --------------------------------------------------------------------------------------------
# The emulator
# --------------------------------------------------------------------------------------------


class _Handler(LoopbackHandler):
    def do_PATCH(self) -> None:
        self.server.emulator._handle(self)

    def handle_one_request(self) -> None:
        # A client that gave up on a stream (an exception, a bad CRC) resets the connection;
        # that is the test's business, not a server error worth a traceback.
        try:
            super().handle_one_request()
        except _DISCONNECTS:
            self.close_connection = True


class AgentCoreEmulator(LoopbackEmulator):
    """The emulator; use as a context manager (``with AgentCoreEmulator(script=…) as emu``)."""

    handler_class = _Handler
    thread_name = "agentcore-emulator"

    def __init__(
        self,
        script: Iterable[Turn] = (),
        *,
        access_key_id: str = DEFAULT_ACCESS_KEY_ID,
        secret_access_key: str = DEFAULT_SECRET_ACCESS_KEY,
        session_token: str | None = None,
        region: str = "us-east-1",
        account: str = "123456789012",
        faults: Iterable[AgentCoreFault] = (),
        clock: Callable[[], datetime] | None = None,
        mount_path: str = "/mnt/data",
        harness_name: str = "emulated_harness",
        harness_id: str | None = None,
        runtime_id: str | None = None,
        endpoints: Iterable[str] = ("DEFAULT",),
        lifecycle_clock: Callable[[], float] | None = None,
        ready_after_s: float = 10.0,
        endpoint_appear_after_s: float = 0.0,
        endpoint_ready_after_s: float = 20.0,
        update_after_s: float = 10.0,
        delete_after_s: float = 10.0,
        page_size: int = 5,
    ) -> None:
        """``clock`` (returning an aware UTC datetime) is what ``X-Amz-Date`` is checked
        against (default: the wall clock). ``harness_name`` names the one pre-existing READY
        harness, whose id is ``{harness_name}-{10 alphanumerics}`` unless ``harness_id`` pins it
        (``runtime_id`` likewise pins the runtime behind it); ``endpoints`` are its endpoint
        names (the valid ``qualifier`` values), all READY.

        The control plane's lifecycles run on ``lifecycle_clock`` (seconds; default
        ``time.monotonic``): a created harness is CREATING for ``ready_after_s``; its DEFAULT
        endpoint appears ``endpoint_appear_after_s`` after the harness is READY and is READY
        ``endpoint_ready_after_s`` after the harness is; an update takes ``update_after_s``
        (DEFAULT follows ``endpoint_ready_after_s`` later); a deletion ``delete_after_s``.
        Listings return at most ``page_size`` items a page."""
        if not re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]{0,39}", harness_name):
            raise ValueError(f"invalid harness name {harness_name!r}")
        self._script = list(script)
        self.access_key_id = access_key_id
        self.secret_access_key = secret_access_key
        self.session_token = session_token
        self._credentials: dict[str, tuple[str, str | None]] = {
            access_key_id: (secret_access_key, session_token)
        }
        self.region = region
        self.account = account
        self.mount_path = mount_path
        self._clock = clock or (lambda: datetime.now(UTC))
        partition = _partition(region)
        self.harness_id = harness_id or f"{harness_name}-{_suffix(harness_name)}"
        if not re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]{0,39}-[a-zA-Z0-9]{10}", self.harness_id):
            raise ValueError(f"invalid harness id {self.harness_id!r}")
        self.harness_arn = f"arn:{partition}:bedrock-agentcore:{region}:{account}:harness/{self.harness_id}"
        self.runtime_id = runtime_id or f"harness_{harness_name}-{_suffix('runtime:' + harness_name)}"
        self.runtime_arn = f"arn:{partition}:bedrock-agentcore:{region}:{account}:runtime/{self.runtime_id}"
        self.endpoints = frozenset(endpoints)
        self._lock = threading.RLock()
        self._init_loopback()
        self._faults: list[_Armed] = [_Armed(f, f.times, None) for f in faults]
        self._sessions: dict[str, _Session] = {}
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._root: Path | None = None
        self.requests: list[RecordedRequest] = []
        self.harness_name = harness_name
        self.control = ControlPlane(
            self,
            lifecycle_clock=lifecycle_clock or time.monotonic,
            ready_after_s=ready_after_s,
            endpoint_appear_after_s=endpoint_appear_after_s,
            endpoint_ready_after_s=endpoint_ready_after_s,
            update_after_s=update_after_s,
            delete_after_s=delete_after_s,
            page_size=page_size,
            harness_name=harness_name,
            endpoints=self.endpoints,
        )
        """The control plane: its harnesses, scripts and the calls it received."""

    # -- lifecycle --

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``: boto3's ``endpoint_url``."""
        return f"http://127.0.0.1:{self.port}"

    def _before_close(self) -> None:
        with self._lock:
            for pid in list(self._procs):
                # Registered means not yet reaped, so the group id is still ours.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)

    def close(self) -> None:
        super().close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self._lock:
                if not self._procs:
                    break
            time.sleep(0.02)
        with self._lock:
            root, self._root = self._root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)

    # -- test controls --

    def credentials_env(self) -> dict[str, str]:
        """Environment variables pointing an AWS SDK (or rma) at this emulator."""
        env = {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE": self.base_url,
            "AWS_ENDPOINT_URL_BEDROCK_AGENTCORE_CONTROL": self.base_url,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        if self.session_token is not None:
            env["AWS_SESSION_TOKEN"] = self.session_token
        return env

    def add_credentials(
        self, access_key_id: str, secret_access_key: str, session_token: str | None = None
    ) -> None:
        """Accept another access key (e.g. to test credential rotation)."""
        with self._lock:
            self._credentials[access_key_id] = (secret_access_key, session_token)

    def inject(self, *faults: AgentCoreFault, session_id: str | None = None) -> None:
        """Arm faults for every session (``session_id=None``) or for one runtime session."""
        with self._lock:
            self._faults.extend(_Armed(f, f.times, session_id) for f in faults)

    def script_session(self, session_id: str, script: Iterable[Turn]) -> None:
        """Give one runtime session its own script (its next turn is the first of ``script``)."""
        with self._lock:
            session = self._session(session_id)
            session.script = list(script)
            session.turns_played = 0

    def reset_session(self, session_id: str) -> None:
        """Forget a runtime session (conversation, script position, storage), as when the
        microVM's window ends and the same id starts afresh."""
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is not None and session.workdir is not None:
            shutil.rmtree(session.workdir.parent, ignore_errors=True)

    @property
    def sessions(self) -> dict[str, SessionView]:
        """A snapshot of every runtime session seen, by id."""
        with self._lock:
            return {sid: s.view() for sid, s in self._sessions.items()}

    def storage_dir(self, session_id: str) -> Path:
        """The session's storage directory (what ``mount_path`` maps to), created if needed,
        so a test can put files there before a command runs or read them after."""
        with self._lock:
            return self._dirs(self._session(session_id))[1]

    def workdir(self, session_id: str) -> Path:
        """The session's command working directory, created if needed."""
        with self._lock:
            return self._dirs(self._session(session_id))[0]

    # -- helpers --

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            session = _Session(session_id, len(self._sessions) + 1)
            self._sessions[session_id] = session
        return session

    def _dirs(self, session: _Session) -> tuple[Path, Path]:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="rma-agentcore-emu-"))
        if session.workdir is None or session.storage is None:
            # Session ids may hold any character (commands): directories are numbered instead.
            base = self._root / f"session-{session.number:04d}-{uuid.uuid4().hex[:6]}"
            session.workdir = base / "work"
            session.storage = base / "storage"
            session.workdir.mkdir(parents=True, exist_ok=True)
            session.storage.mkdir(parents=True, exist_ok=True)
        return session.workdir, session.storage

    def _take(
        self, kinds: Iterable[FaultKind], session_id: str | None, operation: Operation
    ) -> list[AgentCoreFault]:
        wanted = set(kinds)
        taken: list[AgentCoreFault] = []
        seen: set[FaultKind] = set()
        for armed in self._faults:
            fault = armed.fault
            if fault.kind not in wanted or fault.kind in seen or armed.remaining <= 0:
                continue
            if armed.session_id is not None and armed.session_id != session_id:
                continue
            if fault.operation is not None and fault.operation != operation:
                continue
            armed.remaining -= 1
            seen.add(fault.kind)
            taken.append(fault)
        return taken

    # -- request handling (server threads) --

    def _handle(self, h: LoopbackHandler) -> None:
        raw = h.read_body()
        headers = {k.lower(): v for k, v in h.headers.items()}
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
        request_id = str(uuid.uuid4())
        with self._lock:
            self.requests.append(RecordedRequest(h.command, h.path, headers, body, raw, request_id))
        try:
            self._verify_signature(h, raw)
            self._route(h, raw, request_id)
        except _AwsError as error:
            self._send_error(h, error, request_id)
        except _DISCONNECTS:
            h.close_connection = True

    def _send_error(self, h: LoopbackHandler, error: _AwsError, request_id: str) -> None:
        payload = json.dumps({"message": error.message, **error.fields}).encode()
        try:
            h.send_response(error.status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(payload)))
            h.send_header("x-amzn-RequestId", request_id)
            h.send_header("x-amzn-ErrorType", error.code)
            for name, value in error.headers.items():
                h.send_header(name, value)
            h.end_headers()
            h.wfile.write(payload)
        except _DISCONNECTS:
            h.close_connection = True

    def _route(self, h: LoopbackHandler, raw: bytes, request_id: str) -> None:
        url = urlsplit(h.path)
        path = url.path
        query = parse_qsl(url.query, keep_blank_values=True)
        media_type = (h.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if raw and media_type != "application/json":
            raise _AwsError(
                415, "UnsupportedMediaTypeException", f"Unsupported Content-Type {media_type or '(none)'!r}"
            )
        if h.command == "POST" and path == "/harnesses/invoke":
            self._invoke_harness(h, query, raw, request_id)
            return
        match = re.fullmatch(r"/runtimes/([^/]+)/commands", path)
        if h.command == "POST" and match:
            self._invoke_command(h, match.group(1), query, raw, request_id)
            return
        control = _control_route(h.command, path)
        if control is not None:
            self.control._serve(h, control[0], control[1], query, raw, request_id)
            return
        raise _AwsError(404, "UnknownOperationException", f"Unknown operation: {h.command} {path}")

    # -- SigV4 --

    def _verify_signature(self, h: LoopbackHandler, body: bytes) -> None:
        from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
        from botocore.awsrequest import AWSRequest, HTTPHeaders  # type: ignore[import-untyped]
        from botocore.credentials import Credentials  # type: ignore[import-untyped]

        authorization = h.headers.get("Authorization")
        if authorization is None:
            raise _forbidden("MissingAuthenticationTokenException", "Missing Authentication Token")
        algorithm, _, rest = authorization.strip().partition(" ")
        if algorithm != "AWS4-HMAC-SHA256":
            raise _forbidden(
                "IncompleteSignatureException",
                f"Unsupported AWS 'algorithm': '{algorithm}'. Authorization={authorization}",
            )
        fields: dict[str, str] = {}
        for part in rest.split(","):
            key, _, value = part.strip().partition("=")
            fields[key] = value
        for required in ("Credential", "SignedHeaders", "Signature"):
            if not fields.get(required):
                raise _forbidden(
                    "IncompleteSignatureException",
                    f"Authorization header requires '{required}' parameter. Authorization={authorization}",
                )
        scope = fields["Credential"].split("/")
        if len(scope) != 5:
            raise _forbidden(
                "IncompleteSignatureException",
                "Credential must have exactly 5 slash-delimited elements, e.g. "
                f"keyid/date/region/service/term, got '{fields['Credential']}'",
            )
        access_key, scope_date, scope_region, scope_service, terminator = scope
        with self._lock:
            known = self._credentials.get(access_key)
        if known is None:
            raise _forbidden(
                "UnrecognizedClientException", "The security token included in the request is invalid."
            )
        secret, token = known
        if h.headers.get("X-Amz-Security-Token") != token:
            raise _forbidden(
                "UnrecognizedClientException", "The security token included in the request is invalid."
            )
        amz_date = h.headers.get("X-Amz-Date")
        if amz_date is None:
            raise _forbidden(
                "IncompleteSignatureException",
                "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header. "
                f"Authorization={authorization}",
            )
        try:
            signed_at = datetime.strptime(amz_date, _SIGV4_TIME).replace(tzinfo=UTC)
        except ValueError:
            raise _forbidden(
                "IncompleteSignatureException",
                f"Date must be in ISO-8601 'basic format'. Got '{amz_date}'. See http://en.wikipedia.org/wiki/ISO_8601",
            ) from None
        if terminator != "aws4_request":
            raise _forbidden(
                "InvalidSignatureException",
                f"Credential should be scoped with a valid terminator: 'aws4_request', not '{terminator}'.",
            )
        if scope_service != SERVICE:
            raise _forbidden(
                "InvalidSignatureException", f"Credential should be scoped to correct service: '{SERVICE}'."
            )
        if scope_region != self.region:
            raise _forbidden("InvalidSignatureException", "Credential should be scoped to a valid region.")
        if scope_date != amz_date[:8]:
            raise _forbidden(
                "InvalidSignatureException",
                "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: "
                f"'{scope_date}' != '{amz_date[:8]}', from '{amz_date}'.",
            )
        now = self._clock()
        now = now if now.tzinfo else now.replace(tzinfo=UTC)
        if signed_at < now - MAX_CLOCK_SKEW:
            raise _forbidden(
                "InvalidSignatureException",
                f"Signature expired: {amz_date} is now earlier than "
                f"{(now - MAX_CLOCK_SKEW).strftime(_SIGV4_TIME)} ({now.strftime(_SIGV4_TIME)} - 5 min.)",
            )
        if signed_at > now + MAX_CLOCK_SKEW:
            raise _forbidden(
                "InvalidSignatureException",
                f"Signature not yet current: {amz_date} is still later than "
                f"{(now + MAX_CLOCK_SKEW).strftime(_SIGV4_TIME)} ({now.strftime(_SIGV4_TIME)} + 5 min.)",
            )
        signed_names = fields["SignedHeaders"].split(";")
        if "host" not in signed_names:
            raise _forbidden(
                "IncompleteSignatureException",
                "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.",
            )
        # Stricter than AWS may be: botocore and the reference signer both sign these, and an
        # unsigned date or token would let the request be replayed or re-scoped.
        for name in ("x-amz-date", "x-amz-security-token"):
            if h.headers.get(name) is not None and name not in signed_names:
                raise _forbidden(
                    "IncompleteSignatureException",
                    f"'{name}' must be a 'SignedHeader' in the AWS Authorization.",
                )
        declared_hash = h.headers.get("X-Amz-Content-SHA256")
        if declared_hash is not None and declared_hash != hashlib.sha256(body).hexdigest():
            raise _forbidden(
                "InvalidSignatureException",
                "The provided 'x-amz-content-sha256' header does not match what was computed"
                + (
                    " (this operation has no unsigned payload)."
                    if declared_hash == "UNSIGNED-PAYLOAD"
                    else "."
                ),
            )
        signed_headers = HTTPHeaders()
        for name in signed_names:
            for value in h.headers.get_all(name) or []:
                signed_headers[name] = value
        request = AWSRequest(method=h.command, url=f"http://{h.headers.get('Host', '')}{h.path}", data=body)
        request.headers = signed_headers
        request.context["timestamp"] = amz_date

        class _Verifier(SigV4Auth):  # type: ignore[misc]
            # Exactly the headers the client named, blacklisted or not: AWS checks what was signed.
            def headers_to_sign(self, req: Any) -> Any:
                return req.headers

        verifier = _Verifier(Credentials(access_key, secret, token), SERVICE, self.region)
        canonical = verifier.canonical_request(request)
        string_to_sign = verifier.string_to_sign(request, canonical)
        expected = verifier.signature(string_to_sign, request)
        if not hmac.compare_digest(expected, fields["Signature"]):
            raise _forbidden(
                "InvalidSignatureException",
                "The request signature we calculated does not match the signature you provided. Check your "
                "AWS Secret Access Key and signing method. Consult the service documentation for details.\n\n"
                f"The Canonical String for this request should have been\n'{canonical}'\n\n"
                f"The String-to-Sign should have been\n'{string_to_sign}'\n",
            )

    # -- input validation --

    def _params(
        self,
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

    def _validate(self, operation: str, params: JSONDict, service: str = SERVICE) -> None:
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
            timeout = (
                (params.get("body") or {}).get("timeout") if isinstance(params.get("body"), dict) else None
            )
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

    @staticmethod
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

    # -- InvokeHarness --

    def _invoke_harness(
        self, h: LoopbackHandler, query: list[tuple[str, str]], raw: bytes, request_id: str
    ) -> None:
        body = self._json_object(raw)
        params = self._params("InvokeHarness", h, query, body, None)
        self._validate("InvokeHarness", params)
        arn = params["harnessArn"]
        self.control._serving(
            lambda harness: harness.arn == arn,
            f"Harness not found: {arn}",
            params.get("qualifier"),
            lambda harness: f"harness {harness.id}",
        )
        session_id: str = params["runtimeSessionId"]
        messages: list[JSONDict] = copy.deepcopy(body["messages"])
        with self._lock:
            status = self._take(("status",), session_id, "InvokeHarness")
            if status:
                fault = status[0]
                raise _fault_error(fault, h)
            session = self._session(session_id)
            if session.busy is not None:
                raise _AwsError(
                    424,
                    "RuntimeClientError",
                    f"agentcore emulator: runtime session {session_id} is already running an invocation",
                )
            session.invocations += 1
            session.received.extend(copy.deepcopy(messages))
            if params.get("runtimeUserId") is not None:
                session.user_id = params["runtimeUserId"]
            problem = _conversation_problem(session.conversation, session.pending, messages)
            script = session.script if session.script is not None else self._script
            turn_index = session.turns_played
            if problem is None and turn_index >= len(script):
                raise _AwsError(
                    400,
                    "EmulatorScriptExhausted",
                    f"agentcore emulator: no scripted turn left for runtime session {session_id} "
                    f"(turn #{turn_index + 1}; the script has {len(script)})",
                )
            stream_faults = (
                self._take(("drop", "truncate", "bad_crc", "exception", "stall"), session_id, "InvokeHarness")
                if problem is None
                else []
            )
            combined = [*session.conversation, *messages]
            view = session.view(combined)
            session.busy = request_id
        played = {"all": False}
        assembler = _Assembler()
        stream = _Stream(self, h, stream_faults, filler=metadata())

        def end() -> None:
            # Runs just before the client can see the stream end (last chunk, exception or
            # cut), so a client that invokes again at once finds the session settled.
            with self._lock:
                if played["all"] and not stream.faulted:
                    # A test may give the session a new script while this turn's last bytes are
                    # still on their way: the new script starts at its first turn, so only the
                    # script this turn came from counts it.
                    current = session.script if session.script is not None else self._script
                    if current is script and session.turns_played == turn_index:
                        session.turns_played += 1
                    outcome = assembler.outcome()
                    if outcome is not None:
                        session.conversation = [*combined, *outcome[0]]
                        session.pending = outcome[1]
                if session.busy == request_id:
                    session.busy = None

        stream.before_end = end
        try:
            stream.begin(request_id, session_id)
            if problem is not None:
                stream.send_frame(Frame("exception", "runtimeClientError", {"message": problem}))
                stream.finish()
                return
            self._play(stream, script[turn_index], view, body, assembler)
            played["all"] = True
            stream.finish()
        except _StreamEnded:
            pass
        finally:
            end()

    def _play(
        self, stream: _Stream, turn: Turn, view: SessionView, body: JSONDict, assembler: _Assembler
    ) -> None:
        """Send the turn's frames; a callable that raises ends the stream with an
        ``internalServerException`` frame saying why (raising ``_StreamEnded``)."""
        try:
            items = turn(view, copy.deepcopy(body)) if callable(turn) else turn
            for item in _flatten(items):
                if item.kind == "pause":
                    stream.wait(item.seconds)
                    continue
                stream.send_frame(item)
                assembler.feed(item)
        except _StreamEnded:
            raise
        except Exception as exc:
            message = f"agentcore emulator: scripted turn raised {type(exc).__name__}: {exc}"
            stream.send_frame(Frame("exception", "internalServerException", {"message": message}))
            stream.finish()
            raise _StreamEnded from exc

    # -- InvokeAgentRuntimeCommand --

    def _invoke_command(
        self, h: LoopbackHandler, raw_label: str, query: list[tuple[str, str]], raw: bytes, request_id: str
    ) -> None:
        body = self._json_object(raw)
        label = unquote(raw_label)
        params = self._params("InvokeAgentRuntimeCommand", h, query, body, label)
        self._validate("InvokeAgentRuntimeCommand", params)
        by_id = params.get("accountId") in (None, self.account)
        self.control._serving(
            lambda harness: (
                label in (harness.arn, harness.runtime_arn)
                or (by_id and label in (harness.id, harness.runtime_id))
            ),
            f"Agent runtime not found: {label}",
            params.get("qualifier"),
            lambda harness: label,
        )
        session_id: str = params.get("runtimeSessionId") or str(uuid.uuid4())
        command: str = body["command"]
        timeout = int(body.get("timeout", _DEFAULT_COMMAND_TIMEOUT))
        with self._lock:
            status = self._take(("status",), session_id, "InvokeAgentRuntimeCommand")
            if status:
                fault = status[0]
                raise _fault_error(fault, h)
            session = self._session(session_id)
            session.commands.append(command)
            workdir, storage = self._dirs(session)
            stream_faults = self._take(
                ("drop", "truncate", "bad_crc", "exception", "stall"), session_id, "InvokeAgentRuntimeCommand"
            )
        stream = _Stream(
            self, h, stream_faults, filler=Frame("event", "chunk", {"contentDelta": {"stdout": ""}})
        )
        stream.begin(request_id, session_id)
        rewritten = command.replace(self.mount_path, str(storage)) if self.mount_path else command
        with contextlib.suppress(_StreamEnded):
            self._run(stream, rewritten, workdir, timeout)
            stream.finish()

    def _run(self, stream: _Stream, command: str, workdir: Path, timeout: int) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(workdir),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
        }
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        with self._lock:
            self._procs[proc.pid] = proc
        assert proc.stdout is not None and proc.stderr is not None
        try:
            stream.send_frame(Frame("event", "chunk", {"contentStart": {}}))
            exit_code, status = self._pump(stream, proc, timeout)
            stream.send_frame(
                Frame("event", "chunk", {"contentStop": {"exitCode": exit_code, "status": status}})
            )
        finally:
            self._end_process(proc)

    def _pump(self, stream: _Stream, proc: subprocess.Popen[bytes], timeout: int) -> tuple[int, str]:
        assert proc.stdout is not None and proc.stderr is not None
        selector = selectors.DefaultSelector()
        decoders = {}
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            selector.register(pipe.fileno(), selectors.EVENT_READ, name)
            decoders[name] = codecs.getincrementaldecoder("utf-8")(errors="replace")
        deadline = time.monotonic() + timeout
        exited_at: float | None = None
        try:
            while selector.get_map():
                now = time.monotonic()
                if now >= deadline:
                    self._kill_group(proc)
                    return -1, "TIMED_OUT"
                if self._stopping.is_set() or _client_gone(stream.h.connection):
                    raise _StreamEnded
                if exited_at is None and _exited(proc):
                    exited_at = now
                if exited_at is not None and now - exited_at > 0.5:
                    # The shell is gone but a background child still holds the pipes.
                    self._kill_group(proc)
                for key, _ in selector.select(timeout=min(0.1, max(0.0, deadline - now))):
                    name = str(key.data)
                    data = os.read(int(key.fd), 65536)
                    text = decoders[name].decode(data, final=not data)
                    if not data:
                        selector.unregister(key.fd)
                    if text:
                        stream.send_frame(Frame("event", "chunk", {"contentDelta": {name: text}}))
            while not _exited(proc):
                if time.monotonic() >= deadline:
                    self._kill_group(proc)
                    return -1, "TIMED_OUT"
                if self._stopping.wait(0.01):
                    raise _StreamEnded
            self._kill_group(proc)  # background leftovers (the leader is a zombie: the group is still ours)
            code = self._reap(proc)
            return (code if code >= 0 else 128 - code), "COMPLETED"
        finally:
            selector.close()

    @staticmethod
    def _kill_group(proc: subprocess.Popen[bytes]) -> None:
        # Never after reaping: until then the group id cannot have been reused.
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def _reap(self, proc: subprocess.Popen[bytes]) -> int:
        with self._lock:
            # Unregistered first, so close() no longer signals a group that is about to go.
            self._procs.pop(proc.pid, None)
        try:
            return proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return -1

    def _end_process(self, proc: subprocess.Popen[bytes]) -> None:
        self._kill_group(proc)
        self._reap(proc)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the process ended, without reaping it (its group id stays ours to signal)."""
    if proc.returncode is not None:
        return True
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid != 0


# --------------------------------------------------------------------------------------------
# The 200 stream (faults happen here)
# --------------------------------------------------------------------------------------------


class _Stream:
    def __init__(
        self, emulator: AgentCoreEmulator, h: LoopbackHandler, faults: Sequence[AgentCoreFault], filler: Frame
    ):
        self.emulator = emulator
        self.h = h
        self.faults = sorted(faults, key=lambda f: f.after)
        self.filler = filler
        self.sent = 0
        self.faulted = False
        self.before_end: Callable[[], None] | None = None

    def _ending(self) -> None:
        hook, self.before_end = self.before_end, None
        if hook is not None:
            hook()

    def begin(self, request_id: str, session_id: str) -> None:
        h = self.h
        try:
            h.send_response(200)
            h.send_header("Content-Type", EVENT_STREAM)
            h.send_header("Transfer-Encoding", "chunked")
            h.send_header("x-amzn-RequestId", request_id)
            h.send_header(SESSION_HEADER, session_id)
            h.end_headers()
        except OSError:
            h.close_connection = True
            raise _StreamEnded from None

    def _write(self, data: bytes) -> None:
        try:
            self.h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        except OSError:
            self.h.close_connection = True
            raise _StreamEnded from None

    def _abort(self) -> None:
        self._ending()
        self.h.close_connection = True
        with contextlib.suppress(OSError):
            self.h.connection.shutdown(socket.SHUT_RDWR)
        raise _StreamEnded

    def wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.emulator._stopping.wait(min(0.05, left)) or _client_gone(self.h.connection):
                self._abort()

    def _due(self, data: bytes | None) -> bytes | None:
        """Fire the faults due before frame number ``self.sent`` (every one left when ``data``
        is None: the end of the stream); return what to write in place of ``data``."""
        while self.faults and (data is None or self.faults[0].after <= self.sent):
            fault = self.faults.pop(0)
            if fault.kind == "stall":
                self.wait(fault.seconds)
                continue
            self.faulted = True
            if fault.kind == "drop":
                self._abort()
            frame_bytes = data if data is not None else self.filler.encode()
            if fault.kind == "truncate":
                self._write(frame_bytes[: max(1, len(frame_bytes) // 2)])
                self._abort()
            elif fault.kind == "bad_crc":
                self._write(frame_bytes[:-4] + bytes(b ^ 0xFF for b in frame_bytes[-4:]))
                if data is not None:
                    self.sent += 1
                    return None
            elif fault.kind == "exception":
                self._write(encode_exception(fault.code, {"message": fault.message, **fault.fields}))
                self._ending()
                self._write(b"")
                raise _StreamEnded
        return data

    def send_frame(self, item: Frame) -> None:
        data = self._due(item.encode())
        if data is None:
            return
        self._write(data)
        self.sent += 1

    def finish(self) -> None:
        self._due(None)
        self._ending()
        self._write(b"")


# --------------------------------------------------------------------------------------------
# What a turn said (for the session's conversation)
# --------------------------------------------------------------------------------------------


class _Assembler:
    """Folds the frames a turn sent into messages, the way a Converse client would."""

    def __init__(self) -> None:
        self.messages: list[JSONDict] = []
        self.current: JSONDict | None = None
        self.active: dict[Any, JSONDict] = {}
        self.final_stop: str | None = None
        self.failed = False

    def _message(self) -> JSONDict:
        if self.current is None:
            self.current = {"role": "assistant", "blocks": []}
            self.messages.append(self.current)
        return self.current

    def feed(self, item: Frame) -> None:
        if item.kind in ("exception", "error"):
            self.failed = True
            return
        payload = item.payload
        if item.kind != "event" or not isinstance(payload, dict):
            return
        index = payload.get("contentBlockIndex")
        if item.name == "messageStart":
            self.current = {"role": payload.get("role", "assistant"), "blocks": []}
            self.messages.append(self.current)
            self.active = {}
        elif item.name == "contentBlockStart":
            start = payload.get("start") or {}
            if isinstance(start.get("toolUse"), dict):
                block = {"kind": "toolUse", **start["toolUse"], "fragments": ""}
            elif isinstance(start.get("toolResult"), dict):
                block = {"kind": "toolResult", **start["toolResult"], "content": []}
            else:
                return
            self._message()["blocks"].append(block)
            self.active[index] = block
        elif item.name == "contentBlockDelta":
            self._delta(index, payload.get("delta") or {})
        elif item.name == "contentBlockStop":
            self.active.pop(index, None)
        elif item.name == "messageStop":
            self.final_stop = payload.get("stopReason")
            self._message()["stop"] = self.final_stop
            self.current = None

    def _delta(self, index: Any, delta: Mapping[str, Any]) -> None:
        block = self.active.get(index)
        if isinstance(delta.get("text"), str):
            if block is None or block["kind"] != "text":
                block = {"kind": "text", "text": ""}
                self._message()["blocks"].append(block)
                self.active[index] = block
            block["text"] += delta["text"]
        elif isinstance(delta.get("toolUse"), dict):
            if block is not None and block["kind"] == "toolUse":
                block["fragments"] += str(delta["toolUse"].get("input", ""))
        elif isinstance(delta.get("toolResult"), list):
            if block is not None and block["kind"] == "toolResult":
                block["content"].extend(delta["toolResult"])
        elif isinstance(delta.get("reasoningContent"), dict):
            if block is None or block["kind"] != "reasoning":
                block = {"kind": "reasoning", "text": "", "signature": None}
                self._message()["blocks"].append(block)
                self.active[index] = block
            part = delta["reasoningContent"]
            block["text"] += str(part.get("text", ""))
            if part.get("signature") is not None:
                block["signature"] = part["signature"]

    def outcome(self) -> tuple[list[JSONDict], list[JSONDict]] | None:
        """(messages the service keeps, client tool uses awaiting results), or None when the
        turn did not end properly (no messageStop, or an exception frame)."""
        if self.failed or self.final_stop is None:
            return None
        messages = [m for m in self.messages if m["blocks"]]
        pending: list[JSONDict] = []
        if self.final_stop == "tool_use" and messages and messages[-1]["role"] == "assistant":
            client = [b for b in messages[-1]["blocks"] if _is_client_tool(b)]
            if client:
                pending = [
                    {"toolUseId": b["toolUseId"], "name": b["name"], "input": _parse_input(b)} for b in client
                ]
                messages = messages[:-1]
        elif messages and messages[-1]["role"] == "assistant":
            # Unanswered client tool uses in a kept message would break the next request.
            messages[-1]["blocks"] = [b for b in messages[-1]["blocks"] if not _is_client_tool(b)]
        committed = [m for m in (_as_message(m) for m in messages) if m["content"]]
        if not pending and (not committed or committed[-1]["role"] != "assistant"):
            committed.append({"role": "assistant", "content": [{"text": "(emulated reply)"}]})
        return committed, pending


def _is_client_tool(block: Mapping[str, Any]) -> bool:
    return block["kind"] == "toolUse" and block.get("type") in (None, "tool_use")


def _parse_input(block: Mapping[str, Any]) -> Any:
    """The input the conversation keeps for a streamed tool use: its fragments as a JSON object,
    or ``{}`` when they are not one (broken JSON, an array, a string) — a tool use's input is an
    object on the model's side of the wire, so that is the only echo the model would accept."""
    try:
        value = json.loads(block["fragments"]) if block["fragments"] else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _as_message(message: Mapping[str, Any]) -> JSONDict:
    content: list[JSONDict] = []
    for block in message["blocks"]:
        if block["kind"] == "text" and block["text"]:
            content.append({"text": block["text"]})
        elif block["kind"] == "toolUse":
            tool_use = {"toolUseId": block["toolUseId"], "name": block["name"], "input": _parse_input(block)}
            if block.get("type") is not None:
                tool_use["type"] = block["type"]
            content.append({"toolUse": tool_use})
        elif block["kind"] == "toolResult":
            result: JSONDict = {"toolUseId": block["toolUseId"], "content": block["content"]}
            if block.get("status") is not None:
                result["status"] = block["status"]
            content.append({"toolResult": result})
        elif block["kind"] == "reasoning" and block["text"]:
            text: JSONDict = {"text": block["text"]}
            if block["signature"] is not None:
                text["signature"] = block["signature"]
            content.append({"reasoningContent": {"reasoningText": text}})
    return {"role": message["role"], "content": content}


# --------------------------------------------------------------------------------------------
# Conversation rules (Bedrock's, plus the emulator's exact-echo check)
# --------------------------------------------------------------------------------------------


def _bedrock(text: str) -> str:
    return f"An error occurred (ValidationException) when calling the ConverseStream operation: {text}"


def _ids(content: Sequence[Mapping[str, Any]], kind: str) -> list[str]:
    return [str(block[kind].get("toolUseId")) for block in content if isinstance(block.get(kind), dict)]


def _conversation_problem(
    stored: Sequence[JSONDict], pending: Sequence[JSONDict], new: Sequence[JSONDict]
) -> str | None:
    """The ``runtimeClientError`` message for a conversation the service would refuse, or None."""
    base = len(stored)
    combined = [*stored, *new]
    if pending and new and new[0].get("role") == "assistant":
        echoed = {
            str(b["toolUse"].get("toolUseId")): b["toolUse"]
            for b in new[0].get("content", [])
            if isinstance(b.get("toolUse"), dict)
        }
        expected = {p["toolUseId"]: p for p in pending}
        same = echoed.keys() == expected.keys() and all(
            echoed[i].get("name") == expected[i]["name"] and echoed[i].get("input") == expected[i]["input"]
            for i in expected
        )
        if not same:
            return (
                f"agentcore emulator: messages.{base}.content must echo exactly the toolUse blocks of the "
                f"previous turn ({json.dumps(list(pending))}); got {json.dumps(list(echoed.values()))}"
            )
    # The stored part is the emulator's own; check from the last stored message on.
    for i in range(max(0, base - 1), len(combined)):
        content = combined[i].get("content") or []
        if not content:
            return _bedrock(
                f"The content field in the Message object at messages.{i} is empty. Add a ContentBlock "
                "object to the content field and try again."
            )
        uses, results = _ids(content, "toolUse"), _ids(content, "toolResult")
        duplicates = sorted(
            {x for x in uses if uses.count(x) > 1} | {x for x in results if results.count(x) > 1}
        )
        if duplicates:
            return _bedrock(f"The request has duplicate Ids at messages.{i}.content: {', '.join(duplicates)}")
        if results:
            previous = combined[i - 1] if i > 0 and combined[i - 1].get("role") == "assistant" else None
            previous_uses = _ids(previous.get("content") or [], "toolUse") if previous else []
            if len(results) > len(previous_uses):
                return _bedrock(
                    f"The number of toolResult blocks at messages.{i}.content exceeds the number of toolUse "
                    "blocks of previous turn."
                )
        if uses and combined[i].get("role") == "assistant" and i + 1 < len(combined):
            answered = set(_ids(combined[i + 1].get("content") or [], "toolResult"))
            missing = [x for x in uses if x not in answered]
            if missing:
                return _bedrock(
                    f"Expected toolResult blocks at messages.{i + 1}.content for the following Ids: "
                    f"{', '.join(missing)}"
                )
    if not combined or combined[0].get("role") != "user":
        return _bedrock(
            "A conversation must start with a user message. Try again with a conversation that starts with a "
            "user message."
        )
    for i in range(max(1, base), len(combined)):
        if combined[i].get("role") == combined[i - 1].get("role"):
            return _bedrock(
                "A conversation must alternate between user and assistant roles. Make sure the conversation "
                "alternates between user and assistant roles and try again."
            )
    if combined[-1].get("role") != "user":
        return _bedrock(
            "A conversation must end with a user message. Try again with a conversation that ends with a "
            "user message."
        )
    return None


# --------------------------------------------------------------------------------------------
# Constraints botocore's ParamValidator does not check
# --------------------------------------------------------------------------------------------


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
