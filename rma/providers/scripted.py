"""A scripted loop host's vocabulary: the codec behind ``rma_shell.testing.ScriptedProvider``.

Not a real provider. It exists so that the session machine can be exercised — in tests,
properties, docs and users' own tests — with a small, explicit event vocabulary:

- ``{"type": "text", "text": str}`` — assistant text
- ``{"type": "tool_use", "id", "name", "input"}`` — a client-side (custom) tool call
- ``{"type": "server_tool_use", "id", "name"}`` — a server-side tool (observe-only)
- ``{"type": "usage", "input_tokens", "output_tokens"[, cache fields]}``
- ``{"type": "tool_result", "tool_use_id", "text", "is_error"}`` — an answered call (echo)
- ``{"type": "idle", "stop_reason": …[, "event_ids": [...]]}`` — the turn boundary

Inputs are lists of such events (``user.message``, ``define_outcome``, ``tool_result``).
"""

from __future__ import annotations

from collections.abc import Sequence

from rma.live import LiveUpdate, TextDelta, ToolCallStarted, common_updates
from rma.provider import DEFAULT_PROMPT, Input, Mode, ProviderCodec, register_codec
from rma.vocabulary import JSON, Outcome, Terminal, ToolResult, ToolUse, TurnResult, Usage

_TERMINALS = {"end_turn": Terminal.END_TURN, "requires_action": Terminal.REQUIRES_ACTION}


def _usage(ev: dict[str, JSON]) -> Usage:
    return Usage(
        _tokens(ev.get("input_tokens")),
        _tokens(ev.get("output_tokens")),
        _tokens(ev.get("cache_read_input_tokens")),
        _tokens(ev.get("cache_creation_input_tokens")),
        raw=(ev,),
    )


def _stop_kind(stop_reason: JSON) -> JSON:
    if isinstance(stop_reason, dict):
        return stop_reason.get("type")
    return stop_reason


def _tokens(value: JSON) -> int:
    """A token count, or 0 for anything that is not a non-negative int: normalize is total."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _tool_use(ev: dict[str, JSON]) -> ToolUse:
    raw_input = ev.get("input")
    use_id = ev.get("id")
    return ToolUse(
        use_id if isinstance(use_id, str) else None,
        str(ev.get("name") or "unknown"),
        raw_input if isinstance(raw_input, dict) else {},
    )


class ScriptedCodec(ProviderCodec):
    """Request/response flavour."""

    name = "scripted"
    mode = Mode.REQUEST_RESPONSE
    has_text_delta = True

    def kickoff_input(self, prompt: str | None, outcome: Outcome | None) -> Input:
        if outcome is not None:
            return [
                {
                    "type": "define_outcome",
                    "description": outcome.description,
                    "rubric": outcome.rubric,
                    "max_iterations": outcome.max_iterations,
                }
            ]
        return self.user_input(prompt if prompt is not None else DEFAULT_PROMPT)

    def user_input(self, text: str) -> Input:
        return [{"type": "user.message", "text": text}]

    def resume_input(self, uses: Sequence[ToolUse], results: Sequence[ToolResult]) -> Input:
        # Results arrive in tool-use order; pairing by position keeps every result even
        # when a host repeats an id within a batch.
        if len(uses) != len(results):
            raise ValueError(f"{len(uses)} tool uses but {len(results)} results")
        return [
            {"type": "tool_result", "tool_use_id": u.id, "text": r.text, "is_error": r.is_error}
            for u, r in zip(uses, results, strict=True)
        ]

    def turn_boundary(self, event: JSON) -> bool:
        return isinstance(event, dict) and event.get("type") == "idle"

    def text_delta(self, event: JSON) -> str | None:
        if isinstance(event, dict) and event.get("type") == "text":
            text = event.get("text")
            if isinstance(text, str):
                return str(text)
        return None

    def live_updates(self, event: JSON) -> tuple[LiveUpdate, ...]:
        if isinstance(event, dict) and event.get("type") == "tool_use":
            use = _tool_use(event)
            return (ToolCallStarted(use.id, use.name),)
        text = self.text_delta(event)
        return (TextDelta(text),) if text else common_updates(event)

    def normalize(self, events: Sequence[JSON]) -> TurnResult:
        texts: list[str] = []
        uses: list[ToolUse] = []
        server: list[JSON] = []
        usage: Usage | None = None
        idle: dict[str, JSON] | None = None
        for ev in events:
            if not isinstance(ev, dict):
                continue
            kind = ev.get("type")
            if kind == "text":
                text = ev.get("text")
                if isinstance(text, str):
                    texts.append(text)
            elif kind == "tool_use":
                uses.append(_tool_use(ev))
            elif kind == "server_tool_use":
                server.append(ev)
            elif kind == "usage":
                u = _usage(ev)
                usage = u if usage is None else usage + u
            elif kind == "idle":
                idle = ev
        if idle is None:
            terminal, stop_reason = Terminal.TERMINATED, None
        else:
            stop_reason = idle.get("stop_reason")
            terminal = _TERMINALS.get(str(_stop_kind(stop_reason)), Terminal.TERMINATED)
            wanted = idle.get("event_ids")
            if isinstance(wanted, list):
                uses = [u for u in uses if u.id in wanted]
        return TurnResult(
            terminal=terminal,
            stop_reason=stop_reason,
            text="".join(texts),
            custom_tool_uses=tuple(uses),
            server_tool_uses=tuple(server),
            usage=usage,
            events=tuple(events),
        )

    def pending_tool_uses(self, history: Sequence[JSON]) -> tuple[ToolUse, ...]:
        answered = {
            ev.get("tool_use_id")
            for ev in history
            if isinstance(ev, dict) and ev.get("type") == "tool_result"
        }
        last_idle = next(
            (ev for ev in reversed(history) if isinstance(ev, dict) and ev.get("type") == "idle"),
            None,
        )
        if last_idle is None or _stop_kind(last_idle.get("stop_reason")) != "requires_action":
            return ()
        wanted = last_idle.get("event_ids")
        return tuple(
            _tool_use(ev)
            for ev in history
            if isinstance(ev, dict)
            and ev.get("type") == "tool_use"
            and ev.get("id") not in answered
            and (not isinstance(wanted, list) or ev.get("id") in wanted)
        )


class ScriptedStreamingCodec(ScriptedCodec):
    """Streaming flavour, with outcomes and budgets, like a managed host."""

    name = "scripted-streaming"
    mode = Mode.STREAMING
    supports_outcomes = True
    supports_budget = True


register_codec(ScriptedCodec)
register_codec(ScriptedStreamingCodec)
