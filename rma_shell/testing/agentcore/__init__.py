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

**StopRuntimeSession** (``POST /runtimes/{agentRuntimeArn}/stopruntimesession``, checked
like the others against botocore's model: the session header, ``qualifier``, ``clientToken``)
cuts the session's ``InvokeHarness`` still in flight (its connection closed, the turn not
consumed) and answers 200; ``stops`` records every one (``RuntimeStop``). A session never
seen is a 404; the conversation is kept (both modeled: undocumented). ``hang_stop`` holds a
stop unanswered (a stop that hangs); ``error_once(…, operation="StopRuntimeSession")`` fails
one (``RetryableConflictException`` …).

**Faults** (``faults=`` or ``inject``; global or for one session; each for ``times`` requests;
``operation`` narrows them to ``"InvokeHarness"``, ``"InvokeAgentRuntimeCommand"``,
``"StopRuntimeSession"`` or a control operation — there only the status faults apply):
``throttle_once`` (429 ``ThrottlingException``), ``server_error_once``
(``InternalServerException``), ``error_once`` (any status and code), and, inside a 200 stream
after ``n`` frames: ``drop_after`` (close the connection), ``truncate_frame_after`` (half a
frame, then close), ``bad_crc_after`` (that frame with a corrupted message CRC, the stream then
goes on), ``exception_frame`` (an exception frame, then the stream ends cleanly) and ``stall``
(silence for a while, then the stream goes on; it never holds up ``close``). A cut or damaged
stream's turn is not kept in the conversation, unless the fault says ``kept=True``: the
harness then plays the turn to its end unseen and keeps it, as a host that outlives its
client would. A stream fault asked for past the last frame happens at the end of the stream
(truncate and bad CRC then use a filler event). Note that ``throttlingException`` is not a
member of the ``InvokeHarness`` stream union: botocore raises ``EventStreamError`` with an
empty code for it there.

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
listing, no endpoint updates, no memory, no credential providers, no costs, no TLS. It needs
botocore, its oracle (the ``aws`` extra: ``pip install "rma-agents[aws]"``); without it the
constructor raises ``ImportError`` saying so.

The package, one concern a module: ``server`` (``AgentCoreEmulator``: start-up, test controls,
routing), ``invoke`` (InvokeHarness), ``commands`` (InvokeAgentRuntimeCommand), ``stop``
(StopRuntimeSession), ``stream`` (the 200 event stream and its faults), ``conversation`` (what
a session keeps, Bedrock's rules), ``control`` and ``harnesses`` (the control plane), ``sigv4``
and ``validation`` (the request checks), ``frames`` (the script), ``faults`` and ``state``.
Every public name is importable from here.
"""

from rma_shell.testing.agentcore._common import (
    CONTROL_SERVICE,
    DEFAULT_ACCESS_KEY_ID,
    DEFAULT_ENDPOINT,
    DEFAULT_SECRET_ACCESS_KEY,
    GONE,
    HARNESS_STATUSES,
    INVOKABLE_STATUSES,
    SESSION_HEADER,
)
from rma_shell.testing.agentcore._common import EVENT_STREAM as EVENT_STREAM
from rma_shell.testing.agentcore._common import MAX_CLOCK_SKEW as MAX_CLOCK_SKEW
from rma_shell.testing.agentcore._common import SERVICE as SERVICE
from rma_shell.testing.agentcore._common import JSONDict as JSONDict
from rma_shell.testing.agentcore.control import ControlPlane
from rma_shell.testing.agentcore.faults import (
    AgentCoreFault,
    ControlOperation,
    bad_crc_after,
    drop_after,
    error_once,
    exception_frame,
    hang_stop,
    server_error_once,
    stall,
    throttle_once,
    truncate_frame_after,
)
from rma_shell.testing.agentcore.faults import FaultKind as FaultKind
from rma_shell.testing.agentcore.faults import Operation as Operation
from rma_shell.testing.agentcore.frames import (
    STOP_REASONS,
    Frame,
    SessionView,
    Turn,
    block_stop,
    frame,
    hook_event,
    message_start,
    message_stop,
    metadata,
    new_tool_use_id,
    pause,
    raw_frame,
    reasoning,
    reused_index_tool_turn,
    server_tool_turn,
    stop_turn,
    stream_error,
    stream_exception,
    text_delta,
    text_turn,
    tool_input_delta,
    tool_result_delta,
    tool_result_start,
    tool_turn,
    tool_use_start,
)
from rma_shell.testing.agentcore.frames import FrameItem as FrameItem
from rma_shell.testing.agentcore.frames import FrameKind as FrameKind
from rma_shell.testing.agentcore.frames import ToolCall as ToolCall
from rma_shell.testing.agentcore.frames import TurnFunction as TurnFunction
from rma_shell.testing.agentcore.harnesses import ControlCall, HarnessView
from rma_shell.testing.agentcore.server import AgentCoreEmulator
from rma_shell.testing.agentcore.state import RuntimeStop

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
    "RuntimeStop",
    "SessionView",
    "Turn",
    "bad_crc_after",
    "block_stop",
    "drop_after",
    "error_once",
    "exception_frame",
    "frame",
    "hang_stop",
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
