# Over 800 lines on purpose: readers, builders, normalization and merge share one event vocabulary.
"""Claude Managed Agents (CMA): the pure codec — wire vocabulary, normalization, consolidation.

What this module is: how CMA inputs look (``user.message``, ``user.custom_tool_result``,
``user.tool_confirmation``, ``user.define_outcome``, ``user.interrupt``), how a turn's raw
server events normalize into a ``TurnResult``, which events end a turn, and how the event
history listed after a stream drop is consolidated with what the client already saw.
What it is not: no HTTP, no SSE parsing (``rma.wire.sse``), no clock, no credentials —
the transport in ``rma_shell`` moves what is built here. Event shapes follow the official
``anthropic`` SDK (2.10.0) wherever it and the Elixir reference disagree (wire reference §15).

Decisions (behaviour ids refer to ``shared/reference/behaviors.md``):

- **Turn boundaries** (wire §10.1): ``session.status_idle`` (whatever its stop reason,
  including ``requires_action`` and a missing one), ``session.status_terminated`` and
  ``session.deleted``. Not boundaries: ``session.error`` (the SDK treats it as
  informational — ``retry_status`` says whether an idle or a termination follows; §15 #10,
  unlike C-9), ``session.status_rescheduled``, every ``session.thread_status_*`` (a
  sub-agent thread's idle is not the session's), ``workflow_run.*`` and every outcome span
  (a ``needs_revision`` evaluation is followed by more work, S-58).
- **Terminal** (C-13, C-15, C-16, wire §9.2): from the turn's last boundary event. Idle
  ``end_turn`` → END_TURN; ``requires_action`` → REQUIRES_ACTION; ``retries_exhausted``,
  ``refusal``, unknown or missing stop reasons → TERMINATED; the reference's aliases
  ``satisfied`` / ``max_iterations_reached`` → END_TURN and ``failed`` → TERMINATED are
  tolerated. Outcome verdicts live on ``span.outcome_evaluation_end.result`` (§11, §15 #13,
  ``verdict`` accepted as a fallback): an ``end_turn`` idle after a ``failed`` verdict is
  TERMINATED; ``satisfied``, ``max_iterations_reached`` and ``interrupted`` stay END_TURN.
  ``session.status_terminated`` / ``session.deleted`` → TERMINATED with the event's own
  ``stop_reason`` (normally absent, §15 #12). No boundary at all → TERMINATED, stop reason
  None. ``stop_reason`` is always the raw value (S-63).
- **budget_reached → TERMINATED** (S-76). The server pauses the session (idle, not
  terminated) because its list cost reached the cap; nothing the loop can send will make
  progress until someone raises or removes the budget. END_TURN would look like success and
  would trigger terminal-tool re-prompts (S-44) that hit the same cap. The raw stop reason
  ``{"type": "budget_reached"}`` says why; a live session stays usable once the budget is
  changed server-side.
- **Text** (C-18, C-21): one chunk per ``agent.message`` — its text blocks concatenated with
  no separator (the text delta); the turn's text is those chunks joined with ``"\\n"``. This
  refines C-18 (which puts ``"\\n"`` between every block) so that the text is exactly the
  deltas joined; the two agree whenever a message has one text block.
- **Custom tool uses** (C-14): only for a ``requires_action`` turn — the idle's
  ``event_ids`` in that order, resolved against this batch's ``agent.custom_tool_use`` events;
  ids answered in the batch or on a terminated thread are skipped. Anything else is
  recovered from history (``pending_tool_uses``, S-52). Ids that name ``agent.tool_use`` /
  ``agent.mcp_tool_use`` events await a ``user.tool_confirmation``: see
  ``confirmations_required``. An absent or null ``input`` is ``{}``; an ``input`` that is not
  an object (or nests deeper than ``MAX_TOOL_INPUT_DEPTH``) is never run with ``{}``: the use
  carries ``input_error`` and is answered with it as an ``is_error`` result (issue #12).
- **Server tool uses** (C-19, P-6): the raw ``agent.tool_use`` and ``agent.mcp_tool_use``
  events, observe-only. Their results stay in ``events``.
- **Usage** (C-20, §9.5, §15 #16): the sum of ``span.model_request_end.model_usage`` (all
  four token counts, ``usage`` accepted as a fallback key); ``raw`` holds those maps. Grader
  usage (``span.outcome_evaluation_end.usage``) is not added, because the API does not say
  whether grader calls also emit model-request spans; ``grader_usage`` and
  ``usage_snapshot`` (the cumulative ``session.usage`` with ``list_cost``) read them.
- **Consolidation** after a drop (R-18/R-19 Better): see ``consolidate``.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Final, Literal

import attrs

from rma.content import Part
from rma.live import ContextCompacted, LiveTurn, LiveUpdate, TextDelta, ToolCallStarted
from rma.provider import DEFAULT_PROMPT, Input, Mode, ProviderCodec, register_codec
from rma.providers.claude import previews
from rma.providers.claude.content import LIMITS as CONTENT_LIMITS
from rma.providers.claude.content import content_blocks
from rma.session.events import Reconnected
from rma.vocabulary import (
    JSON,
    Outcome,
    Terminal,
    ToolResult,
    ToolUse,
    TurnResult,
    Usage,
    rejected_tool_input,
    tool_input_problem,
)

# --- event types (SDK 2.10.0 ``BetaManagedAgentsStreamSessionEvents``) ---------------------

USER_MESSAGE: Final = "user.message"
USER_INTERRUPT: Final = "user.interrupt"
USER_TOOL_CONFIRMATION: Final = "user.tool_confirmation"
USER_CUSTOM_TOOL_RESULT: Final = "user.custom_tool_result"
USER_TOOL_RESULT: Final = "user.tool_result"
USER_DEFINE_OUTCOME: Final = "user.define_outcome"
SYSTEM_MESSAGE: Final = "system.message"
AGENT_MESSAGE: Final = "agent.message"
AGENT_THINKING: Final = "agent.thinking"
AGENT_CUSTOM_TOOL_USE: Final = "agent.custom_tool_use"
AGENT_TOOL_USE: Final = "agent.tool_use"
AGENT_TOOL_RESULT: Final = "agent.tool_result"
AGENT_MCP_TOOL_USE: Final = "agent.mcp_tool_use"
AGENT_MCP_TOOL_RESULT: Final = "agent.mcp_tool_result"
SESSION_STATUS_RUNNING: Final = "session.status_running"
SESSION_STATUS_IDLE: Final = "session.status_idle"
SESSION_STATUS_RESCHEDULED: Final = "session.status_rescheduled"
SESSION_STATUS_TERMINATED: Final = "session.status_terminated"
SESSION_DELETED: Final = "session.deleted"
SESSION_ERROR: Final = "session.error"
SESSION_UPDATED: Final = "session.updated"
SESSION_USAGE: Final = "session.usage"
SESSION_THREAD_STATUS_TERMINATED: Final = "session.thread_status_terminated"
SPAN_MODEL_REQUEST_END: Final = "span.model_request_end"
SPAN_OUTCOME_EVALUATION_END: Final = "span.outcome_evaluation_end"


class Role(enum.StrEnum):
    """What normalization does with an event type (the values of ``EVENT_ROLES``)."""

    INPUT_ECHO = "input_echo"
    """Our own input, echoed; a result/confirmation echo marks its tool use answered."""
    TEXT = "text"
    PROGRESS = "progress"
    CUSTOM_TOOL_USE = "custom_tool_use"
    SERVER_TOOL_USE = "server_tool_use"
    SERVER_TOOL_RESULT = "server_tool_result"
    USAGE = "usage"
    OUTCOME = "outcome"
    STATUS = "status"
    BOUNDARY = "boundary"
    ERROR = "error"
    THREAD = "thread"
    WORKFLOW = "workflow"
    PREVIEW = "preview"
    INFO = "info"


EVENT_ROLES: Final[Mapping[str, Role]] = {
    USER_MESSAGE: Role.INPUT_ECHO,
    USER_INTERRUPT: Role.INPUT_ECHO,
    USER_TOOL_CONFIRMATION: Role.INPUT_ECHO,
    USER_CUSTOM_TOOL_RESULT: Role.INPUT_ECHO,
    USER_TOOL_RESULT: Role.INPUT_ECHO,
    USER_DEFINE_OUTCOME: Role.INPUT_ECHO,
    SYSTEM_MESSAGE: Role.INPUT_ECHO,
    AGENT_MESSAGE: Role.TEXT,
    AGENT_THINKING: Role.PROGRESS,
    "agent.thread_context_compacted": Role.PROGRESS,
    AGENT_CUSTOM_TOOL_USE: Role.CUSTOM_TOOL_USE,
    AGENT_TOOL_USE: Role.SERVER_TOOL_USE,
    AGENT_MCP_TOOL_USE: Role.SERVER_TOOL_USE,
    AGENT_TOOL_RESULT: Role.SERVER_TOOL_RESULT,
    AGENT_MCP_TOOL_RESULT: Role.SERVER_TOOL_RESULT,
    "agent.thread_message_sent": Role.THREAD,
    "agent.thread_message_received": Role.THREAD,
    SESSION_STATUS_RUNNING: Role.STATUS,
    SESSION_STATUS_RESCHEDULED: Role.STATUS,
    SESSION_STATUS_IDLE: Role.BOUNDARY,
    SESSION_STATUS_TERMINATED: Role.BOUNDARY,
    SESSION_DELETED: Role.BOUNDARY,
    SESSION_ERROR: Role.ERROR,
    SESSION_UPDATED: Role.INFO,
    SESSION_USAGE: Role.USAGE,
    "session.thread_created": Role.THREAD,
    "session.thread_status_running": Role.THREAD,
    "session.thread_status_idle": Role.THREAD,
    "session.thread_status_rescheduled": Role.THREAD,
    SESSION_THREAD_STATUS_TERMINATED: Role.THREAD,
    "span.model_request_start": Role.PROGRESS,
    SPAN_MODEL_REQUEST_END: Role.USAGE,
    "span.outcome_evaluation_start": Role.OUTCOME,
    "span.outcome_evaluation_ongoing": Role.OUTCOME,
    SPAN_OUTCOME_EVALUATION_END: Role.OUTCOME,
    "workflow_run.created": Role.WORKFLOW,
    "workflow_run.status_running": Role.WORKFLOW,
    "workflow_run.status_idle": Role.WORKFLOW,
    "workflow_run.status_ended": Role.WORKFLOW,
    "workflow_run.phase_started": Role.WORKFLOW,
    "workflow_run.phase_ended": Role.WORKFLOW,
    "workflow_run.error": Role.WORKFLOW,
    "event_start": Role.PREVIEW,
    "event_delta": Role.PREVIEW,
}
"""Every server event type the SDK defines, by role. Unknown types are kept verbatim."""

BOUNDARY_TYPES: Final = frozenset({SESSION_STATUS_IDLE, SESSION_STATUS_TERMINATED, SESSION_DELETED})
SERVER_TOOL_USE_TYPES: Final = frozenset({AGENT_TOOL_USE, AGENT_MCP_TOOL_USE})

NO_OUTPUT: Final = "(no output)"
"""Stands in for an empty tool result: the API takes no empty text block (§8.3, §15 #18)."""

_END_TURN_ALIASES = frozenset({"end_turn", "satisfied", "max_iterations_reached"})
_SESSION_OVER = frozenset({SESSION_STATUS_TERMINATED, SESSION_DELETED})
# For "is the remote session idle": events that show the session working (or about to).
_ACTIVE_PREFIXES = ("agent.", "span.", "user.", "system.")
_ACTIVE_TYPES = frozenset({SESSION_STATUS_RUNNING, SESSION_STATUS_RESCHEDULED, SESSION_ERROR})


# --- small readers ------------------------------------------------------------------------


def event_id(event: JSON) -> str | None:
    """The event's id when it is a string (previews and some fixtures have none, §15 #24)."""
    if isinstance(event, Mapping):
        value = event.get("id")
        if isinstance(value, str):
            return value
    return None


def event_type(event: JSON) -> str | None:
    if isinstance(event, Mapping):
        value = event.get("type")
        if isinstance(value, str):
            return value
    return None


def stop_type(stop_reason: JSON) -> str | None:
    """``stop_reason.type``; a bare string (older fixtures) is its own type."""
    if isinstance(stop_reason, Mapping):
        value = stop_reason.get("type")
        return value if isinstance(value, str) else None
    return stop_reason if isinstance(stop_reason, str) else None


def _listed_ids(stop_reason: JSON) -> list[str] | None:
    """``requires_action.event_ids`` as strings, or None when absent or malformed."""
    if not isinstance(stop_reason, Mapping):
        return None
    ids = stop_reason.get("event_ids")
    if not isinstance(ids, list):
        return None
    return [i for i in ids if isinstance(i, str)]


def _count(value: JSON) -> int:
    # Usage must never crash normalization: anything but a non-negative int counts as 0.
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return 0


def message_text(event: JSON) -> str | None:
    """An ``agent.message``'s text blocks concatenated; None when it has none (C-21)."""
    if event_type(event) != AGENT_MESSAGE:
        return None
    content = event.get("content")
    if not isinstance(content, list):
        return None
    parts = [
        block["text"]
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str)
    ]
    return "".join(parts) if parts else None


