"""Receiving a turn's events: dedupe, forward, count, buffer (E-4…E-11).

Handlers of the machine's table for what a host sends while a turn is in flight: stream
events (``StreamEvent``), a request/response host's live events (``LiveEvent``) and its
whole turn (``TurnPolled``). Each event goes to the handler (``DeliverEvent``, and a text
delta when asked, E-9), to live-update consumers (``DeliverUpdate``) and to telemetry; at a
turn boundary the buffered turn goes to ``rma.session.completing``.
"""

from __future__ import annotations

import attrs

from rma.live import NO_LIVE_TURN, AttemptDiscarded, TextDelta, ToolCallStarted
from rma.session.commands import Command, DeliverEvent, DeliverUpdate, Log
from rma.session.completing import handle_turn
from rma.session.events import LiveEvent, StreamEvent, TurnPolled
from rma.session.state import State, Step, evolve
from rma.session.telemetry import stream_event
from rma.vocabulary import JSON, TEXT_DELTA_TYPE


def forward(s: State, raw: JSON) -> tuple[State, list[Command]]:
    """What ``raw`` becomes for its consumers: deliveries (only for a handler with
    ``handle_event``: ``deliver_events``) and live updates (only while consumed)."""
    out: list[Command] = []
    cfg = s.config
    if cfg.deliver_events:
        out.append(DeliverEvent(raw))
        if cfg.text_deltas:
            chunk = cfg.codec.text_delta(raw)
            if isinstance(chunk, str) and chunk:
                out.append(DeliverEvent({"type": TEXT_DELTA_TYPE, "text": chunk}))  # E-9
    if s.updates:
        s, more = live_updates(s, raw)
        out.extend(more)
    return s, out


def live_updates(s: State, raw: JSON) -> tuple[State, list[Command]]:
    """The codec's ``rma.live`` updates of ``raw``, folded with what the open turn told."""
    try:
        live, updates = s.config.codec.live_fold(s.live, raw, s.turn_events.to_tuple())
    except Exception as exc:  # a codec must be total; a bug here costs the updates, not the session
        return s, [Log("warning", "live_updates failed", {"error": f"{type(exc).__name__}: {exc}"[:300]})]
    if not live.spoke and any(isinstance(u, TextDelta | ToolCallStarted) for u in updates):
        live = attrs.evolve(live, spoke=True)
    if live != s.live:
        s = evolve(s, live=live)
    return s, [DeliverUpdate(update) for update in updates]


def discard_live(s: State, attempt: int, error: str | None) -> tuple[State, list[Command]]:
    """The open turn's stream is gone: what its live updates said belongs to no turn (a
    reconnect re-delivers what stands). Nothing when nothing was said."""
    if not s.live.spoke and not s.live.previews:
        return s, []
    out: list[Command] = []
    if s.live.spoke and s.updates:
        out.append(DeliverUpdate(AttemptDiscarded(attempt, error)))
    return evolve(s, live=NO_LIVE_TURN), out


def on_stream_event(s: State, ev: StreamEvent) -> Step:
    return receive(s, ev.event)


def receive(s: State, raw: JSON) -> Step:
    """One streamed event of the open turn; at a turn boundary, the turn completes."""
    if s.config.codec.is_preview(raw):
        # A preview of an event still being produced: live updates only. ``handle_event``,
        # the turn, the dedupe and the telemetry see the final event, the source of truth.
        if not s.updates:
            return s, ()
        s, previewed = live_updates(s, raw)
        return s, tuple(previewed)
    seen = s.seen
    if isinstance(raw, dict):
        event_id = raw.get("id")
        if isinstance(event_id, str):
            if event_id in seen:  # E-11: already processed (re-delivered after a reconnect)
                return s, ()
            seen = seen.add(event_id)
    s, out = forward(s, raw)
    out.extend(stream_event(s, raw))
    turn = s.turn_events.append(raw)
    s = evolve(s, seen=seen, turn_events=turn)
    if s.config.codec.turn_boundary(raw):
        s, more = handle_turn(s, turn.to_tuple())
        out.extend(more)
    return s, tuple(out)


def live_event_forwards(s: State) -> bool:
    """Whether a live event reaches a consumer of the machine's: the handler's ``handle_event``
    (``deliver_events``) or live updates. When it does not, a live event after the turn's
    first (``live_forwarded`` ≥ 1) only adds its ``rma.stream.event`` telemetry and its count,
    so the shell need not post it while nothing subscribes to that telemetry (issue #17: eight
    frames a turn on AgentCore; ``properties/test_session_deliveries.py`` pins it)."""
    return s.config.deliver_events or s.updates


def on_live_event(s: State, ev: LiveEvent) -> Step:
    """E-4: a request/response host forwarded an event mid-turn; the turn still comes whole."""
    s, out = forward(s, ev.event)
    out.extend(stream_event(s, ev.event))
    return evolve(s, live_forwarded=s.live_forwarded + 1), tuple(out)


def on_polled(s: State, ev: TurnPolled) -> Step:
    out: list[Command] = []
    if s.live_forwarded == 0:  # E-5: batch delivery only when nothing went out live
        for raw in ev.events:
            s, delivered = forward(s, raw)
            out.extend(delivered)
    s, more = handle_turn(evolve(s, live_forwarded=0), ev.events)
    out.extend(more)
    return s, tuple(out)
