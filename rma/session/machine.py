"""The session machine: every loop decision, as ``step(state, event) -> (state, commands)``.

One frozen ``State`` per session (``rma.session.state``), one pure transition function. The
shell turns I/O into events (``rma.session.events``) and executes the commands returned here
(``rma.session.commands``); it decides nothing. Behaviour ids in comments refer to the
catalogue in ``shared/reference/behaviors.md``.

Phases. A session is always in exactly one phase:

=============  ==========================================================================
CONNECTING     streaming, waiting for the first "connected" (kickoff waits for it, S-21)
AWAITING       a turn is in flight: stream events or a poll result will arrive
PUSHING        a push is outstanding (streaming)
TOOLS          the handler is running a batch of tool uses
GUARD          the turn guard is being consulted
BACKOFF        waiting before a reconnect attempt (R-12)
RECONNECTING   consolidating after a drop or on reattach
IDLE           live session between requests
DONE           a sync run has its one result; every later event is ignored
=============  ==========================================================================

The table. ``TRANSITIONS[phase][event type]`` is what a phase does with an event, for every
phase and event in one place (as h11's ``_state.py`` keeps its ``EVENT_TRIGGERED_TRANSITIONS``);
``step`` dispatches through it, and ``rma.session.diagram`` draws it for docs/core-protocol.md.
An entry is one of:

- ``Go(handler, to=…)``: the phase takes the event. ``handler(state, event)`` returns the next
  state and the commands; ``to`` names the phases it may move the session to (it may also
  stay where it is) — what the diagram draws, and what a property holds every handler to.
  Outcomes several handlers share are named once as a ``Choice`` (``TURN_COMPLETED``,
  ``NEXT_TURN``, ``ENDS``), each way with the condition it is taken on.
- ``DEFER``: the phase is busy with something the event must not interrupt. The event waits in
  ``State.deferred`` and is fed again, in order, as soon as the phase it finds takes it
  (S-90, S-91, S-70 Better): stream events that arrive while tools run belong to the next
  turn, and a follow-up never interrupts a turn.
- ``IGNORE``: the phase does not take it — an answer nobody asked for, anything after DONE.
- ``ByMode(streaming=…, request_response=…)``: one of the above for each kind of host (a
  request/response host has no stream of turn events and nothing to push a raw event to).

A row lists what its phase takes or defers; every other event is ignored. What every phase
but DONE does alike is written once (``_EVERY_PHASE``), including the row for an event of a
type the machine does not know (``object``: logged at debug, then ignored). Handlers live by
subject: ``rma.session.driving`` (opening, kickoff, pushes, follow-ups),
``rma.session.receiving`` (a turn's events), ``rma.session.completing`` (a completed turn,
the guard, tool batches), ``rma.session.reconnecting`` (drops, reconnects, resume); a
request's ending is ``rma.session.endings``.

Two rules come before the table, in every phase:

1. Lanes. Inputs keep their order within their lane — the stream's events, follow-ups, raw
   events to push — so an input whose lane has one waiting waits behind it, whatever its
   entry. Lanes are independent: a follow-up waiting for the request to end must not hold
   back the stream events that will end it.
2. Staleness. An answer to superseded work is ignored: an event of a stream generation that
   is not the current one (S-24), results for a tool batch that is not the current one.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from rma.errors import Timeout
from rma.provider import Mode
from rma.session import completing, driving, receiving, reconnecting
from rma.session.commands import Command, Log
from rma.session.completing import NO_TERMINAL_TOOL, REPROMPT_TEMPLATE
from rma.session.endings import carries_result, fail, with_progress, with_transcript
from rma.session.events import (
    EVENT_TYPES,
    DeadlineReached,
    Event,
    GuardVerdict,
    LiveEvent,
    Opened,
    PushFinished,
    ReconnectFinished,
    ReconnectTimerFired,
    SendEventRequested,
    StreamClosed,
    StreamConnected,
    StreamEvent,
    StreamFailed,
    ToolsFinished,
    TurnFailed,
    TurnPolled,
    UpdatesWanted,
    UserMessage,
)
from rma.session.reconnecting import (
    BACKOFF_BASE_MS,
    BACKOFF_CAP_MS,
    BACKOFF_MAX_EXPONENT,
    reconnect_backoff_ms,
)
from rma.session.state import Accumulated, Phase, State, Step, evolve, initial_state

__all__ = [
    "BACKOFF_BASE_MS",
    "BACKOFF_CAP_MS",
    "BACKOFF_MAX_EXPONENT",
    "DEFER",
    "ENDS",
    "IGNORE",
    "NEXT_TURN",
    "NO_TERMINAL_TOOL",
    "REPROMPT_TEMPLATE",
    "TRANSITIONS",
    "TURN_COMPLETED",
    "Accumulated",
    "ByMode",
    "Choice",
    "Go",
    "Phase",
    "Rule",
    "State",
    "Step",
    "carries_result",
    "entry_for",
    "initial_state",
    "reconnect_backoff_ms",
    "step",
    "with_progress",
    "with_telemetry",
    "with_transcript",
]


class Rule(enum.Enum):
    IGNORE = "ignore"
    DEFER = "defer"


IGNORE, DEFER = Rule.IGNORE, Rule.DEFER

Handler = Callable[[State, Any], Step]
"""``handler(state, event)``; each is only ever given events of its row's type."""