def live_updates(event: JSON) -> tuple[LiveUpdate, ...]:
    """``rma.live`` updates of one final event: an ``agent.message``'s text (one delta per
    message, E-10 — token deltas come from previews: ``rma.providers.claude.previews``), an
    ``agent.custom_tool_use``'s start (with the sub-agent thread it was cross-posted from) and
    a sub-agent thread's activity (``ThreadActivity``). Host-run tools (``agent.tool_use``,
    ``agent.mcp_tool_use``) are not custom calls: they have no update. The host's own
    compaction (``agent.thread_context_compacted``) is a ``ContextCompacted`` without numbers."""
    kind = event_type(event)
    if kind == "agent.thread_context_compacted":
        return (ContextCompacted(reason="host"),)
    if kind == AGENT_MESSAGE:
        text = message_text(event)
        return (TextDelta(text),) if text else ()
    if kind == AGENT_CUSTOM_TOOL_USE:
        use = _tool_use(event)
        return (ToolCallStarted(use.id, use.name, _thread(event)),)
    if kind is not None and EVENT_ROLES.get(kind) is Role.THREAD:
        return previews.thread_updates(event)
    return ()


def is_turn_boundary(event: JSON) -> bool:
    """Does this event end a turn (wire §10.1)? See the module docstring."""
    return event_type(event) in BOUNDARY_TYPES


