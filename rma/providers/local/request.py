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

import attrs
from returns.result import Failure, Result, Success

from rma._persistent import AppendLog, GrowOnlySet, JoinedBytes
from rma.errors import ProviderError, SessionError
from rma.provider import Input
from rma.providers.local.content import images_message
from rma.providers.local.context import (
    CONTEXT_COMPACTED,
    CONTEXT_WINDOW,
    DEFAULT_SHORTEN_TO,
    ContextState,
    body_parts,
    calibrated,
    count,
    messages_of,
    new_state,
    plan,
    ranges,
    raw_count,
    request_started,
    summary_due,
    summary_messages,
    with_summary,
)
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


def _repeatable(tool: object) -> bool:
    """Whether a tool opted out of the duplicate-call guard (``repeatable``: a mapping key or an
    attribute, as ``ToolSpec`` and ``@tool`` carry it). Never part of the declaration."""
    flag = tool.get("repeatable") if isinstance(tool, Mapping) else getattr(tool, "repeatable", None)
    return flag is True


def _tool_spec(tool: object) -> Result[JSON, SessionError]:
    """A declaration from a spec tool: a mapping or an object with name/description/input_schema
    (and ``strict``) (L-2, L-5 — both shapes accepted), or an already-declared
    ``{"type": "function", …}``, which is kept as declared — ``strict`` and any other field the
    API defines reach the wire unchanged; only a missing description or parameters is filled
    in (L-5). ``repeatable`` is rma's, read by ``_repeatable`` and never declared."""
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
            return Success({**{k: v for k, v in tool.items() if k != "repeatable"}, "function": declared})
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
    context_window: int | None = None,
    window_source: str = "option",
    shorten_to: int = DEFAULT_SHORTEN_TO,
    summarize: bool = False,
) -> Result[Conversation, SessionError]:
    """A fresh conversation, or a reattached one when ``history`` is non-empty (L-4, L-28).

    ``max_history_messages`` turns on request truncation (off by default): a request then
    carries the leading system message plus at most that many of the latest messages,
    moved so that a tool message is never sent without the assistant message that made
    its call (when the newest messages are one such group, the group is kept whole).

    ``context_window`` (tokens) turns on the context policy instead
    (``rma.providers.local.context``): each request is planned to fit the window, shortening old
    tool results to ``shorten_to`` characters, then dropping the oldest turns whole.
    ``window_source`` says where the number came from (reported with it); ``summarize`` has
    the dropped turns condensed by the model (``summary_request`` / ``summarized``).
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
    for option, value in (("context_window", context_window), ("shorten_to", shorten_to)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            return invalid_option(option, f"must be a positive integer (tokens), got {value!r}")
    if context_window is not None and max_history_messages is not None:
        return invalid_option(
            "max_history_messages",
            "cuts the history by message count; context_window fits it to the window: choose one",
        )
    if isinstance(tools, (str, bytes, Mapping)):
        return invalid_option("tools", "must be a list of tools")
    declarations: list[JSON] = []
    names: list[str] = []
    repeatable: set[str] = set()
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
        if _repeatable(tool):
            repeatable.add(name)
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
    context = None
    if context_window is not None:
        context = new_state(
            context_window,
            seeded,
            encoded,
            params=params,
            fixed_bytes=len(template.head) + len(template.tools) + len(template.params),
            shorten_to=shorten_to,
            source=window_source,
            summarize=summarize,
        )
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
            repeatable=frozenset(repeatable),
            context=context,
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
    if conv.context is not None:
        begin = len(conv.history) + len(closing)
        conv = attrs.evolve(conv, context=request_started(conv.context, begin, begin + len(fresh)))
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
    images: list[JSON] = []
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
        shown = entry.get("images", [])
        if not isinstance(shown, list) or not all(
            isinstance(i, Mapping) and isinstance(i.get("ref"), str) and isinstance(i.get("url"), str)
            for i in shown
        ):
            return bad_input("a resume result's images must be a list of {ref, url} objects", entry)
        images.extend(shown)
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
    if images:
        # A tool message takes text only: the batch's images follow in one user message.
        messages.append(images_message(images))
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
    if conv.context is not None:
        pieces = ranges(conv.context, len(conv.history))
        if all(kind == "full" for kind, _, _ in pieces):  # nothing shortened: one copy, as without
            spans = [(start, stop) for _, start, stop in pieces]
            return conv.encoded.splice(template.head, spans, _body_tail(template, stream))
        parts = body_parts(conv.context, conv.encoded)
        return b"".join((template.head, b",".join(parts), _body_tail(template, stream)))
    return conv.encoded.splice(template.head, _window(conv), _body_tail(template, stream))


def request_body(conv: Conversation, stream: bool = False) -> dict[str, JSON]:
    """The same body as a dict, for pluggable chat callables (``Local(chat=…)``)."""
    history = conv.history
    if conv.context is not None:
        messages = messages_of(conv.context, history)
    else:
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
    conv = appended(conv, directive, polls=conv.polls + 1)
    if conv.context is not None:
        conv, noted = _fitted(conv, "window")
        events.extend(noted)
    conv = attrs.evolve(conv, poll_events=tuple(events))
    return conv, request_body_bytes(conv, stream=stream), tuple(events)


def _fitted(conv: Conversation, reason: str, budget: int | None = None) -> tuple[Conversation, list[JSON]]:
    """The conversation with its request planned to fit the window, and the events saying so:
    the window when first known, and a compaction when this plan shortened or dropped more."""
    before = conv.context
    assert before is not None
    size = len(conv.history)
    events: list[JSON] = []
    if not before.announced:
        events.append({"type": CONTEXT_WINDOW, "tokens": before.window, "source": before.source})
    tokens_before = count(before, size)
    after = plan(before, conv.history, conv.encoded, budget=budget)
    if after.keep_from != before.keep_from or after.shortened != before.shortened:
        events.append(
            {
                "type": CONTEXT_COMPACTED,
                "reason": reason,
                "dropped": after.dropped,
                "shortened": after.shortened,
                "tokens_before": tokens_before,
                "tokens_after": count(after, size),
                "window": after.window,
            }
        )
    after = attrs.evolve(after, announced=True, planned=raw_count(after, size))
    return attrs.evolve(conv, context=after), events


def fits(conv: Conversation) -> bool:
    """Whether the planned request fits the window by the policy's own count (always, without one)."""
    ctx = conv.context
    return ctx is None or count(ctx, len(conv.history)) + ctx.reserve <= ctx.window


