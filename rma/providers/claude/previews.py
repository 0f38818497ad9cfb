"""Claude Managed Agents: live updates from ``event_deltas`` previews, and of sub-agent threads.

What this module is: the pure fold that turns a stream's ``event_start`` / ``event_delta``
previews (``GET …/events/stream?event_deltas[]=agent.message``) into token-sized
``TextDelta``s, reconciles them with the final event, and discards what a preview said when
its final event never came (``AttemptDiscarded``, as ``rma.live`` defines it); and the
``ThreadActivity`` updates of a multi-agent session's thread events. What it is not: no
turn logic — previews never enter a turn's events (the final event is the source of truth
for the result and a replay) — and no I/O.

The rules (SDK 2.10.0 ``BetaManagedAgentsStartEvent`` / ``…DeltaEvent``):

- ``event_start`` opens a preview of the event ``event.id``; ``agent.thinking`` previews are
  start-only (no text).
- ``event_delta`` with a ``content_delta`` text fragment: a ``TextDelta`` of it (opening the
  preview when no start came).
- The final ``agent.message`` with a previewed id: the part of its text the deltas did not
  deliver, when they delivered a prefix of it (deltas are best-effort and may stop early);
  otherwise the deltas were wrong — discard and deliver again.
- A preview still open when its model request ends (``span.model_request_end``), at a
  ``session.error`` or at a turn boundary was cut (an error, an interrupt): when it delivered
  text, ``AttemptDiscarded`` and then every live update the turn's events so far carry — what
  still stands — so a consumer that clears on a discard shows exactly the final events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

import attrs

from rma.live import AttemptDiscarded, LiveTurn, LiveUpdate, TextDelta, ThreadActivity, ToolCallStarted
from rma.vocabulary import JSON

EVENT_START: Final = "event_start"
EVENT_DELTA: Final = "event_delta"
PREVIEW_TYPES: Final = frozenset({EVENT_START, EVENT_DELTA})
DELTA_TYPES: Final = ("agent.message", "agent.thinking")
"""What ``event_deltas`` may ask previews of (``BetaManagedAgentsDeltaType``)."""

_CLOSERS: Final = frozenset(
    {
        "span.model_request_end",
        "session.error",
        "session.status_idle",
        "session.status_terminated",
        "session.deleted",
    }
)
PREVIEW_CUT: Final = "preview_cut"
"""``AttemptDiscarded.error`` when a preview ended without its final event."""
PREVIEW_MISMATCH: Final = "preview_mismatch"
"""``AttemptDiscarded.error`` when the final event contradicts what its previews said."""

_THREAD_STATUS: Final[Mapping[str, str]] = {
    "session.thread_created": "created",
    "session.thread_status_running": "running",
    "session.thread_status_idle": "idle",
    "session.thread_status_rescheduled": "rescheduled",
    "session.thread_status_terminated": "terminated",
}


def _str(value: JSON) -> str | None:
    return value if isinstance(value, str) else None


def is_preview(event: JSON) -> bool:
    return isinstance(event, Mapping) and event.get("type") in PREVIEW_TYPES


def _text(content: JSON) -> str | None:
    if not isinstance(content, list):
        return None
    parts = [
        b["text"]
        for b in content
        if isinstance(b, Mapping) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    return "".join(parts) if parts else None


def thread_updates(event: Mapping[str, JSON]) -> tuple[LiveUpdate, ...]:
    """``ThreadActivity`` of a thread event on the primary stream; () for any other event."""
    kind = event.get("type")
    activity = _THREAD_STATUS.get(kind) if isinstance(kind, str) else None
    if activity is not None:
        thread = _str(event.get("session_thread_id"))
        if thread is None:
            return ()
        stop = event.get("stop_reason") if activity == "idle" else None
        return (ThreadActivity(thread, activity, _str(event.get("agent_name")), stop),)
    if kind == "agent.thread_message_sent":
        thread = _str(event.get("to_session_thread_id"))
        name = _str(event.get("to_agent_name"))
        activity = "message_sent"
    elif kind == "agent.thread_message_received":
        thread = _str(event.get("from_session_thread_id"))
        name = _str(event.get("from_agent_name"))
        activity = "message_received"
    else:
        return ()
    if thread is None:
        return ()
    return (ThreadActivity(thread, activity, name, None, _text(event.get("content"))),)


def _delta_text(event: Mapping[str, JSON]) -> str | None:
    delta = event.get("delta")
    if not isinstance(delta, Mapping) or delta.get("type") != "content_delta":
        return None
    content = delta.get("content")
    if not isinstance(content, Mapping) or content.get("type") != "text":
        return None
    return _str(content.get("text"))


def _discard(
    turn: Sequence[JSON], updates_of: Callable[[JSON], tuple[LiveUpdate, ...]], error: str
) -> list[LiveUpdate]:
    """``AttemptDiscarded``, then the text and tool-call starts the turn's final events so far
    still say (what a discard clears; thread activity is not cleared, so not repeated)."""
    out: list[LiveUpdate] = [AttemptDiscarded(0, error)]
    for event in turn:
        out.extend(u for u in updates_of(event) if isinstance(u, TextDelta | ToolCallStarted))
    return out


def _voided(previews: Mapping[str, str | None]) -> dict[str, str | None]:
    return dict.fromkeys(previews)


def fold(
    live: LiveTurn,
    event: JSON,
    turn: Sequence[JSON],
    updates_of: Callable[[JSON], tuple[LiveUpdate, ...]],
) -> tuple[LiveTurn, tuple[LiveUpdate, ...]]:
    """One event's live updates given what the open turn's previews delivered (see the module
    docstring); ``updates_of`` gives a final event's own updates."""
    if not isinstance(event, Mapping):
        return live, ()
    kind = event.get("type")
    previews = live.previews
    if kind == EVENT_START:
        preview = event.get("event")
        eid = _str(preview.get("id")) if isinstance(preview, Mapping) else None
        if eid is None or eid in previews:
            return live, ()
        return attrs.evolve(live, previews={**previews, eid: ""}), ()
    if kind == EVENT_DELTA:
        eid, text = _str(event.get("event_id")), _delta_text(event)
        if eid is None or not text:
            return live, ()
        said = previews.get(eid, "")
        if said is None:  # voided by a discard: the final event will say it whole
            return live, ()
        return attrs.evolve(live, previews={**previews, eid: said + text}), (TextDelta(text),)
    eid = _str(event.get("id"))
    own = updates_of(event)
    if eid is not None and eid in previews:
        said = previews[eid]
        rest = {k: v for k, v in previews.items() if k != eid}
        live = attrs.evolve(live, previews=rest)
        if not said or kind != "agent.message":
            return live, own  # nothing delivered yet (or voided): the event says it all
        full = "".join(u.text for u in own if isinstance(u, TextDelta))
        if full.startswith(said):
            tail = full[len(said) :]
            others = tuple(u for u in own if not isinstance(u, TextDelta))
            return live, ((TextDelta(tail),) if tail else ()) + others
        out = _discard(turn, updates_of, PREVIEW_MISMATCH)
        out.extend(own)
        return attrs.evolve(live, previews=_voided(rest)), tuple(out)
    if kind in _CLOSERS and previews:
        cut = any(said for said in previews.values())
        live = attrs.evolve(live, previews={})
        if cut:
            out = _discard(turn, updates_of, PREVIEW_CUT)
            out.extend(own)
            return live, tuple(out)
    return live, own
