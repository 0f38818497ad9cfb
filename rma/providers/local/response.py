"""What comes back from a Local poll: the response folded into the conversation, and the turn read.

``apply_response`` checks a chat-completions response and folds it into the conversation —
the assistant message, the answers Local makes itself (duplicates, rejected and cut-off
calls, the empty-reply nudge) — and returns the poll's events (L-8…L-17, L-20, with the rules
in ``rma.providers.local.codec``'s docstring). ``normalize``, ``text_delta`` and ``live_updates`` read
those events for the session (L-21…L-26). What goes out is ``rma.providers.local.request``.
No I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from returns.result import Failure, Result, Success

from rma._persistent import GrowOnlySet
from rma.errors import MalformedResponse, SessionError
from rma.live import (
    LiveUpdate,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    common_updates,
    context_compacted,
)
from rma.providers.local.context import CONTEXT_COMPACTED, calibrated
from rma.providers.local.conversation import (
    CUT_OFF_TEMPLATE,
    DIRECTIVE,
    DUPLICATE_TOOL_CALL,
    EMPTY_REPLY_NUDGE,
    EMPTY_REPLY_NUDGE_TERMINAL_TEMPLATE,
    INVALID_ARGUMENTS_TEMPLATE,
    MODEL_RESPONSE,
    NO_TOOLS_TEXT,
    REJECTED_TOOL_CALL,
    ROLE_EMPTY_REPLY,
    UNKNOWN_TOOL_TEMPLATE,
    Conversation,
    appended,
    compact_json,
    duplicate_content,
    error_content,
)
from rma.providers.local.stream import STREAMED, TEXT_DELTA, TOOL_CALL_DELTA, synthetic_call_id
from rma.vocabulary import (
    JSON,
    MAX_TOOL_INPUT_DEPTH,
    Terminal,
    ToolUse,
    TurnResult,
    Usage,
    tool_input_problem,
)
from rma.wire.openai_chat import error_from_body

# --- responses --------------------------------------------------------------------------


_RAW_PREVIEW_CHARS = 200


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
        wire = (
            arguments if isinstance(arguments, str) and arguments.strip() else compact_json(decoded.unwrap())
        )
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
    already went out live as ``rma.providers.local.stream`` deltas, so its model response and
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
        if call.name in conv.repeatable or call.name == conv.terminal_tool:
            fresh.append(call)  # runs every time: not a loop the guard should break
            continue
        key = (call.name, compact_json(call.input, sort_keys=True))
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
    context = conv.context
    prompt_tokens = usage.get("prompt_tokens") if isinstance(usage, Mapping) else None
    if context is not None and isinstance(prompt_tokens, int) and not isinstance(prompt_tokens, bool):
        context = calibrated(context, prompt_tokens)  # the server's count of what was sent
    try:
        conv = appended(
            conv,
            history_add,
            context=context,
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
    if kind == CONTEXT_COMPACTED:
        return (context_compacted(event),)
    if kind in (REJECTED_TOOL_CALL, DUPLICATE_TOOL_CALL):
        call_id, name = event.get("id"), event.get("name")
        call_id = call_id if isinstance(call_id, str) else None
        name = name if isinstance(name, str) else ""
        given, told = event.get("input"), event.get("message")
        if not isinstance(told, str):
            told = duplicate_content() if kind == DUPLICATE_TOOL_CALL else None
        finished = ToolCallFinished(
            call_id,
            name,
            kind == REJECTED_TOOL_CALL,
            input=given if isinstance(given, Mapping) else None,
            output=told
            if isinstance(told, str)
            else duplicate_content()
            if kind == DUPLICATE_TOOL_CALL
            else None,
        )
        if event.get(STREAMED) is True:
            return (finished,)
        return (ToolCallStarted(call_id, name), finished)
    return common_updates(event)
