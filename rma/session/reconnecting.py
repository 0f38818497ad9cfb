"""Losing the stream, reconnecting and resuming (R-1…R-18, S-24, S-25).

Handlers of the machine's table for a stream that closes or fails, the backoff timer and
the reconnect's answer. A lost stream ends its generation (anything it still delivers is
stale, S-24) and schedules a reconnect after a backoff (R-12); a sync run does so within a
bound (``rma.session.resilience``). A reconnect's answer is folded like live events (R-18
Better), then the session goes on from where the host is: tool uses to redrive, an armed
prompt to send, or nothing.
"""

from __future__ import annotations

from returns.result import Failure

from rma._persistent import AppendLog, SeenIds
from rma.errors import SessionError, StreamDropped
from rma.session.commands import Command, Log, Reconnect, ScheduleReconnect
from rma.session.completing import exceeds_max_turns, max_turns_error, run_tools
from rma.session.driving import deliver_message
from rma.session.endings import fail, finish
from rma.session.events import ReconnectFinished, ReconnectTimerFired, StreamClosed, StreamEvent, StreamFailed
from rma.session.receiving import discard_live, receive
from rma.session.resilience import SYNC_RECONNECT_ATTEMPTS, gave_up, no_terminal_coming, worth_reconnecting
from rma.session.state import Phase, State, Step, evolve
from rma.session.telemetry import stream_lifecycle, tool_uses
from rma.vocabulary import JSON, Terminal, TurnResult

BACKOFF_BASE_MS = 500
BACKOFF_MAX_EXPONENT = 7
BACKOFF_CAP_MS = 3_600_000

STREAM_WAITS_IN = (Phase.PUSHING, Phase.TOOLS, Phase.GUARD, Phase.RECONNECTING)
"""The phases whose table rows defer stream events (a test holds the table to it): a replayed
event that finds the session in one waits too."""


def reconnect_backoff_ms(attempt: int) -> int:
    """Delay before reconnect attempt ``attempt`` (0-based): 500 ms doubling, capped (R-12)."""
    return min(BACKOFF_BASE_MS * (1 << min(attempt, BACKOFF_MAX_EXPONENT)), BACKOFF_CAP_MS)


def _closed() -> SessionError:
    # S-25 Better: a clean close without a terminal is a drop, not "nothing".
    return StreamDropped(detail="server closed the stream", clean_close=True)


def on_stream_closed(s: State, ev: StreamClosed) -> Step:
    done = stream_lifecycle(s, "rma.stream.done")
    s, commands = stream_lost(s, _closed())
    return s, (done, *commands)


def on_stream_failed(s: State, ev: StreamFailed) -> Step:
    failed = stream_lifecycle(s, "rma.stream.error", reason=ev.error.kind)
    s, commands = stream_lost(s, ev.error)
    return s, (failed, *commands)


def on_stream_closed_at_rest(s: State, ev: StreamClosed) -> Step:
    """BACKOFF or IDLE: no turn was in flight on this stream (see ``stream_lost_at_rest``)."""
    done = stream_lifecycle(s, "rma.stream.done")
    s, commands = stream_lost_at_rest(s, _closed())
    return s, (done, *commands)


def on_stream_failed_at_rest(s: State, ev: StreamFailed) -> Step:
    failed = stream_lifecycle(s, "rma.stream.error", reason=ev.error.kind)
    s, commands = stream_lost_at_rest(s, ev.error)
    return s, (failed, *commands)


def stream_lost(s: State, error: SessionError) -> Step:
    """A turn's stream (or the one a kickoff waits for) is gone: reconnect, or end the request."""
    if not s.config.live:
        # R-14 Better: a sync run reconnects like a live session, within a bound.
        if not worth_reconnecting(error):
            return fail(s, error)
        mark = (s.turns, len(s.turn_events))
        losses = 0 if mark > s.progress_mark else s.losses_in_a_row
        s = evolve(s, losses_in_a_row=losses, progress_mark=max(mark, s.progress_mark))
        if losses >= SYNC_RECONNECT_ATTEMPTS:
            return fail(s, gave_up(error, losses))
        s = evolve(s, losses_in_a_row=losses + 1, last_loss=error)
    return schedule_reconnect(s, error)


def stream_lost_at_rest(s: State, error: SessionError) -> Step:
    """A live session keeps a stream open between requests, so it reconnects; a sync run has
    its result already (IDLE) or a reconnect coming (BACKOFF)."""
    if not s.config.live:
        return s, ()
    return schedule_reconnect(s, error)