@attrs.frozen
class Choice:
    """A fork several handlers' outcomes share, named once: each way is a phase (or another
    choice) and, in words, when the session goes there."""

    label: str
    ways: tuple[tuple[Phase | Choice, str], ...]

    def phases(self) -> frozenset[Phase]:
        return _phases(way for way, _ in self.ways)


@attrs.frozen
class Go:
    handler: Handler
    to: tuple[Phase | Choice, ...] = ()

    def phases(self) -> frozenset[Phase]:
        """Every phase the handler may leave the session in, besides the one it found."""
        return _phases(self.to)


def _phases(targets: Iterable[Phase | Choice]) -> frozenset[Phase]:
    return frozenset().union(*({t} if isinstance(t, Phase) else t.phases() for t in targets))


@attrs.frozen
class ByMode:
    streaming: Go | Rule
    request_response: Go | Rule


Entry = Go | Rule | ByMode


# ── the few handlers that are a line each ─────────────────────────────────────────────


def on_turn_failed(s: State, ev: TurnFailed) -> Step:
    return fail(s, ev.error)


def on_deadline(s: State, ev: DeadlineReached) -> Step:
    # M-7 Better: a timed-out run ends like every other error, telemetry included.
    return fail(evolve(s, deferred=()), Timeout(timeout_s=ev.timeout_s))


def on_updates_wanted(s: State, ev: UpdatesWanted) -> Step:
    return evolve(s, updates=ev.wanted or s.config.deliver_updates), ()


def on_unknown(s: State, ev: object) -> Step:
    return s, (Log("debug", "ignored event", {"event": type(ev).__name__}),)


# ── the table ──────────────────────────────────────────────────────────────────────────

ENDS = Choice("the request ends", ((Phase.IDLE, "live"), (Phase.DONE, "sync")))
NEXT_TURN = Choice("a turn is driven", ((Phase.AWAITING, "polled"), (Phase.PUSHING, "pushed")))
TURN_COMPLETED = Choice(
    "a turn completed",
    (
        (Phase.GUARD, "a turn guard is set"),
        (Phase.TOOLS, "it asks for tools"),
        (NEXT_TURN, "a re-prompt or resume is due"),
        (ENDS, "it is the request's last, or fails"),
    ),
)

Row = Mapping[type, Entry]

