"""A loopback Claude Managed Agents server with a scripted agent.

``CMAEmulator`` runs a real HTTP/1.1 server on 127.0.0.1 (an OS-chosen port) in background
threads and speaks the Claude Managed Agents wire (beta ``managed-agents-2026-04-01``) the way
the official ``anthropic`` SDK (2.10.0) expects it, so any client — the SDK, httpx, rma's
provider — talks to it over its ordinary HTTP stack::

    with CMAEmulator(script=[tool_turn(("lookup", {"id": "c9"})), text_turn("Done.")]) as emu:
        client = anthropic.Anthropic(base_url=emu.base_url, api_key=emu.api_key)
        agent = client.beta.agents.create(name="bot", model="claude-sonnet-4-6")
        ...

What it serves (all under ``/v1``): agents (create, get with ``version``, update — versioned —,
list, versions list, archive), environments (create, get, update, list, archive, delete),
sessions (create, get, update, list — bidirectional cursor —, archive, delete), session
resources, events (``POST …/events``, ``GET …/events`` paginated, ``GET …/events/stream`` as
SSE) and files (multipart upload, list, metadata, content download, delete). Errors use the
API's envelope ``{"type": "error", "error": {"type", "message", "details"?}, "request_id"}``
and, where the SDK maps one, its ``error.details.error_code`` (``environment_not_found``,
``environment_archived``, ``invalid_metadata``, ``file_not_downloadable``).

The agent is a script: a list of turns, each a list of server events (build them with the
helpers below: ``agent_message``, ``custom_tool_use``, ``model_request_end``,
``idle_requires_action`` …, or whole turns with ``text_turn`` / ``tool_turn``) or a callable
``(SessionView, input_events) -> events``. Every session runs the emulator's script from its
first turn (``script_session`` gives one session its own). A turn starts when the client sends
a ``user.message`` or ``user.define_outcome``, or answers the last pending tool use
(``user.custom_tool_result``, ``user.tool_confirmation``, ``user.tool_result``); answering only
some re-emits a ``requires_action`` idle listing the rest; ``user.interrupt`` emits an
``end_turn`` idle. Input events are echoed into the history (and to live streams) before the
turn they trigger. Running out of turns answers the triggering POST with a 400 of type
``emulator_script_exhausted``.

The emulator fills what the server fills: event ``id`` (``sevt_…``) and ``processed_at``;
``event_ids`` of a ``requires_action`` idle (the tool uses still waiting); ``model_request_start_id``
of a ``span.model_request_end`` (emitting the start first if the script did not);
``outcome_id``, ``iteration`` and ``outcome_evaluation_start_id`` of outcome spans; the
``outcome_id`` of a ``user.define_outcome`` echo. It tracks the session's ``status``, ``usage``
(from ``span.model_request_end``) and ``outcome_evaluations``.

The stream has no replay: a subscriber receives only events emitted after it connected.
Faults (``inject`` or ``faults=``; global or per session; each for ``times`` occurrences):
``status_once`` (the stream's ``GET …/events/stream`` included), ``drop_stream_after``,
``error_frame``, ``requires_action_from_earlier_batch``, ``terminal_while_disconnected``,
``close_idle_connection``. A wrong or missing key always gets a 401.

Scripted turns are played synchronously while the triggering POST is handled (before its
response is written), under the emulator's lock: a callable turn may call the emulator's own
inspection methods (``history``, ``session``) but must not make HTTP calls to it.

It is not a model and not the real service: no sandbox, no tool execution, no costs.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import json
import mimetypes
import queue
import re
import select
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

import attrs

from rma_shell.testing._loopback import LoopbackEmulator, LoopbackHandler
from rma_shell.testing.openai_emulator import RecordedRequest

__all__ = [
    "BETA",
    "DEFAULT_API_KEY",
    "CMAEmulator",
    "CMAFault",
    "ServerEvent",
    "SessionView",
    "Turn",
    "agent_message",
    "agent_thinking",
    "agent_tool_result",
    "agent_tool_use",
    "close_idle_connection",
    "custom_tool_use",
    "drop_stream_after",
    "error_frame",
    "idle_budget_reached",
    "idle_end_turn",
    "idle_refusal",
    "idle_requires_action",
    "idle_retries_exhausted",
    "model_request_end",
    "model_request_start",
    "model_usage",
    "outcome_evaluation_end",
    "outcome_evaluation_ongoing",
    "outcome_evaluation_start",
    "requires_action_from_earlier_batch",
    "session_error",
    "session_usage",
    "status_idle",
    "status_once",
    "status_rescheduled",
    "status_running",
    "status_terminated",
    "terminal_while_disconnected",
    "text_turn",
    "tool_turn",
]

JSONDict = dict[str, Any]

BETA = "managed-agents-2026-04-01"
"""The beta every agents/environments/sessions call must name in ``anthropic-beta``."""

DEFAULT_API_KEY = "sk-ant-emulator-key"


# --------------------------------------------------------------------------------------------
# Script types
# --------------------------------------------------------------------------------------------


@attrs.frozen
class SessionView:
    """What a callable turn sees: a snapshot of the session when the turn starts."""

    id: str
    resource: JSONDict
    """The session object, as ``GET /v1/sessions/{id}`` returns it."""
    history: tuple[JSONDict, ...]
    """Every stored event so far, oldest first (including this request's echoes)."""
    pending: tuple[str, ...]
    """Ids of the tool-use events still waiting for a result or confirmation."""
    turn_index: int
    """0-based index of the turn being played."""


ServerEvent = Mapping[str, Any]
TurnFunction = Callable[[SessionView, list[JSONDict]], Iterable[ServerEvent]]
Turn = Sequence[ServerEvent] | TurnFunction
"""A list of server events to emit, or a callable ``(session, input_events) -> events``."""


# --------------------------------------------------------------------------------------------
# Event builders (shapes as the API sends them; the emulator adds id and processed_at)
# --------------------------------------------------------------------------------------------


def _text_blocks(text: str | Sequence[str]) -> list[JSONDict]:
    texts = [text] if isinstance(text, str) else list(text)
    return [{"type": "text", "text": t} for t in texts]


def agent_message(text: str | Sequence[str]) -> JSONDict:
    """``agent.message`` with one text block per string."""
    return {"type": "agent.message", "content": _text_blocks(text)}


def agent_thinking() -> JSONDict:
    """``agent.thinking`` (a progress signal; it carries no text)."""
    return {"type": "agent.thinking"}


def custom_tool_use(
    name: str,
    input: Mapping[str, Any] | None = None,
    *,
    id: str | None = None,
    session_thread_id: str | None = None,
) -> JSONDict:
    """``agent.custom_tool_use``: the client must answer with ``user.custom_tool_result``
    whose ``custom_tool_use_id`` is this event's id (pin it with ``id`` if a test needs it)."""
    event: JSONDict = {"type": "agent.custom_tool_use", "name": name, "input": dict(input or {})}
    if id is not None:
        event["id"] = id
    if session_thread_id is not None:
        event["session_thread_id"] = session_thread_id
    return event


def agent_tool_use(
    name: str,
    input: Mapping[str, Any] | None = None,
    *,
    evaluated_permission: Literal["allow", "ask", "deny"] | None = None,
    id: str | None = None,
) -> JSONDict:
    """``agent.tool_use`` (a built-in tool); ``evaluated_permission="ask"`` makes it wait for a
    ``user.tool_confirmation``."""
    event: JSONDict = {"type": "agent.tool_use", "name": name, "input": dict(input or {})}
    if evaluated_permission is not None:
        event["evaluated_permission"] = evaluated_permission
        policy = {"allow": "always_allow", "ask": "always_ask", "deny": "auto"}[evaluated_permission]
        evaluation: JSONDict = {"type": policy}
        if policy == "auto":
            evaluation["evaluated_permission"] = {"type": "deny", "reason_code": "high_risk"}
        event["evaluation"] = evaluation
    if id is not None:
        event["id"] = id
    return event


def agent_tool_result(tool_use_id: str, text: str, *, is_error: bool = False) -> JSONDict:
    """``agent.tool_result``: the server's output of a built-in tool."""
    return {
        "type": "agent.tool_result",
        "tool_use_id": tool_use_id,
        "content": _text_blocks(text),
        "is_error": is_error,
    }


def model_request_start() -> JSONDict:
    """``span.model_request_start``."""
    return {"type": "span.model_request_start"}


def model_usage(
    input_tokens: int = 10,
    output_tokens: int = 5,
    *,
    cache_creation_input_tokens: int = 0,
    cache_read_input_tokens: int = 0,
) -> JSONDict:
    """A ``model_usage`` / ``usage`` object (all four token counts are always present)."""
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": cache_creation_input_tokens,
        "cache_read_input_tokens": cache_read_input_tokens,
    }


def model_request_end(
    input_tokens: int = 10,
    output_tokens: int = 5,
    *,
    cache_creation_input_tokens: int = 0,
    cache_read_input_tokens: int = 0,
    is_error: bool | None = None,
    model_request_start_id: str | None = None,
) -> JSONDict:
    """``span.model_request_end`` with ``model_usage``; ``model_request_start_id`` defaults to
    the open ``span.model_request_start`` (emitted first if there is none)."""
    event: JSONDict = {
        "type": "span.model_request_end",
        "model_usage": model_usage(
            input_tokens,
            output_tokens,
            cache_creation_input_tokens=cache_creation_input_tokens,
            cache_read_input_tokens=cache_read_input_tokens,
        ),
    }
    if is_error is not None:
        event["is_error"] = is_error
    if model_request_start_id is not None:
        event["model_request_start_id"] = model_request_start_id
    return event


def status_running() -> JSONDict:
    """``session.status_running``."""
    return {"type": "session.status_running"}


def status_rescheduled() -> JSONDict:
    """``session.status_rescheduled``."""
    return {"type": "session.status_rescheduled"}


def status_idle(stop_reason: Mapping[str, Any], *, stop_details: Mapping[str, Any] | None = None) -> JSONDict:
    """``session.status_idle`` with an explicit ``stop_reason`` object."""
    event: JSONDict = {"type": "session.status_idle", "stop_reason": dict(stop_reason)}
    if stop_details is not None:
        event["stop_details"] = dict(stop_details)
    return event


def idle_end_turn() -> JSONDict:
    """``session.status_idle`` with ``stop_reason: end_turn``."""
    return status_idle({"type": "end_turn"})


def idle_requires_action(event_ids: Sequence[str] | None = None) -> JSONDict:
    """``session.status_idle`` with ``stop_reason: requires_action``; ``event_ids`` defaults to
    every tool use still waiting when the idle is emitted."""
    stop: JSONDict = {"type": "requires_action"}
    if event_ids is not None:
        stop["event_ids"] = list(event_ids)
    return status_idle(stop)


def idle_retries_exhausted() -> JSONDict:
    """``session.status_idle`` with ``stop_reason: retries_exhausted``."""
    return status_idle({"type": "retries_exhausted"})


def idle_budget_reached() -> JSONDict:
    """``session.status_idle`` with ``stop_reason: budget_reached``."""
    return status_idle({"type": "budget_reached"})


def idle_refusal(category: str | None = None, explanation: str | None = None) -> JSONDict:
    """``session.status_idle`` with ``stop_reason: refusal`` and its ``stop_details``."""
    return status_idle(
        {"type": "refusal"},
        stop_details={"type": "refusal", "category": category, "explanation": explanation},
    )


def status_terminated() -> JSONDict:
    """``session.status_terminated`` (it has no ``stop_reason``)."""
    return {"type": "session.status_terminated"}


