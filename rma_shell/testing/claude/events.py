"""The Claude Managed Agents emulator's script: the turn types and the event builders.

A turn is a list of server events (``agent_message``, ``custom_tool_use``,
``model_request_end``, ``idle_requires_action`` …, or whole turns from ``text_turn`` /
``tool_turn``) or a callable ``(SessionView, input_events) -> events``. The builders make the
shapes the API sends; the emulator fills what the server fills (``id``, ``processed_at``, the
linkage ids) when it emits them. Not the emulator itself, and not faults (``faults``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs

JSONDict = dict[str, Any]


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


PAUSE_TYPE = "emulator.pause"
"""The ``type`` of ``pause``'s marker: never emitted, never stored."""


def pause(seconds: float = math.inf) -> JSONDict:
    """Not an event: the host goes on working on this turn for ``seconds`` (``math.inf``: until
    interrupted) before the rest of the turn is emitted. The session stays ``running`` (when
    the turn said so) meanwhile; a ``user.interrupt`` drops the rest of the turn."""
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"pause needs a non-negative number of seconds, got {seconds!r}")
    return {"type": PAUSE_TYPE, "seconds": seconds}


PREVIEW_ONLY_TYPE = "emulator.preview_only"
"""The ``type`` of ``cut_message``'s marker: previewed to streams that ask, never stored."""

IN_THREAD_TYPE = "emulator.in_thread"
"""The ``type`` of ``in_thread``'s marker: its event goes to one thread's own stream only."""


def cut_message(text: str | Sequence[str]) -> JSONDict:
    """Not an event: a message the model began but never finished (an error or interrupt
    mid-stream). Streams that asked ``event_deltas=agent.message`` get its ``event_start`` and
    ``event_delta`` previews; no ``agent.message`` follows and nothing is stored (follow it
    with ``model_request_end``, which closes the preview, as the host does)."""
    return {"type": PREVIEW_ONLY_TYPE, "content": _text_blocks(text)}


def thread_created(session_thread_id: str, agent_name: str) -> JSONDict:
    """``session.thread_created``: a sub-agent thread started (the thread is listed from now)."""
    return {
        "type": "session.thread_created",
        "session_thread_id": session_thread_id,
        "agent_name": agent_name,
    }


def thread_status(
    session_thread_id: str,
    agent_name: str,
    status: str,
    stop_reason: Mapping[str, Any] | None = None,
) -> JSONDict:
    """``session.thread_status_<status>`` (``running``, ``idle``, ``rescheduled``,
    ``terminated``), on the thread's own stream and cross-posted to the primary one. An idle
    without ``stop_reason`` ended its turn."""
    event: JSONDict = {
        "type": f"session.thread_status_{status}",
        "session_thread_id": session_thread_id,
        "agent_name": agent_name,
    }
    if status == "idle":
        event["stop_reason"] = dict(stop_reason or {"type": "end_turn"})
    return event


def thread_message_sent(
    to_session_thread_id: str, text: str, *, to_agent_name: str | None = None
) -> JSONDict:
    """``agent.thread_message_sent``: the session's agent wrote to a sub-agent thread."""
    event: JSONDict = {
        "type": "agent.thread_message_sent",
        "to_session_thread_id": to_session_thread_id,
        "content": _text_blocks(text),
    }
    if to_agent_name is not None:
        event["to_agent_name"] = to_agent_name
    return event


def thread_message_received(
    from_session_thread_id: str, text: str, *, from_agent_name: str | None = None
) -> JSONDict:
    """``agent.thread_message_received``: a sub-agent thread wrote to the session's agent."""
    event: JSONDict = {
        "type": "agent.thread_message_received",
        "from_session_thread_id": from_session_thread_id,
        "content": _text_blocks(text),
    }
    if from_agent_name is not None:
        event["from_agent_name"] = from_agent_name
    return event


def in_thread(session_thread_id: str, event: Mapping[str, Any]) -> JSONDict:
    """Not an event of the primary stream: ``event`` happens in a sub-agent thread, stored in
    its history (``…/threads/{id}/events``) and sent to its streams only. A thread's
    ``agent.custom_tool_use`` needs no wrapper: give ``custom_tool_use`` its
    ``session_thread_id`` and it lands in the thread and is cross-posted to the primary stream."""
    return {"type": IN_THREAD_TYPE, "session_thread_id": session_thread_id, "event": dict(event)}


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