def schedule_reconnect(s: State, error: SessionError | None) -> Step:
    attempt = s.reconnect_attempts
    delay = reconnect_backoff_ms(attempt)
    # What the open turn said live is void: the reconnect re-folds the turn's events.
    s, discarded = discard_live(s, attempt, None if error is None else error.kind)
    # The dead stream's generation ends here: anything it still delivers is stale (S-24).
    s = evolve(s, phase=Phase.BACKOFF, reconnect_attempts=attempt + 1, gen=s.gen + 1, turn_events=AppendLog())
    fields: dict[str, JSON] = {"attempt": attempt, "delay_ms": delay}
    if error is not None:
        fields["error"] = error.kind
    return s, (
        *discarded,
        Log("warning", f"stream lost; reconnecting in {delay} ms", fields),
        ScheduleReconnect(delay, attempt),
    )


def on_timer_fired(s: State, ev: ReconnectTimerFired) -> Step:
    return evolve(s, phase=Phase.RECONNECTING), (Reconnect(s.gen, s.seen.ids()),)


def _settled_phase(s: State) -> Phase:
    if not s.kicked_off:
        return Phase.CONNECTING
    return Phase.AWAITING if s.request_open else Phase.IDLE


def on_reconnect_finished(s: State, ev: ReconnectFinished) -> Step:
    if isinstance(ev.outcome, Failure):
        error = ev.outcome.failure()
        if not s.config.live:
            # a definite answer ends a sync run; a transient one is another attempt.
            if not worth_reconnecting(error):
                return fail(s, error)
            if s.losses_in_a_row >= SYNC_RECONNECT_ATTEMPTS:
                return fail(s, gave_up(error, s.losses_in_a_row))
            s = evolve(s, losses_in_a_row=s.losses_in_a_row + 1, last_loss=error)
        return schedule_reconnect(s, error)
    r = ev.outcome.unwrap()
    was_resuming = s.resuming
    s = evolve(
        s,
        session_id=r.session_id,
        seen=SeenIds(window=s.config.seen_window).union(r.seen),
        turn_events=AppendLog(),
        resuming=False,
        phase=_settled_phase(s),
    )
    out: list[Command] = []
    turns_before = s.turns
    # R-18 Better: what happened while disconnected goes through the normal path.
    for i, raw in enumerate(r.replay):
        if s.phase is Phase.DONE:
            return s, tuple(out)
        if s.phase in STREAM_WAITS_IN:
            rest = tuple(StreamEvent(s.gen, e) for e in r.replay[i:])
            return evolve(s, deferred=(*rest, *s.deferred)), tuple(out)
        s, more = receive(s, raw)
        out.extend(more)
    if s.turns != turns_before or s.phase not in (Phase.AWAITING, Phase.IDLE, Phase.CONNECTING):
        return s, tuple(out)  # the replay completed a turn; it drove the session on
    if r.pending:
        # R-4 with R-5 Better: a redrive is reported and accumulated like S-52 recovery.
        out.extend(tool_uses(s, r.pending))
        s = evolve(s, acc=s.acc.add_new_tool_uses(r.pending), request_open=True, phase=Phase.AWAITING)
        if exceeds_max_turns(s):
            s, more = max_turns_error(s, TurnResult(terminal=Terminal.REQUIRES_ACTION))
            return s, (*out, *more)
        return run_tools(s, r.pending, out)
    if s.pending_message is not None and r.idle:  # R-6; R-9: nothing pending and the host idle
        s, more = deliver_message(s, s.pending_message)
        return s, (*out, *more)
    if was_resuming and r.idle and not s.config.live:
        # R-10 Better: a sync reattach with nothing to do returns at once.
        tr = TurnResult(terminal=Terminal.END_TURN, stop_reason=None)
        s, more = finish(s, tr, reason="resumed_idle")
        return s, (*out, *more)
    if was_resuming and r.idle:
        s = evolve(s, request_open=False, phase=Phase.IDLE)
    elif (
        r.idle
        and not s.config.live
        and s.request_open
        and s.phase is Phase.AWAITING
        and not any(isinstance(d, StreamEvent) for d in s.deferred)
    ):
        # S-25 Better, after R-14 Better: the host is idle and nothing replayed ends the
        # request, so nothing ever will; fail now rather than at the run's timeout.
        s, more = fail(s, no_terminal_coming(s.last_loss))
        return s, (*out, *more)
    return s, tuple(out)  # park