def session_error(
    message: str = "An unexpected error occurred.",
    *,
    error_type: str = "unknown_error",
    retry_status: Literal["retrying", "exhausted", "terminal"] = "retrying",
    **extra: Any,
) -> JSONDict:
    """``session.error``; ``retry_status`` says what the server does next."""
    error: JSONDict = {
        "type": error_type,
        "message": message,
        "retry_status": {"type": retry_status},
        **extra,
    }
    return {"type": "session.error", "error": error}


def session_usage(usage: Mapping[str, Any], *, budget: Mapping[str, Any] | None = None) -> JSONDict:
    """``session.usage``: a cumulative usage snapshot (and the budget, if any)."""
    event: JSONDict = {"type": "session.usage", "usage": dict(usage)}
    if budget is not None:
        event["budget"] = dict(budget)
    return event


def outcome_evaluation_start(*, outcome_id: str | None = None, iteration: int | None = None) -> JSONDict:
    """``span.outcome_evaluation_start``; ``outcome_id`` defaults to the latest defined outcome,
    ``iteration`` to the number of evaluations that outcome already finished."""
    event: JSONDict = {"type": "span.outcome_evaluation_start"}
    if outcome_id is not None:
        event["outcome_id"] = outcome_id
    if iteration is not None:
        event["iteration"] = iteration
    return event


def outcome_evaluation_ongoing(*, outcome_id: str | None = None, iteration: int | None = None) -> JSONDict:
    """``span.outcome_evaluation_ongoing`` (a grader heartbeat)."""
    event: JSONDict = {"type": "span.outcome_evaluation_ongoing"}
    if outcome_id is not None:
        event["outcome_id"] = outcome_id
    if iteration is not None:
        event["iteration"] = iteration
    return event


def outcome_evaluation_end(
    result: str,
    explanation: str = "",
    *,
    usage: Mapping[str, Any] | None = None,
    outcome_id: str | None = None,
    iteration: int | None = None,
    outcome_evaluation_start_id: str | None = None,
) -> JSONDict:
    """``span.outcome_evaluation_end`` with its verdict in ``result`` (``satisfied``,
    ``needs_revision``, ``max_iterations_reached``, ``failed``, ``interrupted``)."""
    event: JSONDict = {
        "type": "span.outcome_evaluation_end",
        "result": result,
        "explanation": explanation,
        "usage": dict(usage) if usage is not None else model_usage(),
    }
    if outcome_id is not None:
        event["outcome_id"] = outcome_id
    if iteration is not None:
        event["iteration"] = iteration
    if outcome_evaluation_start_id is not None:
        event["outcome_evaluation_start_id"] = outcome_evaluation_start_id
    return event


def text_turn(text: str | Sequence[str], *, usage: Mapping[str, Any] | None = None) -> list[JSONDict]:
    """A whole turn ending the way a plain answer does: running, model request (start, the
    message, end with ``usage``), idle ``end_turn``."""
    return [
        status_running(),
        model_request_start(),
        agent_message(text),
        _with_usage(model_request_end(), usage),
        idle_end_turn(),
    ]


def tool_turn(
    *calls: tuple[str, Mapping[str, Any]] | Mapping[str, Any],
    text: str | None = None,
    usage: Mapping[str, Any] | None = None,
) -> list[JSONDict]:
    """A whole turn asking for custom tools: running, model request (optional text, one
    ``agent.custom_tool_use`` per call, end), idle ``requires_action`` listing them. A call is
    ``(name, input)`` or a ``custom_tool_use(...)`` event."""
    events = [status_running(), model_request_start()]
    if text is not None:
        events.append(agent_message(text))
    for call in calls:
        events.append(custom_tool_use(call[0], call[1]) if isinstance(call, tuple) else dict(call))
    events += [_with_usage(model_request_end(), usage), idle_requires_action()]
    return events


def _with_usage(event: JSONDict, usage: Mapping[str, Any] | None) -> JSONDict:
    if usage is not None:
        event["model_usage"] = {**model_usage(0, 0), **usage}
    return event


# --------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------

FaultKind = Literal[
    "status",
    "drop_stream",
    "error_frame",
    "earlier_batch",
    "terminal_disconnected",
    "trickle",
    "drop_budget",
    "close_idle",
]


@attrs.frozen
class CMAFault:
    """A fault; build with ``status_once``, ``drop_stream_after``, ``error_frame``,
    ``requires_action_from_earlier_batch``, ``terminal_while_disconnected``, ``trickle``,
    ``budget_not_echoed`` or ``close_idle_connection``."""

    kind: FaultKind
    times: int = 1
    status: int = 0
    retry_after: str | None = None
    retry_after_ms: str | None = None
    error_type: str | None = None
    message: str | None = None
    method: str | None = None
    path: str | None = None
    after: int = 0
    delay: float | None = 0.05
    drop_stream: bool = False
    size: int = 0


def status_once(
    code: int,
    *,
    retry_after: float | str | None = None,
    retry_after_ms: float | None = None,
    error_type: str | None = None,
    message: str | None = None,
    method: str | None = None,
    path: str | None = None,
    times: int = 1,
) -> CMAFault:
    """Answer the next matching request(s) with HTTP ``code`` and the API's error envelope.

    ``method`` (e.g. "POST") and ``path`` (a regex searched in the path, query excluded)
    narrow which requests match; ``retry_after`` sets ``retry-after`` (seconds),
    ``retry_after_ms`` sets ``retry-after-ms``."""
    return CMAFault(
        "status",
        times=times,
        status=code,
        retry_after=None if retry_after is None else _num(retry_after),
        retry_after_ms=None if retry_after_ms is None else _num(retry_after_ms),
        error_type=error_type,
        message=message,
        method=method.upper() if method else None,
        path=path,
    )


def drop_stream_after(n: int, *, times: int = 1) -> CMAFault:
    """Close the next SSE connection abruptly (no final chunk) after it carried ``n`` events.
    Events emitted afterwards still go to the history."""
    return CMAFault("drop_stream", times=times, after=max(0, n))


def error_frame(
    after: int = 0,
    *,
    error_type: str = "overloaded_error",
    message: str = "Overloaded",
    times: int = 1,
) -> CMAFault:
    """On the next SSE connection, after ``after`` events, send an ``event: error`` frame whose
    data is the error envelope, then end the stream."""
    return CMAFault("error_frame", times=times, after=max(0, after), error_type=error_type, message=message)


def requires_action_from_earlier_batch(
    *, delay: float | None = 0.05, drop_stream: bool = False, times: int = 1
) -> CMAFault:
    """In the next turn holding a ``requires_action`` idle, emit the events before the idle at
    once and hold the idle (and the rest of the turn) back, so it reaches the client in a later
    batch than the tool uses it references. The held events are released when a new stream
    subscribes, when the client sends events, or after ``delay`` seconds (``None``: never by
    time). ``drop_stream=True`` also drops every open stream of the session right after the
    tool uses, and then only a new subscription or a send releases the idle."""
    return CMAFault("earlier_batch", times=times, delay=delay, drop_stream=drop_stream)


def terminal_while_disconnected(*, times: int = 1) -> CMAFault:
    """In the next turn holding a terminal event (an idle other than ``requires_action``, or
    ``session.status_terminated``), drop every open stream of the session just before it, so
    that event lands in the history while no stream is connected."""
    return CMAFault("terminal_disconnected", times=times)


def trickle(
    *,
    method: str | None = None,
    path: str | None = None,
    interval: float = 0.1,
    size: int = 4096,
    times: int = 1,
) -> CMAFault:
    """Serve the next matching request(s) as usual, but send the answer's body one byte every
    ``interval`` seconds, padded with JSON whitespace to ``size`` bytes: a server that never
    goes silent long enough for a per-read timeout to fire, yet takes ``interval × size``
    seconds to answer. ``method``/``path`` narrow the match as in ``status_once``."""
    return CMAFault(
        "trickle",
        times=times,
        method=method.upper() if method else None,
        path=path,
        delay=max(0.0, interval),
        size=max(1, size),
    )


def budget_not_echoed(*, times: int = 1) -> CMAFault:
    """The next session create(s) accept the request but keep no budget: the session is created
    uncapped and its ``budget`` is ``null`` (what a client must catch before prompting, S-73)."""
    return CMAFault("drop_budget", times=times)


def close_idle_connection(*, method: str | None = None, path: str | None = None, times: int = 1) -> CMAFault:
    """The keep-alive race: the next matching request that arrives on a connection which
    already served one finds it closed — the server drops the connection without answering
    and without processing the request (it is not in ``requests``; ``closed_idle`` counts
    it). ``method``/``path`` narrow the match as in ``status_once``."""
    return CMAFault("close_idle", times=times, method=method.upper() if method else None, path=path)


def _num(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else str(value)


@attrs.define
class _Armed:
    fault: CMAFault
    remaining: int
    session_id: str | None


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------

_ERROR_TYPES: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    402: ("billing_error", "Your credit balance is too low."),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "Not found."),
    408: ("timeout_error", "Request timed out."),
    409: ("conflict_error", "Conflict."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of requests has exceeded your rate limit."),
    500: ("api_error", "Internal server error."),
    502: ("api_error", "Bad gateway."),
    503: ("api_error", "Service unavailable."),
    504: ("timeout_error", "Gateway timeout."),
    529: ("overloaded_error", "Overloaded"),
}


class _Rejected(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        error_type: str | None = None,
        *,
        error_code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type or _ERROR_TYPES.get(status, ("api_error", ""))[0]
        self.error_code = error_code
        self.headers = dict(headers or {})


def _invalid(message: str, *, error_code: str | None = None) -> _Rejected:
    return _Rejected(400, message, "invalid_request_error", error_code=error_code)


def _not_found(what: str, ident: str, *, error_code: str | None = None) -> _Rejected:
    return _Rejected(404, f"{what} {ident!r} not found.", "not_found_error", error_code=error_code)


# --------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------


class _Subscriber:
    def __init__(self, connection: socket.socket, deltas: frozenset[str]) -> None:
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.connection = connection
        self.deltas = deltas
        self.drop_after: int | None = None
        self.error: CMAFault | None = None
        self.watched = False
        """Whether ``_HangupWatch`` tells this stream when its client hangs up."""


_DROP = object()
_END = object()
_GONE = object()
_WAKE = object()


class _HangupWatch:
    """One thread that notices clients hanging up on their event streams.

    Without it every stream thread would wake up ten times a second to look at its socket;
    with thousands of streams open those wake-ups alone saturate the GIL. The watcher waits on
    all stream sockets at once and puts ``_GONE`` in a stream's queue when its client has closed
    the connection, so stream threads block on their queues until there is something to do.
    A socket that turns readable with data instead (a client writing on its stream) is handed
    back to its stream thread (``_WAKE``), which then polls it itself as before.
    """

    def __init__(self, stopping: threading.Event) -> None:
        self._stopping = stopping
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, sub: _Subscriber) -> None:
        with self._lock:
            try:
                self._selector.register(sub.connection, selectors.EVENT_READ, sub)
            except (KeyError, ValueError, OSError):
                return  # not watchable: the stream thread keeps polling its socket
            sub.watched = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="cma-emulator-hangups", daemon=True)
                self._thread.start()

    def unwatch(self, sub: _Subscriber) -> None:
        with self._lock:
            if sub.watched:
                sub.watched = False
                with contextlib.suppress(KeyError, ValueError, OSError):
                    self._selector.unregister(sub.connection)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                ready = self._selector.select(timeout=0.1)
            except (OSError, ValueError):
                continue
            for key, _ in ready:
                sub: _Subscriber = key.data
                if not sub.watched:
                    continue
                gone = _client_gone(sub.connection)  # never raises: a broken socket is gone
                self.unwatch(sub)
                sub.queue.put(_GONE if gone else _WAKE)