def classify(event: JSON) -> str:
    """A status event's meaning (C-43, with the SDK's stop reasons).

    Idle → its stop type (``end_turn``, ``requires_action``, ``retries_exhausted``,
    ``budget_reached``, ``refusal``; ``satisfied`` / ``max_iterations_reached`` →
    ``end_turn``, ``failed`` → ``terminated``; any other typed reason → ``unknown_idle``);
    ``session.status_terminated`` → ``terminated``; ``session.deleted`` → ``deleted``;
    ``session.error`` → ``error``; anything else, including an idle without a typed stop
    reason → ``other``.
    """
    kind = event_type(event)
    if kind == SESSION_STATUS_IDLE:
        stop = stop_type(event.get("stop_reason"))
        if stop is None:
            return "other"
        if stop in _END_TURN_ALIASES:
            return "end_turn"
        if stop == "failed":
            return "terminated"
        if stop in ("requires_action", "retries_exhausted", "budget_reached", "refusal"):
            return stop
        return "unknown_idle"
    if kind == SESSION_STATUS_TERMINATED:
        return "terminated"
    if kind == SESSION_DELETED:
        return "deleted"
    if kind == SESSION_ERROR:
        return "error"
    return "other"


def retry_status(event: JSON) -> str | None:
    """A ``session.error``'s ``retry_status.type``: ``retrying`` (the server retries; keep
    waiting), ``exhausted`` (a ``retries_exhausted`` idle follows) or ``terminal`` (a
    termination follows) — wire §9.3. None for anything else."""
    if event_type(event) != SESSION_ERROR:
        return None
    error = event.get("error")
    status = error.get("retry_status") if isinstance(error, Mapping) else None
    return stop_type(status)


def _verdict(event: JSON) -> str | None:
    value = event.get("result")
    if not isinstance(value, str):
        value = event.get("verdict")  # the reference's fixtures (§15 #13)
    return value if isinstance(value, str) else None