def measured(conv: Conversation, tokens: int) -> tuple[Conversation, tuple[JSON, ...]]:
    """The conversation after the server's tokenizer counted the planned request's prompt as
    ``tokens`` (``/tokenize``): the count calibrates the estimate, and the request is planned
    again when it no longer fits. Returns the events of that second plan (a compaction)."""
    ctx = conv.context
    if ctx is None:
        return conv, ()
    conv = attrs.evolve(conv, context=calibrated(ctx, tokens))
    conv, events = _fitted(conv, "window")
    return attrs.evolve(conv, poll_events=(*conv.poll_events, *events)), tuple(events)


def compacted_after_refusal(
    conv: Conversation, window: int | None, tokens: int | None, *, source: str = "refusal"
) -> tuple[Conversation, tuple[JSON, ...]] | None:
    """The conversation planned again after the server refused its request for its length
    (``window``/``tokens`` as the refusal said, when it did), and the compaction event; None when
    nothing more can be left out — the window is then exceeded for good.

    Without a window so far the refusal's own number becomes it. The second plan aims below
    the server's count: the estimate is scaled by what the server counted, and the budget
    shrinks by an eighth, so a near miss is not repeated.
    """
    ctx = conv.context
    if ctx is None:
        if window is None:
            return None
        ctx = new_state(
            window,
            conv.history.to_tuple(),
            conv.encoded.to_tuple(),
            params=conv.params,
            fixed_bytes=len(conv.template.head) + len(conv.template.tools) + len(conv.template.params),
            source=source,
        )
        ctx = attrs.evolve(ctx, announced=True, planned=raw_count(ctx, len(conv.history)))
        start_at = _last_user(conv)
        ctx = request_started(ctx, start_at, start_at + 1) if start_at is not None else ctx
    elif window is not None and window < ctx.window:
        ctx = attrs.evolve(ctx, window=window, reserve=min(ctx.reserve, window // 8))
    if tokens is not None:
        ctx = calibrated(ctx, tokens)
    before = (ctx.keep_from, ctx.shortened)
    conv = attrs.evolve(conv, context=ctx)
    conv, events = _fitted(conv, "refused", budget=ctx.budget - ctx.budget // 8)
    after = conv.context
    assert after is not None
    if (after.keep_from, after.shortened) == before:
        return None
    return attrs.evolve(conv, poll_events=(*conv.poll_events, *events)), tuple(events)


def _last_user(conv: Conversation) -> int | None:
    """Index of the current request's user message (the last one that is not Local's own)."""
    for i in range(len(conv.history) - 1, -1, -1):
        if role_of(conv.history[i]) == "user":
            return i
    return None


def context_state(conv: Conversation) -> ContextState | None:
    return conv.context


SUMMARY_MAX_TOKENS = 512


def summary_request(conv: Conversation) -> dict[str, JSON] | None:
    """The request body asking the model to condense the turns the plan just dropped (and the
    earlier summary), or None when no summary is due. No tools: the answer is text."""
    ctx = conv.context
    if ctx is None or summary_due(ctx) is None:
        return None
    params = {k: v for k, v in conv.params.items() if k not in ("max_tokens", "max_completion_tokens")}
    params["max_tokens"] = min(SUMMARY_MAX_TOKENS, max(ctx.window // 8, 16))
    return build_request_body(
        conv.model, summary_messages(ctx, conv.history), (), stream=False, params=params
    )


def summarized(conv: Conversation, text: str | None) -> tuple[Conversation, tuple[JSON, ...]]:
    """The conversation with the model's summary of the dropped turns placed after the system
    prompt, planned again (the summary takes room too), and the event saying so. ``text`` None
    (the summary call failed): the dropped turns are left unsummarized, and not asked again."""
    ctx = conv.context
    assert ctx is not None
    if text is None or not text.strip():
        return attrs.evolve(conv, context=attrs.evolve(ctx, summarized_to=ctx.keep_from)), ()
    size = len(conv.history)
    before = count(ctx, size)
    conv = attrs.evolve(conv, context=with_summary(ctx, text.strip()))
    conv, more = _fitted(conv, "window")
    after = conv.context
    assert after is not None
    event: JSON = {
        "type": CONTEXT_COMPACTED,
        "reason": "summary",
        "dropped": after.dropped,
        "shortened": after.shortened,
        "tokens_before": before,
        "tokens_after": count(after, size),
        "window": after.window,
        "summarized": True,
    }
    events = (*more, event)
    return attrs.evolve(conv, poll_events=(*conv.poll_events, *events)), events