_EVERY_PHASE: Row = {
    Opened: Go(driving.on_opened, to=(Phase.CONNECTING, Phase.RECONNECTING, Phase.AWAITING, Phase.IDLE)),
    UpdatesWanted: Go(on_updates_wanted),
    DeadlineReached: Go(on_deadline, to=(ENDS,)),
    object: Go(on_unknown),
}
_READS_THE_STREAM: Row = {
    StreamEvent: ByMode(
        streaming=Go(receiving.on_stream_event, to=(TURN_COMPLETED,)), request_response=IGNORE
    ),
    StreamConnected: Go(driving.on_connected, to=(Phase.IDLE, NEXT_TURN)),
    StreamClosed: Go(reconnecting.on_stream_closed, to=(Phase.BACKOFF, ENDS)),
    StreamFailed: Go(reconnecting.on_stream_failed, to=(Phase.BACKOFF, ENDS)),
}
# BACKOFF and IDLE: no turn is in flight on the stream, so losing it ends nothing.
_READS_THE_STREAM_AT_REST: Row = {
    **_READS_THE_STREAM,
    StreamClosed: Go(reconnecting.on_stream_closed_at_rest, to=(Phase.BACKOFF,)),
    StreamFailed: Go(reconnecting.on_stream_failed_at_rest, to=(Phase.BACKOFF,)),
}
_STREAM_WAITS: Row = {StreamEvent: DEFER, StreamConnected: DEFER, StreamClosed: DEFER, StreamFailed: DEFER}
_REFUSE_SEND = Go(driving.refuse_send_event)
_SEND_NOW = ByMode(streaming=Go(driving.push_send_event, to=(Phase.PUSHING,)), request_response=_REFUSE_SEND)
_SEND_LATER = ByMode(streaming=DEFER, request_response=_REFUSE_SEND)

_TAKES: Mapping[Phase, Row] = {
    Phase.CONNECTING: {
        **_EVERY_PHASE,
        **_READS_THE_STREAM,
        UserMessage: DEFER,
        SendEventRequested: _SEND_LATER,
    },
    Phase.AWAITING: {
        **_EVERY_PHASE,
        **_READS_THE_STREAM,
        LiveEvent: Go(receiving.on_live_event),
        TurnPolled: ByMode(streaming=IGNORE, request_response=Go(receiving.on_polled, to=(TURN_COMPLETED,))),
        TurnFailed: Go(on_turn_failed, to=(ENDS,)),
        UserMessage: DEFER,
        SendEventRequested: _SEND_NOW,
    },
    Phase.PUSHING: {
        **_EVERY_PHASE,
        **_STREAM_WAITS,
        PushFinished: Go(driving.on_push_finished, to=(Phase.AWAITING, ENDS)),
        UserMessage: DEFER,
        SendEventRequested: _SEND_LATER,
    },
    Phase.TOOLS: {
        **_EVERY_PHASE,
        **_STREAM_WAITS,
        ToolsFinished: Go(completing.on_tools_finished, to=(NEXT_TURN, ENDS)),
        UserMessage: DEFER,
        SendEventRequested: _SEND_LATER,
    },
    Phase.GUARD: {
        **_EVERY_PHASE,
        **_STREAM_WAITS,
        GuardVerdict: Go(completing.on_guard, to=(Phase.TOOLS, NEXT_TURN, ENDS)),
        UserMessage: DEFER,
        SendEventRequested: _SEND_LATER,
    },
    Phase.BACKOFF: {
        **_EVERY_PHASE,
        **_READS_THE_STREAM_AT_REST,
        ReconnectTimerFired: Go(reconnecting.on_timer_fired, to=(Phase.RECONNECTING,)),
        UserMessage: DEFER,
        SendEventRequested: _SEND_LATER,
    },
    Phase.RECONNECTING: {
        **_EVERY_PHASE,
        **_STREAM_WAITS,
        # Parked where the host is, reconnecting again, or on as after a turn (a replayed turn,
        # tool uses to redrive, the armed prompt, a resumed run's result).
        ReconnectFinished: Go(
            reconnecting.on_reconnect_finished,
            to=(Phase.CONNECTING, Phase.AWAITING, Phase.IDLE, Phase.BACKOFF, TURN_COMPLETED),
        ),
        UserMessage: DEFER,
        SendEventRequested: _SEND_LATER,
    },
    Phase.IDLE: {
        **_EVERY_PHASE,
        **_READS_THE_STREAM_AT_REST,
        UserMessage: Go(driving.on_user_message, to=(NEXT_TURN,)),
        SendEventRequested: _SEND_NOW,
    },
    Phase.DONE: {object: IGNORE},
}

