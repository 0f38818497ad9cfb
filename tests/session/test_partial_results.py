"""Progress is never thrown away on failure (issue #12 item 11).

Every ``SessionError`` that ends a request after at least one completed turn carries what those
turns did as ``error.result``: a terminated ``SessionResult`` with their turns, usage (raw
entries included), events, tool uses and last text — and the transcript on Local — whose
``reason`` is the error's kind. Before any turn completes, ``error.result`` is None.
"""

from __future__ import annotations

import io
import json
from typing import Any

import anyio
import pytest
from returns.result import Failure

from rma.codec_json import dumps
from rma.errors import HttpError, MaxTurnsExceeded, ProviderError, SessionError, StreamDropped, TransportError
from rma.provider import codec_for
from rma.replay import replay_lines
from rma.vocabulary import SessionResult, Terminal
from rma_shell import open_session, run
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.local import Local
from rma_shell.seams import Seams
from rma_shell.testing import (
    CMAEmulator,
    OpenAIEmulator,
    Turn,
    delay,
    error_frame,
    status,
    text_turn,
    tool_turn,
)
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.testing.scripted import DROP, ScriptedProvider
from tests.helpers import Recorder, calls, end, text, tool
from tests.providers.test_cma_session import KEY as CMA_KEY
from tests.providers.test_cma_session import Tools as CMATools
from tests.providers.test_cma_session import setup as cma_setup

WEATHER = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}
CALL = {"tool_calls": [{"id": "call_w", "name": "get_weather", "arguments": {"city": "SF"}}]}
CALL_2 = {"tool_calls": [{"id": "call_x", "name": "get_weather", "arguments": {"city": "LA"}}]}
CALL_3 = {"tool_calls": [{"id": "call_y", "name": "get_weather", "arguments": {"city": "NY"}}]}
LOCAL_KEY = "sk-test-partial-1a2b"


def weather(name: str, input: dict[str, Any], ctx: object) -> str:
    return f"sunny in {input.get('city')}"


def partial_of(outcome: Any, kind: type[SessionError]) -> SessionResult:
    error = outcome.failure()
    assert isinstance(error, kind), error
    assert error.result is not None, f"{error.kind} lost the completed turns"
    assert error.result.terminal is Terminal.TERMINATED and error.result.reason == error.kind
    return error.result


def local(emu: OpenAIEmulator, **kw: Any) -> Local:
    kw.setdefault("max_retries", 0)
    return Local(
        base_url=emu.base_url,
        model="m",
        api_key=LOCAL_KEY,
        tools=[WEATHER],
        system_prompt="be brief",
        _seams=Seams(rand=lambda: 0.0),
        **kw,
    )


# ── the machine attaches it, whatever the provider ───────────────────────────────────


async def test_a_poll_failing_on_turn_two_keeps_turn_one() -> None:
    turn_one = [text("let me check"), *calls(tool("lookup", "t1", q="x"), i=2, o=3)]
    provider = ScriptedProvider([turn_one, HttpError(status=502, body="bad gateway")])
    outcome = await run(provider, handler=Recorder(), prompt="go")
    result = partial_of(outcome, HttpError)
    assert result.turns == 1 and result.text == "let me check"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (2, 3)
    assert [e["input_tokens"] for e in result.usage.raw] == [2]
    assert [u.id for u in result.custom_tool_uses] == ["t1"]
    assert [e["type"] for e in result.events] == [e["type"] for e in turn_one]
    assert result.session_id == "sess_scripted" and result.stop_reason is None


async def test_a_stream_dropping_after_a_turn_keeps_the_turn() -> None:
    provider = ScriptedProvider([calls(tool("a", "t1"), i=4, o=5), [text("half"), DROP]], streaming=True)
    outcome = await run(provider, handler=Recorder(), prompt="go")
    result = partial_of(outcome, StreamDropped)
    assert result.turns == 1 and (result.usage.input_tokens, result.usage.output_tokens) == (4, 5)
    assert all(e.get("text") != "half" for e in result.events)  # only completed turns


@pytest.mark.parametrize("streaming", [False, True])
async def test_an_error_before_any_completed_turn_carries_no_result(streaming: bool) -> None:
    turns: list[Any] = [[text("half"), DROP]] if streaming else [HttpError(status=500)]
    outcome = await run(ScriptedProvider(turns, streaming=streaming), handler=Recorder(), prompt="go")
    assert isinstance(outcome, Failure) and outcome.failure().result is None