def outcome_result(events: Iterable[JSON]) -> str | None:
    """The last outcome verdict among ``events`` (``satisfied``, ``needs_revision``, …)."""
    verdict = None
    for event in events:
        if event_type(event) == SPAN_OUTCOME_EVALUATION_END:
            verdict = _verdict(event) or verdict
    return verdict


def terminal_for(stop_reason: JSON, verdict: str | None = None) -> Terminal:
    """The canonical terminal of an idle's stop reason (C-15, S-76), given the outcome verdict."""
    stop = stop_type(stop_reason)
    if stop == "requires_action":
        return Terminal.REQUIRES_ACTION
    if stop in _END_TURN_ALIASES:
        return Terminal.TERMINATED if verdict == "failed" else Terminal.END_TURN
    # retries_exhausted, budget_reached, refusal, failed, unknown, missing.
    return Terminal.TERMINATED


def _usage_of(value: JSON) -> Usage:
    return Usage(
        input_tokens=_count(value.get("input_tokens")),
        output_tokens=_count(value.get("output_tokens")),
        cache_read_input_tokens=_count(value.get("cache_read_input_tokens")),
        cache_creation_input_tokens=_count(value.get("cache_creation_input_tokens")),
        raw=(value,),
    )


def _sum_usage(maps: Sequence[JSON]) -> Usage | None:
    total: Usage | None = None
    for value in maps:
        usage = _usage_of(value)
        total = usage if total is None else total + usage
    return total


def model_usage(events: Iterable[JSON]) -> Usage | None:
    """Σ ``span.model_request_end.model_usage`` (``usage`` as a fallback key) — C-20, §9.5."""
    maps: list[JSON] = []
    for event in events:
        if event_type(event) == SPAN_MODEL_REQUEST_END:
            value = event.get("model_usage")
            if not isinstance(value, Mapping):
                value = event.get("usage")
            if isinstance(value, Mapping):
                maps.append(value)
    return _sum_usage(maps)


def grader_usage(events: Iterable[JSON]) -> Usage | None:
    """Σ ``span.outcome_evaluation_end.usage`` — the outcome grader's tokens (kept apart)."""
    maps = [
        event["usage"]
        for event in events
        if event_type(event) == SPAN_OUTCOME_EVALUATION_END and isinstance(event.get("usage"), Mapping)
    ]
    return _sum_usage(maps)


def usage_snapshot(events: Iterable[JSON]) -> JSON:
    """The latest cumulative ``session.usage`` snapshot (with ``list_cost``), or None."""
    snapshot = None
    for event in events:
        if event_type(event) == SESSION_USAGE and isinstance(event.get("usage"), Mapping):
            snapshot = event["usage"]
    return snapshot


def _thread(event: JSON) -> str | None:
    value = event.get("session_thread_id")
    return value if isinstance(value, str) else None


def _tool_use(event: JSON) -> ToolUse:
    raw_input = event.get("input")
    name = event.get("name")
    # A nameless call cannot be dispatched by name; "unknown" lets the handler answer it
    # with an error result instead of crashing normalization.
    name = name if isinstance(name, str) and name else "unknown"
    if raw_input is None:  # absent or null: a tool without parameters (C-14)
        return ToolUse(id=event_id(event), name=name, input={})
    problem = tool_input_problem(raw_input)
    if problem is not None:
        # Never run a tool on input the model did not send (issue #12): the session answers
        # the call with this error, the way Local answers bad arguments.
        error = rejected_tool_input(name, problem, raw_input)
        return ToolUse(id=event_id(event), name=name, input={}, input_error=error)
    return ToolUse(id=event_id(event), name=name, input=raw_input)


@attrs.frozen
class _Index:
    """What one pass over a list of events knows about its tool uses and answers."""

    custom_uses: Mapping[str, JSON]
    server_uses: Mapping[str, JSON]
    answered: frozenset[str]
    confirmed: frozenset[str]
    terminated_threads: frozenset[str]


def _index(events: Iterable[JSON]) -> _Index:
    custom: dict[str, JSON] = {}
    server: dict[str, JSON] = {}
    answered: set[str] = set()
    confirmed: set[str] = set()
    threads: set[str] = set()
    for event in events:
        kind = event_type(event)
        if kind == AGENT_CUSTOM_TOOL_USE:
            eid = event_id(event)
            if eid is not None:
                custom.setdefault(eid, event)
        elif kind in SERVER_TOOL_USE_TYPES:
            eid = event_id(event)
            if eid is not None:
                server.setdefault(eid, event)
        elif kind == USER_CUSTOM_TOOL_RESULT:
            ref = event.get("custom_tool_use_id")
            if isinstance(ref, str):
                answered.add(ref)
        elif kind == USER_TOOL_CONFIRMATION:
            ref = event.get("tool_use_id")
            if isinstance(ref, str):
                confirmed.add(ref)
        elif kind == SESSION_THREAD_STATUS_TERMINATED:
            thread = _thread(event)
            if thread is not None:
                threads.add(thread)
    return _Index(custom, server, frozenset(answered), frozenset(confirmed), frozenset(threads))


def _open_custom_uses(ids: Iterable[str], index: _Index) -> tuple[ToolUse, ...]:
    """Custom tool uses named by ``ids`` (in that order) that still take a result."""
    out: list[ToolUse] = []
    taken: set[str] = set()
    for eid in ids:
        event = index.custom_uses.get(eid)
        if event is None or eid in taken or eid in index.answered:
            continue
        if _thread(event) in index.terminated_threads:
            continue  # the API takes no result for a terminated thread's call
        taken.add(eid)
        out.append(_tool_use(event))
    return tuple(out)


