"""Live sessions: follow-ups, send_event, one result per request, errors reported (S-2, S-6, S-7, S-23,
S-32, S-37, S-49, S-66…S-71)."""

from __future__ import annotations

import anyio
import pytest
from returns.result import Failure, Success

from rma.errors import Closed, MaxTurnsExceeded, ProviderError, Unsupported
from rma.vocabulary import Terminal
from rma_shell import open_session
from rma_shell.testing.scripted import ScriptedProvider
from tests.helpers import Recorder, calls, end, text, tool, usage

STREAMING = [False, True]


@pytest.mark.parametrize("streaming", STREAMING)
async def test_S69_S32_S37_follow_up_starts_a_fresh_request(streaming: bool) -> None:
    provider = ScriptedProvider(
        [calls(tool("a", "t1"), i=5, o=5), end("one", i=1, o=1), end("two", i=2, o=3)], streaming=streaming
    )
    async with open_session(provider, handler=Recorder(), prompt="first") as session:
        first = (await session.next_result()).unwrap()
        assert first.turns == 2 and first.text == "one" and first.usage.input_tokens == 6
        await session.message("second")
        second = (await session.next_result()).unwrap()
    assert second.text == "two" and second.turns == 1
    assert (second.usage.input_tokens, second.usage.output_tokens) == (2, 3)
    assert len(second.events) == 3 and second.custom_tool_uses == ()
    assert provider.inputs[-1] == [{"type": "user.message", "text": "second"}]


@pytest.mark.parametrize("streaming", STREAMING)
async def test_S70_Better_follow_up_during_a_turn_waits_for_the_result(streaming: bool) -> None:
    provider = ScriptedProvider([end("one"), end("two")], streaming=streaming, turn_delay=0.05)
    async with open_session(provider, handler=Recorder(), prompt="first") as session:
        await session.message("queued")  # the first request is still in flight
        results = [await session.next_result(), await session.next_result()]
    assert [r.unwrap().text for r in results] == ["one", "two"]
    assert [r.unwrap().turns for r in results] == [1, 1]
    assert provider.inputs == [
        [{"type": "user.message", "text": "first"}],
        [{"type": "user.message", "text": "queued"}],
    ]


async def test_live_session_without_prompt_waits_for_a_message() -> None:
    provider = ScriptedProvider([end("hello")], streaming=True)
    async with open_session(provider, handler=Recorder()) as session:
        await anyio.sleep(0.01)
        assert provider.inputs == [] and session.idle
        await session.message("hi")
        assert (await session.next_result()).unwrap().text == "hello"


@pytest.mark.parametrize("streaming", STREAMING)
async def test_S66_Better_errors_are_reported_and_the_session_stays_usable(streaming: bool) -> None:
    provider = ScriptedProvider(
        [calls(tool("a", "t1")), calls(tool("a", "t2")), end("recovered")], streaming=streaming
    )
    async with open_session(provider, handler=Recorder(), prompt="go", max_turns=1) as session:
        first = await session.next_result()
        assert isinstance(first.failure(), MaxTurnsExceeded)
        await session.message("again")
        provider.turns.pop(0)  # the refused turn never happened; drop its script entry
        assert (await session.next_result()).unwrap().text == "recovered"


async def test_S23_Better_refused_push_on_a_live_session_is_reported() -> None:
    provider = ScriptedProvider([end("a"), end("b")], streaming=True, push_failures=[1])
    async with open_session(provider, handler=Recorder(), prompt="go") as session:
        assert (await session.next_result()).unwrap().text == "a"
        await session.message("will be refused")
        failed = await session.next_result()
        assert isinstance(failed.failure(), ProviderError)
        await session.message("accepted")
        provider.turns.insert(0, end("c"))
        assert (await session.next_result()).unwrap().text == "c"


async def test_S67_send_event_pushes_verbatim_without_reset_and_its_turn_joins_the_request() -> None:
    provider = ScriptedProvider([end("one", i=1, o=1)], streaming=True)
    async with open_session(provider, handler=Recorder(), prompt="go") as session:
        first = (await session.next_result()).unwrap()
        confirmation = {"type": "user.tool_confirmation", "tool_use_id": "x", "result": "allow"}
        assert await session.send_event(confirmation) == Success(None)
        assert provider.inputs[-1] == [confirmation]
        provider.emit(
            text("two"), usage(2, 2), {"type": "idle", "stop_reason": {"type": "end_turn"}, "id": "z9"}
        )
        second = (await session.next_result()).unwrap()
    assert first.turns == 1
    assert second.turns == 2 and second.usage.input_tokens == 3  # S-37: no reset on send_event
    assert len(second.events) == len(first.events) + 3  # S-29: earlier turns not duplicated


async def test_S68_X13_send_event_on_request_response_is_unsupported() -> None:
    provider = ScriptedProvider([end()])
    async with open_session(provider, handler=Recorder(), prompt="go") as session:
        await session.next_result()
        outcome = await session.send_event({"type": "anything"})
    assert outcome == Failure(Unsupported(operation="send_event"))


async def test_async_iteration_yields_one_result_per_request_then_closed() -> None:
    provider = ScriptedProvider([end("a"), end("b")])
    seen: list[str] = []
    async with open_session(provider, handler=Recorder(), prompt="go") as session:
        async for outcome in session:
            seen.append(outcome.unwrap().text)
            if len(seen) == 1:
                await session.message("more")
            else:
                break
    assert seen == ["a", "b"]
    assert await session.next_result() == Failure(Closed())
    assert provider.closed == 1


async def test_S64_terminated_results_are_delivered_too() -> None:
    provider = ScriptedProvider([[text("x"), {"type": "idle", "stop_reason": {"type": "error"}, "id": "q"}]])
    async with open_session(provider, handler=Recorder(), prompt="go") as session:
        r = (await session.next_result()).unwrap()
    assert r.terminal is Terminal.TERMINATED
