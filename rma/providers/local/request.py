"""The Local conversation going out: starting it, the session's inputs, a poll's request body.

``start`` checks a provider's tools, model config and history into a ``Conversation`` (L-2…L-5,
L-28); ``apply_input`` applies a user message or a resume's tool results (L-12…L-14, L-18);
``prepare_request`` counts the poll, adds the final-turn directive (L-19) and splices the
body from the pre-encoded history (L-30 Better). The rules are in ``rma.providers.local.codec``'s
docstring; what comes back is ``rma.providers.local.response``. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from returns.result import Failure, Result, Success

from rma._persistent import AppendLog, GrowOnlySet, JoinedBytes
from rma.errors import ProviderError, SessionError
from rma.provider import Input
from rma.providers.local.conversation import (
    DEFAULT_MAX_TURNS,
    DIRECTIVE,
    ROLE_CORRECTIVE,
    ROLE_FINAL_TURN,
    UNANSWERED_CALL_TEXT,
    Conversation,
    appended,
    bad_input,
    corrective_text,
    error_content,
    final_turn_text,
    invalid_option,
    role_of,
)
from rma.vocabulary import JSON
from rma.wire.openai_chat import (
    RESERVED_BODY_KEYS,
    RequestTemplate,
    build_request_body,
    encode_json,
    tool_declaration,
)

_CONFIG_ONLY_KEYS = frozenset({"model", "base_url", "api_key", "metadata"})
"""model_config keys that configure the transport, never sent as request params."""


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
                return invalid_option("tools", f"function tool without a name: {tool!r}")
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
        return invalid_option("tools", f"every tool needs a non-empty string name, got {tool!r}")
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
        return invalid_option("tools", f"tool {name!r}: description must be a string")
    if schema is not None and not isinstance(schema, Mapping):
        return invalid_option("tools", f"tool {name!r}: input_schema must be a JSON object")
    if strict is not None and not isinstance(strict, bool):
        return invalid_option("tools", f"tool {name!r}: strict must be true or false")
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
        return invalid_option("model_config", f"model must be a non-empty string, got {model!r}")
    reserved = sorted(k for k in config if k in RESERVED_BODY_KEYS and k != "model")
    if reserved:
        return invalid_option("model_config", f"{', '.join(reserved)} are set by the Local provider")
    params = {str(k): v for k, v in config.items() if k not in _CONFIG_ONLY_KEYS}
    try:
        encode_json(params)
    except (TypeError, ValueError) as exc:
        return invalid_option("model_config", f"request params must be JSON: {exc}")
    return Success((model, params))


def _pending_in(history: Sequence[JSON]) -> tuple[tuple[str, str], ...]:
    """Calls of the last assistant message that no later tool message answered."""
    answered: set[object] = set()
    for message in reversed(history):
        role = role_of(message)
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
        return invalid_option("system_prompt", "must be a string")
    if terminal_tool is not None and (not isinstance(terminal_tool, str) or not terminal_tool):
        return invalid_option("terminal_tool", "must be a non-empty string or None")
    if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1:
        return invalid_option("max_turns", f"must be a positive integer, got {max_turns!r}")
    if max_history_messages is not None and (
        not isinstance(max_history_messages, int)
        or isinstance(max_history_messages, bool)
        or max_history_messages < 1
    ):
        return invalid_option(
            "max_history_messages", f"must be a positive integer, got {max_history_messages!r}"
        )
    if isinstance(tools, (str, bytes, Mapping)):
        return invalid_option("tools", "must be a list of tools")
    declarations: list[JSON] = []
    names: list[str] = []
    for tool in tools:
        declared = _tool_spec(tool)
        if isinstance(declared, Failure):
            return declared
        decl = declared.unwrap()
        name = decl["function"]["name"]
        if name in names:
            return invalid_option("tools", f"tool {name!r} is declared twice")
        names.append(name)
        declarations.append(decl)
    configured = _model_config(model_config)
    if isinstance(configured, Failure):
        return configured
    model, params = configured.unwrap()
    try:
        template = RequestTemplate.build(model, declarations, params)
    except (TypeError, ValueError) as exc:
        return invalid_option("tools", f"tool schemas must be JSON: {exc}")

    seeded: list[JSON]
    if history:
        if isinstance(history, (str, bytes, Mapping)):
            return invalid_option("history", "must be a list of messages")
        seeded = []
        for message in history:
            if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
                return invalid_option("history", f"every message needs a string role, got {message!r}")
            seeded.append(dict(message))
    elif system_prompt:
        seeded = [{"role": "system", "content": system_prompt}]
    else:
        seeded = []
    try:
        encoded = [encode_json(m) for m in seeded]
    except (TypeError, ValueError) as exc:
        return invalid_option("history", f"messages must be JSON: {exc}")
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
        return bad_input("Local input must be a JSON object", input)
    kind = input.get("kind")
    if kind == "messages":
        return _apply_messages(conv, input.get("messages"))
    if kind == "resume":
        return _apply_resume(conv, input)
    return bad_input(f"unknown Local input kind {kind!r}", input)


def _apply_messages(conv: Conversation, messages: object) -> Result[Conversation, SessionError]:
    if not isinstance(messages, list):
        return bad_input("a messages input needs a 'messages' list", messages)
    fresh: list[JSON] = []
    for message in messages:
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            return bad_input("every input message needs a string role", message)
        try:
            encode_json(message)
        except (TypeError, ValueError) as exc:
            return bad_input(f"input message is not JSON: {exc}", None)
        fresh.append(dict(message))
    closing = _answers_in_call_order(conv, ())
    # L-13: a user message starts a fresh request.
    return Success(
        appended(
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
        return bad_input("a resume input needs a 'results' list", dict(input))
    names = dict(conv.pending_calls)
    counts = dict(conv.error_counts)
    given: list[tuple[str, JSON]] = []
    erroring: list[tuple[str, str]] = []
    for entry in results:
        if not isinstance(entry, Mapping):
            return bad_input("every resume result must be an object", entry)
        call_id, text, is_error = (
            entry.get("tool_use_id"),
            entry.get("text", ""),
            entry.get("is_error", False),
        )
        if not isinstance(call_id, str) or not isinstance(text, str) or not isinstance(is_error, bool):
            return bad_input("a resume result needs tool_use_id (str), text (str), is_error (bool)", entry)
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
        appended(
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
    first = 1 if role_of(conv.history[0]) in ("system", "developer") else 0
    keep_from = max(first, size - limit)
    cut = keep_from
    while cut < size and role_of(conv.history[cut]) == "tool":
        cut += 1
    if cut == size:
        # Only tool messages would remain: keep their assistant message with them instead.
        cut = keep_from
        while cut > first and role_of(conv.history[cut]) == "tool":
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
    conv = appended(conv, directive, polls=conv.polls + 1, poll_events=tuple(events))
    return conv, request_body_bytes(conv, stream=stream), tuple(events)
