"""The Vercel AI SDK's UI message stream (``x-vercel-ai-ui-message-stream: v1``, what ``useChat``
reads): an agent's run as its parts, and an ASGI endpoint that takes ``useChat``'s request
(``{"id", "messages": [UIMessage…]}``) and streams them.

    app = Starlette(routes=[Route("/api/chat", vercel_endpoint(agent), methods=["POST"])])

``VercelParts`` maps rma's live updates (``rma.live``) and the run's end to the stream's parts
(SSE ``data:`` JSON objects, then ``data: [DONE]``): ``start``, ``start-step``/``finish-step``
around each model turn and its calls' answers, ``text-start``/``text-delta``/``text-end``,
``tool-input-start``, ``tool-input-available``, ``tool-output-available`` (or ``tool-output-error``,
``tool-output-denied``), ``tool-approval-request`` for a call that waits for approval (the
answer comes back as the tool part's ``approval-responded`` state in the next request),
``error`` and ``finish``. The shapes follow the SDK's own schema (``uiMessageChunkSchema``,
ai 6); tests validate every part against JSON schemas written from it. The whole mapping is
tabled in docs/streaming.md. Not a client, and not a second session loop.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import attrs
from returns.result import Failure, Success

from rma.journal import AwaitingApproval
from rma.live import AttemptDiscarded, LiveUpdate, TextDelta, ToolCallFinished, ToolCallStarted, TurnFinished
from rma.vocabulary import SessionResult, Terminal
from rma_shell.agent import Agent, RunFinished
from rma_shell.cost import inclusive_input_tokens
from rma_shell.ui._asgi import SseEndpoint, sse
from rma_shell.ui._runs import (
    BadRequest,
    CallBook,
    Decision,
    Overrides,
    ShownCall,
    approval_id,
    decide,
    one_line,
    parse_approval_id,
    updates_of,
)

HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"connection", b"keep-alive"),
    (b"x-vercel-ai-ui-message-stream", b"v1"),
    (b"x-accel-buffering", b"no"),
)
"""The SDK's ``UI_MESSAGE_STREAM_HEADERS``."""

DONE = b"data: [DONE]\n\n"
"""The stream's last line."""

DISCARDED = "data-rma-attempt-discarded"
"""The data part that says an attempt's text and tool calls are void (``AttemptDiscarded``)."""

Part = dict[str, Any]