def _open_confirmations(ids: Iterable[str], index: _Index) -> tuple[JSON, ...]:
    out: list[JSON] = []
    taken: set[str] = set()
    for eid in ids:
        event = index.server_uses.get(eid)
        if event is None or eid in taken or eid in index.confirmed:
            continue
        if _thread(event) in index.terminated_threads or event.get("evaluated_permission") == "deny":
            continue  # a denied call is resolved by the server; never answer it (§8.4)
        taken.add(eid)
        out.append(event)
    return tuple(out)


# --- input builders (wire §8.2; shapes match the SDK's ``…EventParams`` TypedDicts) ------


def text_block(text: str) -> dict[str, JSON]:
    return {"type": "text", "text": text}


def user_message(text: str) -> dict[str, JSON]:
    """``user.message`` with one text block (C-39)."""
    return {"type": USER_MESSAGE, "content": [text_block(text)]}


def custom_tool_result(
    custom_tool_use_id: str, text: str, is_error: bool = False, content: tuple[Part, ...] = ()
) -> dict[str, JSON]:
    """``user.custom_tool_result`` answering one ``agent.custom_tool_use`` (C-41).

    An empty text becomes ``(no output)``, as the SDK's session runner sends (§15 #18). A rich
    result's ``content`` (``rma.content`` parts) becomes its blocks (``claude.content``).
    """
    blocks = content_blocks(content) if content else []
    return {
        "type": USER_CUSTOM_TOOL_RESULT,
        "custom_tool_use_id": custom_tool_use_id,
        "content": blocks or [text_block(text or NO_OUTPUT)],
        "is_error": bool(is_error),
    }


def tool_confirmation(
    tool_use_id: str, result: Literal["allow", "deny"], deny_message: str | None = None
) -> dict[str, JSON]:
    """``user.tool_confirmation`` for a confirm-gated ``agent.tool_use``/``agent.mcp_tool_use`` (C-42).

    ValueError for a result other than allow/deny, or a deny message with allow (the API
    rejects it, §8.3).
    """
    if result not in ("allow", "deny"):
        raise ValueError(f"tool confirmation result must be 'allow' or 'deny', got {result!r}")
    if deny_message is not None and result != "deny":
        raise ValueError("deny_message is only allowed with result='deny'")
    event: dict[str, JSON] = {"type": USER_TOOL_CONFIRMATION, "tool_use_id": tool_use_id, "result": result}
    if deny_message is not None:
        event["deny_message"] = deny_message
    return event


def text_rubric(content: str) -> dict[str, JSON]:
    return {"type": "text", "content": content}


def file_rubric(file_id: str) -> dict[str, JSON]:
    return {"type": "file", "file_id": file_id}


def define_outcome(
    description: str, rubric: str | Mapping[str, JSON], max_iterations: int | None = None
) -> dict[str, JSON]:
    """``user.define_outcome`` (C-40): a string rubric is a text rubric, a mapping goes verbatim
    (e.g. ``file_rubric(id)``); ``max_iterations`` only when an int, never a null."""
    event: dict[str, JSON] = {
        "type": USER_DEFINE_OUTCOME,
        "description": description,
        "rubric": text_rubric(rubric) if isinstance(rubric, str) else dict(rubric),
    }
    if isinstance(max_iterations, int) and not isinstance(max_iterations, bool):
        event["max_iterations"] = max_iterations
    return event


def interrupt(session_thread_id: str | None = None) -> dict[str, JSON]:
    """``user.interrupt``: every live thread, or only the named one."""
    event: dict[str, JSON] = {"type": USER_INTERRUPT}
    if session_thread_id is not None:
        event["session_thread_id"] = session_thread_id
    return event


def bare_model_id(model: str) -> str:
    """C-26: a provider-qualified id is sent bare — everything up to the first ``:`` goes
    (``anthropic:claude-sonnet-4-6`` → ``claude-sonnet-4-6``); a bare id is unchanged."""
    return model.split(":", 1)[1] if ":" in model else model


def wire_model(model_config: JSON) -> JSON:
    """An agent's ``model`` as the agents API takes it: a model id string or ``{"id", …}``
    with the id bare (C-26); anything else verbatim, for the API to judge."""
    if isinstance(model_config, str):
        return bare_model_id(model_config)
    if isinstance(model_config, Mapping) and isinstance(model_config.get("id"), str):
        return {**model_config, "id": bare_model_id(model_config["id"])}
    return model_config


def events_body(events: Iterable[JSON]) -> dict[str, JSON]:
    """The body of ``POST /v1/sessions/{id}/events``."""
    return {"events": list(events)}


@attrs.frozen
class Confirmation:
    """A verdict on one confirm-gated tool use (what a confirmation callback decides)."""

    tool_use_id: str
    allow: bool
    deny_message: str | None = None


# --- normalization ---------------------------------------------------------------------


