"""AG-UI (the Agent User Interaction protocol, 1.0): an agent's run as AG-UI events, and an
ASGI endpoint that takes AG-UI's ``RunAgentInput`` and streams them.

    app = Starlette(routes=[Route("/agent", agui_endpoint(agent), methods=["POST"])])

``AguiEvents`` maps rma's live updates (``rma.live``) and the run's end to AG-UI events as
JSON objects — the wire shape, camelCase, optional fields left out as the official SDK leaves
them; tests validate every one against the ``ag-ui-protocol`` package's pydantic models. The
mapping, including ``AttemptDiscarded`` and approvals (an interrupt; the answer comes back as
the next input's ``resume`` entries), is tabled in docs/streaming.md. Not a client, and not a
second session loop: a run is ``Agent.stream``, a resumed one ``Agent.stream_resume``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import attrs
from returns.result import Failure, Success

from rma.journal import AwaitingApproval
from rma.live import AttemptDiscarded, LiveUpdate, TextDelta, ToolCallFinished, ToolCallStarted, TurnFinished
from rma.vocabulary import SessionResult, Usage
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

PROTOCOL_VERSION = "1.0"

APPROVAL_REASON = "tool_approval"
"""An interrupt's ``reason`` when a call waits for a person's approval."""

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approved"],
}
"""What a ``resume`` entry's ``payload`` answers an approval interrupt with."""

DISCARDED = "rma.attempt_discarded"
"""The ``CUSTOM`` event's name for ``AttemptDiscarded``."""

Event = dict[str, Any]


