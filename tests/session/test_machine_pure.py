"""The machine driven directly, without a shell (R-13, R-18 core, S-24, S-91)."""

from __future__ import annotations

from returns.result import Success

from rma.errors import StreamDropped
from rma.providers.scripted import ScriptedStreamingCodec
from rma.session import commands as c
from rma.session.events import (
    Opened,
    PushFinished,
    Reconnected,
    ReconnectFinished,
    ReconnectTimerFired,
    StreamConnected,
    StreamEvent,
    StreamFailed,
    ToolsFinished,
)
from rma.session.machine import Phase, State, initial_state, step
from rma.session.options import SessionConfig
from rma.vocabulary import ToolResult


def live_streaming() -> State:
    s = initial_state(SessionConfig(codec=ScriptedStreamingCodec(), live=True, prompt="go"))
    s, _ = step(s, Opened("s1"))
    s, out = step(s, StreamConnected(0))
    assert isinstance(out[0], c.PushInput)
    s, _ = step(s, PushFinished(Success(None)))
    return s


def test_R18_Better_events_listed_on_reconnect_are_folded_through_the_normal_path() -> None:
    s = live_streaming()
    s, out = step(s, StreamFailed(0, StreamDropped()))
    assert any(isinstance(x, c.ScheduleReconnect) for x in out)
    s, out = step(s, ReconnectTimerFired())
    assert out == (c.Reconnect(1, ()),)
    replay = (
        {"type": "text", "text": "while away", "id": "x1"},
        {"type": "idle", "stop_reason": "end_turn", "id": "x2"},
    )
    s, out = step(s, ReconnectFinished(Success(Reconnected("s1", seen=("k0",), replay=replay))))
    finishes = [x for x in out if isinstance(x, c.Finish)]
    assert len(finishes) == 1
    result = finishes[0].outcome.unwrap()
    assert result.text == "while away" and list(result.events) == list(replay)
    assert "x1" in s.seen and "k0" in s.seen


def test_S24_events_from_an_older_stream_generation_are_ignored() -> None:
    s = live_streaming()
    s, _ = step(s, StreamFailed(0, StreamDropped()))
    before = s
    s, out = step(s, StreamEvent(0, {"type": "idle", "stop_reason": "end_turn", "id": "late"}))
    assert (s, out) == (before, ())


def test_R13_the_attempt_counter_escalates_across_flaps_and_resets_on_a_terminal() -> None:
    s = live_streaming()
    delays = []
    for _ in range(3):
        s, out = step(s, StreamFailed(s.gen, StreamDropped()))
        delays += [x.delay_ms for x in out if isinstance(x, c.ScheduleReconnect)]
        s, _ = step(s, ReconnectTimerFired())
        s, _ = step(s, ReconnectFinished(Success(Reconnected("s1"))))
        s, _ = step(s, StreamConnected(s.gen))  # connected again: no reset
    assert delays == [500, 1000, 2000]
    s, out = step(s, StreamEvent(s.gen, {"type": "idle", "stop_reason": "end_turn", "id": "z"}))
    assert any(isinstance(x, c.Finish) for x in out)
    assert s.reconnect_attempts == 0


def test_S91_stream_events_during_tools_wait_and_form_the_next_turn() -> None:
    s = live_streaming()
    s, out = step(s, StreamEvent(0, {"type": "tool_use", "id": "t1", "name": "a", "input": {}}))
    s, out = step(s, StreamEvent(0, {"type": "idle", "stop_reason": "requires_action", "id": "i1"}))
    run = next(x for x in out if isinstance(x, c.RunTools))
    assert s.phase is Phase.TOOLS
    early = {"type": "text", "text": "next", "id": "n1"}
    s, out = step(s, StreamEvent(0, early))
    assert out == () and s.deferred  # not delivered while tools run
    s, out = step(s, ToolsFinished(run.batch, (ToolResult("t1", "ok"),)))
    assert isinstance(out[0], c.PushInput) and s.phase is Phase.PUSHING
    s, out = step(s, PushFinished(Success(None)))
    assert c.DeliverEvent(early) in out  # replayed once the push is accepted
    assert s.turn_events.to_tuple() == (early,)


def test_R17_Better_the_dedupe_memory_is_a_bounded_window() -> None:
    from rma._persistent import SeenIds

    seen = SeenIds(window=100)
    for i in range(1000):
        seen = seen.add(f"e{i}")
    assert len(seen) == 100
    assert "e999" in seen and "e900" in seen and "e899" not in seen
    assert len(seen.ids()) == 100