def normalize(events: Sequence[JSON]) -> TurnResult:
    """One turn's raw events as a ``TurnResult``; the events travel verbatim (P-4, E-8)."""
    kept = tuple(events)
    chunks: list[str] = []
    server: list[JSON] = []
    usage_maps: list[JSON] = []
    status: JSON = None
    verdict: str | None = None
    for event in kept:
        kind = event_type(event)
        if kind == AGENT_MESSAGE:
            chunk = message_text(event)
            if chunk is not None:
                chunks.append(chunk)
        elif kind in SERVER_TOOL_USE_TYPES:
            server.append(event)
        elif kind == SPAN_MODEL_REQUEST_END:
            value = event.get("model_usage")
            if not isinstance(value, Mapping):
                value = event.get("usage")
            if isinstance(value, Mapping):
                usage_maps.append(value)
        elif kind == SPAN_OUTCOME_EVALUATION_END:
            verdict = _verdict(event) or verdict
        if kind in BOUNDARY_TYPES:
            status = event  # C-13: the most recent boundary decides
    text = "\n".join(chunks)
    usage = _sum_usage(usage_maps)
    if status is None:
        return TurnResult(Terminal.TERMINATED, None, text, (), server, usage, kept)
    stop_reason = status.get("stop_reason")
    if event_type(status) != SESSION_STATUS_IDLE:
        return TurnResult(Terminal.TERMINATED, stop_reason, text, (), server, usage, kept)
    terminal = terminal_for(stop_reason, verdict)
    uses: tuple[ToolUse, ...] = ()
    if terminal is Terminal.REQUIRES_ACTION:
        uses = _open_custom_uses(_listed_ids(stop_reason) or (), _index(kept))
    return TurnResult(terminal, stop_reason, text, uses, server, usage, kept)


# --- history: answered and outstanding calls (R-20…R-22, S-52) -----------------------------


def dedupe(events: Iterable[JSON], seen: Iterable[str]) -> tuple[tuple[JSON, ...], frozenset[str]]:
    """R-20: (fresh events in order, grown seen). Id-less events always pass; a seen id
    drops; an id repeated within ``events`` passes only the first time."""
    known = set(seen)
    fresh: list[JSON] = []
    for event in events:
        eid = event_id(event)
        if eid is None:
            fresh.append(event)
        elif eid not in known:
            known.add(eid)
            fresh.append(event)
    return tuple(fresh), frozenset(known)


def unanswered_tool_uses(history: Iterable[JSON]) -> tuple[JSON, ...]:
    """R-21: ``agent.custom_tool_use`` events whose id has no ``user.custom_tool_result``,
    in history order (each id once)."""
    events = tuple(history)
    index = _index(events)
    out: list[JSON] = []
    taken: set[str] = set()
    for event in events:
        eid = event_id(event)
        if (
            event_type(event) == AGENT_CUSTOM_TOOL_USE
            and eid is not None
            and eid not in index.answered
            and eid not in taken
        ):
            taken.add(eid)
            out.append(event)
    return tuple(out)


def _outstanding_idle(history: Sequence[JSON]) -> int | None:
    """Index of the last idle when it is ``requires_action`` and still stands, else None.

    A later typed idle resolves it (R-22); so does the session ending (it takes no input).
    """
    for i in range(len(history) - 1, -1, -1):
        kind = event_type(history[i])
        if kind in _SESSION_OVER:
            return None
        if kind == SESSION_STATUS_IDLE:
            if stop_type(history[i].get("stop_reason")) == "requires_action":
                return i
            return None
    return None


def pending_requires_action(history: Sequence[JSON]) -> JSON:
    """R-22: the last idle's stop_reason when it is ``requires_action``, else None."""
    at = _outstanding_idle(tuple(history))
    return None if at is None else history[at].get("stop_reason")


def _pending_from(history: Sequence[JSON], at: int) -> tuple[ToolUse, ...]:
    index = _index(history)
    listed = _listed_ids(history[at].get("stop_reason"))
    if not listed:
        # The idle names nothing usable: answer whatever custom call is still open.
        listed = [eid for e in unanswered_tool_uses(history) if (eid := event_id(e)) is not None]
    return _open_custom_uses(listed, index)


def pending_tool_uses(history: Sequence[JSON]) -> tuple[ToolUse, ...]:
    """S-52 / C-11: the custom tool uses the session is blocked on.

    The outstanding ``requires_action`` idle's ``event_ids`` (in that order) that are
    ``agent.custom_tool_use`` events of ``history`` with no ``user.custom_tool_result`` and
    not on a terminated thread. When the idle lists no ids, every unanswered custom call
    (R-21). No outstanding ``requires_action`` → nothing. Ids the client may already have
    answered without an echo yet are returned too (at-least-once, S-54).
    """
    events = tuple(history)
    at = _outstanding_idle(events)
    return () if at is None else _pending_from(events, at)


def confirmations_required(events: Sequence[JSON]) -> tuple[JSON, ...]:
    """The ``agent.tool_use`` / ``agent.mcp_tool_use`` events the outstanding
    ``requires_action`` idle lists that await a ``user.tool_confirmation`` (§8.4, §15 #14).

    In ``event_ids`` order; already-confirmed calls, calls the server denied
    (``evaluated_permission: deny``) and calls on terminated threads are left out. Answer
    each with ``tool_confirmation`` (or ``ClaudeManagedAgentsCodec.confirmation_input``).
    """
    history = tuple(events)
    at = _outstanding_idle(history)
    if at is None:
        return ()
    return _open_confirmations(_listed_ids(history[at].get("stop_reason")) or (), _index(history))


def session_idle(history: Sequence[JSON]) -> bool:
    """Will nothing arrive unprompted? True when the latest status-bearing event is an idle,
    a termination or a deletion (or there is none: sessions start idle); False when the
    session was last seen running, or an input, agent or span event came after."""
    for event in reversed(history):
        kind = event_type(event)
        if kind is None:
            continue
        if kind == SESSION_STATUS_IDLE or kind in _SESSION_OVER:
            return True
        if kind in _ACTIVE_TYPES or kind.startswith(_ACTIVE_PREFIXES):
            return False
        # Neutral: thread and workflow statuses, session.updated/usage, previews, unknowns.
    return True


# --- consolidation after a drop (R-18, R-19 Better) ----------------------------------------


