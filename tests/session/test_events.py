"""Event observation through run(): handle_event shapes, live vs batch, deltas, dedupe (E-1…E-12, S-89)."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import anyio
import pytest
import trio
import trio.testing
from returns.result import Success

from rma.codec_json import dumps
from rma.provider import codec_for
from rma.replay import replay_lines
from rma.session.commands import DeliverEvent
from rma.vocabulary import TEXT_DELTA_TYPE, SessionInfo
from rma_shell import Telemetry, run
from rma_shell.providers.base import LiveSink, PollOutcome
from rma_shell.testing.scripted import ScriptedConn, ScriptedProvider
from tests.helpers import calls, end, idle, text, tool, usage


def _delta(t: str) -> dict[str, Any]:
    return {"type": TEXT_DELTA_TYPE, "text": t}


def _with_deltas(events: list[Any]) -> list[Any]:
    """What the handler should see for ``events``: each text event followed by its delta (E-9)."""
    out: list[Any] = []
    for ev in events:
        out.append(ev)
        if isinstance(ev, dict) and ev.get("type") == "text" and ev.get("text"):
            out.append(_delta(ev["text"]))
    return out


class Observer:
    """handle_tool_call + handle_event(event, ctx, info)."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.infos: list[Any] = []
        self.ctxs: list[Any] = []

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any) -> str:
        return f"ok:{name}"

    def handle_event(self, event: Any, ctx: Any, info: SessionInfo) -> None:
        self.events.append(event)
        self.ctxs.append(ctx)
        self.infos.append(info)


# ── E-1 / E-2: who receives events ─────────────────────────────────────────────────


async def test_E1_handle_event_with_3_args_gets_session_info() -> None:
    h = Observer()
    outcome = await run(ScriptedProvider([end("hi")], streaming=True), handler=h, prompt="go", context="C")
    assert isinstance(outcome, Success), outcome
    assert h.events
    assert all(isinstance(i, SessionInfo) and i.session_id == "sess_scripted" for i in h.infos)
    assert all(i.provider == "scripted-streaming" for i in h.infos)
    assert set(h.ctxs) == {"C"}


async def test_E1_handle_event_with_2_args_gets_no_info() -> None:
    seen: list[tuple[Any, ...]] = []

    class TwoArgs:
        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any) -> str:
            return "ok"

        def handle_event(self, event: Any, ctx: Any) -> None:
            seen.append((event, ctx))

    turn = end("hi")
    outcome = await run(ScriptedProvider([turn]), handler=TwoArgs(), prompt="go", context="C")
    assert isinstance(outcome, Success), outcome
    assert seen == [(ev, "C") for ev in _with_deltas(turn)]


async def test_E1_async_handle_event_is_awaited_and_its_return_ignored() -> None:
    seen: list[Any] = []

    class AsyncObserver:
        async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any) -> str:
            return "ok"

        async def handle_event(self, event: Any, ctx: Any, info: SessionInfo) -> str:
            await anyio.lowlevel.checkpoint()
            seen.append(event)
            return "ignored"

    turn = end("hi")
    outcome = await run(ScriptedProvider([turn], streaming=True), handler=AsyncObserver(), prompt="go")
    assert isinstance(outcome, Success), outcome
    assert seen == _with_deltas(turn)


async def test_E2_plain_callable_handlers_get_no_events() -> None:
    tool_calls: list[str] = []

    def handler(name: str, input: dict[str, Any], ctx: Any) -> str:
        tool_calls.append(name)
        return "ok"

    for streaming in (False, True):
        provider = ScriptedProvider([calls(tool("t", "t1")), end()], streaming=streaming)
        outcome = await run(provider, handler=handler, prompt="go")
        assert isinstance(outcome, Success), outcome
    assert tool_calls == ["t", "t"]


# ── E-3: streaming forwarding ──────────────────────────────────────────────────────


async def test_E3_streaming_each_fresh_event_forwarded_once_in_order() -> None:
    turn1 = [text("let me look"), *calls(tool("lookup", "t1"))]
    turn2 = end("answer")
    h = Observer()
    outcome = await run(ScriptedProvider([turn1, turn2], streaming=True), handler=h, prompt="go")
    assert isinstance(outcome, Success), outcome
    assert h.events == _with_deltas(turn1 + turn2)