TRANSITIONS: Mapping[Phase, Row] = {
    phase: {**dict.fromkeys(EVENT_TYPES, IGNORE), **row} for phase, row in _TAKES.items()
}
"""``_TAKES`` with every event type a row does not name set to ``IGNORE``: total, for every
phase and every event type."""


# ── dispatch ────────────────────────────────────────────────────────────────────────────


def entry_for(s: State, ev: object) -> Go | Rule:
    """What ``s``'s phase does with ``ev``: the table's entry for its type (or the nearest
    base class that has one), for this session's kind of host — ``IGNORE`` if ``ev`` is stale."""
    if _stale(s, ev):
        return IGNORE
    row = TRANSITIONS[s.phase]
    entry = row.get(type(ev))
    if entry is None:  # a subclass of an event type, or a type the machine does not know
        entry = next(row[cls] for cls in type(ev).__mro__ if cls in row)  # every row has ``object``
    if isinstance(entry, ByMode):
        return entry.streaming if s.config.codec.mode is Mode.STREAMING else entry.request_response
    return entry


_STREAM_EVENTS = (StreamEvent, StreamConnected, StreamClosed, StreamFailed)


def _stale(s: State, ev: object) -> bool:
    if isinstance(ev, _STREAM_EVENTS):
        return ev.gen != s.gen
    if isinstance(ev, ToolsFinished):
        return ev.batch != s.batch
    return False


def _lane(ev: object) -> int | None:
    """The lane of an input a phase may defer (the stream, follow-ups, raw events); the
    others are never deferred, so they never wait behind anything."""
    if isinstance(ev, _STREAM_EVENTS):
        return 0
    if isinstance(ev, UserMessage):
        return 1
    if isinstance(ev, SendEventRequested):
        return 2
    return None


def _waits_in_its_lane(s: State, ev: object) -> bool:
    lane = _lane(ev)
    return lane is not None and any(_lane(waiting) == lane for waiting in s.deferred)


def _take(s: State, ev: object, entry: Go | Rule) -> Step:
    if isinstance(entry, Go):
        return entry.handler(s, ev)
    return s, ()


def step(s: State, ev: Event) -> Step:
    """Apply one event. Total: any event in any phase yields a state (unknowns are ignored)."""
    entry = entry_for(s, ev)
    if entry is DEFER or (s.deferred and _waits_in_its_lane(s, ev)):
        return evolve(s, deferred=(*s.deferred, ev)), ()
    s, commands = _take(s, ev, entry)
    if s.deferred and s.phase is not Phase.DONE:
        return _drain(s, list(commands))
    return s, commands


def with_telemetry(s: State, wanted: bool) -> State:
    """``s`` building its per-turn telemetry or not (``State.telemetry``): the shell says,
    before each event, whether anything subscribes; the core cannot know."""
    return s if s.telemetry is wanted else evolve(s, telemetry=wanted)


def _drain(s: State, out: list[Command]) -> Step:
    """Feed waiting inputs again, lane by lane in order, until none can go (one may unblock another)."""
    progress = True
    while progress and s.deferred and s.phase is not Phase.DONE:
        progress = False
        queue, s = s.deferred, evolve(s, deferred=())
        blocked: set[int | None] = set()
        kept: list[Event] = []
        for ev in queue:
            lane = _lane(ev)
            if s.phase is Phase.DONE or lane in blocked or (entry := entry_for(s, ev)) is DEFER:
                blocked.add(lane)
                kept.append(ev)
                continue
            s, commands = _take(s, ev, entry)
            out.extend(commands)
            progress = True
        if s.phase is Phase.DONE:
            return evolve(s, deferred=()), tuple(out)
        s = evolve(s, deferred=(*kept, *s.deferred))
    return s, tuple(out)