@attrs.define
class _Agent:
    seq: int
    versions: list[JSONDict]


@attrs.define
class _Resource:
    seq: int
    data: JSONDict


@attrs.define
class _File:
    seq: int
    meta: JSONDict
    content: bytes


@attrs.define
class _Session:
    seq: int
    data: JSONDict
    script: list[Turn]
    self_hosted: bool
    turn_index: int = 0
    history: list[tuple[int, JSONDict]] = attrs.Factory(list)
    tool_kinds: dict[str, str] = attrs.Factory(dict)
    pending: dict[str, str] = attrs.Factory(dict)
    answered: set[str] = attrs.Factory(set)
    awaiting_action: bool = False
    subscribers: list[_Subscriber] = attrs.Factory(list)
    deferred: list[JSONDict] = attrs.Factory(list)
    deferred_token: int = 0
    open_model_request: str | None = None
    last_outcome_id: str | None = None
    outcome_iterations: dict[str, int] = attrs.Factory(dict)
    outcome_starts: dict[str, str] = attrs.Factory(dict)
    resources: list[tuple[int, JSONDict]] = attrs.Factory(list)
    created: float = 0.0


_INPUT_TYPES = frozenset(
    {
        "user.message",
        "user.interrupt",
        "user.tool_confirmation",
        "user.custom_tool_result",
        "user.define_outcome",
        "user.tool_result",
        "system.message",
    }
)
_ANSWERS = frozenset({"user.custom_tool_result", "user.tool_confirmation", "user.tool_result"})
_KICKOFFS = frozenset({"user.message", "user.define_outcome"})
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_AGENT_TOOLSET = "agent_toolset_20260401"
_SESSION_AGENT_KEYS = (
    "id",
    "type",
    "name",
    "description",
    "model",
    "system",
    "tools",
    "mcp_servers",
    "skills",
    "multiagent",
    "execution_identity",
    "version",
)


# --------------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------------


@attrs.frozen
class _Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Mapping[str, str] = attrs.Factory(dict)