class AguiEvents:
    """One run's AG-UI events: ``opening()``, then ``feed(update)`` for each live update and
    for the ``RunFinished`` that ends the run (the last events: ``RUN_FINISHED`` or
    ``RUN_ERROR``). Message and tool-message ids are ``<run_id>-m<n>``."""

    def __init__(self, thread_id: str, run_id: str, *, model: str | None = None, host: str | None = None):
        self.thread_id = thread_id
        self.run_id = run_id
        self.model = model
        self.host = host
        self._n = 0
        self._text: str | None = None
        self._step: str | None = None
        self._turns = 0
        self._calls = CallBook(run_id)
        self._attempt_texts: list[str] = []

    def opening(self) -> list[Event]:
        return [
            {
                "type": "RUN_STARTED",
                "threadId": self.thread_id,
                "runId": self.run_id,
                "protocolVersion": PROTOCOL_VERSION,
            }
        ]

    def feed(self, update: LiveUpdate | RunFinished) -> list[Event]:
        out: list[Event] = []
        match update:
            case TextDelta(text=text):
                self._open_step(out)
                if self._text is None:
                    self._text = self._new_id()
                    self._attempt_texts.append(self._text)
                    out.append({"type": "TEXT_MESSAGE_START", "messageId": self._text, "role": "assistant"})
                out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": self._text, "delta": text})
            case ToolCallStarted(id=call_id, name=name):
                self._open_step(out)
                self._close_text(out)
                call = self._calls.started(call_id, name)
                out.append({"type": "TOOL_CALL_START", "toolCallId": call.id, "toolCallName": name})
            case ToolCallFinished():
                self._close_text(out)
                call_id = self._calls.finished_id(update)
                open_call = self._calls.known(call_id)
                if open_call is not None and not open_call.closed:
                    self._end_call(out, open_call, update.input)
                out.append(self._result(call_id, update.output if update.output is not None else ""))
            case TurnFinished():
                self._open_step(out)  # a turn with nothing to show still is a step
                self._close_text(out)
                self._close_step(out)
                self._calls.new_attempt()
                self._attempt_texts = []
            case AttemptDiscarded(attempt=attempt, error=error):
                self._close_text(out)
                void = self._calls.open_in_attempt()
                for call in void:
                    self._end_call(out, call, None)
                    # Answered, so no consumer takes it for a frontend call left to answer.
                    out.append(self._result(call.id, f"discarded: the model's attempt failed ({error})"))
                value = {
                    "attempt": attempt,
                    "error": error,
                    "messageIds": self._attempt_texts,
                    "toolCallIds": [call.id for call in void],
                }
                out.append({"type": "CUSTOM", "name": DISCARDED, "value": value})
                self._calls.new_attempt()
                self._attempt_texts = []
            case RunFinished(result=result):
                self._close_text(out)
                self._close_step(out)
                out.extend(self._ending(result))
        return out

    # ── the run's end ──

    def _ending(self, result: Any) -> list[Event]:
        out: list[Event] = []
        match result:
            case Success(done):
                finished = self._finished(done)
                finished["result"] = done.text
                out.append(finished)
            case Failure(AwaitingApproval(waiting=waiting) as paused):
                interrupts = []
                for call in waiting:
                    known = self._calls.known(call.tool_use_id)
                    if known is None:
                        known = self._calls.add(call.tool_use_id, call.name)
                        out.append(
                            {"type": "TOOL_CALL_START", "toolCallId": known.id, "toolCallName": call.name}
                        )
                    if not known.closed:
                        self._end_call(out, known, call.input)
                    interrupts.append(
                        {
                            "id": approval_id(paused.key, call.tool_use_id),
                            "reason": APPROVAL_REASON,
                            "message": f"{call.name} waits for your approval",
                            "toolCallId": call.tool_use_id,
                            "responseSchema": APPROVAL_SCHEMA,
                        }
                    )
                finished = self._finished(paused.result if isinstance(paused.result, SessionResult) else None)
                finished["outcome"] = {"type": "interrupt", "interrupts": interrupts}
                out.append(finished)
            case Failure(error):
                out.append({"type": "RUN_ERROR", "message": one_line(error), "code": error.kind})
        return out

    def _finished(self, done: SessionResult | None) -> Event:
        event: Event = {"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id}
        if done is not None and done.turns:
            event["usage"] = [self._usage(done.usage)]
        return event

    def _usage(self, usage: Usage) -> Event:
        # AG-UI counts cache reads and writes as parts of inputTokens (as OpenTelemetry does).
        inp = inclusive_input_tokens(usage, self.host)
        entry: Event = {
            "inputTokens": inp,
            "outputTokens": usage.output_tokens,
            "totalTokens": inp + usage.output_tokens,
        }
        if usage.cache_read_input_tokens:
            entry["cachedInputTokens"] = usage.cache_read_input_tokens
        if usage.cache_creation_input_tokens:
            entry["cacheWriteInputTokens"] = usage.cache_creation_input_tokens
        if self.model is not None:
            entry["model"] = self.model
        return entry

    # ── bookkeeping ──

    def _new_id(self) -> str:
        self._n += 1
        return f"{self.run_id}-m{self._n}"

    def _open_step(self, out: list[Event]) -> None:
        if self._step is None:
            self._turns += 1
            self._step = f"turn {self._turns}"
            out.append({"type": "STEP_STARTED", "stepName": self._step})

    def _close_step(self, out: list[Event]) -> None:
        if self._step is not None:
            out.append({"type": "STEP_FINISHED", "stepName": self._step})
            self._step = None

    def _close_text(self, out: list[Event]) -> None:
        if self._text is not None:
            out.append({"type": "TEXT_MESSAGE_END", "messageId": self._text})
            self._text = None

    def _end_call(self, out: list[Event], call: ShownCall, given: Mapping[str, Any] | None) -> None:
        if given is not None:
            out.append({"type": "TOOL_CALL_ARGS", "toolCallId": call.id, "delta": _compact(given)})
        out.append({"type": "TOOL_CALL_END", "toolCallId": call.id})
        call.closed = True

    def _result(self, call_id: str, content: str) -> Event:
        return {
            "type": "TOOL_CALL_RESULT",
            "messageId": self._new_id(),
            "toolCallId": call_id,
            "content": content,
            "role": "tool",
        }


def _compact(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), separators=(",", ":"), ensure_ascii=False, default=str)


# ── the request ──


@attrs.frozen
class AguiRun:
    """What one ``RunAgentInput`` asks: a run of ``prompt``, or the decisions that carry a
    paused run on."""

    thread_id: str
    run_id: str
    prompt: str | None
    decisions: tuple[Decision, ...]
    body: Mapping[str, Any]


