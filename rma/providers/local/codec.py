"""The Local provider's pure half: its codec and the conversation it keeps (§8, L-1…L-30).

Local runs the agent loop in this process over any OpenAI-compatible chat-completions
endpoint: one model call per turn, the history held client-side. This half decides
everything about that conversation — what a request body holds, how an input and a model
response change the history, the loop guards for weak models, how a turn normalizes —
and does no I/O. The transport (``rma_shell.providers.local.provider``) only moves the bytes
``prepare_request`` returns and hands the decoded response to ``apply_response``.

This module is the codec and the one place to import Local's pure half from: the conversation
and Local's own texts live in ``rma.providers.local.conversation``, what goes out (``start``,
``apply_input``, ``prepare_request``) in ``rma.providers.local.request``, what comes back
(``apply_response``, ``normalize``, ``text_delta``, ``live_updates``) in
``rma.providers.local.response``.

A poll is ``apply_input`` → ``prepare_request`` → (transport) → ``apply_response``. Events
of one poll come out of ``apply_response`` in the order of L-20: directives (correctives,
final turn), then answered calls (duplicates, rejected calls), then the model response.

Decisions where the reference was silent, weak or crash-prone:

- **Invalid tool-call arguments** (not JSON, or JSON that is not an object): the call is
  answered in the history with an error tool message that tells the model the arguments
  were not a valid JSON object (quoting what it sent) and is *not* surfaced to the handler
  (a ``local.rejected_tool_call`` event records it). Running a tool with ``{}`` (L-23) would
  act on input the model never meant. Empty or null arguments mean ``{}`` — models send
  that for tools without parameters. The history copy of a rejected call carries ``"{}"``
  as its arguments, because some servers (Ollama) re-parse history arguments and answer
  400 to the whole request otherwise.
- **A reply cut off at the token limit** (``finish_reason: "length"``) runs none of its
  calls: the model did not finish sending them (vLLM streams a call's id and name before its
  arguments, so a cut-off call can look complete with ``{}``, or hold half its arguments).
  Each call is answered in the history like a rejected call (reason ``"cut_off"``, arguments
  ``"{}"``), so the history stays valid input, and the turn normalizes to ``terminated``
  with stop reason ``"length"`` — as a cut-off text reply does (L-22) — rather than driving
  another model call.
- **Unknown tool names** are answered the same way, with an error naming the available
  tools. The terminal tool counts as known even when it is not among ``tools``.
- **Duplicate calls** (L-16) are also detected *within* one response, not only against
  earlier responses of the request. Two kinds of tool are exempt and run every time: a tool
  declared ``repeatable`` (a clock, a status poll: ``@tool(repeatable=True)``) and the terminal
  tool (a repeated final answer is checked again — a typed answer's validation errors go back
  and use a re-prompt, as on the other hosts — instead of being told to call the terminal
  tool it just called).
- **Tool results go back in call order.** Qwen/Hermes-style chat templates drop
  ``tool_call_id`` and pair the n-th result with the n-th call, so the answers Local makes
  itself (duplicates, rejected calls) are held back while other calls of the same reply wait
  for the handler, and sent with those results in the order of the reply's ``tool_calls``.
  The assistant message is never reordered. Until then the transcript holds the reply without
  those answers (a reattach answers every call left open with the "not executed" error).
- **Empty replies** (no content, no tool calls, finish "stop"): the first one in a request
  gets a nudge user message and the turn normalizes to requires_action with no uses, like
  an all-duplicates turn; the empty resume the session then sends drives the next model
  call (S-56 Better, ``empty_resume_safe``). A second empty reply is accepted (end_turn).
  Each rejected or duplicate call costs a turn, so all three loops are bounded by
  ``max_turns`` and the final-turn directive (L-19).
- **Missing tool ids** or ids repeated within a response get a deterministic synthetic id
  (``call_<poll>_<n>``) so every tool message matches exactly one call.
- **History messages are request-shaped**: an assistant reply is stored as role, content
  and tool calls (with the ids above); response-only fields (``refusal``,
  ``reasoning_content``, …) stay in the ``local.model_response`` event, because servers
  such as DeepSeek reject them as input. The raw message otherwise travels verbatim.
- **Unanswered calls never reach the wire**: a user message or a resume that leaves a
  surfaced call without a result first answers it with an error tool message, since
  OpenAI-compatible servers reject a history with an unanswered tool call.
- **Images in tool results** (``rma.content``) cannot go in a ``tool`` message (text only):
  the message names each (``See file <ref>.``) and one user message after the batch's tool
  messages shows them as ``image_url`` data URLs (``rma.providers.local.content``).
- **Missing results** in a resume (L-14 crashes) come back as a ``ProviderError`` with
  ``error_type="missing_tool_result"`` naming the tool uses.
"""

from __future__ import annotations

from collections.abc import Sequence

