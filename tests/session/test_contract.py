"""Lifecycle, result shape and the provider contract (S-1, S-13, S-17, S-18, S-22, S-26, S-27, S-33,
S-60…S-65, S-72, S-77, S-78, S-80, S-86, S-88, T-8, T-10, E-7, P-1…P-7)."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
import trio
from returns.result import Failure, Success

from rma._persistent import AppendLog
from rma.errors import Halted, MalformedResponse, ProviderError, UnresolvedRequiresAction
from rma.provider import Mode, ProviderCodec
from rma.providers.scripted import ScriptedCodec, ScriptedStreamingCodec
from rma.session.events import Opened, StreamEvent, TurnPolled
from rma.session.machine import Phase, State, initial_state, step
from rma.session.options import DEFAULT_MAX_CONCURRENCY, SessionConfig, lift_handles
from rma.vocabulary import JSON, Budget, SessionInfo, Terminal, ToolResult, TurnResult
from rma_shell import Halt, open_session, run
from rma_shell.handler import result_of
from rma_shell.providers.base import LiveSink, PollOutcome
from rma_shell.testing.scripted import DROP, ScriptedConn, ScriptedProvider
from tests.helpers import Recorder, calls, end, idle, text, tool


class RaisingOpen(ScriptedProvider):
    async def open(self, request: Any) -> Any:
        raise RuntimeError("boom at open")


class ExplodingCodec(ScriptedCodec):
    def normalize(self, events: Sequence[JSON]) -> TurnResult:
        raise ZeroDivisionError("codec bug")


async def test_S1_run_never_raises_open_and_codec_failures_come_back_as_values() -> None:
    outcome = await run(RaisingOpen([end()]), handler=Recorder(), prompt="x")
    assert isinstance(outcome.failure(), ProviderError) and "boom at open" in outcome.failure().detail
    provider = ScriptedProvider([end()])
    provider.codec = ExplodingCodec()
    outcome = await run(provider, handler=Recorder(), prompt="x")
    err = outcome.failure()
    assert isinstance(err, MalformedResponse) and "ZeroDivisionError" in err.detail
    assert provider.closed == 1


async def test_S22_X12_a_raising_poll_is_a_provider_error() -> None:
    provider = ScriptedProvider([ValueError("bad payload")])
    outcome = await run(provider, handler=Recorder(), prompt="x")
    err = outcome.failure()
    assert isinstance(err, ProviderError) and err.error_type == "ValueError"


async def test_S27_poll_error_sync_is_the_error_and_live_is_reported() -> None:
    failure = ProviderError(detail="503 after retries")
    assert await run(ScriptedProvider([failure]), handler=Recorder(), prompt="x") == Failure(failure)
    async with open_session(ScriptedProvider([failure, end("ok")]), handler=Recorder(), prompt="x") as s:
        assert await s.next_result() == Failure(failure)
        await s.message("again")
        assert (await s.next_result()).unwrap().text == "ok"


class ConnCounting(ScriptedProvider):
    """Each poll returns a new conn, as Local does with its conversation (S-26)."""

    async def poll_turn(
        self, conn: ScriptedConn, input: Any, live: LiveSink | None
    ) -> PollOutcome[ScriptedConn]:
        out = await super().poll_turn(conn, input, live)
        return PollOutcome(out.result, ScriptedConn(conn.session_id, conn.resumed, conn.connects + 1))

    def transcript(self, conn: ScriptedConn) -> tuple[JSON, ...]:
        return ({"polls": conn.connects},)


async def test_S26_S61_the_polled_conn_replaces_the_old_one_and_feeds_the_transcript() -> None:
    r = (await run(ConnCounting([calls(tool("a", "t1")), end()]), handler=Recorder(), prompt="x")).unwrap()
    assert r.transcript == ({"polls": 2},)


async def test_S13_handles_are_lifted_to_ids_and_explicit_ids_win() -> None:
    class Handle:
        agent_id = "agent_obj"

    assert lift_handles({"agent": {"agent_id": "a1"}, "environment": {"environment_id": "e1"}}) == {
        "agent": {"agent_id": "a1"},
        "environment": {"environment_id": "e1"},
        "agent_id": "a1",
        "environment_id": "e1",
    }
    assert lift_handles({"agent": Handle()})["agent_id"] == "agent_obj"
    assert lift_handles({"environment": {"type": "environment", "id": "env_1"}})["environment_id"] == "env_1"
    assert lift_handles({"agent": {"agent_id": "a1"}, "agent_id": "explicit"})["agent_id"] == "explicit"
    provider = ScriptedProvider([end()])
    await run(provider, handler=Recorder(), prompt="x", agent={"agent_id": "a9"})
    assert provider.opened[0].extra["agent_id"] == "a9"


async def test_S17_session_info_is_rebuilt_after_a_reconnect(autojump_clock: trio.abc.Clock) -> None:
    class Renaming(ScriptedProvider):
        async def reconnect(self, conn: ScriptedConn, seen: tuple[str, ...]) -> Any:
            conn.session_id = "sess_after"
            return await super().reconnect(conn, seen)

    provider = Renaming([[text("a"), DROP]], streaming=True)
    handler = Recorder()
    async with open_session(provider, handler=handler, prompt="go") as session:
        assert session.session_id == "sess_scripted"
        await anyio.sleep(1)
        provider.emit(text("b"), idle("end_turn"))
        r = (await session.next_result()).unwrap()
    assert session.session_id == "sess_after" and r.session_id == "sess_after"
    assert handler.infos[-1].session_id == "sess_after"


def test_S18_defaults() -> None:
    params = inspect.signature(run).parameters
    assert params["max_turns"].default == 50
    assert params["max_reprompts"].default == 2
    assert params["timeout"].default == 600
    assert params["context"].default is None
    assert params["max_concurrency"].default == DEFAULT_MAX_CONCURRENCY == 8
    cfg = SessionConfig(codec=ScriptedCodec())
    assert (cfg.max_turns, cfg.max_reprompts) == (50, 2)
    s = initial_state(cfg)
    assert (s.kicked_off, s.turns, s.reconnect_attempts, s.live_forwarded, len(s.seen)) == (False, 0, 0, 0, 0)


def test_S33_accumulators_are_persistent_and_linear() -> None:
    log: AppendLog[int] = AppendLog()
    versions = []
    for i in range(1000):
        log = log.append(i)
        versions.append(log)
    assert versions[10].to_tuple() == tuple(range(11))
    forked = versions[10].append(-1)  # an older version forks instead of corrupting the newest
    assert forked.to_tuple() == (*range(11), -1) and log.to_tuple() == tuple(range(1000))


async def test_S60_S61_S63_result_fields_and_raw_stop_reason() -> None:
    provider = ScriptedProvider([calls(tool("a", "t1"), i=1, o=2), end("bye", i=3, o=4)])
    r = (await run(provider, handler=Recorder(), prompt="x")).unwrap()
    assert r.terminal is Terminal.END_TURN
    assert r.stop_reason == {"type": "end_turn"}  # provider-native, not flattened
    assert r.session_id == "sess_scripted" and r.text == "bye" and r.turns == 2
    assert r.transcript is None and r.reason is None and not r.resumed
    assert [e["type"] for e in r.events] == ["tool_use", "usage", "idle", "text", "usage", "idle"]


async def test_S65_exactly_one_result_and_stop_cancels_the_stream() -> None:
    provider = ScriptedProvider([end()], streaming=True)
    outcome = await run(provider, handler=Recorder(), prompt="x")
    assert isinstance(outcome, Success)
    assert provider.active_streams == 0 and provider.closed == 1


async def test_S77_S79_library_endings_carry_the_terminated_result_in_live_sessions() -> None:
    provider = ScriptedProvider([calls(tool("a", "t1")), [text("?"), idle("requires_action", [])]])
    async with open_session(provider, handler=Recorder(), prompt="x", turn_guard=lambda p: Halt("cap")) as s:
        halted = (await s.next_result()).failure()
        assert isinstance(halted, Halted) and halted.result is not None
        assert halted.result.terminal is Terminal.TERMINATED and halted.result.reason == "halted"
    provider = ScriptedProvider([[text("?"), idle("requires_action", [])]])
    async with open_session(provider, handler=Recorder(), prompt="x") as s:
        unresolved = (await s.next_result()).failure()
        assert isinstance(unresolved, UnresolvedRequiresAction) and unresolved.result is not None


async def test_S78_S80_results_queue_without_blocking_and_nothing_on_validation_failure() -> None:
    provider = ScriptedProvider([end("a"), end("b"), end("c")])
    async with open_session(provider, handler=Recorder(), prompt="x") as s:
        await s.message("m1")
        await s.message("m2")
        await anyio.sleep(0.05)  # nobody reads: the session is not blocked by its consumer
        texts = [(await s.next_result()).unwrap().text for _ in range(3)]
    assert texts == ["a", "b", "c"]


async def test_S86_a_crashing_stream_consumer_is_a_failed_stream() -> None:
    class Crashing(ScriptedProvider):
        async def stream(self, conn: Any, on_connected: Any, on_event: Any) -> Any:
            await on_connected()
            raise OSError("socket went away")

    outcome = await run(Crashing([end()], streaming=True), handler=Recorder(), prompt="x")
    err = outcome.failure()
    assert isinstance(err, ProviderError) and err.error_type == "OSError"


def test_S88_events_that_make_no_sense_in_a_phase_are_ignored() -> None:
    s = initial_state(SessionConfig(codec=ScriptedCodec()))
    s, _ = step(s, Opened("s1"))
    before = s
    s, out = step(s, StreamEvent(0, {"type": "text"}))  # a stream event on a request/response host
    assert (s, out) == (before, ())
    s, _ = step(s, TurnPolled(({"type": "idle", "stop_reason": "end_turn"},)))
    assert s.phase is Phase.DONE
    assert step(s, TurnPolled(())) == (s, ())  # after the one result, nothing


def test_T8_handler_values_become_tool_results() -> None:
    assert result_of("t1", "ok") == ToolResult("t1", "ok", False)
    assert result_of("t1", Success("fine")) == ToolResult("t1", "fine", False)
    assert result_of("t1", Failure("nope")) == ToolResult("t1", "nope", True)
    assert result_of("t1", {"a": 1}) == ToolResult("t1", '{"a": 1}', False)  # JSON text (issue #13)
    assert result_of("t1", None).is_error


async def test_T10_decision_tool_telemetry_always_carries_the_session_id() -> None:
    from rma_shell.telemetry import Telemetry

    seen: list[dict[str, Any]] = []
    t = Telemetry()
    t.attach("x", "rma.tool.*", lambda n, m, md: seen.append(dict(md)))
    await run(ScriptedProvider([calls(tool("a", "t1")), end()]), handler=Recorder(), prompt="x", telemetry=t)
    assert {md["session_id"] for md in seen} == {"sess_scripted"}


async def test_E7_delivery_is_at_least_once_across_drops_but_the_record_is_exactly_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    provider = ScriptedProvider([[text("draft", id="d1"), DROP]], streaming=True)
    handler = Recorder()
    async with open_session(provider, handler=handler, prompt="go") as session:
        await anyio.sleep(1)
        provider.emit(text("draft again", id="d2"), idle("end_turn"))
        r = (await session.next_result()).unwrap()
    delivered = [e.get("id") for e in handler.events if e.get("type") == "text"]
    # The open turn is refolded after the drop (R-18 Better): the handler sees d1 twice...
    assert delivered == ["d1", "d1", "d2"]
    # ...while the record holds every event exactly once.
    assert [e.get("id") for e in r.events if e.get("type") == "text"] == ["d1", "d2"]


async def test_S72_budget_reaches_the_provider_at_open() -> None:
    provider = ScriptedProvider([end()], streaming=True)
    await run(provider, handler=Recorder(), prompt="x", budget=Budget("2500"))
    assert provider.opened[0].budget == Budget(2500)
    assert Budget("2500").to_wire() == {  # whole cents: $25.00
        "type": "limit",
        "max_list_cost": {"amount": "2500", "currency": "USD"},
    }


CODECS: list[ProviderCodec] = [ScriptedCodec(), ScriptedStreamingCodec()]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_P1_P2_P3_P5_codecs_declare_mode_and_capabilities_and_use_the_canonical_terminals(
    codec: ProviderCodec,
) -> None:
    assert codec.mode in (Mode.STREAMING, Mode.REQUEST_RESPONSE)
    for attr in ("supports_outcomes", "supports_budget", "empty_resume_safe", "has_text_delta"):
        assert isinstance(getattr(codec, attr), bool)
    for stop in ("end_turn", "requires_action", "error", "weird"):
        tr = codec.normalize([{"type": "idle", "stop_reason": {"type": stop}}])
        assert tr.terminal in set(Terminal)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_P4_P6_normalize_keeps_events_verbatim_and_server_tools_are_observe_only(
    codec: ProviderCodec,
) -> None:
    events = [
        {"type": "server_tool_use", "id": "s1", "name": "web_search"},
        tool("mine", "t1", a=1),
        {"type": "idle", "stop_reason": {"type": "requires_action"}},
    ]
    tr = codec.normalize(events)
    assert list(tr.events) == events
    assert [u.name for u in tr.custom_tool_uses] == ["mine"]
    assert tr.server_tool_uses == (events[0],)


def test_P7_the_core_never_sees_a_connection_object() -> None:
    names = {f.name for f in SessionInfo.__attrs_attrs__} | {f.name for f in State.__attrs_attrs__}
    assert "conn" not in names and "consumer" not in names and "ref" not in names


async def test_S86_live_stream_failure_reconnects(autojump_clock: trio.abc.Clock) -> None:
    provider = ScriptedProvider([[DROP]], streaming=True)
    async with open_session(provider, handler=Recorder(), prompt="go"):
        await anyio.sleep(1)
    assert len(provider.reconnects) == 1 and provider.streams_opened == 2
