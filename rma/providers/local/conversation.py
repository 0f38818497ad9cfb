"""The Local conversation: the value a Local session's history lives in, and the texts Local adds.

``Conversation`` is the Local conn's pure state; the constants are Appendix A's directives and
the event types Local reports its own answers under. Shared by the two halves of a poll —
``rma.providers.local.request`` (what goes out) and ``rma.providers.local.response`` (what
comes back); ``rma.providers.local.codec`` is the codec and the place to import all of them from.
No I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import attrs
from returns.result import Failure

from rma._persistent import AppendLog, GrowOnlySet, JoinedBytes
from rma.errors import InvalidOpts, ProviderError, SessionError
from rma.providers.local.context import ContextState, grown
from rma.vocabulary import JSON
from rma.wire.openai_chat import RequestTemplate, encode_json

# --- constants (Appendix A) -------------------------------------------------------------

DUPLICATE_DIRECTIVE = (
    "You already called this tool with these exact arguments; the result is unchanged. "
    "Do NOT repeat it. If you have enough information, call your terminal tool now."
)
"""A.2 — sent as the tool message ``{"duplicate": true, "message": DUPLICATE_DIRECTIVE}``."""

CORRECTIVE_TEMPLATE = (
    "STOP — the {name} tool rejected your input again: {error}. You must change your input "
    "to fix THIS specific error before calling {name} again (or call your terminal tool)."
)
"""A.3 — the corrective after a tool's second consecutive error (L-18)."""

FINAL_TURN_DIRECTIVE = (
    "FINAL TURN: you are about to reach the maximum number of turns. You MUST produce your "
    "final answer now with the information you have already gathered. Do not call any other tool."
)
"""A.4 without a terminal tool (L-19)."""

FINAL_TURN_TERMINAL_TEMPLATE = (
    "FINAL TURN: you are about to reach the maximum number of turns. You MUST call your "
    "terminal tool ({tool}) now with the information you have already gathered. "
    "Do not call any other tool."
)
"""A.4 with a terminal tool (L-19)."""

EMPTY_REPLY_NUDGE = "Your last reply was empty. Reply now: answer the request, or call one of your tools."
EMPTY_REPLY_NUDGE_TERMINAL_TEMPLATE = (
    "Your last reply was empty. Reply now: answer the request, or call your terminal tool ({tool})."
)
UNANSWERED_CALL_TEXT = "This tool call was not executed: no result was returned for it."
INVALID_ARGUMENTS_TEMPLATE = (
    "The arguments you sent to {name} are not a valid JSON object ({reason}). You sent: {raw}. "
    "Call {name} again with a single JSON object that matches its input schema."
)
CUT_OFF_TEMPLATE = (
    "Your reply was cut off at the token limit before this call to {name} was complete, so it was not run."
)
UNKNOWN_TOOL_TEMPLATE = "There is no tool named {name}. Available tools: {available}. Call one of those."
NO_TOOLS_TEXT = "There is no tool named {name}. No tools are available here: answer in text."

DEFAULT_MAX_TURNS = 50
"""L-7: Local's max_turns is the session's, default 50."""

MODEL_RESPONSE = "local.model_response"
DUPLICATE_TOOL_CALL = "local.duplicate_tool_call"
DIRECTIVE = "local.directive"
REJECTED_TOOL_CALL = "local.rejected_tool_call"
"""Not in the reference: a call answered in the history because its name or arguments were bad."""

ROLE_CORRECTIVE = "corrective"
ROLE_FINAL_TURN = "final_turn"
ROLE_EMPTY_REPLY = "empty_reply"


# Tool-message contents are read by the model, so keep non-ASCII readable; the request
# encoder escapes it for the wire. ``default=repr`` keeps this total for arguments a chat
# callable handed over as non-JSON Python objects. Built once: ``json.dumps`` with options
# builds a new encoder on every call, and this runs a few times a turn.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=repr)
_COMPACT_SORTED = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=repr, sort_keys=True)


def compact_json(value: JSON, *, sort_keys: bool = False) -> str:
    return (_COMPACT_SORTED if sort_keys else _COMPACT).encode(value)


