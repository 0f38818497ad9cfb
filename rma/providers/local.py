"""The Local provider's pure half: its codec and the conversation it keeps (§8, L-1…L-30).

Local runs the agent loop in this process over any OpenAI-compatible chat-completions
endpoint: one model call per turn, the history held client-side. This module decides
everything about that conversation — what a request body holds, how an input and a model
response change the history, the loop guards for weak models, how a turn normalizes —
and does no I/O. The transport (``rma_shell.providers.local``) only moves the bytes
``prepare_request`` returns and hands the decoded response to ``apply_response``.

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
  earlier responses of the request.
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
- **Missing results** in a resume (L-14 crashes) come back as a ``ProviderError`` with
  ``error_type="missing_tool_result"`` naming the tool uses.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import attrs
from returns.result import Failure, Result, Success

from rma._persistent import AppendLog, GrowOnlySet, JoinedBytes
from rma.errors import InvalidOpts, MalformedResponse, ProviderError, SessionError
from rma.live import LiveUpdate, TextDelta, ToolCallFinished, ToolCallStarted, common_updates
from rma.provider import Input, Mode, ProviderCodec, register_codec
from rma.providers.local_stream import STREAMED, TEXT_DELTA, TOOL_CALL_DELTA, synthetic_call_id
from rma.vocabulary import (
    JSON,
    MAX_TOOL_INPUT_DEPTH,
    Terminal,
    ToolResult,
    ToolUse,
    TurnResult,
    Usage,
    tool_input_problem,
)
from rma.wire.openai_chat import (
    RESERVED_BODY_KEYS,
    RequestTemplate,
    build_request_body,
    encode_json,
    error_from_body,
    tool_declaration,
)

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

_CONFIG_ONLY_KEYS = frozenset({"model", "base_url", "api_key", "metadata"})
"""model_config keys that configure the transport, never sent as request params."""

_RAW_PREVIEW_CHARS = 200


# Tool-message contents are read by the model, so keep non-ASCII readable; the request
# encoder escapes it for the wire. ``default=repr`` keeps this total for arguments a chat
# callable handed over as non-JSON Python objects. Built once: ``json.dumps`` with options
# builds a new encoder on every call, and this runs a few times a turn.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=repr)
_COMPACT_SORTED = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=repr, sort_keys=True)


def _compact(value: JSON, *, sort_keys: bool = False) -> str:
    return (_COMPACT_SORTED if sort_keys else _COMPACT).encode(value)


def error_content(text: str) -> str:
    """L-14: the tool message content for an error result."""
    return _compact({"error": text, "isError": True})


def duplicate_content() -> str:
    """L-16 / A.2: the tool message content answering a duplicate call."""
    return _compact({"duplicate": True, "message": DUPLICATE_DIRECTIVE})


def final_turn_text(terminal_tool: str | None) -> str:
    if terminal_tool:
        return FINAL_TURN_TERMINAL_TEMPLATE.format(tool=terminal_tool)
    return FINAL_TURN_DIRECTIVE


def corrective_text(name: str, error: str) -> str:
    return CORRECTIVE_TEMPLATE.format(name=name, error=error)


def _invalid(option: str, detail: str) -> Failure[SessionError]:
    return Failure(InvalidOpts(option=option, detail=detail))


def _bad_input(detail: str, payload: JSON = None) -> Failure[SessionError]:
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


def _role(message: JSON) -> object:
    return message.get("role") if isinstance(message, Mapping) else None


def _append(conv: Conversation, messages: Sequence[JSON], **changes: Any) -> Conversation:
    """The conversation with ``messages`` appended and the other fields in ``changes`` set
    (one evolve: a poll makes several of these)."""
    if messages:
        encoded = [encode_json(m) for m in messages]  # first: a message that is not JSON changes nothing
        changes["history"] = conv.history.extend(messages)
        changes["encoded"] = conv.encoded.extend(encoded)
    return attrs.evolve(conv, **changes) if changes else conv


def _tool_spec(tool: object) -> Result[JSON, SessionError]:
    """A declaration from a spec tool: a mapping or an object with name/description/input_schema
    (and ``strict``) (L-2, L-5 — both shapes accepted), or an already-declared
    ``{"type": "function", …}``, which is kept as declared — ``strict`` and any other field the
    API defines reach the wire unchanged; only a missing description or parameters is filled
    in (L-5)."""
    if isinstance(tool, Mapping):
        function = tool.get("function")
        if tool.get("type") == "function" and isinstance(function, Mapping):
            name = function.get("name")
            if not isinstance(name, str) or not name:
                return _invalid("tools", f"function tool without a name: {tool!r}")
            checked = _check_tool_fields(
                name, function.get("description"), function.get("parameters"), function.get("strict")
            )
            if isinstance(checked, Failure):
                return checked
            declared = dict(function)
            declared["description"] = function.get("description") or ""
            declared["parameters"] = function.get("parameters") or {"type": "object"}
            return Success({**tool, "function": declared})
        name, description = tool.get("name"), tool.get("description")
        schema = tool.get("input_schema", tool.get("parameters"))
        strict = tool.get("strict")
    else:
        name = getattr(tool, "name", None)
        description = getattr(tool, "description", None)
        schema = getattr(tool, "input_schema", None)
        strict = getattr(tool, "strict", None)
    if not isinstance(name, str) or not name:
        return _invalid("tools", f"every tool needs a non-empty string name, got {tool!r}")
    checked = _check_tool_fields(name, description, schema, strict)
    if isinstance(checked, Failure):
        return checked
    return Success(
        tool_declaration(name, description, dict(schema) if schema is not None else None, strict=strict)
    )


def _check_tool_fields(
    name: str, description: object, schema: object, strict: object
) -> Result[None, SessionError]:
    if description is not None and not isinstance(description, str):
        return _invalid("tools", f"tool {name!r}: description must be a string")
    if schema is not None and not isinstance(schema, Mapping):
        return _invalid("tools", f"tool {name!r}: input_schema must be a JSON object")
    if strict is not None and not isinstance(strict, bool):
        return _invalid("tools", f"tool {name!r}: strict must be true or false")
    return Success(None)


def _model_config(model_config: object) -> Result[tuple[str | None, dict[str, JSON]], SessionError]:
    """L-3: None → {}, a non-mapping value v → {model: v}; returns (model, request params)."""
    if model_config is None:
        config: Mapping[str, Any] = {}
    elif isinstance(model_config, Mapping):
        config = model_config
    else:
        config = {"model": model_config}
    model = config.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        return _invalid("model_config", f"model must be a non-empty string, got {model!r}")
    reserved = sorted(k for k in config if k in RESERVED_BODY_KEYS and k != "model")
    if reserved:
        return _invalid("model_config", f"{', '.join(reserved)} are set by the Local provider")
    params = {str(k): v for k, v in config.items() if k not in _CONFIG_ONLY_KEYS}
    try:
        encode_json(params)
    except (TypeError, ValueError) as exc:
        return _invalid("model_config", f"request params must be JSON: {exc}")
    return Success((model, params))


def _pending_in(history: Sequence[JSON]) -> tuple[tuple[str, str], ...]:
    """Calls of the last assistant message that no later tool message answered."""
    answered: set[object] = set()
    for message in reversed(history):
        role = _role(message)
        if role == "tool":
            answered.add(message.get("tool_call_id"))
            continue
        if role != "assistant":
            return ()
        calls = message.get("tool_calls")
        if not isinstance(calls, list):
            return ()
        pending: list[tuple[str, str]] = []
        for call in calls:
            if not isinstance(call, Mapping):
                continue
            call_id = call.get("id")
            function = call.get("function")
            name = function.get("name") if isinstance(function, Mapping) else None
            if isinstance(call_id, str) and call_id not in answered:
                pending.append((call_id, name if isinstance(name, str) else ""))
        return tuple(pending)
    return ()


def start(
    system_prompt: str | None = None,
    tools: Iterable[object] = (),
    terminal_tool: str | None = None,
    model_config: object = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    history: Sequence[JSON] | None = None,
    *,
    max_history_messages: int | None = None,
) -> Result[Conversation, SessionError]:
    """A fresh conversation, or a reattached one when ``history`` is non-empty (L-4, L-28).

    ``max_history_messages`` turns on request truncation (off by default): a request then
    carries the leading system message plus at most that many of the latest messages,
    moved so that a tool message is never sent without the assistant message that made
    its call (when the newest messages are one such group, the group is kept whole).
    """
    if system_prompt is not None and not isinstance(system_prompt, str):
        return _invalid("system_prompt", "must be a string")
    if terminal_tool is not None and (not isinstance(terminal_tool, str) or not terminal_tool):
        return _invalid("terminal_tool", "must be a non-empty string or None")
    if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1:
        return _invalid("max_turns", f"must be a positive integer, got {max_turns!r}")
    if max_history_messages is not None and (
        not isinstance(max_history_messages, int)
        or isinstance(max_history_messages, bool)
        or max_history_messages < 1
    ):
        return _invalid("max_history_messages", f"must be a positive integer, got {max_history_messages!r}")
    if isinstance(tools, (str, bytes, Mapping)):
        return _invalid("tools", "must be a list of tools")
    declarations: list[JSON] = []
    names: list[str] = []
    for tool in tools:
        declared = _tool_spec(tool)
        if isinstance(declared, Failure):
            return declared
        decl = declared.unwrap()
        name = decl["function"]["name"]
        if name in names:
            return _invalid("tools", f"tool {name!r} is declared twice")
        names.append(name)
        declarations.append(decl)
    configured = _model_config(model_config)
    if isinstance(configured, Failure):
        return configured
    model, params = configured.unwrap()
    try:
        template = RequestTemplate.build(model, declarations, params)
    except (TypeError, ValueError) as exc:
        return _invalid("tools", f"tool schemas must be JSON: {exc}")

    seeded: list[JSON]
    if history:
        if isinstance(history, (str, bytes, Mapping)):
            return _invalid("history", "must be a list of messages")
        seeded = []
        for message in history:
            if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
                return _invalid("history", f"every message needs a string role, got {message!r}")
            seeded.append(dict(message))
    elif system_prompt:
        seeded = [{"role": "system", "content": system_prompt}]
    else:
        seeded = []
    try:
        encoded = [encode_json(m) for m in seeded]
    except (TypeError, ValueError) as exc:
        return _invalid("history", f"messages must be JSON: {exc}")
    return Success(
        Conversation(
            template=template,
            model=model,
            tools=tuple(declarations),
            params=params,
            tool_names=tuple(names),
            terminal_tool=terminal_tool,
            system_prompt=system_prompt,
            max_turns=max_turns,
            history=AppendLog.of(seeded),
            encoded=JoinedBytes.of(encoded),
            resumed=bool(history),
            max_history_messages=max_history_messages,
            pending_calls=_pending_in(seeded),
        )
    )


def transcript(conv: Conversation) -> tuple[JSON, ...]:
    """L-27: the full history — system, user, assistant, tool and directive messages."""
    return conv.history.to_tuple()


# --- inputs -----------------------------------------------------------------------------


def _answers_in_call_order(conv: Conversation, given: Sequence[tuple[str, JSON]]) -> list[JSON]:
    """The tool messages answering the last reply's calls, in its call order.

    ``given`` are (call id, tool message) from a resume; with the held answers they fill the
    reply's slots, and a waiting call left without either gets the "not executed" error. A
    message for an id that is not one of the reply's calls (or a second one for the same id)
    follows, in the order given.
    """
    order = conv.call_order or tuple(call_id for call_id, _ in conv.pending_calls)
    slots: dict[str, JSON] = {}
    for message in conv.held_answers:
        if isinstance(message, Mapping) and isinstance(message.get("tool_call_id"), str):
            slots[message["tool_call_id"]] = message
    wanted = set(order)
    given_ids: set[str] = set()
    extra: list[JSON] = []
    for call_id, message in given:
        if call_id in wanted and call_id not in given_ids:
            given_ids.add(call_id)
            slots[call_id] = message  # a result the caller sent wins over a held answer
        else:
            extra.append(message)
    waiting = {call_id for call_id, _ in conv.pending_calls}
    out: list[JSON] = []
    for call_id in order:
        message = slots.get(call_id)
        if message is None and call_id in waiting:
            message = {
                "role": "tool",
                "tool_call_id": call_id,
                "content": error_content(UNANSWERED_CALL_TEXT),
            }
        if message is not None:
            out.append(message)
    return out + extra


def apply_input(conv: Conversation, input: Input) -> Result[Conversation, SessionError]:
    """Apply a codec input: user messages (L-12, L-13) or tool results (L-14, L-18)."""
    if not isinstance(input, Mapping):
        return _bad_input("Local input must be a JSON object", input)
    kind = input.get("kind")
    if kind == "messages":
        return _apply_messages(conv, input.get("messages"))
    if kind == "resume":
        return _apply_resume(conv, input)
    return _bad_input(f"unknown Local input kind {kind!r}", input)


def _apply_messages(conv: Conversation, messages: object) -> Result[Conversation, SessionError]:
    if not isinstance(messages, list):
        return _bad_input("a messages input needs a 'messages' list", messages)
    fresh: list[JSON] = []
    for message in messages:
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            return _bad_input("every input message needs a string role", message)
        try:
            encode_json(message)
        except (TypeError, ValueError) as exc:
            return _bad_input(f"input message is not JSON: {exc}", None)
        fresh.append(dict(message))
    closing = _answers_in_call_order(conv, ())
    # L-13: a user message starts a fresh request.
    return Success(
        _append(
            conv,
            closing + fresh,
            polls=0,
            seen_calls=GrowOnlySet(),
            error_counts={},
            pending_calls=(),
            held_answers=(),
            call_order=(),
            poll_events=(),
            nudged=False,
        )
    )


def _apply_resume(conv: Conversation, input: Mapping[str, JSON]) -> Result[Conversation, SessionError]:
    missing = input.get("missing")
    if missing:
        return Failure(
            ProviderError(
                detail=f"no tool result for tool use(s) {missing!r}",
                error_type="missing_tool_result",
                payload=dict(input),
            )
        )
    results = input.get("results")
    if not isinstance(results, list):
        return _bad_input("a resume input needs a 'results' list", dict(input))
    names = dict(conv.pending_calls)
    counts = dict(conv.error_counts)
    given: list[tuple[str, JSON]] = []
    erroring: list[tuple[str, str]] = []
    for entry in results:
        if not isinstance(entry, Mapping):
            return _bad_input("every resume result must be an object", entry)
        call_id, text, is_error = (
            entry.get("tool_use_id"),
            entry.get("text", ""),
            entry.get("is_error", False),
        )
        if not isinstance(call_id, str) or not isinstance(text, str) or not isinstance(is_error, bool):
            return _bad_input("a resume result needs tool_use_id (str), text (str), is_error (bool)", entry)
        given.append(
            (
                call_id,
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "content": error_content(text) if is_error else text,
                },
            )
        )
        name = names.get(call_id) or entry.get("name")
        if isinstance(name, str) and name:
            # L-18: an error bumps the tool's consecutive-error count, a success resets it.
            counts[name] = counts.get(name, 0) + 1 if is_error else 0
            if is_error:
                erroring.append((name, text))
    messages = _answers_in_call_order(conv, given)
    events = list(conv.poll_events)
    for name, text in erroring:
        if counts.get(name, 0) >= 2:
            corrective = corrective_text(name, text)
            messages.append({"role": "user", "content": corrective})
            events.append({"type": DIRECTIVE, "role": ROLE_CORRECTIVE, "text": corrective})
    return Success(
        _append(
            conv,
            messages,
            error_counts=counts,
            pending_calls=(),
            held_answers=(),
            call_order=(),
            poll_events=tuple(events),
        )
    )


# --- requests ---------------------------------------------------------------------------


def _window(conv: Conversation) -> tuple[tuple[int, int], ...]:
    """The history messages a request carries, as [start, stop) index ranges in order (all of
    them, unless truncation is on)."""
    size = len(conv.history)
    limit = conv.max_history_messages
    if limit is None or size <= limit:
        return ((0, size),)
    first = 1 if _role(conv.history[0]) in ("system", "developer") else 0
    keep_from = max(first, size - limit)
    cut = keep_from
    while cut < size and _role(conv.history[cut]) == "tool":
        cut += 1
    if cut == size:
        # Only tool messages would remain: keep their assistant message with them instead.
        cut = keep_from
        while cut > first and _role(conv.history[cut]) == "tool":
            cut -= 1
    return ((0, 1), (cut, size)) if first else ((cut, size),)


def _body_tail(template: RequestTemplate, stream: bool) -> bytes:
    """What ``template.body_bytes`` puts after the messages (tools, stream flag, params)."""
    return template.body_bytes((), stream=stream)[len(template.head) :]


def request_body_bytes(conv: Conversation, stream: bool) -> bytes:
    """The request body for the current history, spliced from pre-encoded messages.

    The messages are already held comma-joined, so this is one copy of their bytes.
    """
    template = conv.template
    return conv.encoded.splice(template.head, _window(conv), _body_tail(template, stream))


def request_body(conv: Conversation, stream: bool = False) -> dict[str, JSON]:
    """The same body as a dict, for pluggable chat callables (``Local(chat=…)``)."""
    history = conv.history
    messages = [history[i] for start, stop in _window(conv) for i in range(start, stop)]
    return build_request_body(conv.model, messages, conv.tools, stream=stream, params=conv.params)


def prepare_request(conv: Conversation, stream: bool) -> tuple[Conversation, bytes, tuple[JSON, ...]]:
    """Count the poll, add the final-turn directive when due (L-19), build the body.

    Returns the directive events of this poll (correctives from the input, then the final
    turn). They are also held in the conversation and lead the events ``apply_response``
    returns, so callers that forward events need only the latter.
    """
    events = list(conv.poll_events)
    directive: list[JSON] = []
    if conv.polls + 1 >= conv.max_turns:
        text = final_turn_text(conv.terminal_tool)
        directive.append({"role": "user", "content": text})
        events.append({"type": DIRECTIVE, "role": ROLE_FINAL_TURN, "text": text})
    conv = _append(conv, directive, polls=conv.polls + 1, poll_events=tuple(events))
    return conv, request_body_bytes(conv, stream=stream), tuple(events)


# --- responses --------------------------------------------------------------------------


@attrs.frozen
class _Call:
    id: str
    name: str
    raw_arguments: JSON
    wire_arguments: str
    """The arguments as the history sends them back."""
    input: Mapping[str, JSON] | None = attrs.field(hash=False)
    problem: str | None = None
    """Why the call is rejected: "unknown_tool", "invalid_arguments" or "cut_off"."""
    message: str = ""


def _strict_constant(token: str) -> object:
    raise ValueError(f"{token} is not JSON")


_STRICT_DECODER = json.JSONDecoder(parse_constant=_strict_constant)
"""``json.loads(…, parse_constant=_strict_constant)`` without a new decoder per call."""


def decode_arguments(raw: JSON) -> Result[dict[str, JSON], str]:
    """Tool-call arguments as an object: a JSON object string or a mapping; null/"" → {}."""
    if raw is None:
        return Success({})
    if isinstance(raw, Mapping):
        if not all(isinstance(key, str) for key in raw):
            return Failure("argument names must be strings")
        mapped = dict(raw)
        deep = tool_input_problem(mapped)
        return Success(mapped) if deep is None else Failure(deep)
    if not isinstance(raw, str):
        return Failure(f"arguments must be a JSON string, got {type(raw).__name__}")
    if not raw.strip():
        return Success({})
    try:
        if raw.startswith("\ufeff"):  # json.loads's own BOM error, worded as it words it
            value = json.loads(raw, parse_constant=_strict_constant)
        else:
            value = _STRICT_DECODER.decode(raw)
    except ValueError as exc:
        return Failure(f"invalid JSON: {exc}")
    except RecursionError:  # deeper than the decoder can go: far past any real input
        return Failure(f"nested more than {MAX_TOOL_INPUT_DEPTH} levels deep")
    if not isinstance(value, dict):
        return Failure(f"expected a JSON object, got {type(value).__name__}")
    problem = tool_input_problem(value)  # too deep for a tool to be handed safely
    return Success(value) if problem is None else Failure(problem)


def _preview(raw: JSON) -> str:
    text = raw if isinstance(raw, str) else json.dumps(raw, default=str)
    if len(text) > _RAW_PREVIEW_CHARS:
        text = text[:_RAW_PREVIEW_CHARS] + "…"
    return text


def _parse_calls(
    conv: Conversation, raw_calls: list[Any], response: JSON
) -> Result[list[_Call], SessionError]:
    names = list(conv.tool_names)
    if conv.terminal_tool and conv.terminal_tool not in names:
        names.append(conv.terminal_tool)
    known = set(names)
    available = ", ".join(names)
    used: set[str] = set()
    calls: list[_Call] = []
    for n, raw in enumerate(raw_calls):
        if not isinstance(raw, Mapping) or not isinstance(raw.get("function"), Mapping):
            return Failure(
                MalformedResponse(detail="tool call without a 'function' object", response=response)
            )
        function = raw["function"]
        name = function.get("name")
        if not isinstance(name, str):
            return Failure(MalformedResponse(detail="tool call without a string name", response=response))
        call_id = raw.get("id")
        if not isinstance(call_id, str) or not call_id or call_id in used:
            call_id = synthetic_call_id(conv.polls, n, used)
        used.add(call_id)
        arguments = function.get("arguments")
        if name not in known:
            template = UNKNOWN_TOOL_TEMPLATE if available else NO_TOOLS_TEXT
            message = template.format(name=json.dumps(name), available=available)
            calls.append(_Call(call_id, name, arguments, "{}", None, "unknown_tool", message))
            continue
        decoded = decode_arguments(arguments)
        if isinstance(decoded, Failure):
            message = INVALID_ARGUMENTS_TEMPLATE.format(
                name=name, reason=decoded.failure(), raw=_preview(arguments)
            )
            calls.append(_Call(call_id, name, arguments, "{}", None, "invalid_arguments", message))
            continue
        wire = arguments if isinstance(arguments, str) and arguments.strip() else _compact(decoded.unwrap())
        calls.append(_Call(call_id, name, arguments, wire, decoded.unwrap()))
    return Success(calls)


def _wire_call(call: _Call) -> JSON:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.wire_arguments},
    }


def _is_empty_content(content: JSON) -> bool:
    if content is None:
        return True
    if isinstance(content, str):
        return not content.strip()
    if isinstance(content, list):
        return not content
    return False


def apply_response(
    conv: Conversation, response: JSON, *, streamed: bool = False
) -> Result[tuple[Conversation, tuple[JSON, ...]], SessionError]:
    """Fold one chat-completions response into the conversation; return the poll's events.

    L-8/L-9 (shape, first choice only), L-15 (assistant message appended with all its
    calls), L-16 (duplicates answered and reported), L-17, L-20 (event order), plus the
    weak-model handling in the module docstring. ``streamed``: the reply's text and calls
    already went out live as ``rma.providers.local_stream`` deltas, so its model response and
    answered-call events say ``"streamed": true`` (they then carry no text delta or call start
    of their own: each reaches a handler once).
    """
    provider_error = error_from_body(response)
    if provider_error is not None:
        return Failure(provider_error)
    choices = response.get("choices") if isinstance(response, Mapping) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    if (
        not isinstance(first, Mapping)
        or not isinstance(first.get("message"), Mapping)
        or "finish_reason" not in first
    ):
        return Failure(
            MalformedResponse(detail="no first choice with a message and a finish_reason", response=response)
        )
    message: Mapping[str, JSON] = first["message"]
    finish = first["finish_reason"]
    if finish is not None and not isinstance(finish, str):
        return Failure(MalformedResponse(detail="finish_reason is not a string", response=response))
    raw_calls = message.get("tool_calls")
    if raw_calls is None:
        raw_calls = []
    if not isinstance(raw_calls, list):
        return Failure(MalformedResponse(detail="tool_calls is not a list", response=response))
    parsed = _parse_calls(conv, raw_calls, response)
    if isinstance(parsed, Failure):
        return parsed
    calls = parsed.unwrap()
    if finish == "length":
        # Cut off at the token limit: no call of this reply is what the model meant to send.
        calls = [
            _Call(c.id, c.name, c.raw_arguments, "{}", None, "cut_off", CUT_OFF_TEMPLATE.format(name=c.name))
            for c in calls
        ]
    content = message.get("content")
    usage = response.get("usage")

    seen: GrowOnlySet[tuple[str, str]] = (
        conv.seen_calls if isinstance(conv.seen_calls, GrowOnlySet) else GrowOnlySet(conv.seen_calls)
    )
    fresh: list[_Call] = []
    answers: list[JSON] = []
    answer_events: list[JSON] = []
    for call in calls:
        if call.problem is not None:
            answers.append({"role": "tool", "tool_call_id": call.id, "content": error_content(call.message)})
            answer_events.append(
                {
                    "type": REJECTED_TOOL_CALL,
                    "id": call.id,
                    "name": call.name,
                    "arguments": call.raw_arguments,
                    "reason": call.problem,
                    "message": call.message,
                }
            )
            continue
        assert call.input is not None
        key = (call.name, _compact(call.input, sort_keys=True))
        if key in seen:
            answers.append({"role": "tool", "tool_call_id": call.id, "content": duplicate_content()})
            answer_events.append(
                {"type": DUPLICATE_TOOL_CALL, "id": call.id, "name": call.name, "input": dict(call.input)}
            )
            continue
        seen = seen.add(key)
        fresh.append(call)

    assistant: dict[str, JSON] = {"role": "assistant", "content": content}
    if calls:
        assistant["tool_calls"] = [_wire_call(c) for c in calls]
    elif content is None:
        # An assistant message needs content or tool calls to be valid input again.
        assistant["content"] = ""
    # Answers wait for the handler's results when some calls are surfaced, so that all of them
    # go back in call order; otherwise they follow the reply at once.
    held = tuple(answers) if fresh and answers else ()
    history_add: list[JSON] = [assistant] if held else [assistant, *answers]

    directive_events: list[JSON] = []
    nudged = conv.nudged
    if not calls and finish == "stop" and _is_empty_content(content) and not conv.nudged:
        text = (
            EMPTY_REPLY_NUDGE_TERMINAL_TEMPLATE.format(tool=conv.terminal_tool)
            if conv.terminal_tool
            else EMPTY_REPLY_NUDGE
        )
        history_add.append({"role": "user", "content": text})
        directive_events.append({"type": DIRECTIVE, "role": ROLE_EMPTY_REPLY, "text": text})
        nudged = True

    surfaced = dict(message)
    if "tool_calls" in message:
        surfaced["tool_calls"] = [_wire_call(c) for c in fresh]
    response_event = {"type": MODEL_RESPONSE, "message": surfaced, "finish_reason": finish, "usage": usage}
    if streamed:
        response_event[STREAMED] = True
        for answered in answer_events:
            answered[STREAMED] = True
    events = (*conv.poll_events, *directive_events, *answer_events, response_event)
    try:
        conv = _append(
            conv,
            history_add,
            seen_calls=seen,
            pending_calls=tuple((c.id, c.name) for c in fresh),
            held_answers=held,
            call_order=tuple(c.id for c in calls) if held else (),
            poll_events=(),
            nudged=nudged,
        )
    except (TypeError, ValueError) as exc:
        # e.g. NaN inside list content: the reply could never be sent back as JSON.
        return Failure(
            MalformedResponse(detail=f"response message is not strict JSON: {exc}", response=response)
        )
    return Success((conv, events))


# --- normalize --------------------------------------------------------------------------


def _text(content: JSON) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # Content parts: [{"type": "text", "text": …}, …].
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def _count(value: JSON) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def usage_of(usage: JSON) -> Usage | None:
    """L-24: usage only when prompt_tokens is a (non-negative) integer; cache reads from
    ``prompt_tokens_details.cached_tokens``. ``input_tokens`` is OpenAI's prompt_tokens,
    which *includes* the cached tokens."""
    if not isinstance(usage, Mapping):
        return None
    prompt = _count(usage.get("prompt_tokens"))
    if prompt is None:
        return None
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, Mapping) else None
    return Usage(
        input_tokens=prompt,
        output_tokens=_count(usage.get("completion_tokens")) or 0,
        cache_read_input_tokens=cached or 0,
        raw=(usage,),
    )


def _answered_internally(event: JSON) -> bool:
    if not isinstance(event, Mapping):
        return False
    kind = event.get("type")
    if kind in (DUPLICATE_TOOL_CALL, REJECTED_TOOL_CALL):
        return True
    return kind == DIRECTIVE and event.get("role") == ROLE_EMPTY_REPLY


def _uses(message: Mapping[str, JSON]) -> tuple[ToolUse, ...]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return ()
    uses: list[ToolUse] = []
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        name = function.get("name")
        if not isinstance(name, str) or not name:
            continue
        call_id = call.get("id")
        decoded = decode_arguments(function.get("arguments"))
        # L-23: anything undecodable becomes {} (apply_response never surfaces such a
        # call; this only matters for events recorded elsewhere).
        uses.append(
            ToolUse(
                call_id if isinstance(call_id, str) else None,
                name,
                decoded.unwrap() if isinstance(decoded, Success) else {},
            )
        )
    return tuple(uses)


def normalize(events: Sequence[JSON]) -> TurnResult:
    """L-21…L-24: one poll's events as a TurnResult (events kept verbatim)."""
    kept = tuple(events)
    response = next(
        (e for e in kept if isinstance(e, Mapping) and e.get("type") == MODEL_RESPONSE),
        None,
    )
    if response is None:
        return TurnResult(terminal=Terminal.TERMINATED, stop_reason=None, events=kept)
    message = response.get("message")
    if not isinstance(message, Mapping):
        message = {}
    finish = response.get("finish_reason")
    uses = _uses(message)
    if uses:
        terminal = Terminal.REQUIRES_ACTION
    elif finish == "length":
        # Cut off at the token limit, calls included (apply_response answered them unrun).
        terminal = Terminal.TERMINATED
    elif any(_answered_internally(e) for e in kept) or finish == "tool_calls":
        terminal = Terminal.REQUIRES_ACTION
    elif finish == "stop":
        terminal = Terminal.END_TURN
    else:
        terminal = Terminal.TERMINATED
    return TurnResult(
        terminal=terminal,
        stop_reason=finish,
        text=_text(message.get("content")),
        custom_tool_uses=uses,
        server_tool_uses=(),
        usage=usage_of(response.get("usage")),
        events=kept,
    )