_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class CMAEmulator(LoopbackEmulator):
    """The emulator; use as a context manager (``with CMAEmulator(script=…) as emu``)."""

    handler_class = LoopbackHandler
    thread_name = "cma-emulator"

    def __init__(
        self,
        script: Iterable[Turn] = (),
        *,
        api_key: str | None = DEFAULT_API_KEY,
        bearer_tokens: Iterable[str] = (),
        faults: Iterable[CMAFault] = (),
        require_beta: bool = True,
        require_version: bool = True,
        uploads_downloadable: bool = False,
        ping_interval: float | None = None,
        delta_chars: int = 8,
        unique_names: bool = False,
    ) -> None:
        """``api_key``: requests must carry it as ``x-api-key`` or ``Authorization: Bearer``
        (the SDK 2.10.0 sends the latter); ``None`` disables the check. ``bearer_tokens``: extra
        tokens accepted as ``Authorization: Bearer <token>``. ``require_beta``: agents,
        environments and sessions calls must name ``managed-agents-2026-04-01`` in
        ``anthropic-beta`` (else 400). ``require_version``: every call must send
        ``anthropic-version``. ``uploads_downloadable``: let ``GET /v1/files/{id}/content`` serve
        uploads (the API answers 400 ``file_not_downloadable``; only agent outputs are
        downloadable — add those with ``add_output_file``). ``ping_interval``: send
        ``event: ping`` frames on idle streams. ``delta_chars``: text per ``event_delta`` preview.
        ``unique_names``: answer a create of an agent or environment whose name an existing one
        (live or archived) already holds with 409 ``conflict_error`` — whether the real API
        does is unverified, so this is opt-in (it makes name-collision recovery testable)."""
        self._script = list(script)
        self.api_key = api_key
        self._bearer_tokens = frozenset(bearer_tokens)
        self._require_beta = require_beta
        self._require_version = require_version
        self._uploads_downloadable = uploads_downloadable
        self._ping_interval = ping_interval
        self._delta_chars = max(1, delta_chars)
        self._unique_names = unique_names
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._init_loopback()
        self._faults: list[_Armed] = [_Armed(f, f.times, None) for f in faults]
        self.closed_idle = 0
        """Requests dropped unanswered by ``close_idle_connection``."""
        self._hangups = _HangupWatch(self._stopping)
        self._counter = 0
        self._ids: dict[str, int] = {}
        self._last_time = datetime.now(UTC)
        self._agents: dict[str, _Agent] = {}
        self._environments: dict[str, _Resource] = {}
        self._sessions: dict[str, _Session] = {}
        self._files: dict[str, _File] = {}
        self._timers: list[threading.Timer] = []
        self.requests: list[RecordedRequest] = []

    # -- lifecycle --

    def _before_close(self) -> None:
        with self._lock:
            for timer in self._timers:
                timer.cancel()
            for session in self._sessions.values():
                for sub in session.subscribers:
                    sub.queue.put(_END)
                session.subscribers.clear()
            self._changed.notify_all()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` — the SDK's ``base_url`` form (paths carry ``/v1``)."""
        return f"http://127.0.0.1:{self.port}"

    # -- test controls --

    def inject(self, *faults: CMAFault, session_id: str | None = None) -> None:
        """Arm faults, for every session (``session_id=None``) or for one."""
        with self._lock:
            self._faults.extend(_Armed(f, f.times, session_id) for f in faults)

    def script_session(self, session_id: str, script: Iterable[Turn]) -> None:
        """Give one session its own script (its next turn is the first of ``script``)."""
        with self._lock:
            session = self._session(session_id)
            session.script = list(script)
            session.turn_index = 0

    def emit(self, session_id: str, *events: ServerEvent) -> list[JSONDict]:
        """Emit server events now (outside any turn), e.g. to terminate a session."""
        with self._lock:
            session = self._session(session_id)
            return [self._emit(session, e) for e in events]

    def history(self, session_id: str) -> list[JSONDict]:
        """A copy of the session's stored events, oldest first."""
        with self._lock:
            return copy.deepcopy([e for _, e in self._session(session_id).history])

    def session(self, session_id: str) -> JSONDict:
        """A copy of the session object."""
        with self._lock:
            return copy.deepcopy(self._session_out(self._session(session_id)))

    @property
    def session_ids(self) -> list[str]:
        """Ids of the live (not deleted) sessions, oldest first."""
        with self._lock:
            return list(self._sessions)

    def subscribers(self, session_id: str) -> int:
        """How many event streams of the session are open."""
        with self._lock:
            return len(self._session(session_id).subscribers)

    def wait_for_subscribers(self, session_id: str, count: int = 1, timeout: float = 5.0) -> None:
        """Block until at least ``count`` streams of the session are open."""
        with self._changed:
            if not self._changed.wait_for(
                lambda: session_id in self._sessions and len(self._sessions[session_id].subscribers) >= count,
                timeout,
            ):
                raise TimeoutError(f"fewer than {count} stream(s) on {session_id} after {timeout}s")

    def wait_for_event(
        self, session_id: str, event_type: str, timeout: float = 5.0, *, nth: int = 1
    ) -> JSONDict:
        """Block until the session's history holds ``nth`` events of ``event_type``; return the last."""

        def found() -> list[JSONDict]:
            session = self._sessions.get(session_id)
            events = [e for _, e in session.history] if session else []
            return [e for e in events if e.get("type") == event_type]

        with self._changed:
            if not self._changed.wait_for(lambda: len(found()) >= nth, timeout):
                raise TimeoutError(f"no {event_type} #{nth} on {session_id} after {timeout}s")
            return copy.deepcopy(found()[nth - 1])

    def add_output_file(
        self,
        session_id: str,
        filename: str,
        content: bytes | str,
        *,
        mime_type: str | None = None,
    ) -> JSONDict:
        """Store a file as if the agent wrote it under ``/mnt/session/outputs/``: scoped to the
        session and downloadable. Returns its metadata."""
        data = content.encode() if isinstance(content, str) else content
        with self._lock:
            self._session(session_id)
            meta = self._new_file(filename, data, mime_type, downloadable=True)
            meta["scope"] = {"type": "session", "id": session_id}
            return copy.deepcopy(meta)

    # -- ids, clock, faults --

    def _next(self) -> int:
        self._counter += 1
        return self._counter

    def _id(self, prefix: str) -> str:
        self._ids[prefix] = self._ids.get(prefix, 0) + 1
        return f"{prefix}_emu{self._ids[prefix]:06d}"

    def _now(self) -> str:
        now = datetime.now(UTC)
        if now <= self._last_time:
            now = self._last_time + timedelta(microseconds=1)
        self._last_time = now
        return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def _take(
        self, kind: FaultKind, session_id: str | None = None, method: str = "", path: str = ""
    ) -> CMAFault | None:
        for armed in self._faults:
            fault = armed.fault
            if fault.kind != kind or armed.remaining <= 0:
                continue
            other_session = armed.session_id is not None and armed.session_id != session_id
            if other_session and (kind not in ("status", "close_idle") or str(armed.session_id) not in path):
                continue
            if kind in ("status", "trickle", "close_idle"):
                if fault.method is not None and fault.method != method:
                    continue
                if fault.path is not None and not re.search(fault.path, path):
                    continue
            armed.remaining -= 1
            return fault
        return None

    # -- request handling (server threads) --

    def _handle(self, h: LoopbackHandler) -> None:
        raw = h.read_body()
        headers = {k.lower(): v for k, v in h.headers.items()}
        body: Any = None
        if raw and headers.get("content-type", "").startswith("application/json"):
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
        url = urlsplit(h.path)
        path = url.path.rstrip("/") or "/"
        query = parse_qsl(url.query, keep_blank_values=True)
        reused = getattr(h, "_emu_served", 0) > 0
        h._emu_served = getattr(h, "_emu_served", 0) + 1  # type: ignore[attr-defined]
        with self._lock:
            idle_close = reused and self._take("close_idle", None, h.command, path) is not None
            if idle_close:
                self.closed_idle += 1
        if idle_close:
            h.close_connection = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(socket.SHUT_RDWR)
            return
        with self._lock:
            request_id = self._id("req")
            self.requests.append(RecordedRequest(h.command, h.path, headers, body, raw, request_id))
        try:
            reply = self._serve(h, path, query, headers, body, raw, request_id)
        except _Rejected as rejected:
            reply = self._error_reply(rejected, request_id)
        except _DISCONNECTS:
            h.close_connection = True
            return
        except Exception as exc:
            # A scripted callable failed: say so in the response rather than killing the
            # connection, so the test shows the cause.
            message = f"cma emulator: {type(exc).__name__}: {exc}"
            reply = self._error_reply(_Rejected(500, message, "api_error"), request_id)
        if reply is None:
            return
        with self._lock:
            slow = self._take("trickle", None, h.command, path)
        body = reply.body
        if slow is not None:
            body = body.ljust(slow.size, b" ")
        try:
            h.send_response(reply.status)
            h.send_header("Content-Type", reply.content_type)
            h.send_header("Content-Length", str(len(body)))
            h.send_header("request-id", request_id)
            for name, value in reply.headers.items():
                h.send_header(name, value)
            h.end_headers()
            if slow is None:
                h.wfile.write(body)
                return
            for i in range(len(body)):
                if self._stopping.wait(slow.delay or 0.0):
                    h.close_connection = True
                    return
                h.wfile.write(body[i : i + 1])
                h.wfile.flush()
        except _DISCONNECTS:
            h.close_connection = True

    def _serve(
        self,
        h: LoopbackHandler,
        path: str,
        query: list[tuple[str, str]],
        headers: Mapping[str, str],
        body: Any,
        raw: bytes,
        request_id: str,
    ) -> _Reply | None:
        method = h.command
        with self._lock:
            fault = self._take("status", None, method, path)
        if fault is not None:
            raise self._status_fault(fault)
        self._check_auth(headers)
        if self._require_version and not headers.get("anthropic-version"):
            raise _invalid("anthropic-version: header is required")
        parts = path.strip("/").split("/")
        if len(parts) < 2 or parts[0] != "v1":
            raise _Rejected(404, f"Not found: {method} {path}")
        if parts[1] in ("agents", "environments", "sessions") and self._require_beta:
            betas = {b.strip() for b in headers.get("anthropic-beta", "").split(",")}
            if BETA not in betas:
                raise _invalid(f"This endpoint requires the anthropic-beta header to include {BETA!r}.")
        if parts[1:] == ["files"] and method == "POST":
            with self._lock:
                return self._json(200, self._upload(headers, raw))
        if len(parts) == 5 and parts[1:3] == ["sessions", parts[2]] and parts[3:] == ["events", "stream"]:
            if method != "GET":
                raise _Rejected(404, f"Not found: {method} {path}")
            self._stream(h, parts[2], query, request_id)
            return None
        params = _Query(query)
        with self._lock:
            if parts[1] == "agents":
                return self._json(200, self._route_agents(method, parts[2:], params, body))
            if parts[1] == "environments":
                return self._json(200, self._route_environments(method, parts[2:], params, body))
            if parts[1] == "sessions":
                return self._json(200, self._route_sessions(method, parts[2:], params, body))
            if parts[1] == "files":
                return self._route_files(method, parts[2:], params)
        raise _Rejected(404, f"Not found: {method} {path}")

    def _check_auth(self, headers: Mapping[str, str]) -> None:
        if self.api_key is None and not self._bearer_tokens:
            return
        key = headers.get("x-api-key")
        authorization = headers.get("authorization", "")
        token = authorization[7:] if authorization[:7].lower() == "bearer " else None
        if self.api_key is not None and self.api_key in (key, token):
            return
        if token is not None and token in self._bearer_tokens:
            return
        if key is None and token is None:
            raise _Rejected(401, "x-api-key header is required", "authentication_error")
        raise _Rejected(401, "invalid x-api-key", "authentication_error")

    def _status_fault(self, fault: CMAFault) -> _Rejected:
        kind, message = _ERROR_TYPES.get(fault.status, ("api_error", "Error."))
        extra: dict[str, str] = {}
        if fault.retry_after is not None:
            extra["retry-after"] = fault.retry_after
        if fault.retry_after_ms is not None:
            extra["retry-after-ms"] = fault.retry_after_ms
        return _Rejected(fault.status, fault.message or message, fault.error_type or kind, headers=extra)

    def _error_reply(self, rejected: _Rejected, request_id: str) -> _Reply:
        error: JSONDict = {"type": rejected.error_type, "message": rejected.message}
        if rejected.error_code is not None:
            error["details"] = {"error_code": rejected.error_code}
        envelope = {"type": "error", "error": error, "request_id": request_id}
        return _Reply(rejected.status, json.dumps(envelope).encode(), headers=rejected.headers)

    @staticmethod
    def _json(status: int, data: Any) -> _Reply:
        return _Reply(status, json.dumps(data).encode())

    # -- agents --

    def _route_agents(self, method: str, rest: list[str], q: _Query, body: Any) -> Any:
        if not rest:
            if method == "POST":
                return self._create_agent(_require_object(body))
            if method == "GET":
                return self._list_agents(q)
        elif len(rest) == 1:
            agent = self._agent(rest[0])
            if method == "GET":
                version = q.int("version", None, 1, None)
                if version is None:
                    return agent.versions[-1]
                if version > len(agent.versions):
                    raise _not_found("Agent version", f"{rest[0]}@{version}")
                return agent.versions[version - 1]
            if method == "POST":
                return self._update_agent(agent, _require_object(body))
        elif len(rest) == 2 and rest[1] == "archive" and method == "POST":
            agent = self._agent(rest[0])
            stamp = self._now()
            for snapshot in agent.versions:
                snapshot["archived_at"] = snapshot["archived_at"] or stamp
            return agent.versions[-1]
        elif len(rest) == 2 and rest[1] == "versions" and method == "GET":
            agent = self._agent(rest[0])
            items = [(v["version"], v) for v in reversed(agent.versions)]
            return self._page(items, q, kind=f"versions:{rest[0]}", ascending=False)
        raise _Rejected(404, f"Not found: {method} /v1/agents/{'/'.join(rest)}")

    def _agent(self, agent_id: str) -> _Agent:
        agent = self._agents.get(agent_id)
        if agent is None:
            raise _not_found("Agent", agent_id)
        return agent

    def _create_agent(self, body: JSONDict) -> JSONDict:
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise _invalid("name: Field required (a non-empty string)")
        if "model" not in body:
            raise _invalid("model: Field required")
        if self._unique_names and any(a.versions[-1]["name"] == name for a in self._agents.values()):
            raise _Rejected(409, f"An agent named {name!r} already exists.", "conflict_error")
        stamp = self._now()
        agent: JSONDict = {
            "id": self._id("agent"),
            "type": "agent",
            "name": name,
            "description": _optional_str(body, "description"),
            "model": _model(body["model"]),
            "system": _optional_str(body, "system"),
            "tools": _tools(body.get("tools")),
            "mcp_servers": _mcp_servers(body.get("mcp_servers")),
            "skills": _list(body.get("skills"), "skills"),
            "metadata": _metadata(body.get("metadata"), {}),
            "multiagent": body.get("multiagent"),
            "execution_identity": body.get("execution_identity") or {"type": "service_account"},
            "version": 1,
            "created_at": stamp,
            "updated_at": stamp,
            "archived_at": None,
        }
        _check_mcp_references(agent)
        self._agents[agent["id"]] = _Agent(self._next(), [agent])
        return agent

    def _update_agent(self, agent: _Agent, body: JSONDict) -> JSONDict:
        current = agent.versions[-1]
        expected = body.get("version")
        if expected is not None:
            if not isinstance(expected, int) or isinstance(expected, bool) or expected < 1:
                raise _invalid("version: must be an integer >= 1")
            if expected != current["version"]:
                raise _Rejected(
                    409,
                    f"Agent {current['id']} is at version {current['version']}, not {expected}.",
                    "conflict_error",
                )
        new = copy.deepcopy(current)
        if "name" in body:
            if not isinstance(body["name"], str) or not body["name"]:
                raise _invalid("name: cannot be cleared")
            new["name"] = body["name"]
        if "model" in body:
            new["model"] = _model(body["model"])
        for key in ("description", "system"):
            if key in body:
                new[key] = _optional_str(body, key) or None
        if "tools" in body:
            new["tools"] = _tools(body["tools"])
        if "mcp_servers" in body:
            new["mcp_servers"] = _mcp_servers(body["mcp_servers"])
        if "skills" in body:
            new["skills"] = _list(body["skills"], "skills")
        if "multiagent" in body:
            new["multiagent"] = body["multiagent"]
        if "execution_identity" in body:
            new["execution_identity"] = body["execution_identity"] or {"type": "service_account"}
        if "metadata" in body:
            new["metadata"] = _metadata_patch(current["metadata"], body["metadata"])
        _check_mcp_references(new)
        comparable = ("updated_at", "version")
        if {k: v for k, v in new.items() if k not in comparable} == {
            k: v for k, v in current.items() if k not in comparable
        }:
            return current
        new["version"] = current["version"] + 1
        new["updated_at"] = self._now()
        agent.versions.append(new)
        return new

    def _list_agents(self, q: _Query) -> JSONDict:
        include_archived = q.bool("include_archived")
        gte, lte = q.time("created_at[gte]"), q.time("created_at[lte]")
        items = []
        for agent in sorted(self._agents.values(), key=lambda a: -a.seq):
            latest = agent.versions[-1]
            if latest["archived_at"] and not include_archived:
                continue
            if not _in_range(latest["created_at"], gte=gte, lte=lte):
                continue
            items.append((agent.seq, latest))
        return self._page(items, q, kind="agents", ascending=False)

    # -- environments --

    def _route_environments(self, method: str, rest: list[str], q: _Query, body: Any) -> Any:
        if not rest:
            if method == "POST":
                return self._create_environment(_require_object(body))
            if method == "GET":
                include_archived = q.bool("include_archived")
                items = [
                    (e.seq, e.data)
                    for e in sorted(self._environments.values(), key=lambda e: -e.seq)
                    if include_archived or not e.data["archived_at"]
                ]
                return self._page(items, q, kind="environments", ascending=False)
        elif len(rest) == 1:
            env = self._environment(rest[0])
            if method == "GET":
                return env.data
            if method == "POST":
                return self._update_environment(env, _require_object(body))
            if method == "DELETE":
                del self._environments[rest[0]]
                return {"id": rest[0], "type": "environment_deleted"}
        elif len(rest) == 2 and rest[1] == "archive" and method == "POST":
            env = self._environment(rest[0])
            stamp = self._now()
            env.data["archived_at"] = env.data["archived_at"] or stamp
            env.data["updated_at"] = stamp
            return env.data
        raise _Rejected(404, f"Not found: {method} /v1/environments/{'/'.join(rest)}")

    def _environment(self, environment_id: str) -> _Resource:
        env = self._environments.get(environment_id)
        if env is None:
            raise _not_found("Environment", environment_id, error_code="environment_not_found")
        return env

    def _create_environment(self, body: JSONDict) -> JSONDict:
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise _invalid("name: Field required (a non-empty string)")
        if self._unique_names and any(e.data["name"] == name for e in self._environments.values()):
            raise _Rejected(409, f"An environment named {name!r} already exists.", "conflict_error")
        stamp = self._now()
        data: JSONDict = {
            "id": self._id("env"),
            "type": "environment",
            "name": name,
            "description": _optional_str(body, "description"),
            "config": _env_config(body.get("config"), None),
            "metadata": _metadata(body.get("metadata"), {}),
            "scope": _scope(body.get("scope")),
            "created_at": stamp,
            "updated_at": stamp,
            "archived_at": None,
        }
        self._environments[data["id"]] = _Resource(self._next(), data)
        return data

    def _update_environment(self, env: _Resource, body: JSONDict) -> JSONDict:
        data = env.data
        if body.get("name") is not None:
            if not isinstance(body["name"], str) or not body["name"]:
                raise _invalid("name: must be a non-empty string")
            data["name"] = body["name"]
        if "description" in body:
            data["description"] = _optional_str(body, "description") or None
        if body.get("config") is not None:
            data["config"] = _env_config(body["config"], data["config"])
        if "metadata" in body:
            data["metadata"] = _metadata_patch(data["metadata"], body["metadata"], empty_deletes=True)
        if body.get("scope") is not None:
            data["scope"] = _scope(body["scope"])
        data["updated_at"] = self._now()
        return data

    # -- sessions --

    def _route_sessions(self, method: str, rest: list[str], q: _Query, body: Any) -> Any:
        if not rest:
            if method == "POST":
                return self._create_session(_require_object(body))
            if method == "GET":
                return self._list_sessions(q)
        elif len(rest) == 1:
            session = self._session(rest[0])
            if method == "GET":
                return self._session_out(session)
            if method == "POST":
                return self._update_session(session, _require_object(body))
            if method == "DELETE":
                return self._delete_session(session)
        elif rest[1:] == ["archive"] and method == "POST":
            session = self._session(rest[0])
            stamp = self._now()
            session.data["archived_at"] = session.data["archived_at"] or stamp
            session.data["updated_at"] = stamp
            return self._session_out(session)
        elif rest[1:] == ["events"]:
            session = self._session(rest[0])
            if method == "POST":
                return self._post_events(session, _require_object(body))
            if method == "GET":
                return self._list_events(session, q)
        elif len(rest) >= 2 and rest[1] == "resources":
            return self._route_resources(method, self._session(rest[0]), rest[2:], body, q)
        raise _Rejected(404, f"Not found: {method} /v1/sessions/{'/'.join(rest)}")

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise _not_found("Session", session_id)
        return session

    def _session_out(self, session: _Session) -> JSONDict:
        data = session.data
        data["stats"]["duration_seconds"] = round(time.monotonic() - session.created, 3)
        data["resources"] = [r for _, r in session.resources]
        return data

    def _session_agent(self, spec: Any) -> JSONDict:
        if isinstance(spec, str):
            return self._agent(spec).versions[-1]
        if not isinstance(spec, dict) or not isinstance(spec.get("id"), str):
            raise _invalid("agent: expected an agent id, {type: agent, id, version?} or agent_with_overrides")
        kind = spec.get("type", "agent")
        if kind not in ("agent", "agent_with_overrides"):
            raise _invalid(f"agent.type: unknown value {kind!r}")
        agent = self._agent(spec["id"])
        version = spec.get("version")
        if version is None:
            snapshot = agent.versions[-1]
        elif not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise _invalid("agent.version: must be an integer >= 1")
        elif version > len(agent.versions):
            raise _not_found("Agent version", f"{spec['id']}@{version}")
        else:
            snapshot = agent.versions[version - 1]
        if kind == "agent_with_overrides":
            snapshot = copy.deepcopy(snapshot)
            if "model" in spec:
                snapshot["model"] = _model(spec["model"])
            if "system" in spec:
                snapshot["system"] = _optional_str(spec, "system") or None
            if "tools" in spec:
                snapshot["tools"] = _tools(spec["tools"])
            if "mcp_servers" in spec:
                snapshot["mcp_servers"] = _mcp_servers(spec["mcp_servers"])
            if "skills" in spec:
                snapshot["skills"] = _list(spec["skills"], "skills")
        return snapshot

    def _create_session(self, body: JSONDict) -> JSONDict:
        if "agent" not in body:
            raise _invalid("agent: Field required")
        environment_id = body.get("environment_id")
        if not isinstance(environment_id, str):
            raise _invalid("environment_id: Field required")
        snapshot = self._session_agent(body["agent"])
        env = self._environment(environment_id)
        if env.data["archived_at"]:
            raise _invalid(f"Environment {environment_id} is archived.", error_code="environment_archived")
        budget = _budget(body.get("budget"))
        if budget is not None and self._take("drop_budget"):
            budget = None
        initial = body.get("initial_events")
        if initial is not None and (not isinstance(initial, list) or len(initial) > 50):
            raise _invalid("initial_events: at most 50 events")
        vault_ids = body.get("vault_ids") or []
        if not isinstance(vault_ids, list) or not all(isinstance(v, str) for v in vault_ids):
            raise _invalid("vault_ids: expected a list of strings")
        stamp = self._now()
        session_id = self._id("sesn")
        data: JSONDict = {
            "id": session_id,
            "type": "session",
            "status": "idle",
            "agent": {k: copy.deepcopy(snapshot.get(k)) for k in _SESSION_AGENT_KEYS},
            "environment_id": environment_id,
            "title": _optional_str(body, "title"),
            "metadata": _metadata(body.get("metadata"), {}),
            "resources": [],
            "vault_ids": list(vault_ids),
            "budget": budget,
            "usage": {
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_read_input_tokens": 0,
                "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            },
            "stats": {"active_seconds": 0.0, "duration_seconds": 0.0},
            "outcome_evaluations": [],
            "created_at": stamp,
            "updated_at": stamp,
            "archived_at": None,
            "deployment_id": None,
        }
        session = _Session(
            self._next(),
            data,
            list(self._script),
            self_hosted=env.data["config"].get("type") == "self_hosted",
            created=time.monotonic(),
        )
        resources = [
            self._make_resource(r, f"resources[{i}]") for i, r in enumerate(body.get("resources") or [])
        ]
        if initial:
            self._validate_inputs(session, initial, initial=True)
        session.resources = [(self._next(), r) for r in resources]
        self._sessions[session_id] = session
        if initial:
            try:
                self._accept_inputs(session, initial)
            except _Rejected:
                del self._sessions[session_id]
                raise
        return self._session_out(session)

    def _update_session(self, session: _Session, body: JSONDict) -> JSONDict:
        data = session.data
        if "vault_ids" in body:
            raise _invalid("vault_ids: cannot be updated")
        changed: JSONDict = {}
        if "title" in body:
            data["title"] = changed["title"] = _optional_str(body, "title")
        if "metadata" in body:
            data["metadata"] = changed["metadata"] = _metadata_patch(data["metadata"], body["metadata"])
        if "budget" in body:
            if data["status"] == "terminated":
                raise _invalid("budget: the session is terminated")
            if body["budget"] is not None and data["budget"] is None:
                raise _invalid("budget: rejected with reason budget_create_only")
            data["budget"] = changed["budget"] = _budget(body["budget"])
        if "agent" in body:
            update = _require_object(body["agent"], "agent")
            if data["status"] == "running":
                raise _invalid("agent: cannot be updated while the session is running")
            if "tools" in update:
                data["agent"]["tools"] = _tools(update["tools"])
            if "mcp_servers" in update:
                data["agent"]["mcp_servers"] = _mcp_servers(update["mcp_servers"])
            changed["agent"] = data["agent"]
        if changed:
            data["updated_at"] = self._now()
            self._emit(session, {"type": "session.updated", **copy.deepcopy(changed)})
        return self._session_out(session)

    def _delete_session(self, session: _Session) -> JSONDict:
        event = {"type": "session.deleted", "id": self._id("sevt"), "processed_at": self._now()}
        for sub in session.subscribers:
            sub.queue.put(event)
            sub.queue.put(_END)
        session.subscribers.clear()
        session.deferred.clear()
        del self._sessions[session.data["id"]]
        self._changed.notify_all()
        return {"id": session.data["id"], "type": "session_deleted"}

    def _list_sessions(self, q: _Query) -> JSONDict:
        include_archived = q.bool("include_archived")
        agent_id = q.get("agent_id")
        agent_version = q.int("agent_version", None, 1, None)
        statuses = set(q.list("statuses"))
        bounds = {op: q.time(f"created_at[{op}]") for op in ("gt", "gte", "lt", "lte")}
        order = q.get("order") or "desc"
        if order not in ("asc", "desc"):
            raise _invalid("order: must be 'asc' or 'desc'")
        items = []
        for session in sorted(self._sessions.values(), key=lambda s: s.seq, reverse=order == "desc"):
            data = session.data
            if data["archived_at"] and not include_archived:
                continue
            if agent_id is not None and data["agent"]["id"] != agent_id:
                continue
            if agent_version is not None and data["agent"]["version"] != agent_version:
                continue
            if statuses and data["status"] not in statuses:
                continue
            if not _in_range(data["created_at"], **bounds):
                continue
            items.append((session.seq, self._session_out(session)))
        return self._page(items, q, kind="sessions", ascending=order == "asc", bidirectional=True)

    # -- session resources --

    def _make_resource(self, spec: Any, where: str) -> JSONDict:
        spec = _require_object(spec, where)
        kind = spec.get("type")
        stamp = self._now()
        if kind == "file":
            file_id = spec.get("file_id")
            if not isinstance(file_id, str):
                raise _invalid(f"{where}.file_id: Field required")
            if file_id not in self._files:
                raise _not_found("File", file_id)
            mount = spec.get("mount_path") or f"/mnt/session/uploads/{file_id}"
            return {
                "id": self._id("sesrsc"),
                "type": "file",
                "file_id": file_id,
                "mount_path": mount,
                "created_at": stamp,
                "updated_at": stamp,
            }
        if kind == "github_repository":
            url = spec.get("url")
            if not isinstance(url, str):
                raise _invalid(f"{where}.url: Field required")
            repo = url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
            return {
                "id": self._id("sesrsc"),
                "type": "github_repository",
                "url": url,
                "checkout": spec.get("checkout"),
                "mount_path": spec.get("mount_path") or f"/workspace/{repo}",
                "created_at": stamp,
                "updated_at": stamp,
            }
        if kind == "memory_store":
            store = spec.get("memory_store_id")
            if not isinstance(store, str):
                raise _invalid(f"{where}.memory_store_id: Field required")
            return {
                "type": "memory_store",
                "memory_store_id": store,
                "access": spec.get("access") or "read_write",
                "instructions": spec.get("instructions"),
                "mount_path": f"/mnt/memory/{store}",
            }
        raise _invalid(f"{where}.type: unknown resource type {kind!r}")

    def _route_resources(self, method: str, session: _Session, rest: list[str], body: Any, q: _Query) -> Any:
        if not rest:
            if method == "POST":
                spec = _require_object(body)
                if spec.get("type") != "file":
                    raise _invalid("type: only 'file' resources can be added")
                resource = self._make_resource(spec, "resource")
                session.resources.append((self._next(), resource))
                return resource
            if method == "GET":
                items = [(seq, r) for seq, r in session.resources]
                return self._page(
                    items, q, kind=f"resources:{session.data['id']}", ascending=True, max_limit=1000
                )
        elif len(rest) == 1:
            found = [(seq, r) for seq, r in session.resources if r.get("id") == rest[0]]
            if not found:
                raise _not_found("Session resource", rest[0])
            resource = found[0][1]
            if method == "GET":
                return resource
            if method == "POST":
                resource["updated_at"] = self._now()
                return resource
            if method == "DELETE":
                session.resources.remove(found[0])
                return {"id": rest[0], "type": "session_resource_deleted"}
        raise _Rejected(404, f"Not found: {method} resources/{'/'.join(rest)}")

    # -- events: input --

    def _post_events(self, session: _Session, body: JSONDict) -> JSONDict:
        events = body.get("events")
        if not isinstance(events, list) or not events:
            raise _invalid("events: must be a non-empty list of events")
        if session.data["status"] == "terminated":
            raise _invalid(f"Session {session.data['id']} is terminated and accepts no more events.")
        self._flush_deferred(session)
        self._validate_inputs(session, events, initial=False)
        return {"data": self._accept_inputs(session, events)}

    def _accept_inputs(self, session: _Session, events: list[JSONDict]) -> list[JSONDict]:
        """Echo validated inputs, then play what they trigger (all under the lock)."""
        interrupts = [i for i, e in enumerate(events) if e["type"] == "user.interrupt"]
        last_interrupt = interrupts[-1] if interrupts else -1
        kickoff = any(e["type"] in _KICKOFFS for e in events[last_interrupt + 1 :])
        answered = {_answer_id(e) for e in events if e["type"] in _ANSWERS}
        # An allowed confirmation on a self-hosted environment still waits for the tool result.
        converted = {
            e["tool_use_id"]
            for e in events
            if e["type"] == "user.tool_confirmation"
            and e["result"] == "allow"
            and session.self_hosted
            and session.tool_kinds.get(e["tool_use_id"]) == "agent.tool_use"
        }
        still_pending = (set(session.pending) - answered) | converted
        turn_due = kickoff or (bool(answered) and not still_pending and not interrupts)
        if turn_due and session.turn_index >= len(session.script):
            raise _Rejected(
                400,
                f"cma emulator: no scripted turn left for session {session.data['id']} "
                f"(turn #{session.turn_index + 1})",
                "emulator_script_exhausted",
            )
        echoes = [self._echo(session, e) for e in events]
        if interrupts:
            self._emit(session, idle_end_turn())
        if turn_due:
            self._play_turn(session, echoes)
        elif answered and session.pending and session.awaiting_action:
            self._emit(session, idle_requires_action())
        return echoes

    def _validate_inputs(self, session: _Session, events: list[Any], *, initial: bool) -> None:
        answering: set[str] = set()
        for i, event in enumerate(events):
            where = f"events[{i}]"
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise _invalid(f"{where}: expected an event object with a string 'type'")
            kind = event["type"]
            if kind not in _INPUT_TYPES:
                raise _invalid(f"{where}.type: unknown input event type {kind!r}")
            if initial and kind not in _KICKOFFS:
                raise _invalid(
                    f"initial_events[{i}].type: only user.message and user.define_outcome are allowed"
                )
            if kind == "user.message":
                _blocks(event.get("content"), f"{where}.content", {"text", "image", "document", "redacted"})
            elif kind == "system.message":
                if i != len(events) - 1:
                    raise _invalid(f"{where}: a system.message must be the last event of the request")
                if i == 0 or events[i - 1].get("type") not in (
                    "user.message",
                    "user.tool_result",
                    "user.custom_tool_result",
                ):
                    raise _invalid(
                        f"{where}: a system.message must directly follow a user message or tool result"
                    )
                _blocks(event.get("content"), f"{where}.content", {"text"})
            elif kind == "user.custom_tool_result":
                ident = self._answerable(session, event, "custom_tool_use_id", where, answering)
                if session.tool_kinds.get(ident) != "agent.custom_tool_use":
                    raise _invalid(
                        f"{where}.custom_tool_use_id: {ident!r} is not an agent.custom_tool_use event"
                    )
                _result_content(event, where)
            elif kind == "user.tool_result":
                if not session.self_hosted:
                    raise _invalid(f"{where}: user.tool_result is only accepted in self_hosted environments")
                ident = self._answerable(session, event, "tool_use_id", where, answering)
                if session.tool_kinds.get(ident) != "agent.tool_use":
                    raise _invalid(f"{where}.tool_use_id: {ident!r} is not an agent.tool_use event")
                _result_content(event, where)
            elif kind == "user.tool_confirmation":
                ident = self._answerable(session, event, "tool_use_id", where, answering)
                if session.pending.get(ident) != "confirm":
                    raise _invalid(f"{where}.tool_use_id: {ident!r} is not awaiting a confirmation")
                result = event.get("result")
                if result not in ("allow", "deny"):
                    raise _invalid(f"{where}.result: must be 'allow' or 'deny'")
                if event.get("deny_message") is not None and result != "deny":
                    raise _invalid(f"{where}.deny_message: only allowed with result 'deny'")
            elif kind == "user.define_outcome":
                _define_outcome(event, where, self._files)
            elif kind == "user.interrupt" and not isinstance(event.get("session_thread_id", ""), str | None):
                raise _invalid(f"{where}.session_thread_id: expected a string")

    def _answerable(
        self, session: _Session, event: JSONDict, key: str, where: str, answering: set[str]
    ) -> str:
        ident = event.get(key)
        if not isinstance(ident, str) or not ident:
            raise _invalid(f"{where}.{key}: Field required")
        if ident not in session.tool_kinds:
            raise _invalid(f"{where}.{key}: no tool use event {ident!r} in this session")
        if ident in session.answered or ident in answering or ident not in session.pending:
            raise _invalid(f"{where}.{key}: tool use {ident!r} was already answered")
        answering.add(ident)
        return ident

    def _echo(self, session: _Session, event: JSONDict) -> JSONDict:
        kind = event["type"]
        echo: JSONDict = {"type": kind, "id": self._id("sevt")}
        echo.update({k: copy.deepcopy(v) for k, v in event.items() if k not in ("type", "id")})
        if kind == "user.define_outcome":
            outcome_id = self._id("outc")
            echo["outcome_id"] = outcome_id
            session.last_outcome_id = outcome_id
            session.data["outcome_evaluations"].append(
                {
                    "type": "outcome_evaluation",
                    "outcome_id": outcome_id,
                    "description": event["description"],
                    "iteration": 0,
                    "result": "pending",
                    "explanation": None,
                    "completed_at": None,
                }
            )
        elif kind in _ANSWERS:
            ident = _answer_id(event)
            session.pending.pop(ident, None)
            if kind == "user.tool_confirmation" and event["result"] == "allow" and session.self_hosted:
                session.pending[ident] = "tool_result"
            else:
                session.answered.add(ident)
        echo["processed_at"] = self._now()
        self._store(session, echo)
        return echo

    # -- events: output --

    def _play_turn(self, session: _Session, inputs: list[JSONDict]) -> None:
        turn = session.script[session.turn_index]
        index = session.turn_index
        session.turn_index += 1
        if callable(turn):
            view = SessionView(
                id=session.data["id"],
                resource=copy.deepcopy(self._session_out(session)),
                history=tuple(copy.deepcopy([e for _, e in session.history])),
                pending=tuple(session.pending),
                turn_index=index,
            )
            events = [dict(e) for e in turn(view, copy.deepcopy(inputs))]
        else:
            events = [dict(e) for e in turn]
        sid = session.data["id"]
        ra_index = next((i for i, e in enumerate(events) if _is_requires_action(e)), None)
        end_index = next((i for i, e in enumerate(events) if _is_terminal(e)), None)
        earlier = self._take("earlier_batch", sid) if ra_index is not None else None
        disconnect = self._take("terminal_disconnected", sid) if end_index is not None else None
        for i, event in enumerate(events):
            if earlier is not None and i == ra_index:
                self._defer(session, events[i:], earlier)
                return
            if disconnect is not None and i == end_index:
                self._drop_subscribers(session)
            self._emit(session, event)

    def _defer(self, session: _Session, events: list[JSONDict], fault: CMAFault) -> None:
        if fault.drop_stream:
            self._drop_subscribers(session)
        session.deferred = events
        session.deferred_token += 1
        if fault.delay is not None and not fault.drop_stream:
            timer = threading.Timer(
                fault.delay, self._release_deferred, args=(session.data["id"], session.deferred_token)
            )
            timer.daemon = True
            self._timers.append(timer)
            timer.start()

    def _release_deferred(self, session_id: str, token: int) -> None:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None and session.deferred_token == token and not self._stopping.is_set():
                self._flush_deferred(session)

    def _flush_deferred(self, session: _Session) -> None:
        events, session.deferred = session.deferred, []
        session.deferred_token += 1
        for event in events:
            self._emit(session, event)

    def _drop_subscribers(self, session: _Session) -> None:
        for sub in session.subscribers:
            sub.queue.put(_DROP)
        session.subscribers.clear()
        self._changed.notify_all()

    def _emit(self, session: _Session, template: ServerEvent) -> JSONDict:
        """Finalize a server event (ids, timestamps, linkage), apply it to the session, store it
        and push it to every subscriber. Caller holds the lock."""
        event: JSONDict = json.loads(json.dumps(dict(template)))
        kind = event.get("type")
        if not isinstance(kind, str):
            raise TypeError(f"a scripted event needs a string 'type': {template!r}")
        if kind == "span.model_request_end" and "model_request_start_id" not in event:
            if session.open_model_request is None:
                self._emit(session, model_request_start())
            event["model_request_start_id"] = session.open_model_request
        if kind.startswith("span.outcome_evaluation_"):
            self._fill_outcome(session, event)
        if kind == "session.status_idle":
            stop = event.setdefault("stop_reason", {"type": "end_turn"})
            if stop.get("type") == "requires_action" and "event_ids" not in stop:
                stop["event_ids"] = [i for i, k in session.pending.items() if k != "tool_result"] or list(
                    session.pending
                )
        final: JSONDict = {"type": kind, "id": event.pop("id", None) or self._id("sevt")}
        final.update({k: v for k, v in event.items() if k != "type"})
        final["processed_at"] = self._now()
        self._apply(session, final)
        self._store(session, final)
        return final

    def _fill_outcome(self, session: _Session, event: JSONDict) -> None:
        outcome_id = event.setdefault("outcome_id", session.last_outcome_id)
        if outcome_id is None:
            raise ValueError(f"{event['type']} needs an outcome_id and no user.define_outcome was received")
        iteration = session.outcome_iterations.get(outcome_id, 0)
        event.setdefault("iteration", iteration)
        if event["type"] == "span.outcome_evaluation_end":
            start = session.outcome_starts.get(outcome_id)
            if "outcome_evaluation_start_id" not in event:
                if start is None:
                    start = self._emit(
                        session, outcome_evaluation_start(outcome_id=outcome_id, iteration=event["iteration"])
                    )["id"]
                event["outcome_evaluation_start_id"] = start

    def _apply(self, session: _Session, event: JSONDict) -> None:
        kind = event["type"]
        data = session.data
        status = {
            "session.status_running": "running",
            "session.status_idle": "idle",
            "session.status_rescheduled": "rescheduling",
            "session.status_terminated": "terminated",
        }.get(kind)
        if status is not None:
            data["status"] = status
            data["updated_at"] = event["processed_at"]
            session.awaiting_action = _is_requires_action(event)
        if kind == "agent.custom_tool_use":
            session.tool_kinds[event["id"]] = kind
            session.pending[event["id"]] = "custom"
        elif kind in ("agent.tool_use", "agent.mcp_tool_use"):
            session.tool_kinds[event["id"]] = kind
            permission = event.get("evaluated_permission")
            if permission == "ask":
                session.pending[event["id"]] = "confirm"
            elif kind == "agent.tool_use" and session.self_hosted and permission != "deny":
                session.pending[event["id"]] = "tool_result"
        elif kind == "span.model_request_start":
            session.open_model_request = event["id"]
        elif kind == "span.model_request_end":
            session.open_model_request = None
            _add_usage(data["usage"], event.get("model_usage") or {})
        elif kind.startswith("span.outcome_evaluation_"):
            outcome_id = event["outcome_id"]
            entry = next((o for o in data["outcome_evaluations"] if o["outcome_id"] == outcome_id), None)
            if kind == "span.outcome_evaluation_start":
                session.outcome_starts[outcome_id] = event["id"]
            if entry is not None:
                entry["iteration"] = event["iteration"]
                if kind == "span.outcome_evaluation_end":
                    entry["result"] = event["result"]
                    entry["explanation"] = event.get("explanation")
                    entry["completed_at"] = event["processed_at"]
                else:
                    entry["result"] = "evaluating"
            if kind == "span.outcome_evaluation_end":
                session.outcome_starts.pop(outcome_id, None)
                session.outcome_iterations[outcome_id] = event["iteration"] + 1
        elif kind == "session.usage" and isinstance(event.get("usage"), dict):
            data["usage"].update(copy.deepcopy(event["usage"]))

    def _store(self, session: _Session, event: JSONDict) -> None:
        session.history.append((self._next(), event))
        for sub in session.subscribers:
            sub.queue.put(event)
        self._changed.notify_all()

    def _list_events(self, session: _Session, q: _Query) -> JSONDict:
        order = q.get("order") or "asc"
        if order not in ("asc", "desc"):
            raise _invalid("order: must be 'asc' or 'desc'")
        types = set(q.list("types"))
        bounds = {op: q.time(f"created_at[{op}]") for op in ("gt", "gte", "lt", "lte")}
        items = [
            (seq, e)
            for seq, e in session.history
            if (not types or e["type"] in types) and _in_range(e["processed_at"], **bounds)
        ]
        if order == "desc":
            items.reverse()
        return self._page(
            items, q, kind=f"events:{session.data['id']}", ascending=order == "asc", max_limit=1000
        )

    # -- events: stream --

    def _stream(
        self, h: LoopbackHandler, session_id: str, query: list[tuple[str, str]], request_id: str
    ) -> None:
        deltas = frozenset(v for k, v in query if k in ("event_deltas[]", "event_deltas"))
        sub = _Subscriber(h.connection, deltas)
        with self._lock:
            session = self._session(session_id)
            drop = self._take("drop_stream", session_id)
            sub.drop_after = drop.after if drop is not None else None
            sub.error = self._take("error_frame", session_id)
            session.subscribers.append(sub)
            self._changed.notify_all()
            # Held-back events (requires_action_from_earlier_batch) reach the new subscriber.
            self._flush_deferred(session)
        try:
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream; charset=utf-8")
            h.send_header("Cache-Control", "no-cache")
            h.send_header("Transfer-Encoding", "chunked")
            h.send_header("request-id", request_id)
            h.end_headers()
            if self._ping_interval is None:
                self._hangups.watch(sub)
            self._pump(h, sub)
        except OSError:
            h.close_connection = True
        finally:
            with self._lock:
                session_now = self._sessions.get(session_id)
                if session_now is not None and sub in session_now.subscribers:
                    session_now.subscribers.remove(sub)
                    self._changed.notify_all()
            self._hangups.unwatch(sub)

    def _pump(self, h: LoopbackHandler, sub: _Subscriber) -> None:
        def write(data: bytes) -> None:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        def frame(name: str, data: Any) -> None:
            write(f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode())

        sent = 0
        last_write = time.monotonic()
        while True:
            if sub.error is not None and sent >= sub.error.after:
                body = {
                    "type": "error",
                    "error": {"type": sub.error.error_type, "message": sub.error.message},
                }
                frame("error", body)
                write(b"")
                return
            if sub.drop_after is not None and sent >= sub.drop_after:
                self._hangups.unwatch(sub)  # the watcher must not wake up for our own hang-up
                self._abort(h)
                return
            wait = 0.1 if self._ping_interval is None else min(0.1, self._ping_interval)
            try:
                # A watched stream sleeps until its queue says something: an event, a fault,
                # the end, or _GONE from the hang-up watcher (close() queues _END everywhere).
                item = sub.queue.get(timeout=None if sub.watched else wait)
            except queue.Empty:
                if self._stopping.is_set() or _client_gone(h.connection):
                    h.close_connection = True
                    return
                if self._ping_interval is not None and time.monotonic() - last_write >= self._ping_interval:
                    frame("ping", {"type": "ping"})
                    last_write = time.monotonic()
                continue
            if item is _WAKE:
                continue
            if item is _GONE:
                h.close_connection = True
                return
            if item is _DROP:
                self._hangups.unwatch(sub)
                self._abort(h)
                return
            if item is _END:
                write(b"")
                return
            event: JSONDict = item
            if event["type"] in sub.deltas and event["type"] in ("agent.message", "agent.thinking"):
                frame(
                    "event_start",
                    {"type": "event_start", "event": {"type": event["type"], "id": event["id"]}},
                )
                if event["type"] == "agent.message":
                    for index, block in enumerate(event.get("content") or []):
                        text = block.get("text") if isinstance(block, dict) else None
                        if not isinstance(text, str):
                            continue
                        for at in range(0, len(text), self._delta_chars):
                            delta = {
                                "type": "content_delta",
                                "index": index,
                                "content": {"type": "text", "text": text[at : at + self._delta_chars]},
                            }
                            frame(
                                "event_delta",
                                {"type": "event_delta", "event_id": event["id"], "delta": delta},
                            )
            frame(event["type"], event)
            sent += 1
            last_write = time.monotonic()
            if event["type"] == "session.deleted":
                write(b"")
                return

    @staticmethod
    def _abort(h: LoopbackHandler) -> None:
        h.close_connection = True
        with contextlib.suppress(OSError):
            h.connection.shutdown(socket.SHUT_RDWR)

    # -- files --

    def _new_file(
        self, filename: str, content: bytes, mime_type: str | None, *, downloadable: bool
    ) -> JSONDict:
        name = filename.replace("\\", "/").rsplit("/", 1)[-1]
        mime = mime_type or mimetypes.guess_type(name)[0] or "application/octet-stream"
        if not name:
            name = "unnamed" + (mimetypes.guess_extension(mime) or "")
        meta: JSONDict = {
            "id": self._id("file"),
            "type": "file",
            "filename": name,
            "mime_type": mime,
            "size_bytes": len(content),
            "created_at": self._now(),
            "downloadable": downloadable,
        }
        self._files[meta["id"]] = _File(self._next(), meta, content)
        return meta

    def _upload(self, headers: Mapping[str, str], raw: bytes) -> JSONDict:
        fields = _multipart(headers.get("content-type", ""), raw)
        filename, content_type, content = fields.get("file") or (None, None, b"")
        if filename is None:
            raise _invalid("file: Field required (a multipart file part)")
        expires = fields.get("expires_in_seconds")
        expires_at = None
        if expires is not None:
            try:
                seconds = int(expires[2].decode())
            except ValueError:
                raise _invalid("expires_in_seconds: expected an integer") from None
            if not 3600 <= seconds <= 7_776_000:
                raise _invalid("expires_in_seconds: must be between 3600 and 7776000")
            expires_at = (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        mime = content_type if content_type and content_type != "application/octet-stream" else None
        meta = self._new_file(filename, content, mime, downloadable=self._uploads_downloadable)
        if expires_at is not None:
            meta["expires_at"] = expires_at
        return meta

    def _route_files(self, method: str, rest: list[str], q: _Query) -> _Reply:
        if not rest and method == "GET":
            ids = q.list("ids")
            if ids:
                if q.get("page") is not None or q.get("limit") is not None:
                    raise _invalid("ids: mutually exclusive with page and limit")
                if len(set(ids)) > 100:
                    raise _invalid("ids: at most 100 entries")
                data = [self._files[i].meta for i in dict.fromkeys(ids) if i in self._files]
                return self._json(200, {"data": data, "next_page": None})
            scope_id = q.get("scope_id")
            items = [
                (f.seq, f.meta)
                for f in sorted(self._files.values(), key=lambda f: -f.seq)
                if scope_id is None or (f.meta.get("scope") or {}).get("id") == scope_id
            ]
            return self._json(200, self._page(items, q, kind="files", ascending=False, max_limit=1000))
        if len(rest) >= 1:
            stored = self._files.get(rest[0])
            if stored is None:
                raise _not_found("File", rest[0])
            if len(rest) == 1 and method == "GET":
                return self._json(200, stored.meta)
            if len(rest) == 1 and method == "DELETE":
                del self._files[rest[0]]
                return self._json(200, {"id": rest[0], "type": "file_deleted"})
            if rest[1:] == ["content"] and method == "GET":
                if not stored.meta.get("downloadable"):
                    raise _invalid(f"File {rest[0]} is not downloadable.", error_code="file_not_downloadable")
                return _Reply(200, stored.content, stored.meta["mime_type"])
        raise _Rejected(404, f"Not found: {method} /v1/files/{'/'.join(rest)}")

    # -- pagination --

    def _page(
        self,
        items: Sequence[tuple[int, JSONDict]],
        q: _Query,
        *,
        kind: str,
        ascending: bool,
        bidirectional: bool = False,
        default_limit: int = 20,
        max_limit: int = 100,
    ) -> JSONDict:
        limit = q.int("limit", default_limit, 1, max_limit)
        assert limit is not None
        start = 0
        page = q.get("page")
        if page:
            direction, key = _decode_cursor(page, kind)

            def after(seq: int) -> bool:
                return seq > key if ascending else seq < key

            if direction == "n":
                start = next((i for i, (seq, _) in enumerate(items) if after(seq)), len(items))
            else:
                end = next((i for i, (seq, _) in enumerate(items) if after(seq) or seq == key), len(items))
                start = max(0, end - limit)
                items = items[:end]
        chosen = items[start : start + limit]
        more = start + len(chosen) < len(items)
        out: JSONDict = {
            "data": [copy.deepcopy(d) for _, d in chosen],
            "next_page": _encode_cursor("n", chosen[-1][0], kind) if chosen and more else None,
        }
        if bidirectional:
            out["prev_page"] = _encode_cursor("p", chosen[0][0], kind) if chosen and start > 0 else None
        return out


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


class _Query:
    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._pairs = pairs

    def get(self, key: str) -> str | None:
        for k, v in self._pairs:
            if k == key:
                return v
        return None

    def list(self, key: str) -> list[str]:
        return [v for k, v in self._pairs if k in (key, f"{key}[]")]

    def bool(self, key: str) -> bool:
        value = self.get(key)
        if value is None:
            return False
        if value not in ("true", "false"):
            raise _invalid(f"{key}: expected true or false")
        return value == "true"

    def int(self, key: str, default: int | None, low: int, high: int | None) -> int | None:
        value = self.get(key)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise _invalid(f"{key}: expected an integer") from None
        if number < low or (high is not None and number > high):
            raise _invalid(f"{key}: must be between {low} and {high}" if high else f"{key}: must be >= {low}")
        return number

    def time(self, key: str) -> datetime | None:
        value = self.get(key)
        if value is None:
            return None
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise _invalid(f"{key}: expected an RFC 3339 timestamp") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _in_range(
    stamp: str,
    *,
    gt: datetime | None = None,
    gte: datetime | None = None,
    lt: datetime | None = None,
    lte: datetime | None = None,
) -> bool:
    at = datetime.fromisoformat(stamp)
    return (
        (gt is None or at > gt)
        and (gte is None or at >= gte)
        and (lt is None or at < lt)
        and (lte is None or at <= lte)
    )


def _encode_cursor(direction: str, key: int, kind: str) -> str:
    token = base64.urlsafe_b64encode(f"{kind}|{direction}|{key}".encode()).decode().rstrip("=")
    return f"page_{token}"


def _decode_cursor(page: str, kind: str) -> tuple[str, int]:
    try:
        token = page.removeprefix("page_")
        decoded = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        cursor_kind, direction, key = decoded.rsplit("|", 2)
        if cursor_kind != kind or direction not in ("n", "p"):
            raise ValueError(decoded)
        return direction, int(key)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise _invalid("page: invalid pagination cursor") from None


def _client_gone(connection: socket.socket) -> bool:
    try:
        # poll, not select: select() refuses file descriptors past 1023, which a few thousand
        # open streams reach.
        poller = select.poll()
        poller.register(connection, select.POLLIN)
        return bool(poller.poll(0)) and connection.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _require_object(body: Any, where: str = "body") -> JSONDict:
    if not isinstance(body, dict):
        raise _invalid(f"{where}: expected a JSON object")
    return body


def _optional_str(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise _invalid(f"{key}: expected a string")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _invalid(f"{where}: expected an array")
    return copy.deepcopy(value)


def _model(value: Any) -> JSONDict:
    model = value.get("id") if isinstance(value, dict) else value
    if isinstance(model, str) and ":" in model:
        # The API knows its models by their bare ids; "anthropic:claude-…" is another
        # library's provider-qualified spelling (C-26: clients send the id bare).
        raise _invalid(f"model: {model!r} is not a model id (send the bare id, without a provider prefix)")
    if isinstance(value, str) and value:
        return {"id": value}
    if isinstance(value, dict) and isinstance(value.get("id"), str) and value["id"]:
        return copy.deepcopy(value)
    raise _invalid("model: expected a model id string or {id, effort?, speed?, inference_geo?}")


def _tools(value: Any) -> list[JSONDict]:
    tools = _list(value, "tools")
    if len(tools) > 256:
        raise _invalid("tools: at most 256 tools")
    out: list[JSONDict] = []
    names: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _invalid(f"{where}: expected an object")
        kind = tool.get("type")
        if kind == "custom":
            name = tool.get("name")
            if not isinstance(name, str) or not _TOOL_NAME.match(name):
                raise _invalid(f"{where}.name: must match ^[a-zA-Z0-9_-]{{1,128}}$")
            if name in names:
                raise _invalid(f"{where}.name: duplicate tool name {name!r}")
            names.add(name)
            if not isinstance(tool.get("description"), str):
                raise _invalid(f"{where}.description: Field required")
            schema = tool.get("input_schema")
            if not isinstance(schema, dict) or schema.get("type") != "object":
                raise _invalid(f"{where}.input_schema: expected a JSON schema with type 'object'")
            out.append(
                {"type": "custom", "name": name, "description": tool["description"], "input_schema": schema}
            )
        elif kind in (_AGENT_TOOLSET, "mcp_toolset"):
            policy = "always_allow" if kind == _AGENT_TOOLSET else "always_ask"
            default = {
                "enabled": True,
                "permission_policy": {"type": policy},
                **(tool.get("default_config") or {}),
            }
            configs = []
            for config in tool.get("configs") or []:
                if not isinstance(config, dict) or not isinstance(config.get("name"), str):
                    raise _invalid(f"{where}.configs: each config needs a 'name'")
                filled = {
                    "enabled": default["enabled"],
                    "permission_policy": default["permission_policy"],
                    **config,
                }
                if kind == _AGENT_TOOLSET:
                    filled["type"] = config["name"]
                configs.append(filled)
            entry: JSONDict = {"type": kind, "default_config": default, "configs": configs}
            if kind == "mcp_toolset":
                if not isinstance(tool.get("mcp_server_name"), str):
                    raise _invalid(f"{where}.mcp_server_name: Field required")
                entry["mcp_server_name"] = tool["mcp_server_name"]
            out.append(entry)
        else:
            raise _invalid(f"{where}.type: unknown tool type {kind!r}")
    return out


def _mcp_servers(value: Any) -> list[JSONDict]:
    servers = _list(value, "mcp_servers")
    if len(servers) > 20:
        raise _invalid("mcp_servers: at most 20 servers")
    names = [s.get("name") if isinstance(s, dict) else None for s in servers]
    if any(not isinstance(n, str) for n in names) or len(set(names)) != len(names):
        raise _invalid("mcp_servers: each server needs a unique 'name'")
    return [{"type": "url", **s} for s in servers]


def _check_mcp_references(agent: JSONDict) -> None:
    referenced = {t.get("mcp_server_name") for t in agent["tools"] if t["type"] == "mcp_toolset"}
    for server in agent["mcp_servers"]:
        if server["name"] not in referenced:
            raise _invalid(f"mcp_servers: server {server['name']!r} is not referenced by any mcp_toolset")


def _metadata(value: Any, default: JSONDict) -> JSONDict:
    if value is None:
        return dict(default)
    if not isinstance(value, dict):
        raise _invalid("metadata: expected an object", error_code="invalid_metadata")
    _check_metadata(value)
    return dict(value)


def _check_metadata(value: Mapping[str, Any]) -> None:
    if len(value) > 16:
        raise _invalid("metadata: at most 16 keys", error_code="invalid_metadata")
    for key, item in value.items():
        if len(key) > 64 or not isinstance(item, str) or len(item) > 512:
            raise _invalid(
                f"metadata.{key}: keys up to 64 chars, string values up to 512 chars",
                error_code="invalid_metadata",
            )


def _metadata_patch(current: JSONDict, patch: Any, *, empty_deletes: bool = False) -> JSONDict:
    if patch is None:
        return current
    if not isinstance(patch, dict):
        raise _invalid("metadata: expected an object", error_code="invalid_metadata")
    merged = dict(current)
    for key, value in patch.items():
        if value is None or (empty_deletes and value == ""):
            merged.pop(key, None)
        else:
            merged[key] = value
    _check_metadata(merged)
    return merged


def _scope(value: Any) -> str:
    if value is None or value == "organization":
        return "organization"
    if value == "account":
        raise _invalid("scope: 'account' is not accepted for API organizations")
    raise _invalid("scope: must be 'organization' or 'account'")


def _env_config(value: Any, current: JSONDict | None) -> JSONDict:
    if value is None:
        value = {"type": "cloud"}
    if not isinstance(value, dict):
        raise _invalid("config: expected an object")
    kind = value.get("type")
    if current is not None and current.get("type") != kind:
        raise _invalid("config.type: cannot change the config type", error_code="invalid_config_type_change")
    if kind == "self_hosted":
        return {"type": "self_hosted"}
    if kind != "cloud":
        raise _invalid(f"config.type: unknown value {kind!r}")
    base = current or {}
    networking = value.get("networking") or base.get("networking") or {"type": "unrestricted"}
    if networking.get("type") == "limited":
        networking = {
            "type": "limited",
            "allowed_hosts": list(networking.get("allowed_hosts") or []),
            "allow_mcp_servers": bool(networking.get("allow_mcp_servers", False)),
            "allow_package_managers": bool(networking.get("allow_package_managers", False)),
        }
    elif networking.get("type") == "unrestricted":
        networking = {"type": "unrestricted"}
    else:
        raise _invalid(f"config.networking.type: unknown value {networking.get('type')!r}")
    packages: JSONDict = {"type": "packages"}
    given = value.get("packages") or {}
    for manager in ("apt", "cargo", "gem", "go", "npm", "pip"):
        packages[manager] = list(given.get(manager) or (base.get("packages") or {}).get(manager) or [])
    if (
        networking["type"] == "limited"
        and any(packages[m] for m in ("apt", "cargo", "gem", "go", "npm", "pip"))
        and not networking["allow_package_managers"]
    ):
        raise _invalid("config.packages: limited networking needs allow_package_managers: true")
    return {"type": "cloud", "networking": networking, "packages": packages}


def _budget(value: Any) -> JSONDict | None:
    if value is None:
        return None
    cost = value.get("max_list_cost") if isinstance(value, dict) else None
    if (
        not isinstance(value, dict)
        or value.get("type") != "limit"
        or not isinstance(cost, dict)
        or not isinstance(cost.get("amount"), str)
        or not cost["amount"].isdigit()
        or cost.get("currency") != "USD"
    ):
        raise _invalid(
            'budget: expected {"type": "limit", "max_list_cost": {"amount": "<cents>", "currency": "USD"}}'
        )
    return {"type": "limit", "max_list_cost": {"amount": cost["amount"], "currency": "USD"}}


def _blocks(content: Any, where: str, allowed: set[str]) -> None:
    if not isinstance(content, list) or not content:
        raise _invalid(f"{where}: expected a non-empty array of content blocks")
    for i, block in enumerate(content):
        at = f"{where}[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in allowed:
            raise _invalid(f"{at}.type: expected one of {sorted(allowed)}")
        if kind == "text" and (not isinstance(block.get("text"), str) or not block["text"]):
            raise _invalid(f"{at}.text: text content blocks must be non-empty")
        if kind in ("image", "document"):
            source = block.get("source")
            if not isinstance(source, dict) or source.get("type") not in ("base64", "url", "file", "text"):
                raise _invalid(f"{at}.source: expected a base64, url, file (or text) source")
        if kind == "search_result" and not (
            isinstance(block.get("source"), str)
            and isinstance(block.get("title"), str)
            and isinstance(block.get("content"), list)
        ):
            raise _invalid(f"{at}: a search_result needs source, title and content")


def _result_content(event: JSONDict, where: str) -> None:
    if event.get("content") is not None:
        _blocks(event["content"], f"{where}.content", {"text", "image", "document", "search_result"})
    if event.get("is_error") is not None and not isinstance(event["is_error"], bool):
        raise _invalid(f"{where}.is_error: expected a boolean")


def _define_outcome(event: JSONDict, where: str, files: Mapping[str, _File]) -> None:
    if not isinstance(event.get("description"), str) or not event["description"]:
        raise _invalid(f"{where}.description: Field required")
    rubric = event.get("rubric")
    if not isinstance(rubric, dict):
        raise _invalid(f"{where}.rubric: Field required")
    if rubric.get("type") == "text":
        if not isinstance(rubric.get("content"), str) or not rubric["content"]:
            raise _invalid(f"{where}.rubric.content: Field required")
    elif rubric.get("type") == "file":
        if rubric.get("file_id") not in files:
            raise _invalid(f"{where}.rubric.file_id: unknown file")
    else:
        raise _invalid(f"{where}.rubric.type: must be 'text' or 'file'")
    iterations = event.get("max_iterations")
    if iterations is not None and (
        not isinstance(iterations, int) or isinstance(iterations, bool) or not 1 <= iterations <= 20
    ):
        raise _invalid(f"{where}.max_iterations: must be between 1 and 20")


def _answer_id(event: Mapping[str, Any]) -> str:
    key = "custom_tool_use_id" if event["type"] == "user.custom_tool_result" else "tool_use_id"
    value = event[key]
    assert isinstance(value, str)
    return value


def _is_requires_action(event: Mapping[str, Any]) -> bool:
    stop = event.get("stop_reason")
    return (
        event.get("type") == "session.status_idle"
        and isinstance(stop, Mapping)
        and stop.get("type") == "requires_action"
    )


def _is_terminal(event: Mapping[str, Any]) -> bool:
    kind = event.get("type")
    return kind == "session.status_terminated" or (
        kind == "session.status_idle" and not _is_requires_action(event)
    )


def _add_usage(total: JSONDict, usage: Mapping[str, Any]) -> None:
    for key in ("input_tokens", "output_tokens", "cache_read_input_tokens"):
        total[key] = int(total.get(key) or 0) + int(usage.get(key) or 0)
    cache = total.setdefault(
        "cache_creation", {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}
    )
    cache["ephemeral_5m_input_tokens"] = int(cache.get("ephemeral_5m_input_tokens") or 0) + int(
        usage.get("cache_creation_input_tokens") or 0
    )


def _multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, str | None, bytes]]:
    """Parse multipart/form-data into {name: (filename, content_type, bytes)}."""
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if not content_type.startswith("multipart/form-data") or match is None:
        raise _invalid("expected a multipart/form-data body")
    delimiter = b"--" + match.group(1).encode()
    fields: dict[str, tuple[str | None, str | None, bytes]] = {}
    for chunk in raw.split(delimiter)[1:]:
        if chunk.startswith(b"--"):
            break
        head, _, body = chunk.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        body = body.removesuffix(b"\r\n")
        headers: dict[str, str] = {}
        for line in head.decode("utf-8", "replace").split("\r\n"):
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        disposition = headers.get("content-disposition", "")
        name_match = re.search(r'\bname="([^"]*)"', disposition)
        if name_match is None:
            continue
        file_match = re.search(r'\bfilename="([^"]*)"', disposition)
        fields[name_match.group(1)] = (
            file_match.group(1) if file_match else None,
            headers.get("content-type"),
            body,
        )
    return fields
