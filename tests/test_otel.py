"""The OpenTelemetry bridge (O-1…O-10, issue 6): span trees, attributes, statuses and metrics,
asserted with the SDK's in-memory span exporter and metric reader."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import trio
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from returns.result import Failure, Success

from rma.errors import AuthenticationError, Halted, Timeout
from rma.session.options import CONTINUE, Halt
from rma_shell import Telemetry, open_session, otel, run
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.seams import Seams
from rma_shell.testing import CMAEmulator, OpenAIEmulator, ScriptedProvider, delay, text_turn, tool_turn
from tests.helpers import Recorder, RunDeadline, cma_agent_and_environment, end

KEY = "sk-test-otel-1b2c"
ANT_KEY = "sk-ant-otel-9d8e"
WEATHER = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}
CALL = {"tool_calls": [{"id": "call_w", "name": "get_weather", "arguments": {"city": "SF"}}]}
TWO_CALLS = {
    "tool_calls": [
        {"id": "call_a", "name": "get_weather", "arguments": {"city": "SF"}},
        {"id": "call_b", "name": "get_weather", "arguments": {"city": "LA"}},
    ]
}


class OTel:
    """A private tracer/meter provider pair with in-memory exporters, bridged to a private
    telemetry dispatcher."""

    def __init__(self, capture_content: bool = False) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.telemetry = Telemetry()
        self.handle = otel.instrument(
            self.telemetry,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            capture_content=capture_content,
        ).unwrap()

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith(prefix)]

    def root(self) -> ReadableSpan:
        [root] = [s for s in self.spans() if s.parent is None]
        return root

    def children(self, span: ReadableSpan) -> list[ReadableSpan]:
        sid = span.context.span_id
        return sorted(
            (s for s in self.spans() if s.parent is not None and s.parent.span_id == sid),
            key=lambda s: s.start_time or 0,
        )

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        data = self.reader.get_metrics_data()
        out: list[tuple[dict[str, Any], Any]] = []
        if data is None:
            return out
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == metric:
                        out.extend((dict(p.attributes or {}), p) for p in m.data.data_points)
        return out

    def local(self, emu: OpenAIEmulator, **kw: Any) -> Local:
        kw.setdefault("model", "gpt-test")
        return Local(
            base_url=emu.base_url,
            api_key=KEY,
            tools=[WEATHER],
            _seams=Seams(rand=lambda: 0.0),
            telemetry=self.telemetry,
            **kw,
        )


@pytest.fixture
def ot() -> Iterator[OTel]:
    o = OTel()
    yield o
    otel.uninstrument(o.handle)


def attrs_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def weather(name: str, input: dict[str, Any], ctx: object) -> str:
    return f"sunny in {input.get('city')}"


# ── a Local run ────────────────────────────────────────────────────────────────────


async def test_a_local_run_is_one_invoke_agent_span_with_chat_and_execute_tool_children(ot: OTel) -> None:
    with OpenAIEmulator([CALL, {"content": "Sunny in SF."}], api_key=KEY) as emu:
        outcome = await run(
            ot.local(emu),
            handler=weather,
            prompt="weather?",
            telemetry=ot.telemetry,
            metadata={"tenant": "acme", "run": 7},
        )
    result = outcome.unwrap()
    root = ot.root()
    assert root.name == "invoke_agent" and root.kind is SpanKind.INTERNAL
    assert root.status.status_code is StatusCode.UNSET
    ra = attrs_of(root)
    assert ra["gen_ai.operation.name"] == "invoke_agent"
    assert ra["gen_ai.provider.name"] == "openai"  # O-3 Better: the real provider, not "anthropic"
    assert ra["gen_ai.request.model"] == "gpt-test"
    assert ra["gen_ai.conversation.id"] == result.session_id
    assert ra["server.address"] == "127.0.0.1" and ra["server.port"] == emu.port
    assert ra["rma.metadata.tenant"] == "acme" and ra["rma.metadata.run"] == 7
    assert ra["gen_ai.usage.input_tokens"] == result.usage.input_tokens
    assert ra["gen_ai.usage.output_tokens"] == result.usage.output_tokens
    assert ra["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert ra["rma.turns"] == 2

    children = ot.children(root)
    assert [c.name for c in children] == ["chat gpt-test", "execute_tool get_weather", "chat gpt-test"]
    assert {s.context.trace_id for s in ot.spans()} == {root.context.trace_id}
    chat1, tool, chat2 = children
    for chat, turn, purpose, finish in ((chat1, 1, "kickoff", "tool_calls"), (chat2, 2, "resume", "stop")):
        a = attrs_of(chat)
        assert chat.kind is SpanKind.CLIENT and chat.status.status_code is StatusCode.UNSET
        assert a["gen_ai.operation.name"] == "chat"
        assert (a["rma.turn"], a["rma.turn.purpose"]) == (turn, purpose)
        assert a["gen_ai.response.finish_reasons"] == (finish,)
        assert a["gen_ai.conversation.id"] == result.session_id
        assert a["gen_ai.provider.name"] == "openai" and a["gen_ai.request.model"] == "gpt-test"
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert a["rma.metadata.tenant"] == "acme"
        [request] = chat.events  # the HTTP attempt that served the turn
        assert (
            request.name == "rma.request"
            and dict(request.attributes or {})["http.response.status_code"] == 200
        )
    u1, u2 = (attrs_of(c)["gen_ai.usage.input_tokens"] for c in (chat1, chat2))
    assert u1 + u2 == result.usage.input_tokens
    ta = attrs_of(tool)
    assert tool.kind is SpanKind.INTERNAL and tool.status.status_code is StatusCode.UNSET
    assert ta["gen_ai.operation.name"] == "execute_tool"
    assert (ta["gen_ai.tool.name"], ta["gen_ai.tool.call.id"], ta["gen_ai.tool.type"]) == (
        "get_weather",
        "call_w",
        "function",
    )
    assert ta["gen_ai.conversation.id"] == result.session_id
    assert "error.type" not in ta
    # ordering: the tool ran between the two model calls
    assert chat1.end_time is not None and tool.start_time is not None and chat1.end_time <= tool.start_time
    assert tool.end_time is not None and chat2.start_time is not None and tool.end_time <= chat2.start_time


async def test_metrics_token_usage_and_operation_duration_per_model_call(ot: OTel) -> None:
    with OpenAIEmulator([CALL, {"content": "Sunny."}], api_key=KEY) as emu:
        result = (
            await run(ot.local(emu), handler=weather, prompt="weather?", telemetry=ot.telemetry)
        ).unwrap()
    tokens = {a["gen_ai.token.type"]: (a, p) for a, p in ot.points("gen_ai.client.token.usage")}
    assert set(tokens) == {"input", "output"}
    for kind, total in (("input", result.usage.input_tokens), ("output", result.usage.output_tokens)):
        a, point = tokens[kind]
        assert point.count == 2 and point.sum == total
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] == "gpt-test" and a["server.address"] == "127.0.0.1"
        assert not any(k.startswith("rma.metadata") for k in a)  # no per-session cardinality
    [(a, point)] = ot.points("gen_ai.client.operation.duration")
    assert point.count == 2 and point.sum > 0 and "error.type" not in a
    assert a["gen_ai.operation.name"] == "chat"


# ── failures ───────────────────────────────────────────────────────────────────────


async def test_O5_a_failing_tool_is_an_error_span_and_the_session_is_not(ot: OTel) -> None:
    def handler(name: str, input: dict[str, Any], ctx: object) -> Any:
        if input["city"] == "SF":
            raise ZeroDivisionError("no weather in SF")
        return Failure("LA is closed")

    with OpenAIEmulator([TWO_CALLS, {"content": "Sorry."}], api_key=KEY) as emu:
        outcome = await run(ot.local(emu), handler=handler, prompt="weather?", telemetry=ot.telemetry)
    assert isinstance(outcome, Success)
    tools = {attrs_of(s)["gen_ai.tool.call.id"]: s for s in ot.named("execute_tool")}
    raised, failed = tools["call_a"], tools["call_b"]
    assert raised.status.status_code is StatusCode.ERROR
    assert attrs_of(raised)["error.type"] == "ZeroDivisionError"
    assert failed.status.status_code is StatusCode.ERROR
    assert attrs_of(failed)["error.type"] == "tool_error"
    assert all(s.parent is not None and s.parent.span_id == ot.root().context.span_id for s in tools.values())
    root = ot.root()
    assert root.status.status_code is StatusCode.UNSET and "error.type" not in attrs_of(root)
    # O-5: never the tool's input or result without content capture
    for s in tools.values():
        text = repr(attrs_of(s))
        assert "SF" not in text and "closed" not in text and "no weather" not in text


async def test_a_halted_run_ends_its_invoke_agent_span_with_the_error(ot: OTel) -> None:
    def guard(payload: dict[str, Any]) -> Any:
        return Halt("budget") if payload["turns"] >= 1 else CONTINUE

    with OpenAIEmulator([CALL, {"content": "never"}], api_key=KEY) as emu:
        outcome = await run(
            ot.local(emu), handler=weather, prompt="weather?", turn_guard=guard, telemetry=ot.telemetry
        )
    assert isinstance(outcome.failure(), Halted)
    root = ot.root()
    assert root.status.status_code is StatusCode.ERROR
    ra = attrs_of(root)
    assert ra["error.type"] == "halted" and ra["gen_ai.response.finish_reasons"] == ("error",)
    [chat] = ot.children(root)  # the one turn that ran completed normally; no tool ran
    assert chat.name == "chat gpt-test" and chat.status.status_code is StatusCode.UNSET
    assert ra["gen_ai.usage.input_tokens"] == attrs_of(chat)["gen_ai.usage.input_tokens"]


async def test_a_timed_out_run_errors_the_in_flight_chat_span_and_the_session(
    ot: OTel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The timeout elapses once the second chat request is at the emulator (held there 30 s),
    # not after a second in which a busy machine may not have got through the first turn.
    deadline = RunDeadline(monkeypatch)

    def second_chat_in_flight() -> None:
        while len(emu.requests) < 2:
            time.sleep(0.005)

    with OpenAIEmulator([CALL, {"content": "too late"}], api_key=KEY, faults={1: delay(30)}) as emu:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(deadline.fire_after, second_chat_in_flight)
                outcome = await run(
                    ot.local(emu), handler=weather, prompt="weather?", timeout=1.0, telemetry=ot.telemetry
                )
    assert isinstance(outcome.failure(), Timeout)
    root = ot.root()
    assert root.status.status_code is StatusCode.ERROR and attrs_of(root)["error.type"] == "timeout"
    chat1, tool, chat2 = ot.children(root)
    assert chat1.status.status_code is StatusCode.UNSET and tool.status.status_code is StatusCode.UNSET
    assert chat2.status.status_code is StatusCode.ERROR and attrs_of(chat2)["error.type"] == "timeout"
    assert "gen_ai.usage.input_tokens" not in attrs_of(chat2)
    durations = {a.get("error.type"): p.count for a, p in ot.points("gen_ai.client.operation.duration")}
    assert durations == {None: 1, "timeout": 1}


async def test_a_tool_cancelled_by_the_timeout_is_an_error_span(
    autojump_clock: trio.testing.MockClock,
) -> None:
    o = OTel()

    async def hang(name: str, input: dict[str, Any], ctx: object) -> str:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    from tests.helpers import calls, tool

    provider = ScriptedProvider([calls(tool("hang", "t1")), end()])
    outcome = await run(provider, handler=hang, prompt="go", timeout=5, telemetry=o.telemetry)
    assert isinstance(outcome.failure(), Timeout)
    [span] = o.named("execute_tool")
    assert span.status.status_code is StatusCode.ERROR and attrs_of(span)["error.type"] == "Cancelled"
    assert attrs_of(o.root())["error.type"] == "timeout"
    assert attrs_of(o.root())["gen_ai.provider.name"] == "scripted"  # unknown hosts: their own name


async def test_the_hosts_stop_after_a_timeout_is_an_event_on_the_request_span(
    autojump_clock: trio.testing.MockClock,
) -> None:
    o = OTel()
    provider = ScriptedProvider([end()], turn_delay=100)
    outcome = await run(provider, handler=weather, prompt="go", timeout=1, telemetry=o.telemetry)
    assert outcome.failure().remote_stop == "not_needed"  # type: ignore[attr-defined]
    [event] = [e for e in o.root().events if e.name == "rma.remote_stop"]
    attributes = dict(event.attributes or {})
    assert isinstance(attributes.pop("rma.remote_stop.duration"), float)
    assert attributes == {"rma.remote_stop.outcome": "not_needed", "rma.remote_stop.reason": "timeout"}
    assert attrs_of(o.root())["error.type"] == "timeout"


# ── content capture ────────────────────────────────────────────────────────────────


CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


async def test_content_is_not_captured_by_default(ot: OTel) -> None:
    with OpenAIEmulator([CALL, {"content": "Sunny in Gotham."}], api_key=KEY) as emu:
        await run(ot.local(emu), handler=weather, prompt="secret plans?", telemetry=ot.telemetry)
    assert ot.spans()
    for span in ot.spans():
        a = attrs_of(span)
        assert not CONTENT_KEYS & set(a), span.name
        assert "secret plans" not in repr(a) and "Gotham" not in repr(a) and "sunny in SF" not in repr(a)


async def test_content_is_captured_when_asked() -> None:
    o = OTel(capture_content=True)
    with OpenAIEmulator([CALL, {"content": "Sunny in Gotham."}], api_key=KEY) as emu:
        await run(o.local(emu), handler=weather, prompt="secret plans?", telemetry=o.telemetry)
    root = o.root()
    ra = attrs_of(root)
    assert "secret plans?" in ra["gen_ai.input.messages"] and "Gotham" in ra["gen_ai.output.messages"]
    chat1, tool, chat2 = o.children(root)
    assert "secret plans?" in attrs_of(chat1)["gen_ai.input.messages"]
    assert '"tool_call"' in attrs_of(chat1)["gen_ai.output.messages"]
    assert attrs_of(tool)["gen_ai.tool.call.arguments"] == '{"city": "SF"}'
    assert attrs_of(tool)["gen_ai.tool.call.result"] == "sunny in SF"
    assert "tool_call_response" in attrs_of(chat2)["gen_ai.input.messages"]
    assert "Gotham" in attrs_of(chat2)["gen_ai.output.messages"]


async def test_content_reaches_only_subscribers_that_opted_in() -> None:
    tel = Telemetry()
    plain: list[dict[str, Any]] = []
    opted: list[dict[str, Any]] = []
    tel.attach("plain", "rma.*", lambda n, m, md: plain.append(dict(md)))
    tel.attach("opted", "rma.*", lambda n, m, md: opted.append(dict(md)), content=True)
    with OpenAIEmulator([CALL, {"content": "Sunny."}], api_key=KEY) as emu:
        await run(
            Local(base_url=emu.base_url, model="m", api_key=KEY, tools=[WEATHER]),
            handler=weather,
            prompt="weather?",
            telemetry=tel,
        )
    assert all("content" not in md for md in plain)
    assert any("content" in md for md in opted)


# ── concurrency, nesting, live sessions ────────────────────────────────────────────


async def test_two_concurrent_sessions_produce_two_separate_trees(ot: OTel) -> None:
    ids: dict[str, str | None] = {}
    slow = {0: delay(0.2), 1: delay(0.2)}
    with (
        OpenAIEmulator([CALL, {"content": "A"}], api_key=KEY, faults=slow) as a,
        OpenAIEmulator([CALL, {"content": "B"}], api_key=KEY, faults=slow) as b,
    ):

        async def one(label: str, emu: OpenAIEmulator) -> None:
            result = (
                await run(
                    ot.local(emu),
                    handler=weather,
                    prompt=label,
                    telemetry=ot.telemetry,
                    metadata={"label": label},
                )
            ).unwrap()
            ids[label] = result.session_id

        async with anyio.create_task_group() as nursery:
            nursery.start_soon(one, "A", a)
            nursery.start_soon(one, "B", b)
    roots = [s for s in ot.spans() if s.parent is None]
    assert len(roots) == 2
    for root in roots:
        label = attrs_of(root)["rma.metadata.label"]
        tree = [s for s in ot.spans() if s.context.trace_id == root.context.trace_id]
        assert len(tree) == 4
        assert [c.name for c in ot.children(root)] == [
            "chat gpt-test",
            "execute_tool get_weather",
            "chat gpt-test",
        ]
        for s in tree:
            assert attrs_of(s)["gen_ai.conversation.id"] == ids[label]
            assert attrs_of(s)["rma.metadata.label"] == label
    assert ids["A"] != ids["B"]


async def test_the_session_nests_under_the_callers_span_and_tool_spans_under_execute_tool(ot: OTel) -> None:
    tracer = ot.tracer_provider.get_tracer("app")

    def handler(name: str, input: dict[str, Any], ctx: object) -> str:
        with tracer.start_as_current_span("db.query"):
            return "sunny"

    with OpenAIEmulator([CALL, {"content": "Sunny."}], api_key=KEY) as emu:
        with tracer.start_as_current_span("request") as outer:
            await run(ot.local(emu), handler=handler, prompt="weather?", telemetry=ot.telemetry)
        assert trace.get_current_span() is not outer
    [request] = ot.named("request")
    [invoke] = ot.named("invoke_agent")
    [tool] = ot.named("execute_tool")
    [query] = ot.named("db.query")
    assert invoke.parent is not None and invoke.parent.span_id == request.context.span_id
    assert query.parent is not None and query.parent.span_id == tool.context.span_id


async def test_a_live_session_has_one_invoke_agent_span_per_request(ot: OTel) -> None:
    with OpenAIEmulator([{"content": "first"}, {"content": "second"}], api_key=KEY) as emu:
        async with open_session(ot.local(emu), handler=weather, prompt="one", telemetry=ot.telemetry) as s:
            assert (await s.next_result()).unwrap().text == "first"
            await s.message("two")
            assert (await s.next_result()).unwrap().text == "second"
            session_id = s.session_id
    invokes = ot.named("invoke_agent")
    assert len(invokes) == 2
    assert all(attrs_of(i)["gen_ai.conversation.id"] == session_id for i in invokes)
    assert [attrs_of(c)["rma.turn.purpose"] for i in invokes for c in ot.children(i)] == [
        "kickoff",
        "message",
    ]
    assert len({i.context.trace_id for i in invokes}) == 2


# ── managed hosts ──────────────────────────────────────────────────────────────────


def agent_and_environment(emu: CMAEmulator, key: str) -> dict[str, str]:
    return cma_agent_and_environment(emu, key)


def _cma(emu: CMAEmulator, tel: Telemetry, **kw: Any) -> ClaudeManagedAgents:
    ids = agent_and_environment(emu, ANT_KEY)
    return ClaudeManagedAgents(api_key=ANT_KEY, base_url=emu.base_url, env={}, telemetry=tel, **ids, **kw)


async def test_O3_a_managed_host_turn_is_an_invoke_agent_client_span_named_for_the_agent(ot: OTel) -> None:
    script = [
        tool_turn(("lookup", {"id": "c9"}), usage={"input_tokens": 5, "output_tokens": 2}),
        text_turn("Ada.", usage={"input_tokens": 7, "output_tokens": 3, "cache_read_input_tokens": 40}),
    ]
    with CMAEmulator(script, api_key=ANT_KEY) as emu:
        provider = _cma(emu, ot.telemetry)
        try:
            result = (
                await run(
                    provider,
                    handler=lambda n, i, c: "found",
                    prompt="who?",
                    timeout=20,
                    telemetry=ot.telemetry,
                )
            ).unwrap()
        finally:
            await provider.close()
    root = ot.root()
    ra = attrs_of(root)
    assert root.name == "invoke_agent a" and root.kind is SpanKind.INTERNAL
    assert ra["gen_ai.provider.name"] == "anthropic"
    assert ra["gen_ai.request.model"] == "claude-sonnet-4-6" and ra["gen_ai.agent.name"] == "a"
    assert ra["gen_ai.conversation.id"] == result.session_id
    turn1, tool, turn2 = ot.children(root)
    assert (turn1.name, turn2.name) == ("invoke_agent a", "invoke_agent a")
    assert turn1.kind is SpanKind.CLIENT and attrs_of(turn1)["gen_ai.operation.name"] == "invoke_agent"
    assert attrs_of(turn1)["gen_ai.response.finish_reasons"] == ("requires_action",)
    assert tool.name == "execute_tool lookup"
    a2 = attrs_of(turn2)
    # Anthropic counts cached tokens apart; the conventions' input_tokens include them.
    assert a2["gen_ai.usage.input_tokens"] == 47 and a2["gen_ai.usage.cache_read.input_tokens"] == 40
    assert ra["gen_ai.usage.input_tokens"] == 52 and ra["gen_ai.usage.output_tokens"] == 5
    tokens = {a["gen_ai.token.type"]: p.sum for a, p in ot.points("gen_ai.client.token.usage")}
    assert tokens == {"input": 52, "output": 5}


async def test_a_session_that_never_opened_is_one_error_span(ot: OTel) -> None:
    with CMAEmulator([text_turn("x")], api_key=ANT_KEY) as emu:
        ids = agent_and_environment(emu, ANT_KEY)
        provider = ClaudeManagedAgents(api_key="sk-ant-wrong-key-1", base_url=emu.base_url, env={}, **ids)
        try:
            outcome = await run(provider, handler=Recorder(), prompt="x", telemetry=ot.telemetry)
        finally:
            await provider.close()
    assert isinstance(outcome.failure(), AuthenticationError)
    [span] = ot.spans()
    assert span.name == "invoke_agent" and span.status.status_code is StatusCode.ERROR
    a = attrs_of(span)
    assert a["error.type"] == "authentication_error" and a["gen_ai.provider.name"] == "anthropic"
    assert span.end_time is not None and span.start_time is not None and span.end_time > span.start_time


# ── O-8, O-9, O-10: availability and robustness ────────────────────────────────────


def test_O9_without_opentelemetry_instrument_is_a_typed_error_and_never_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(sys.modules):
        if name == "opentelemetry" or name.startswith("opentelemetry.") or name == "rma_shell._otel_bridge":
            monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    assert otel.available() is False
    outcome = otel.instrument(Telemetry())
    assert isinstance(outcome, Failure) and outcome.failure().kind == "opentelemetry_unavailable"


def test_O9_available_instrument_and_uninstrument_twice() -> None:
    assert otel.available() is True
    tel = Telemetry()
    handle = otel.instrument(tel, tracer_provider=TracerProvider(), meter_provider=MeterProvider()).unwrap()
    assert tel.listening() and handle.handler_id.startswith("rma-otel-")
    assert otel.uninstrument(handle) == Success(None)
    assert not tel.listening()
    again = otel.uninstrument(handle)
    assert isinstance(again, Failure) and again.failure().kind == "not_found"
    taken = Telemetry()
    otel.instrument(taken, handler_id="x", tracer_provider=TracerProvider()).unwrap()
    clash = otel.instrument(taken, handler_id="x", tracer_provider=TracerProvider())
    assert isinstance(clash, Failure) and clash.failure().kind == "already_attached"


def test_O8_sparse_or_odd_metadata_never_raises_and_never_detaches(ot: OTel) -> None:
    tel = ot.telemetry
    for name, m, md in [
        ("rma.tool.stop", {}, {}),
        ("rma.tool.exception", {}, {"session_id": "nope"}),
        ("rma.turn.stop", {"input_tokens": "many"}, {"turn": "x", "session_id": None}),
        ("rma.turn.start", {}, {"session_id": 5, "provider": 7, "tenant": {"nested": [1, "a"]}}),
        ("rma.session.terminal", {"duration": "long"}, {"terminal": 3}),
        ("rma.session.stop", {}, {"session_id": "unknown"}),
        ("rma.request.stop", {}, {"session_id": 5, "status": "bad"}),
        ("rma.session.start", {"open_duration": None}, {"session_id": "s", "live": "yes"}),
        ("rma.session.stop", {}, {"session_id": "s"}),
    ]:
        tel.emit(name, m, md)
    assert tel.listening()


def test_O10_a_broken_tracer_is_logged_and_swallowed(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(TracerProvider):
        def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
            raise_on = super().get_tracer(*args, **kwargs)

            class T:
                def start_span(self, *a: Any, **k: Any) -> Any:
                    raise RuntimeError("exporter on fire")

                def __getattr__(self, name: str) -> Any:
                    return getattr(raise_on, name)

            return T()

    tel = Telemetry()
    otel.instrument(tel, tracer_provider=Broken(), meter_provider=MeterProvider()).unwrap()
    with caplog.at_level(logging.WARNING, logger="rma.telemetry.otel"):
        tel.emit("rma.session.start", {}, {"session_id": "s1", "provider": "local"})
        tel.emit("rma.turn.start", {}, {"session_id": "s1", "turn": 1})
    assert tel.listening()  # not detached by the dispatcher
    records = [r for r in caplog.records if r.name == "rma.telemetry.otel"]
    assert records and all(r.exc_info is not None for r in records)


def test_turns_nobody_drove_a_closed_live_session_and_uninstrument_end_their_spans(ot: OTel) -> None:
    tel = ot.telemetry
    base = {"session_id": "s1", "provider": "claude_managed_agents", "agent_name": "bot", "live": True}
    tel.emit("rma.session.start", {"open_duration": 0.0}, base)
    # a turn delivered without a drive (e.g. replayed after a reconnect): still a span
    tel.emit(
        "rma.turn.stop", {"input_tokens": 1, "output_tokens": 1}, {**base, "turn": 1, "terminal": "end_turn"}
    )
    tel.emit("rma.session.terminal", {}, {**base, "terminal": "end_turn"})
    # the next request is interrupted by closing the session
    tel.emit("rma.turn.start", {}, {**base, "turn": 1, "purpose": "message"})
    tel.emit("rma.tool.start", {}, {**base, "tool": "t", "tool_use_id": "u1"})
    tel.emit("rma.session.stop", {"duration": 1.0}, base)
    first, second = sorted((s for s in ot.spans() if s.parent is None), key=lambda s: s.start_time or 0)
    assert attrs_of(first)["gen_ai.response.finish_reasons"] == ("end_turn",)
    [undriven] = ot.children(first)
    assert undriven.name == "invoke_agent bot" and undriven.kind is SpanKind.CLIENT
    assert second.status.status_code is StatusCode.ERROR and attrs_of(second)["error.type"] == "closed"
    assert {c.name: attrs_of(c)["error.type"] for c in ot.children(second)} == {
        "invoke_agent bot": "closed",
        "execute_tool t": "closed",
    }
    # uninstrumenting ends what is still open
    tel.emit("rma.session.start", {}, {**base, "session_id": "s2", "live": False})
    assert otel.uninstrument(ot.handle) == Success(None)
    [dangling] = [s for s in ot.spans() if attrs_of(s).get("gen_ai.conversation.id") == "s2"]
    assert attrs_of(dangling)["rma.incomplete"] is True


def test_the_bridge_names_every_bundled_host_by_its_codecs_name() -> None:
    # A typo here sent AgentCore turns down the chat branch and undercounted its cached tokens.
    from rma.providers.agentcore.codec import BedrockAgentCoreCodec
    from rma.providers.claude.codec import ClaudeManagedAgentsCodec
    from rma.providers.local.codec import LocalCodec
    from rma_shell._otel_bridge import CACHE_EXCLUSIVE, MANAGED, PROVIDER_NAMES

    assert set(PROVIDER_NAMES) == {LocalCodec.name, ClaudeManagedAgentsCodec.name, BedrockAgentCoreCodec.name}
    assert MANAGED == CACHE_EXCLUSIVE == {ClaudeManagedAgentsCodec.name, BedrockAgentCoreCodec.name}