@attrs.frozen
class Consolidated:
    """What a reconnect found, ready for the session machine (``reconnected``).

    ``replay``: events to fold through the normal stream path, in order. ``pending``:
    custom tool uses to redrive. ``seen``: ids to seed the machine's dedupe with — never
    an id of ``replay``, since the machine skips seen ids while folding. ``idle``: the
    remote session is idle. ``confirmations``: confirm-gated calls the outstanding
    ``requires_action`` waits on (raw events). ``refolded``: how many replayed events the
    client had already seen (they reach handlers again: delivery is at-least-once, E-7).
    ``session_over``: the history holds a termination or deletion.
    """

    replay: tuple[JSON, ...] = ()
    pending: tuple[ToolUse, ...] = ()
    seen: tuple[str, ...] = ()
    idle: bool = True
    confirmations: tuple[JSON, ...] = ()
    refolded: int = 0
    session_over: bool = False
    boundary: str | None = None
    """The id of the boundary at the client's position, and its ``processed_at``."""
    boundary_at: str | None = None

    def reconnected(self, session_id: str | None) -> Reconnected:
        return Reconnected(
            session_id=session_id,
            pending=self.pending,
            seen=self.seen,
            replay=self.replay,
            idle=self.idle,
            boundary=self.boundary,
            boundary_at=self.boundary_at,
        )


def merge_history(history: Iterable[JSON], buffered: Iterable[JSON] = ()) -> tuple[JSON, ...]:
    """The listing (each id once) followed by the buffered stream events it lacks.

    The stream was subscribed before the listing was read, so the buffer overlaps the
    listing's tail. Buffered events with an id the listing has are duplicates; id-less
    buffered events (previews) count only after the last buffered event the listing also
    has — earlier ones preview events the listing already holds in final form.
    """
    out: list[JSON] = []
    ids: set[str] = set()
    for event in history:
        eid = event_id(event)
        if eid is not None:
            if eid in ids:
                continue
            ids.add(eid)
        out.append(event)
    tail = tuple(buffered)
    overlap_end = max((i for i, e in enumerate(tail) if event_id(e) in ids), default=-1)
    for i, event in enumerate(tail):
        eid = event_id(event)
        if eid is None:
            if i > overlap_end:
                out.append(event)
        elif eid not in ids:
            ids.add(eid)
            out.append(event)
    return tuple(out)


def consolidate(
    history: Iterable[JSON],
    seen: Collection[str],
    buffered: Iterable[JSON] = (),
    *,
    attach: bool = False,
) -> Consolidated:
    """Consolidate the listed history with what the client saw (R-18, R-19 Better).

    ``history`` is the full listing (oldest first), read *after* subscribing the new
    stream; ``buffered`` the events that stream delivered meanwhile; ``seen`` the ids the
    session machine processed before the drop. ``attach`` is True on the first
    consolidation of a reattached session (the client has processed nothing of it).

    The rule. Let H be ``merge_history(history, buffered)``, and *k* the client's position:
    the last boundary in H that the client processed — the last one whose id is in
    ``seen`` (none → before the start); with ``attach``, the last boundary in H.

    1. ``replay`` = H after *k*, in order, each id once. It holds every unseen event after
       the client's position — so a terminal that happened while disconnected is observed —
       *and* the seen events of the client's open turn, re-folded: the machine drops its
       partial-turn buffer at a drop, so without them a ``requires_action`` whose tool uses
       arrived before the drop could not resolve them, and the turn's text and record would
       be cut. Events up to *k* are settled: a client that processed a boundary processed
       its turn (unseen ids there are ids the machine's bounded dedupe window forgot).
    2. ``seen`` = the given ids and the ids of H up to *k*, minus the replayed ids.
    3. ``pending`` = the open custom tool uses (``pending_tool_uses``) of the outstanding
       ``requires_action`` idle, only when that idle is at or before *k* and the client
       never processed it — in practice on attach. An idle after *k* is replayed: folding
       it resolves its tool uses, which are replayed too (they come before their idle) or
       recovered by S-52 from the request's history; an idle the client processed had its
       tools run already. So no tool use is ever both redriven and folded. Likewise
       ``confirmations`` (``confirmations_required``).
    4. ``idle`` = ``session_idle(H)``.
    """
    merged = merge_history(history, buffered)
    prior = set(seen)
    position = -1
    for i in range(len(merged) - 1, -1, -1):
        if is_turn_boundary(merged[i]) and (attach or event_id(merged[i]) in prior):
            position = i
            break
    replay = merged[position + 1 :]
    replay_ids = {eid for e in replay if (eid := event_id(e)) is not None}
    seen_out = [i for i in dict.fromkeys(seen) if i not in replay_ids]
    kept = set(seen_out)
    for event in merged[: position + 1]:
        eid = event_id(event)
        if eid is not None and eid not in kept:
            kept.add(eid)
            seen_out.append(eid)
    pending: tuple[ToolUse, ...] = ()
    confirmations: tuple[JSON, ...] = ()
    at = _outstanding_idle(merged)
    if at is not None and at <= position and event_id(merged[at]) not in prior:
        pending = _pending_from(merged, at)
        listed = _listed_ids(merged[at].get("stop_reason")) or ()
        confirmations = _open_confirmations(listed, _index(merged))
    return Consolidated(
        replay=replay,
        pending=pending,
        seen=tuple(seen_out),
        idle=session_idle(merged),
        confirmations=confirmations,
        refolded=sum(1 for e in replay if event_id(e) in prior),
        session_over=any(event_type(e) in _SESSION_OVER for e in merged),
        boundary=event_id(merged[position]) if position >= 0 else None,
        boundary_at=_processed_at(merged[position]) if position >= 0 else None,
    )