class VercelParts:
    """One response's UI message stream parts: ``opening()``, then ``feed(update)`` for each
    live update and the ``RunFinished`` that ends it (ending with ``finish``). Text part ids
    are ``<message_id>-t<n>``. ``denied``: calls a person denied in this request, whose
    answers are ``tool-output-denied``."""

    def __init__(self, message_id: str, *, host: str | None = None, denied: frozenset[str] = frozenset()):
        self.message_id = message_id
        self.host = host
        self.denied = denied
        self._n = 0
        self._text: str | None = None
        self._step = False
        self._turn = False
        self._calls = CallBook(message_id)
        self._attempt_texts: list[str] = []

    def opening(self) -> list[Part]:
        return [{"type": "start", "messageId": self.message_id}]

    def feed(self, update: LiveUpdate | RunFinished) -> list[Part]:
        out: list[Part] = []
        match update:
            case TextDelta(text=text):
                self._open_turn(out)
                if self._text is None:
                    self._n += 1
                    self._text = f"{self.message_id}-t{self._n}"
                    self._attempt_texts.append(self._text)
                    out.append({"type": "text-start", "id": self._text})
                out.append({"type": "text-delta", "id": self._text, "delta": text})
            case ToolCallStarted(id=call_id, name=name):
                self._open_turn(out)
                self._close_text(out)
                call = self._calls.started(call_id, name)
                out.append({"type": "tool-input-start", "toolCallId": call.id, "toolName": name})
            case ToolCallFinished():
                self._close_text(out)
                call_id = self._calls.finished_id(update)
                shown = self._calls.known(call_id)
                if shown is not None and not shown.closed:
                    out.append(self._input(shown, update.input))
                if call_id in self.denied:
                    out.append({"type": "tool-output-denied", "toolCallId": call_id})
                elif update.is_error:
                    text = update.output or "the call failed"
                    out.append({"type": "tool-output-error", "toolCallId": call_id, "errorText": text})
                else:
                    out.append(
                        {"type": "tool-output-available", "toolCallId": call_id, "output": update.output}
                    )
            case TurnFinished():
                self._open_turn(out)  # a turn with nothing to show still is a step
                self._close_text(out)
                self._turn = False  # its step stays open for its calls' results
                self._calls.new_attempt()
                self._attempt_texts = []
            case AttemptDiscarded(attempt=attempt, error=error):
                self._close_text(out)
                void = self._calls.open_in_attempt()
                for call in void:
                    call.closed = True
                    out.append(
                        {
                            "type": "tool-input-error",
                            "toolCallId": call.id,
                            "toolName": call.name,
                            "input": None,
                            "errorText": f"discarded: the model's attempt failed ({error})",
                        }
                    )
                data = {
                    "attempt": attempt,
                    "error": error,
                    "textIds": self._attempt_texts,
                    "toolCallIds": [call.id for call in void],
                }
                out.append({"type": DISCARDED, "data": data})
                self._calls.new_attempt()
                self._attempt_texts = []
            case RunFinished(result=result):
                self._close_text(out)
                self._close_step(out)
                out.extend(self._ending(result))
        return out

    def _ending(self, result: Any) -> list[Part]:
        out: list[Part] = []
        match result:
            case Success(done):
                out.append({"type": "finish", "finishReason": _finish_reason(done), **self._metadata(done)})
            case Failure(AwaitingApproval(waiting=waiting) as paused):
                for call in waiting:
                    known = self._calls.known(call.tool_use_id)
                    if known is None:
                        known = self._calls.add(call.tool_use_id, call.name)
                        out.append(
                            {"type": "tool-input-start", "toolCallId": known.id, "toolName": call.name}
                        )
                    if not known.closed:
                        out.append(self._input(known, call.input))
                    out.append(
                        {
                            "type": "tool-approval-request",
                            "approvalId": approval_id(paused.key, call.tool_use_id),
                            "toolCallId": call.tool_use_id,
                        }
                    )
                out.append({"type": "finish", "finishReason": "tool-calls", **self._metadata(paused.result)})
            case Failure(error):
                out.append({"type": "error", "errorText": one_line(error)})
                out.append({"type": "finish", "finishReason": "error", **self._metadata(error.result)})
        return out

    def _metadata(self, done: SessionResult | None) -> Part:
        if done is None or not done.turns:
            return {}
        inp = inclusive_input_tokens(done.usage, self.host)
        usage = {"inputTokens": inp, "outputTokens": done.usage.output_tokens}
        return {"messageMetadata": {"turns": done.turns, "usage": usage}}

    def _input(self, call: ShownCall, given: Mapping[str, Any] | None) -> Part:
        call.closed = True
        return {
            "type": "tool-input-available",
            "toolCallId": call.id,
            "toolName": call.name,
            "input": dict(given) if given is not None else {},
        }

    def _open_turn(self, out: list[Part]) -> None:
        # A step is a model turn and its calls' answers, as the SDK's own steps are: the
        # reader looks a call's part up within the current step, so the step of a turn ends
        # only when the next turn begins (or the response ends).
        if not self._turn:
            self._turn = True
            self._close_step(out)
            self._step = True
            out.append({"type": "start-step"})

    def _close_step(self, out: list[Part]) -> None:
        if self._step:
            self._step = False
            out.append({"type": "finish-step"})

    def _close_text(self, out: list[Part]) -> None:
        if self._text is not None:
            out.append({"type": "text-end", "id": self._text})
            self._text = None


def _finish_reason(done: SessionResult) -> str:
    if done.stop_reason in ("length", "max_tokens"):
        return "length"
    return "stop" if done.terminal is Terminal.END_TURN else "other"


# ── the request ──


@attrs.frozen
class VercelRequest:
    """What one ``useChat`` request asks: a run of ``prompt``, or the decisions (approval
    responses) that carry a paused run on, continuing the assistant message ``message_id``."""

    prompt: str | None
    decisions: tuple[Decision, ...]
    message_id: str | None
    body: Mapping[str, Any]


