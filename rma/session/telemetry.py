"""The session machine's telemetry: the ``Emit`` commands for streams, turns and tool uses.

Each is the caller's metadata with the library's keys over it (M-8), built from the state
alone; the shell hands them to subscribers (and copies their maps for each emission). The
per-turn ones are built only while ``State.telemetry`` says something takes them. Not
the session's endings (``rma.session.endings`` emits ``rma.session.terminal``) and not
subscriptions or exporters (``rma_shell.telemetry``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from rma.session.commands import Command, Emit, Log
from rma.session.state import State
from rma.vocabulary import JSON, ToolUse, TurnResult


def _metadata(s: State) -> dict[str, JSON]:
    """A fresh dict of the caller's metadata, for the library's keys to go over."""
    return dict(s.config.metadata)


def stream_lifecycle(s: State, name: str, **fields: JSON) -> Emit:
    """``rma.stream.connected`` / ``.done`` / ``.error`` (M-4, C-48); ``gen`` counts the
    stream's reconnects."""
    meta = _metadata(s)
    meta.update(fields)
    meta["session_id"] = s.session_id
    meta["gen"] = s.gen
    return Emit(name, {}, meta)


def event_type(raw: JSON) -> JSON:
    """A raw event's ``type``, or a Converse envelope's one key (E-4), or None."""
    if isinstance(raw, dict):
        kind = raw.get("type")
        if isinstance(kind, str):
            return kind
        return next(iter(raw), None)
    return None


def stream_event(s: State, raw: JSON) -> tuple[Emit, ...]:
    """``rma.stream.event``: one per event received, named by its type."""
    if not s.telemetry:
        return ()
    meta = _metadata(s)
    meta["type"] = event_type(raw)
    meta["session_id"] = s.session_id
    return (Emit("rma.stream.event", {}, meta),)


def turn_start(s: State, purpose: str, content: Mapping[str, JSON]) -> tuple[Emit, ...]:
    """``rma.turn.start``: turn ``s.turns + 1`` is being driven, and why."""
    if not s.telemetry:
        return ()
    meta = _metadata(s)
    meta["turn"] = s.turns + 1
    meta["purpose"] = purpose
    meta["session_id"] = s.session_id
    return (Emit("rma.turn.start", {}, meta, content),)


def stop_kind(stop_reason: JSON) -> str | None:
    """A stop reason as one string: itself, or a provider map's ``type`` (``{"type": "end_turn"}``)."""
    if isinstance(stop_reason, str):
        return stop_reason
    if isinstance(stop_reason, Mapping):
        kind = stop_reason.get("type")
        return kind if isinstance(kind, str) else None
    return None


def turn_stop(s: State, tr: TurnResult) -> tuple[Emit, ...]:
    """``rma.turn.stop``: the turn that just completed, with its own usage (not the running sum)."""
    if not s.telemetry:
        return ()
    meta = _metadata(s)
    meta["turn"] = s.turns
    meta["terminal"] = tr.terminal.value
    meta["stop_reason"] = stop_kind(tr.stop_reason)
    meta["session_id"] = s.session_id
    u = tr.usage
    measurements = (
        {}
        if u is None
        else {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cache_read_input_tokens": u.cache_read_input_tokens,
            "cache_creation_input_tokens": u.cache_creation_input_tokens,
        }
    )
    calls = [{"id": c.id, "name": c.name, "arguments": dict(c.input)} for c in tr.custom_tool_uses]
    return (Emit("rma.turn.stop", measurements, meta, {"output": tr.text, "tool_calls": calls}),)


def tool_uses(s: State, uses: Sequence[ToolUse]) -> list[Command]:
    """``rma.session.tool_uses`` for a turn's (or a recovery's) uses, and the T-12 warning
    when an id repeats (nothing is deduplicated: providers reject such a resume)."""
    ids = [u.id for u in uses]
    out: list[Command] = []
    if s.telemetry:
        meta = _metadata(s)
        meta["turn"] = s.turns
        meta["tool_use_ids"] = ids
        meta["session_id"] = s.session_id
        out.append(Emit("rma.session.tool_uses", {"tool_use_count": len(ids)}, meta))
    if len(set(ids)) != len(ids):
        dups = sorted({str(i) for i, n in Counter(ids).items() if n > 1})
        message = f"duplicate tool_use id(s) {dups} at turn {s.turns} — "
        message += "providers reject resumes carrying duplicates"
        out.append(Log("warning", message, {"turn": s.turns, "duplicates": dups}))
    return out
