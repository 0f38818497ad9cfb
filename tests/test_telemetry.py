"""Telemetry: the dispatcher (M-10) and what sessions emit through it (M-4…M-8, T-9, T-11, S-16)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing
from returns.result import Failure, Success

import rma_shell
from rma.errors import MaxTurnsExceeded, ProviderError, Timeout
from rma_shell import Telemetry, run
from rma_shell.telemetry import default as default_telemetry
from rma_shell.testing.scripted import ScriptedProvider
from tests.helpers import Recorder, calls, end, text, tool

Emitted = tuple[str, dict[str, Any], dict[str, Any]]


class Collector:
    def __init__(self) -> None:
        self.events: list[Emitted] = []

    def __call__(self, name: str, measurements: Any, metadata: Any) -> None:
        self.events.append((name, dict(measurements), dict(metadata)))

    def named(self, name: str) -> list[Emitted]:
        return [e for e in self.events if e[0] == name]

    def names(self) -> list[str]:
        return [e[0] for e in self.events]


def _sans_session_id(md: dict[str, Any]) -> dict[str, Any]:
    """Metadata without ``session_id`` (the terminal event adds the session id itself)."""
    return {k: v for k, v in md.items() if k != "session_id"}


def _collect(tel: Telemetry, names: Any = "rma.*") -> Collector:
    c = Collector()
    tel.attach(f"collector-{id(c)}", names, c)
    return c


# ── the dispatcher (M-10) ──────────────────────────────────────────────────────────


def test_M10_attach_emit_detach() -> None:
    tel = Telemetry()
    assert not tel.listening()
    c = Collector()
    tel.attach("c", "rma.tool.stop", c)
    assert tel.listening()
    tel.emit("rma.tool.stop", {"duration": 1.0}, {"tool": "x"})
    assert c.events == [("rma.tool.stop", {"duration": 1.0}, {"tool": "x"})]
    assert tel.detach("c") is True
    assert tel.detach("c") is False
    tel.emit("rma.tool.stop", {}, {})
    assert len(c.events) == 1
    assert not tel.listening()


def test_M10_attach_twice_under_one_id_is_refused() -> None:
    tel = Telemetry()
    tel.attach("c", "rma.*", Collector())
    with pytest.raises(ValueError, match="already attached"):
        tel.attach("c", "rma.*", Collector())


def test_M10_exact_names_prefix_patterns_and_lists() -> None:
    tel = Telemetry()
    exact, prefix, many, everything = Collector(), Collector(), Collector(), Collector()
    tel.attach("exact", "rma.tool.start", exact)
    tel.attach("prefix", "rma.tool.*", prefix)
    tel.attach("many", ["rma.session.terminal", "rma.stream.*"], many)
    tel.attach("all", "*", everything)
    for name in (
        "rma.tool.start",
        "rma.tool.stop",
        "rma.session.terminal",
        "rma.stream.event",
        "rma.toolbox",
    ):
        tel.emit(name, {}, {})
    assert exact.names() == ["rma.tool.start"]
    assert prefix.names() == ["rma.tool.start", "rma.tool.stop"]  # not "rma.toolbox"
    assert many.names() == ["rma.session.terminal", "rma.stream.event"]
    assert len(everything.events) == 5


def test_M10_a_raising_subscriber_is_detached_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    tel = Telemetry()
    calls_: list[str] = []

    def broken(name: str, m: Any, md: Any) -> None:
        calls_.append(name)
        raise RuntimeError("metrics backend down")

    good = Collector()
    tel.attach("broken", "rma.*", broken)
    tel.attach("good", "rma.*", good)
    with caplog.at_level(logging.ERROR, logger="rma.telemetry"):
        for _ in range(3):
            tel.emit("rma.tool.start", {}, {})
    assert calls_ == ["rma.tool.start"]  # called once, then detached
    assert len(good.events) == 3  # the others keep receiving, even the first event
    records = [r for r in caplog.records if r.name == "rma.telemetry"]
    assert len(records) == 1
    assert "broken" in records[0].getMessage() and records[0].exc_info is not None
    assert tel.detach("broken") is False


def test_M10_listening_to_a_name_follows_attach_detach_and_a_detached_raiser() -> None:
    tel = Telemetry()
    assert not tel.listening() and not tel.listening("rma.stream.event")
    tel.attach("tools", "rma.tool.*", Collector())
    assert tel.listening() and tel.listening("rma.tool.start")
    assert not tel.listening("rma.stream.event")

    def broken(name: str, m: Any, md: Any) -> None:
        raise RuntimeError("down")

    tel.attach("all", ["rma.stream.event", "rma.turn.*"], broken)
    assert tel.listening("rma.stream.event") and tel.listening("rma.turn.stop")
    tel.emit("rma.stream.event", {}, {})  # raises, so it is detached
    assert not tel.listening("rma.stream.event")
    assert tel.detach("tools") and not tel.listening("rma.tool.start")


def test_M10_span_start_stop_and_exception() -> None:
    tel = Telemetry()
    c = _collect(tel)
    with tel.span("rma.thing", {"k": 1}) as extra:
        extra["status"] = 200
    with pytest.raises(KeyError), tel.span("rma.thing", {"k": 2}):
        raise KeyError("x")
    assert c.names() == ["rma.thing.start", "rma.thing.stop", "rma.thing.start", "rma.thing.exception"]
    (_, m0, md0), (_, m1, md1), _, (_, m3, md3) = c.events
    assert "system_time" in m0 and md0 == {"k": 1}
    assert m1["duration"] >= 0 and md1 == {"k": 1, "status": 200}
    assert m3["duration"] >= 0 and md3 == {"k": 2, "kind": "KeyError"}


def test_secret_metadata_keys_never_reach_subscribers() -> None:
    tel = Telemetry()
    c = _collect(tel)
    tel.emit("rma.x", {}, {"api_key": "sk-1", "Authorization": "Bearer x", "tenant": "acme"})
    assert c.events == [("rma.x", {}, {"tenant": "acme"})]


def test_module_level_attach_detach_use_the_default_dispatcher() -> None:
    c = Collector()
    rma_shell.attach("test-module-level", "rma.test.only", c)
    try:
        default_telemetry.emit("rma.test.only", {}, {"a": 1})
    finally:
        assert rma_shell.detach("test-module-level") is True
    assert c.events == [("rma.test.only", {}, {"a": 1})]


# ── sessions through the dispatcher ────────────────────────────────────────────────


async def test_M10_a_raising_subscriber_never_breaks_a_session(caplog: pytest.LogCaptureFixture) -> None:
    tel = Telemetry()
    hits: list[str] = []

    def broken(name: str, m: Any, md: Any) -> None:
        hits.append(name)
        raise RuntimeError("boom")

    tel.attach("broken", "rma.*", broken)
    good = _collect(tel)
    provider = ScriptedProvider([calls(tool("a", "t1")), end("ok")], streaming=True)
    with caplog.at_level(logging.ERROR, logger="rma.telemetry"):
        outcome = await run(provider, handler=Recorder(), prompt="go", telemetry=tel)
    assert isinstance(outcome, Success), outcome
    assert outcome.unwrap().text == "ok"
    assert len(hits) == 1
    assert len([r for r in caplog.records if r.name == "rma.telemetry"]) == 1
    assert "rma.session.terminal" in good.names()  # the session went on emitting


@pytest.mark.parametrize("streaming", [False, True])
async def test_M8_telemetry_metadata_on_every_session_tool_and_stream_event(streaming: bool) -> None:
    tel = Telemetry()
    c = _collect(tel)
    provider = ScriptedProvider(
        [calls(tool("a", "t1")), end("ok")], streaming=streaming, live_events=not streaming
    )
    outcome = await run(
        provider,
        handler=Recorder(),
        prompt="go",
        telemetry=tel,
        metadata={"tenant": "acme", "run": 7},
    )
    assert isinstance(outcome, Success), outcome
    names = set(c.names())
    assert {"rma.session.tool_uses", "rma.session.terminal", "rma.tool.start", "rma.tool.stop"} <= names
    assert "rma.stream.event" in names
    scoped = [e for e in c.events if e[0].startswith(("rma.session.", "rma.tool.", "rma.stream."))]
    assert scoped
    for name, _, md in scoped:
        assert md["tenant"] == "acme" and md["run"] == 7, name


async def test_M8_library_keys_win_over_caller_metadata() -> None:
    tel = Telemetry()
    c = _collect(tel)
    clash = {k: "caller" for k in ("session_id", "tool", "tool_use_id", "turn", "tool_use_ids", "terminal")}
    clash |= {"type": "caller", "is_error": "caller"}
    provider = ScriptedProvider([calls(tool("a", "t1")), end("ok")], streaming=True)
    outcome = await run(provider, handler=Recorder(), prompt="go", telemetry=tel, metadata=clash)
    assert isinstance(outcome, Success), outcome
    [(_, _, start)] = c.named("rma.tool.start")
    assert (start["tool"], start["tool_use_id"], start["session_id"]) == ("a", "t1", "sess_scripted")
    [(_, _, stop)] = c.named("rma.tool.stop")
    assert stop["is_error"] is False
    uses = [md for _, _, md in c.named("rma.session.tool_uses")]
    assert [md["turn"] for md in uses] == [1, 2]
    assert [md["tool_use_ids"] for md in uses] == [["t1"], []]
    assert all(md["session_id"] == "sess_scripted" for md in uses)
    streams = [md for _, _, md in c.named("rma.stream.event")]
    assert all(md["type"] != "caller" and md["session_id"] == "sess_scripted" for md in streams)
    [(_, _, terminal)] = c.named("rma.session.terminal")
    assert terminal["terminal"] == "end_turn"


async def test_M8_session_terminal_reports_the_real_session_id() -> None:
    tel = Telemetry()
    c = _collect(tel, "rma.session.terminal")
    outcome = await run(
        ScriptedProvider([end()]),
        handler=Recorder(),
        prompt="go",
        telemetry=tel,
        metadata={"session_id": "x"},
    )
    assert isinstance(outcome, Success), outcome
    [(_, _, md)] = c.events
    assert md["session_id"] == "sess_scripted"


async def test_S16_model_config_metadata_merges_and_wins_over_telemetry_metadata() -> None:
    tel = Telemetry()
    c = _collect(tel)
    outcome = await run(
        ScriptedProvider([calls(tool("a", "t1")), end()]),
        handler=Recorder(),
        prompt="go",
        telemetry=tel,
        metadata={"a": 1, "b": 1},
        model_config={"model": "m", "metadata": {"b": 2, "c": 3}},
    )
    assert isinstance(outcome, Success), outcome
    scoped = [md for name, _, md in c.events if name.startswith(("rma.session.", "rma.tool."))]
    assert len(scoped) >= 5
    for md in scoped:
        assert (md["a"], md["b"], md["c"]) == (1, 2, 3)


# ── M-7: session terminal ──────────────────────────────────────────────────────────


@pytest.mark.parametrize("streaming", [False, True])
async def test_M7_terminal_fires_once_on_finish_with_the_terminal(streaming: bool) -> None:
    tel = Telemetry()
    c = _collect(tel, "rma.session.terminal")
    outcome = await run(
        ScriptedProvider([end()], streaming=streaming),
        handler=Recorder(),
        prompt="go",
        telemetry=tel,
        metadata={"tenant": "acme"},
    )
    assert isinstance(outcome, Success), outcome
    [(_, m, md)] = c.events
    assert m == {}
    assert _sans_session_id(md) == {"tenant": "acme", "terminal": "end_turn"}


async def test_M7_Better_terminal_fires_on_error_endings_with_the_error_kind() -> None:
    tel = Telemetry()
    c = _collect(tel, "rma.session.terminal")
    outcome = await run(
        ScriptedProvider([calls(tool("a", "t1")), end()]),
        handler=Recorder(),
        prompt="go",
        telemetry=tel,
        max_turns=1,
    )
    assert isinstance(outcome.failure(), MaxTurnsExceeded)
    assert [(m, _sans_session_id(md)) for _, m, md in c.events] == [
        ({}, {"terminal": "error", "error": "max_turns_exceeded"})
    ]

    c.events.clear()
    outcome = await run(
        ScriptedProvider([]), handler=Recorder(), prompt="go", telemetry=tel
    )  # script exhausted
    assert isinstance(outcome.failure(), ProviderError)
    assert [(m, _sans_session_id(md)) for _, m, md in c.events] == [
        ({}, {"terminal": "error", "error": "provider_error"})
    ]


async def test_M7_Better_terminal_fires_on_timeout(autojump_clock: trio.testing.MockClock) -> None:
    tel = Telemetry()
    c = _collect(tel, "rma.session.terminal")
    outcome = await run(
        ScriptedProvider([end()], turn_delay=100), handler=Recorder(), prompt="go", telemetry=tel, timeout=1
    )
    assert outcome == Failure(Timeout(timeout_s=1, remote_stop="not_needed"))
    assert [_sans_session_id(md) for _, _, md in c.events] == [{"terminal": "error", "error": "timeout"}]


# ── M-5 / T-9: tool spans ──────────────────────────────────────────────────────────


async def test_M5_T9_tool_start_stop_with_duration_and_is_error() -> None:
    tel = Telemetry()
    c = _collect(tel, "rma.tool.*")

    def handler(name: str, input: dict[str, Any], ctx: Any) -> Any:
        return Failure("bad input") if name == "fails" else "fine"

    provider = ScriptedProvider([calls(tool("works", "t1"), tool("fails", "t2")), end()])
    outcome = await run(provider, handler=handler, prompt="go", telemetry=tel, metadata={"tenant": "a"})
    assert isinstance(outcome, Success), outcome
    starts = {md["tool"]: (m, md) for name, m, md in c.events if name == "rma.tool.start"}
    stops = {md["tool"]: (m, md) for name, m, md in c.events if name == "rma.tool.stop"}
    assert set(starts) == set(stops) == {"works", "fails"}
    for tool_name, tool_id in (("works", "t1"), ("fails", "t2")):
        m, md = starts[tool_name]
        assert isinstance(m["system_time"], float)
        assert md == {"tenant": "a", "tool": tool_name, "tool_use_id": tool_id, "session_id": "sess_scripted"}
    assert stops["works"][1]["is_error"] is False
    assert stops["fails"][1]["is_error"] is True
    assert all(m["duration"] >= 0 for m, _ in stops.values())
    assert c.named("rma.tool.exception") == []
    # each call's start comes before its stop
    order = [(name, md["tool"]) for name, _, md in c.events]
    for t in ("works", "fails"):
        assert order.index(("rma.tool.start", t)) < order.index(("rma.tool.stop", t))


async def test_M5_T9_a_raising_tool_emits_exception_with_kind_duration_and_is_error() -> None:
    tel = Telemetry()
    c = _collect(tel, "rma.tool.*")

    def handler(name: str, input: dict[str, Any], ctx: Any) -> str:
        raise ZeroDivisionError("nope")

    provider = ScriptedProvider([calls(tool("div", "t1")), end()])
    outcome = await run(provider, handler=handler, prompt="go", telemetry=tel)
    assert isinstance(outcome, Success), outcome
    assert c.names() == ["rma.tool.start", "rma.tool.exception"]
    _, m, md = c.events[1]
    assert m["duration"] >= 0
    assert md["kind"] == "ZeroDivisionError" and md["is_error"] is True
    assert (md["tool"], md["tool_use_id"], md["session_id"]) == ("div", "t1", "sess_scripted")


# ── M-4: stream events ─────────────────────────────────────────────────────────────


async def test_M4_stream_event_carries_type_and_session_id() -> None:
    tel = Telemetry()
    c = _collect(tel, "rma.stream.event")
    turn = [text("hi"), {"contentBlockStop": {}}, *end("x")]
    outcome = await run(
        ScriptedProvider([turn], streaming=True, session_id="sess_42"),
        handler=Recorder(),
        prompt="go",
        telemetry=tel,
    )
    assert isinstance(outcome, Success), outcome
    assert [md["type"] for _, _, md in c.events] == ["text", "contentBlockStop", "text", "usage", "idle"]
    assert all(md["session_id"] == "sess_42" for _, _, md in c.events)
    assert all(m == {} for _, m, _ in c.events)


async def test_sessions_do_not_touch_the_default_dispatcher() -> None:
    c = Collector()
    rma_shell.attach("test-default-untouched", "*", c)
    try:
        outcome = await run(ScriptedProvider([end()]), handler=Recorder(), prompt="go", telemetry=Telemetry())
    finally:
        rma_shell.detach("test-default-untouched")
    assert isinstance(outcome, Success), outcome
    assert c.events == []


# ── session and turn spans (issue 6) ───────────────────────────────────────────────


@pytest.mark.parametrize("streaming", [False, True])
async def test_session_start_turns_and_stop_frame_a_run(streaming: bool) -> None:
    tel = Telemetry()
    c = _collect(tel)
    provider = ScriptedProvider([calls(tool("a", "t1"), i=3, o=2), end("ok", i=5, o=4)], streaming=streaming)
    outcome = await run(provider, handler=Recorder(), prompt="go", telemetry=tel, metadata={"t": 1})
    assert isinstance(outcome, Success), outcome
    framing = [n for n in c.names() if n.startswith(("rma.session.", "rma.turn."))]
    assert framing == [
        "rma.session.start",
        "rma.turn.start",
        "rma.turn.stop",
        "rma.session.tool_uses",
        "rma.turn.start",
        "rma.turn.stop",
        "rma.session.tool_uses",
        "rma.session.terminal",
        "rma.session.stop",
    ]
    [(_, m, md)] = c.named("rma.session.start")
    assert m["open_duration"] >= 0 and isinstance(m["system_time"], float)
    assert md == {
        "t": 1,
        "session_id": "sess_scripted",
        "provider": provider.codec.name,
        "resumed": False,
        "live": False,
    }
    starts = [md for _, _, md in c.named("rma.turn.start")]
    assert [(md["turn"], md["purpose"]) for md in starts] == [(1, "kickoff"), (2, "resume")]
    assert all(md["session_id"] == "sess_scripted" and md["t"] == 1 for md in starts)
    assert all("content" not in md for md in starts)  # content only for opted-in subscribers
    stops = c.named("rma.turn.stop")
    assert [(md["turn"], md["terminal"], md["stop_reason"]) for _, _, md in stops] == [
        (1, "requires_action", "requires_action"),
        (2, "end_turn", "end_turn"),
    ]
    assert [(m["input_tokens"], m["output_tokens"]) for _, m, _ in stops] == [(3, 2), (5, 4)]
    assert all(m["cache_read_input_tokens"] == 0 for _, m, _ in stops)
    [(_, m, md)] = c.named("rma.session.stop")
    assert m["duration"] >= 0 and md["session_id"] == "sess_scripted"


async def test_turn_events_carry_content_for_subscribers_that_ask() -> None:
    tel = Telemetry()
    seen: list[tuple[str, dict[str, Any]]] = []
    tel.attach("c", "rma.*", lambda n, m, md: seen.append((n, dict(md))), content=True)
    provider = ScriptedProvider([calls(tool("a", "t1", q=1)), end("bye")])
    outcome = await run(provider, handler=Recorder({"a": "A!"}), prompt="hello", telemetry=tel)
    assert isinstance(outcome, Success), outcome
    content = [(n, md["content"]) for n, md in seen if "content" in md]
    assert content == [
        ("rma.turn.start", {"input": "hello"}),
        ("rma.turn.stop", {"output": "", "tool_calls": [{"id": "t1", "name": "a", "arguments": {"q": 1}}]}),
        ("rma.tool.start", {"arguments": {"q": 1}}),
        ("rma.tool.stop", {"result": "A!"}),
        ("rma.turn.start", {"tool_results": [{"id": "t1", "text": "A!", "is_error": False}]}),
        ("rma.turn.stop", {"output": "bye", "tool_calls": []}),
        ("rma.session.terminal", {"output": "bye"}),
    ]


async def test_a_provider_that_never_opens_still_ends_with_a_terminal() -> None:
    tel = Telemetry()
    c = _collect(tel)
    err = ProviderError(detail="no")
    outcome = await run(ScriptedProvider(open_error=err), handler=Recorder(), prompt="go", telemetry=tel)
    assert outcome == Failure(err)
    [(name, m, md)] = c.events
    assert name == "rma.session.terminal" and m["duration"] >= 0
    assert md == {
        "session_id": None,
        "provider": "scripted",
        "terminal": "error",
        "error": "provider_error",
        "phase": "open",
    }


async def test_each_emission_gets_maps_of_its_own() -> None:
    """A subscriber that writes into what it was given cannot alter any later emission."""
    tel = Telemetry()
    dirty: list[bool] = []

    def meddle(name: str, measurements: Any, metadata: Any) -> None:
        dirty.append("meddled" in metadata or "meddled" in measurements)
        metadata["meddled"] = True
        measurements["meddled"] = 1

    tel.attach("meddler", "rma.*", meddle)
    turn = [text("a"), text("b"), text("c"), *end("done")]
    outcome = await run(
        ScriptedProvider([turn], streaming=True), handler=Recorder(), prompt="go", telemetry=tel
    )
    assert isinstance(outcome, Success), outcome
    assert len(dirty) > len(turn) and not any(dirty)