def parse_request(body: object) -> VercelRequest:
    """``{"messages": [UIMessage…], …}`` → ``VercelRequest``, or ``BadRequest`` naming the field."""
    if not isinstance(body, Mapping):
        raise BadRequest("body", "must be an object with messages")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages", "must be a non-empty list of UI messages")
    i = len(messages) - 1
    last = messages[i]
    if not isinstance(last, Mapping):
        raise BadRequest(f"messages[{i}]", "must be a UI message object")
    parts = last.get("parts")
    if not isinstance(parts, list):
        raise BadRequest(f"messages[{i}].parts", "must be a list of parts")
    role = last.get("role")
    if role == "user":
        texts = [p.get("text") for p in parts if isinstance(p, Mapping) and p.get("type") == "text"]
        prompt = "\n".join(t for t in texts if isinstance(t, str))
        return VercelRequest(prompt, (), None, body)
    if role != "assistant":
        raise BadRequest(f"messages[{i}].role", f"must be 'user' or 'assistant', got {role!r}"[:300])
    decisions = []
    for j, part in enumerate(parts):
        if not isinstance(part, Mapping) or part.get("state") != "approval-responded":
            continue
        where = f"messages[{i}].parts[{j}].approval"
        approval = part.get("approval")
        if not isinstance(approval, Mapping):
            raise BadRequest(where, "must be an object with id and approved")
        key, call = parse_approval_id(approval.get("id"), f"{where}.id")
        approved = approval.get("approved")
        if not isinstance(approved, bool):
            raise BadRequest(f"{where}.approved", "must be true or false")
        reason = approval.get("reason")
        decisions.append(Decision(key, call, approved, reason if isinstance(reason, str) else None))
    if not decisions:
        raise BadRequest("messages", "the last message is the assistant's and answers no approval")
    message_id = last.get("id")
    return VercelRequest(None, tuple(decisions), message_id if isinstance(message_id, str) else None, body)


# ── the endpoint ──


class VercelEndpoint(SseEndpoint):
    """POST ``useChat``'s body; the response is the run's UI message stream. See
    ``vercel_endpoint``."""

    headers = HEADERS

    def __init__(self, agent: Agent, overrides: Overrides | None = None) -> None:
        self.agent = agent
        self.overrides = overrides

    def prepare(self, body: Any) -> tuple[VercelRequest, str | None]:
        request = parse_request(body)
        resume_key = decide(self.agent, request.decisions) if request.decisions else None
        return request, resume_key

    async def events(self, plan: tuple[VercelRequest, str | None]) -> AsyncGenerator[bytes, None]:
        request, resume_key = plan
        codec = getattr(self.agent.host, "codec", None)
        parts = VercelParts(
            request.message_id or f"msg-{uuid.uuid4().hex}",
            host=getattr(codec, "name", None),
            denied=frozenset(d.tool_use_id for d in request.decisions if not d.allow),
        )
        for part in parts.opening():
            yield sse(part)
        overrides = dict(self.overrides(request.body)) if self.overrides is not None else {}
        async with updates_of(
            self.agent, prompt=request.prompt, resume_key=resume_key, overrides=overrides, key_prefix="chat"
        ) as updates:
            async for update in updates:
                for part in parts.feed(update):
                    yield sse(part)
        yield DONE


def vercel_endpoint(agent: Agent, *, overrides: Overrides | None = None) -> VercelEndpoint:
    """An ASGI endpoint serving ``agent`` to the Vercel AI SDK's ``useChat`` (its default
    transport POSTs ``{"id", "messages", …}``; the response is the UI message stream).

    The run's prompt is the last user message's text (the host keeps the conversation: pass
    ``overrides`` — body → ``agent.run`` overrides — to continue one). With
    ``Agent(journal=...)`` a call that needs approval ends the response with a
    ``tool-approval-request``; the client's ``addToolApprovalResponse`` sends it back and the
    run carries on in the same assistant message. A bad body is HTTP 400 ``{"error",
    "field"}``. Leaving the stream cancels the run. Whoever can POST here can run the agent and
    decide its approvals: serve it behind your app's authentication.
    """
    return VercelEndpoint(agent, overrides)