def parse_input(body: object) -> AguiRun:
    """``RunAgentInput`` (its JSON) → ``AguiRun``, or ``BadRequest`` naming the field."""
    if not isinstance(body, Mapping):
        raise BadRequest("body", "must be a RunAgentInput object")
    thread_id, run_id = body.get("threadId"), body.get("runId")
    if not isinstance(thread_id, str) or not thread_id:
        raise BadRequest("threadId", "must be a non-empty string")
    if not isinstance(run_id, str) or not run_id:
        raise BadRequest("runId", "must be a non-empty string")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadRequest("messages", "must be a list of messages")
    resume = body.get("resume")
    if resume is not None and not isinstance(resume, list):
        raise BadRequest("resume", "must be a list of resume entries")
    decisions = tuple(_decision(entry, i) for i, entry in enumerate(resume or ()))
    prompt = None
    if not decisions:
        prompt = _last_user_text(messages)
        if prompt is None:
            raise BadRequest("messages", "no user message with text to run")
    return AguiRun(thread_id, run_id, prompt, decisions, body)


def _decision(entry: object, i: int) -> Decision:
    where = f"resume[{i}]"
    if not isinstance(entry, Mapping):
        raise BadRequest(where, "must be a resume entry object")
    key, call = parse_approval_id(entry.get("interruptId"), f"{where}.interruptId")
    status = entry.get("status")
    if status == "cancelled":
        return Decision(key, call, False, "cancelled")
    if status != "resolved":
        raise BadRequest(f"{where}.status", f"must be 'resolved' or 'cancelled', got {status!r}"[:300])
    payload = entry.get("payload")
    approved = payload.get("approved") if isinstance(payload, Mapping) else payload
    if not isinstance(approved, bool):
        raise BadRequest(f"{where}.payload.approved", "must be true or false")
    reason = payload.get("reason") if isinstance(payload, Mapping) else None
    return Decision(key, call, approved, reason if isinstance(reason, str) else None)


def _last_user_text(messages: list[Any]) -> str | None:
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if not isinstance(message, Mapping):
            raise BadRequest(f"messages[{i}]", "must be a message object")
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [p.get("text") for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
            return "\n".join(t for t in texts if isinstance(t, str))
        raise BadRequest(f"messages[{i}].content", "must be a string or a list of parts")
    return None


# ── the endpoint ──


class AguiEndpoint(SseEndpoint):
    """POST a ``RunAgentInput``; the response streams the run's AG-UI events (SSE). See
    ``agui_endpoint``."""

    def __init__(self, agent: Agent, overrides: Overrides | None = None) -> None:
        self.agent = agent
        self.overrides = overrides

    def prepare(self, body: Any) -> tuple[AguiRun, str | None]:
        run = parse_input(body)
        resume_key = decide(self.agent, run.decisions) if run.decisions else None
        return run, resume_key

    async def events(self, plan: tuple[AguiRun, str | None]) -> AsyncGenerator[bytes, None]:
        run, resume_key = plan
        host = self.agent.host
        model = self.agent.model if isinstance(self.agent.model, str) else getattr(host, "model", None)
        codec = getattr(host, "codec", None)
        events = AguiEvents(
            run.thread_id,
            run.run_id,
            model=model if isinstance(model, str) else None,
            host=getattr(codec, "name", None),
        )
        for event in events.opening():
            yield sse(event)
        overrides = dict(self.overrides(run.body)) if self.overrides is not None else {}
        async with updates_of(
            self.agent, prompt=run.prompt, resume_key=resume_key, overrides=overrides, key_prefix="agui"
        ) as updates:
            async for update in updates:
                for event in events.feed(update):
                    yield sse(event)


def agui_endpoint(agent: Agent, *, overrides: Overrides | None = None) -> AguiEndpoint:
    """An ASGI endpoint serving ``agent`` over AG-UI: POST a ``RunAgentInput``, read the events.

    The run's prompt is the last user message's text (the host keeps the conversation: pass
    ``overrides`` — body → ``agent.run`` overrides — to continue one, e.g. ``history=`` from
    your store). With ``Agent(journal=...)`` a call that needs approval ends the run with an
    interrupt; the next input's ``resume`` entries (``payload: {"approved": bool, "reason"}``)
    decide it and the run carries on. A bad body is HTTP 400 ``{"error", "field"}``. Leaving
    the stream cancels the run. Whoever can POST here can run the agent and decide its
    approvals: serve it behind your app's authentication.
    """
    return AguiEndpoint(agent, overrides)