async def test_a_live_sessions_failed_request_keeps_only_its_own_turns() -> None:
    provider = ScriptedProvider(
        [end("first", i=10, o=10), calls(tool("a", "t1"), i=1, o=2), HttpError(status=503)]
    )
    async with open_session(provider, handler=Recorder(), prompt="one") as session:
        first = (await session.next_result()).unwrap()
        await session.message("two")
        with anyio.fail_after(10):
            second = await session.next_result()
    result = partial_of(second, HttpError)
    assert first.turns == 1 and result.turns == 1
    assert (result.usage.input_tokens, result.usage.output_tokens) == (1, 2)


# ── Local: the transcript rides along ────────────────────────────────────────────────


async def test_Local_an_http_error_on_turn_two_keeps_turn_ones_usage_and_transcript() -> None:
    turn_usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    with OpenAIEmulator([Turn(CALL, usage=turn_usage)], faults={1: status(500)}) as emu:
        outcome = await run(local(emu), handler=weather, prompt="weather?")
    result = partial_of(outcome, HttpError)
    assert result.turns == 1
    assert (result.usage.input_tokens, result.usage.output_tokens) == (11, 7)
    assert [e.get("prompt_tokens") for e in result.usage.raw] == [11]
    assert result.transcript is not None
    assert [m["role"] for m in result.transcript] == ["system", "user", "assistant"]
    assert result.transcript[2]["tool_calls"][0]["id"] == "call_w"


async def test_Local_a_transport_error_on_turn_two_keeps_turn_one() -> None:
    with OpenAIEmulator([CALL, {"content": "late"}], faults={1: delay(3)}) as emu:
        outcome = await run(local(emu, timeout=0.3), handler=weather, prompt="weather?")
    result = partial_of(outcome, TransportError)
    assert result.turns == 1 and result.transcript is not None and len(result.transcript) == 3


async def test_Local_max_turns_exceeded_carries_the_transcript() -> None:
    with OpenAIEmulator([CALL, CALL_2, CALL_3]) as emu:
        outcome = await run(local(emu), handler=weather, prompt="weather?", max_turns=2)
    error = outcome.failure()
    assert isinstance(error, MaxTurnsExceeded) and error.result is not None
    assert error.result.turns == 2 and error.result.transcript is not None
    assert [m["role"] for m in error.result.transcript][:3] == ["system", "user", "assistant"]


async def test_Local_a_recorded_failure_replays_to_the_identical_failure_transcript_included() -> None:
    log = io.StringIO()
    with OpenAIEmulator([CALL], faults={1: status(500)}) as emu:
        outcome = await run(local(emu), handler=weather, prompt="weather?", record=log)
    assert partial_of(outcome, HttpError).transcript is not None
    lines = log.getvalue().splitlines()
    assert json.loads(lines[0])["format"] == 2
    assert sum(1 for line in lines if json.loads(line)["kind"] == "transcript") == 1
    replayed = replay_lines(lines, codec_for).unwrap()
    assert [dumps(r) for r in replayed.results] == [dumps(outcome)]


# ── the managed hosts ─────────────────────────────────────────────────────────────────


async def test_CMA_a_stream_error_after_a_turn_keeps_its_usage_and_events() -> None:
    script = [
        tool_turn(("lookup", {"id": "c9"}), usage={"input_tokens": 30, "output_tokens": 4}),
        text_turn("x"),
    ]
    # An `event: error` frame in the second turn: a definite answer, so even a run that
    # reconnects after drops (R-14 Better) ends with it — and keeps the first turn.
    with CMAEmulator(script, api_key=CMA_KEY, faults=[error_frame(after=6)]) as emu:
        provider = cma_setup(emu)
        try:
            outcome = await run(provider, handler=CMATools(), prompt="go", timeout=30)
        finally:
            await provider.close()
    result = partial_of(outcome, ProviderError)
    assert result.turns == 1 and result.session_id is not None
    assert (result.usage.input_tokens, result.usage.output_tokens) == (30, 4)
    assert [u.name for u in result.custom_tool_uses] == ["lookup"]
    assert any(e.get("type") == "agent.custom_tool_use" for e in result.events)


async def test_AgentCore_an_http_error_on_the_resume_keeps_the_first_turn() -> None:
    script = [ace.tool_turn(("lookup", {"id": "c9"})), ace.text_turn("never")]
    sid = "rma-session-0123456789abcdef0123456789"
    with AgentCoreEmulator(script) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn, data_url=emu.base_url, env=emu.credentials_env(), tools=[WEATHER]
        )

        def lookup(name: str, input: dict[str, Any], ctx: object) -> str:
            emu.inject(ace.error_once(400, "ValidationException", "resume refused"))
            return "found"

        try:
            outcome = await run(provider, handler=lookup, prompt="x", runtime_session_id=sid)
        finally:
            await provider.close()
    result = partial_of(outcome, HttpError)
    assert result.turns == 1 and [u.name for u in result.custom_tool_uses] == ["lookup"]
    assert result.usage.raw  # the turn's metadata usage