def error_content(text: str) -> str:
    """L-14: the tool message content for an error result."""
    return compact_json({"error": text, "isError": True})


def duplicate_content() -> str:
    """L-16 / A.2: the tool message content answering a duplicate call."""
    return compact_json({"duplicate": True, "message": DUPLICATE_DIRECTIVE})


def final_turn_text(terminal_tool: str | None) -> str:
    if terminal_tool:
        return FINAL_TURN_TERMINAL_TEMPLATE.format(tool=terminal_tool)
    return FINAL_TURN_DIRECTIVE


def corrective_text(name: str, error: str) -> str:
    return CORRECTIVE_TEMPLATE.format(name=name, error=error)


def invalid_option(option: str, detail: str) -> Failure[SessionError]:
    return Failure(InvalidOpts(option=option, detail=detail))


def bad_input(detail: str, payload: JSON = None) -> Failure[SessionError]:
    return Failure(ProviderError(detail=detail, error_type="invalid_input", payload=payload))


# --- the conversation -------------------------------------------------------------------


@attrs.frozen
class Conversation:
    """The Local conn's pure state: the history plus what the loop guards remember.

    ``history`` and ``encoded`` grow together: each message is JSON-encoded once, when it
    is appended, into one comma-joined buffer, so a request body is spliced from those
    bytes with a single copy, however long the history (L-30 Better). The
    request-scoped fields (``polls``, ``seen_calls``, ``error_counts``, ``nudged``) reset
    on every user message (L-13).
    """

    template: RequestTemplate
    model: str | None
    tools: tuple[JSON, ...]
    params: Mapping[str, JSON] = attrs.field(hash=False)
    tool_names: tuple[str, ...]
    terminal_tool: str | None
    system_prompt: str | None
    max_turns: int
    history: AppendLog[JSON]
    encoded: JoinedBytes = attrs.field(eq=False, repr=False)
    resumed: bool = False
    max_history_messages: int | None = None
    polls: int = 0
    seen_calls: AbstractSet[tuple[str, str]] = attrs.field(factory=GrowOnlySet)
    """(name, canonical arguments) of this request's calls: grows by one per call, so it is
    persistent rather than a frozenset rebuilt every poll."""
    error_counts: Mapping[str, int] = attrs.field(factory=dict, hash=False)
    pending_calls: tuple[tuple[str, str], ...] = ()
    """(id, name) of surfaced calls still waiting for their results."""
    held_answers: tuple[JSON, ...] = ()
    """Local's own tool messages (duplicates, rejected calls) for calls of the last reply, held
    while ``pending_calls`` wait, so that every answer goes back in ``call_order``."""
    call_order: tuple[str, ...] = ()
    """The ids of the last reply's calls in order, while ``held_answers`` is non-empty."""
    poll_events: tuple[JSON, ...] = ()
    """Directive events of the poll being prepared; emitted first by ``apply_response``."""
    nudged: bool = False
    context: ContextState | None = None
    """The context-window policy's state (``rma.providers.local.context``); None without a window."""
    repeatable: frozenset[str] = frozenset()
    """Tools whose identical calls each run: the duplicate-call guard (L-16) skips them, as it
    skips the terminal tool (a repeated answer is checked again, not refused as a repeat)."""


def role_of(message: JSON) -> object:
    return message.get("role") if isinstance(message, Mapping) else None


def appended(conv: Conversation, messages: Sequence[JSON], **changes: Any) -> Conversation:
    """The conversation with ``messages`` appended and the other fields in ``changes`` set
    (one evolve: a poll makes several of these)."""
    if messages:
        encoded = [encode_json(m) for m in messages]  # first: a message that is not JSON changes nothing
        size = len(conv.history)
        changes["history"] = conv.history.extend(messages)
        changes["encoded"] = conv.encoded.extend(encoded)
        context = changes.get("context", conv.context)
        if context is not None:
            changes["context"] = grown(context, messages, encoded, size)
    return attrs.evolve(conv, **changes) if changes else conv