async def test_E3_events_are_forwarded_on_arrival_before_the_boundary(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The handler sees an event while the turn is still open (no boundary yet)."""
    provider = ScriptedProvider([[text("partial")]], streaming=True)
    got_it = anyio.Event()

    class Watching(Observer):
        def handle_event(self, event: Any, ctx: Any, info: SessionInfo) -> None:
            super().handle_event(event, ctx, info)
            got_it.set()

    w = Watching()

    async def finish_later() -> None:
        with anyio.fail_after(5):
            await got_it.wait()
        assert w.events[0]["text"] == "partial"
        provider.emit(idle("end_turn"))

    async with anyio.create_task_group() as nursery:
        nursery.start_soon(finish_later)
        outcome = await run(provider, handler=w, prompt="go")
    assert isinstance(outcome, Success), outcome
    assert outcome.unwrap().text == "partial"


# ── E-4 / E-5 / E-6: request/response live events ─────────────────────────────────


async def test_E4_E5_live_events_forwarded_once_not_again_in_batch() -> None:
    turn1 = [text("thinking"), *calls(tool("lookup", "t1"))]
    turn2 = end("done")
    h = Observer()
    provider = ScriptedProvider([turn1, turn2], live_events=True)
    outcome = await run(provider, handler=h, prompt="go")
    assert isinstance(outcome, Success), outcome
    assert h.events == _with_deltas(turn1 + turn2)  # each exactly once


async def test_E5_batch_delivery_when_nothing_went_out_live() -> None:
    turn1 = calls(tool("lookup", "t1"))
    turn2 = end("done")
    h = Observer()
    outcome = await run(ScriptedProvider([turn1, turn2]), handler=h, prompt="go")
    assert isinstance(outcome, Success), outcome
    assert h.events == _with_deltas(turn1 + turn2)


class _GatedLiveProvider(ScriptedProvider):
    """Request/response host whose poll does not return until the handler saw its live events."""

    def __init__(self, *args: Any, gate: anyio.Event, **kw: Any) -> None:
        super().__init__(*args, live_events=True, **kw)
        self.gate = gate

    async def poll_turn(
        self, conn: ScriptedConn, input: Any, live: LiveSink | None
    ) -> PollOutcome[ScriptedConn]:
        outcome = await super().poll_turn(conn, input, live)
        with anyio.fail_after(5):
            await self.gate.wait()  # a TooSlowError here would fail the turn
        self.gate = anyio.Event()
        return outcome


async def test_E4_live_events_are_forwarded_immediately_while_the_poll_is_in_flight(
    autojump_clock: trio.testing.MockClock,
) -> None:
    turn = end("hi")
    holder: dict[str, _GatedLiveProvider] = {}

    class Opener(Observer):
        def handle_event(self, event: Any, ctx: Any, info: SessionInfo) -> None:
            super().handle_event(event, ctx, info)
            holder["p"].gate.set()

    h = Opener()
    provider = _GatedLiveProvider([turn], gate=anyio.Event())
    holder["p"] = provider
    outcome = await run(provider, handler=h, prompt="go")
    assert isinstance(outcome, Success), outcome
    assert h.events == _with_deltas(turn)


async def test_E4_M4_live_events_emit_stream_telemetry_with_type() -> None:
    seen: list[dict[str, Any]] = []
    tel = Telemetry()
    tel.attach("s", "rma.stream.event", lambda n, m, md: seen.append(dict(md)))
    turn = [{"contentBlockDelta": {"delta": {"text": "x"}}}, "ping", *end("hi")]
    outcome = await run(
        ScriptedProvider([turn], live_events=True), handler=Observer(), prompt="go", telemetry=tel
    )
    assert isinstance(outcome, Success), outcome
    assert [md["type"] for md in seen] == ["contentBlockDelta", None, "text", "usage", "idle"]
    assert all(md["session_id"] == "sess_scripted" for md in seen)


@pytest.mark.parametrize("live", [True, False])
async def test_E6_a_non_dict_live_event_does_not_crash(live: bool) -> None:
    turn = ["keepalive", 42, None, ["a"], *end("fine")]
    h = Observer()
    outcome = await run(ScriptedProvider([turn], live_events=live), handler=h, prompt="go")
    assert isinstance(outcome, Success), outcome
    r = outcome.unwrap()
    assert r.text == "fine"
    assert list(r.events) == turn
    assert h.events == _with_deltas(turn)


async def test_E6_a_non_dict_stream_event_does_not_crash() -> None:
    turn = ["keepalive", 7, *end("fine")]
    h = Observer()
    outcome = await run(ScriptedProvider([turn], streaming=True), handler=h, prompt="go")
    assert isinstance(outcome, Success), outcome
    assert list(outcome.unwrap().events) == turn
    assert h.events == _with_deltas(turn)


# ── E-8: the canonical record ──────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("streaming", "live"), [(False, False), (False, True), (True, False)], ids=["batch", "live", "streaming"]
)
async def test_E8_result_events_hold_every_event_verbatim_once(streaming: bool, live: bool) -> None:
    turn1 = [
        text("a"),
        {"type": "vendor.extra", "nested": {"k": [1, 2]}, "id": "x1"},
        *calls(tool("t", "t1")),
    ]
    turn2 = end("b")
    provider = ScriptedProvider([turn1, turn2], streaming=streaming, live_events=live)
    outcome = await run(provider, handler=Observer(), prompt="go")
    assert isinstance(outcome, Success), outcome
    assert list(outcome.unwrap().events) == turn1 + turn2


# ── E-9: text deltas ───────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("streaming", "live"), [(False, False), (False, True), (True, False)], ids=["batch", "live", "streaming"]
)
async def test_E9_text_delta_follows_its_raw_event_and_is_never_stored(streaming: bool, live: bool) -> None:
    first, second, empty = text("Hel"), text("lo"), text("")
    turn = [first, second, empty, usage(1, 1), idle("end_turn")]
    h = Observer()
    outcome = await run(
        ScriptedProvider([turn], streaming=streaming, live_events=live), handler=h, prompt="go"
    )
    assert isinstance(outcome, Success), outcome
    assert h.events == [first, _delta("Hel"), second, _delta("lo"), empty, *turn[3:]]  # no delta for ""
    r = outcome.unwrap()
    assert all(not (isinstance(e, dict) and e.get("type") == TEXT_DELTA_TYPE) for e in r.events)
    assert list(r.events) == turn
    assert r.text == "Hello"


# ── E-11: dedupe by id ─────────────────────────────────────────────────────────────


async def test_E11_streaming_events_with_a_seen_id_are_skipped_entirely() -> None:
    a = text("once", id="ev-a")
    tail = end("x")
    turn = [a, dict(a), {"type": "note", "id": "ev-b"}, {"type": "note", "id": "ev-b"}, "anon", "anon", *tail]
    h = Observer()
    outcome = await run(ScriptedProvider([turn], streaming=True), handler=h, prompt="go")
    assert isinstance(outcome, Success), outcome
    expected = [a, {"type": "note", "id": "ev-b"}, "anon", "anon", *tail]
    assert list(outcome.unwrap().events) == expected  # not accumulated twice
    assert h.events == _with_deltas(expected)  # not forwarded twice
    assert outcome.unwrap().text == "oncex"


async def test_E11_a_non_string_id_is_never_deduplicated() -> None:
    dup = {"type": "note", "id": 7}
    turn = [dup, dict(dup), *end()]
    h = Observer()
    outcome = await run(ScriptedProvider([turn], streaming=True), handler=h, prompt="go")
    assert isinstance(outcome, Success), outcome
    assert list(outcome.unwrap().events) == turn


# ── S-89: a raising observer is isolated ───────────────────────────────────────────


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("is_async", [False, True])
async def test_S89_raising_handle_event_is_logged_and_the_run_succeeds(
    caplog: pytest.LogCaptureFixture, streaming: bool, is_async: bool
) -> None:
    tool_calls: list[str] = []

    class Sync:
        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any) -> str:
            tool_calls.append(name)
            return "ok"

        def handle_event(self, event: Any, ctx: Any) -> None:
            raise RuntimeError("observer broke")

    class Async(Sync):
        async def handle_event(self, event: Any, ctx: Any) -> None:  # type: ignore[override]
            await anyio.lowlevel.checkpoint()
            raise RuntimeError("observer broke")

    provider = ScriptedProvider([calls(tool("t", "t1")), end("done")], streaming=streaming)
    with caplog.at_level(logging.ERROR, logger="rma.handler"):
        outcome = await run(provider, handler=Async() if is_async else Sync(), prompt="go")
    assert isinstance(outcome, Success), outcome
    r = outcome.unwrap()
    assert (r.text, r.turns) == ("done", 2)
    assert tool_calls == ["t"]
    records = [rec for rec in caplog.records if rec.name == "rma.handler"]
    assert records and all("handle_event" in rec.getMessage() for rec in records)
    assert all(rec.exc_info and "observer broke" in str(rec.exc_info[1]) for rec in records)


class ToolsOnly:
    """A handler with no handle_event: nothing consumes the event stream."""

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any) -> str:
        return f"ok:{name}"


@pytest.mark.parametrize("streaming", [True, False])
async def test_without_handle_event_the_core_builds_no_deliveries_and_loses_nothing(streaming: bool) -> None:
    seen: list[dict[str, Any]] = []
    tel = Telemetry()
    tel.attach("s", "rma.stream.event", lambda n, m, md: seen.append(dict(md)))
    turns = [[text("a"), *calls(tool("lookup", "t1", q=1))], end("done")]
    recording = io.StringIO()
    outcome = await run(
        ScriptedProvider(turns, streaming=streaming),
        handler=ToolsOnly(),
        prompt="go",
        telemetry=tel,
        record=recording,
    )
    assert isinstance(outcome, Success), outcome
    assert outcome.unwrap().text == "done"
    assert [u.name for u in outcome.unwrap().custom_tool_uses] == ["lookup"]
    header = json.loads(recording.getvalue().splitlines()[0])
    assert header["config"]["deliver_events"] is False
    if streaming:  # telemetry still sees every streamed event
        assert [md["type"] for md in seen] == [e["type"] for turn in turns for e in turn]
    replayed = replay_lines(recording.getvalue().splitlines(), codec_for).unwrap()
    assert [dumps(r) for r in replayed.results] == [dumps(outcome)]
    assert not any(isinstance(c, DeliverEvent) for c in replayed.commands)