def text_delta(event: JSON) -> str | None:
    """L-26: the whole content of a model response (Local's delta granularity, E-10) — or,
    with ``stream=True``, each ``local.text_delta`` piece (the streamed response then has none)."""
    if not isinstance(event, Mapping):
        return None
    kind = event.get("type")
    if kind == TEXT_DELTA:
        text = event.get("text")
        return text if isinstance(text, str) and text else None
    if kind != MODEL_RESPONSE or event.get(STREAMED) is True:
        return None
    message = event.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    return content if isinstance(content, str) and content else None


def live_updates(event: JSON) -> tuple[LiveUpdate, ...]:
    """``rma.live`` updates of one Local event.

    Streamed (``stream=True``): a ``local.text_delta`` is a ``TextDelta``, the one
    ``local.tool_call_delta`` of a call that carries its name a ``ToolCallStarted``; the
    reply's own events, marked ``streamed``, add only the finish of calls Local answered itself.
    Not streamed: the model response is the whole text and a start per call it surfaces; a call
    Local answered itself (rejected, cut off, duplicate) starts and finishes at its event.
    """
    if not isinstance(event, Mapping):
        return ()
    kind = event.get("type")
    if kind == TEXT_DELTA:
        text = event.get("text")
        return (TextDelta(text),) if isinstance(text, str) and text else ()
    if kind == TOOL_CALL_DELTA:
        name = event.get("name")
        call_id = event.get("id")
        if isinstance(name, str) and name:
            return (ToolCallStarted(call_id if isinstance(call_id, str) else None, name),)
        return ()
    if kind == MODEL_RESPONSE:
        if event.get(STREAMED) is True:
            return ()
        message = event.get("message")
        if not isinstance(message, Mapping):
            return ()
        out: list[LiveUpdate] = []
        text = _text(message.get("content"))
        if text:
            out.append(TextDelta(text))
        out.extend(ToolCallStarted(use.id, use.name) for use in _uses(message))
        return tuple(out)
    if kind in (REJECTED_TOOL_CALL, DUPLICATE_TOOL_CALL):
        call_id, name = event.get("id"), event.get("name")
        call_id = call_id if isinstance(call_id, str) else None
        name = name if isinstance(name, str) else ""
        finished = ToolCallFinished(call_id, name, kind == REJECTED_TOOL_CALL)
        if event.get(STREAMED) is True:
            return (finished,)
        return (ToolCallStarted(call_id, name), finished)
    return common_updates(event)


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
            entries.append(
                {"tool_use_id": use.id, "name": use.name, "text": found.text, "is_error": found.is_error}
            )
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