from rma.live import LiveUpdate
from rma.provider import Input, Mode, ProviderCodec, register_codec
from rma.providers.local.content import LIMITS as CONTENT_LIMITS
from rma.providers.local.content import tool_text_and_images
from rma.providers.local.conversation import (
    CORRECTIVE_TEMPLATE,
    CUT_OFF_TEMPLATE,
    DEFAULT_MAX_TURNS,
    DIRECTIVE,
    DUPLICATE_DIRECTIVE,
    DUPLICATE_TOOL_CALL,
    EMPTY_REPLY_NUDGE,
    EMPTY_REPLY_NUDGE_TERMINAL_TEMPLATE,
    FINAL_TURN_DIRECTIVE,
    FINAL_TURN_TERMINAL_TEMPLATE,
    INVALID_ARGUMENTS_TEMPLATE,
    MODEL_RESPONSE,
    NO_TOOLS_TEXT,
    REJECTED_TOOL_CALL,
    ROLE_CORRECTIVE,
    ROLE_EMPTY_REPLY,
    ROLE_FINAL_TURN,
    UNANSWERED_CALL_TEXT,
    UNKNOWN_TOOL_TEMPLATE,
    Conversation,
    corrective_text,
    duplicate_content,
    error_content,
    final_turn_text,
)
from rma.providers.local.request import (
    apply_input,
    prepare_request,
    request_body,
    request_body_bytes,
    start,
    transcript,
)
from rma.providers.local.response import (
    apply_response,
    decode_arguments,
    live_updates,
    normalize,
    text_delta,
    usage_of,
)
from rma.vocabulary import JSON, ToolResult, ToolUse, TurnResult

__all__ = [
    "CODEC",
    "CORRECTIVE_TEMPLATE",
    "CUT_OFF_TEMPLATE",
    "DEFAULT_MAX_TURNS",
    "DIRECTIVE",
    "DUPLICATE_DIRECTIVE",
    "DUPLICATE_TOOL_CALL",
    "EMPTY_REPLY_NUDGE",
    "EMPTY_REPLY_NUDGE_TERMINAL_TEMPLATE",
    "FINAL_TURN_DIRECTIVE",
    "FINAL_TURN_TERMINAL_TEMPLATE",
    "INVALID_ARGUMENTS_TEMPLATE",
    "MODEL_RESPONSE",
    "NO_TOOLS_TEXT",
    "REJECTED_TOOL_CALL",
    "ROLE_CORRECTIVE",
    "ROLE_EMPTY_REPLY",
    "ROLE_FINAL_TURN",
    "UNANSWERED_CALL_TEXT",
    "UNKNOWN_TOOL_TEMPLATE",
    "Conversation",
    "LocalCodec",
    "apply_input",
    "apply_response",
    "corrective_text",
    "decode_arguments",
    "duplicate_content",
    "error_content",
    "final_turn_text",
    "live_updates",
    "messages_input",
    "normalize",
    "prepare_request",
    "request_body",
    "request_body_bytes",
    "start",
    "text_delta",
    "transcript",
    "usage_of",
]


# --- the codec --------------------------------------------------------------------------


def messages_input(messages: Sequence[JSON]) -> Input:
    return {"kind": "messages", "messages": list(messages)}


class LocalCodec(ProviderCodec):
    """The Local codec (L-1): request/response, no outcomes or budget, text deltas."""

    name = "local"
    mode = Mode.REQUEST_RESPONSE
    supports_outcomes = False
    supports_budget = False
    # S-56 Better: an all-duplicates (or all-rejected, or empty-reply) turn normalizes to
    # requires_action with no uses; the empty resume the session sends then simply drives
    # the next model call.
    empty_resume_safe = True
    has_text_delta = True
    content_limits = CONTENT_LIMITS

    def user_input(self, text: str) -> Input:
        return messages_input([{"role": "user", "content": text}])

    def resume_input(self, uses: Sequence[ToolUse], results: Sequence[ToolResult]) -> Input:
        """L-14: one result per use, in tool-use order, matched by id.

        A use without a result is listed under ``"missing"``; ``apply_input`` turns that
        into a ``ProviderError`` rather than sending a history the server would reject.
        """
        by_id: dict[str | None, ToolResult] = {}
        for result in results:
            by_id.setdefault(result.tool_use_id, result)
        entries: list[JSON] = []
        missing: list[str | None] = []
        for use in uses:
            found = by_id.get(use.id)
            if found is None:
                missing.append(use.id)
                continue
            entry: dict[str, JSON] = {
                "tool_use_id": use.id,
                "name": use.name,
                "text": found.text,
                "is_error": found.is_error,
            }
            if found.content:
                entry["text"], images = tool_text_and_images(found.content)
                if images:
                    entry["images"] = images
            entries.append(entry)
        out: dict[str, JSON] = {"kind": "resume", "results": entries}
        if missing:
            out["missing"] = missing
        return out

    def normalize(self, events: Sequence[JSON]) -> TurnResult:
        return normalize(events)

    def text_delta(self, event: JSON) -> str | None:
        return text_delta(event)

    def live_updates(self, event: JSON) -> tuple[LiveUpdate, ...]:
        return live_updates(event)


CODEC = LocalCodec()
register_codec(LocalCodec)