def _processed_at(event: JSON) -> str | None:
    stamp = event.get("processed_at") if isinstance(event, dict) else None
    return stamp if isinstance(stamp, str) else None


# --- the codec -----------------------------------------------------------------------------


class ClaudeManagedAgentsCodec(ProviderCodec):
    """CMA (C-1): streaming, outcomes and budgets, one text delta per ``agent.message``.

    Inputs are lists of events, posted as ``{"events": [...]}``. An empty resume is never
    built: the API rejects an empty ``events`` list (S-53).
    """

    name = "claude_managed_agents"
    mode = Mode.STREAMING
    supports_outcomes = True
    supports_budget = True
    has_text_delta = True
    empty_resume_safe = False
    content_limits = CONTENT_LIMITS

    def kickoff_input(self, prompt: str | None, outcome: Outcome | None) -> Input:
        """C-6 / S-57: an outcome kicks off with ``user.define_outcome`` alone (the agent
        starts on receipt; ``prompt`` is ignored); otherwise ``user.message``."""
        if outcome is not None:
            return [define_outcome(outcome.description, outcome.rubric, outcome.max_iterations)]
        return self.user_input(prompt if prompt is not None else DEFAULT_PROMPT)

    def user_input(self, text: str) -> Input:
        return [user_message(text)]

    def resume_input(self, uses: Sequence[ToolUse], results: Sequence[ToolResult]) -> Input:
        """C-7: one ``user.custom_tool_result`` per use, in order; results pair by position."""
        if len(uses) != len(results):
            raise ValueError(f"{len(uses)} tool uses but {len(results)} results")
        if not uses:
            raise ValueError("an empty resume is never sent: the API rejects an empty events list")
        events: list[JSON] = []
        for use, result in zip(uses, results, strict=True):
            if use.id is None:
                raise ValueError(f"tool use {use.name!r} has no id to answer")
            events.append(custom_tool_result(use.id, result.text, result.is_error, result.content))
        return events

    def confirmation_input(self, confirmations: Sequence[Confirmation]) -> Input:
        if not confirmations:
            raise ValueError("an empty confirmation input is never sent")
        return [
            tool_confirmation(c.tool_use_id, "allow", None)
            if c.allow
            else tool_confirmation(c.tool_use_id, "deny", c.deny_message)
            for c in confirmations
        ]

    def interrupt_input(self, session_thread_id: str | None = None) -> Input:
        return [interrupt(session_thread_id)]

    def input_landed(self, input: Input, events: Sequence[JSON]) -> bool:
        """Whether ``input``, posted by a process that stopped before hearing back, reached the
        host: every event of it has its echo among ``events`` (the history the host lists) —
        a tool result or confirmation by the call it answers, any other event by its type.
        Posting again only when one is missing means no result is posted twice (§2: a POST is
        not idempotent)."""
        answered = {e.get("custom_tool_use_id") for e in events if event_type(e) == USER_CUSTOM_TOOL_RESULT}
        confirmed = {e.get("tool_use_id") for e in events if event_type(e) == USER_TOOL_CONFIRMATION}
        kinds = {event_type(e) for e in events}
        for posted in input if isinstance(input, list) else ():
            kind = event_type(posted)
            if kind == USER_CUSTOM_TOOL_RESULT:
                if posted.get("custom_tool_use_id") not in answered:
                    return False
            elif kind == USER_TOOL_CONFIRMATION:
                if posted.get("tool_use_id") not in confirmed:
                    return False
            elif kind not in kinds:
                return False
        return True

    def normalize(self, events: Sequence[JSON]) -> TurnResult:
        return normalize(events)

    def turn_boundary(self, event: JSON) -> bool:
        return is_turn_boundary(event)

    def text_delta(self, event: JSON) -> str | None:
        return message_text(event)

    def live_updates(self, event: JSON) -> tuple[LiveUpdate, ...]:
        return live_updates(event)

    def is_preview(self, event: JSON) -> bool:
        return previews.is_preview(event)

    def live_fold(
        self, live: LiveTurn, event: JSON, turn: Sequence[JSON]
    ) -> tuple[LiveTurn, tuple[LiveUpdate, ...]]:
        return previews.fold(live, event, turn, live_updates)

    def pending_tool_uses(self, history: Sequence[JSON]) -> tuple[ToolUse, ...]:
        return pending_tool_uses(history)

    def confirmations_required(self, events: Sequence[JSON]) -> tuple[JSON, ...]:
        return confirmations_required(events)

    def confirmation_uses(self, events: Sequence[JSON]) -> tuple[ToolUse, ...]:
        return tuple(_tool_use(e) for e in confirmations_required(events))

    def answer_input(
        self,
        uses: Sequence[ToolUse],
        results: Sequence[ToolResult],
        confirmations: Sequence[ToolUse],
        verdicts: Sequence[ToolResult],
    ) -> Input:
        """Tool results, then confirmation verdicts, in one post (a batch is allowed, §14)."""
        events: list[JSON] = list(self.resume_input(uses, results)) if uses else []
        if confirmations:
            if len(confirmations) != len(verdicts):
                raise ValueError(f"{len(confirmations)} confirmations but {len(verdicts)} verdicts")
            events.extend(
                self.confirmation_input(
                    [
                        Confirmation(
                            str(c.id), allow=not v.is_error, deny_message=v.text if v.is_error else None
                        )
                        for c, v in zip(confirmations, verdicts, strict=True)
                    ]
                )
            )
        if not events:
            raise ValueError("an empty answer is never sent")
        return events


CODEC = ClaudeManagedAgentsCodec()
register_codec(ClaudeManagedAgentsCodec)
