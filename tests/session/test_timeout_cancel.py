"""Timeouts, cancellation and input serialization (S-81…S-84, S-90…S-92, S-67/S-68)."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
import trio
import trio.testing
from returns.result import Failure, Success

from rma.errors import ProviderError, Timeout, Unsupported
from rma_shell import Telemetry, open_session, run
from rma_shell.testing.scripted import ScriptedProvider
from tests.helpers import calls, end, idle, text, tool

INTERRUPT = {"type": "user.interrupt"}


def _task_count() -> int:
    """Every task currently alive in this trio run."""

    def walk(task: trio.lowlevel.Task) -> int:
        return 1 + sum(walk(child) for nursery in task.child_nurseries for child in nursery.child_tasks)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    return walk(root)


class _Events:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, name: str, measurements: Any, metadata: Any) -> None:
        self.events.append((name, dict(measurements), dict(metadata)))


# ── S-81 / S-83 / S-84: run's timeout cancels everything in flight ─────────────────


@pytest.mark.parametrize("streaming", [False, True])
async def test_S81_S84_timeout_cancels_a_hung_async_tool(
    autojump_clock: trio.testing.MockClock, streaming: bool
) -> None:
    cleaned_up: list[str] = []
    before = _task_count()

    async def hang(name: str, input: dict[str, Any], ctx: Any) -> str:
        try:
            await anyio.sleep_forever()
        finally:
            cleaned_up.append(name)
        return "unreachable"  # pragma: no cover

    tel = Telemetry()
    seen = _Events()
    tel.attach("all", "rma.*", seen)
    provider = ScriptedProvider([calls(tool("hang", "t1"), tool("hang2", "t2")), end()], streaming=streaming)
    start = anyio.current_time()
    outcome = await run(provider, handler=hang, prompt="go", timeout=5, telemetry=tel)
    error = outcome.failure()
    assert error == Timeout(timeout_s=5, remote_stop="not_needed", result=error.result)
    # The turn that asked for the tools completed: the timeout keeps it (issue #12).
    assert error.result is not None and error.result.turns == 1 and error.result.reason == "timeout"
    assert anyio.current_time() - start == pytest.approx(5)
    assert sorted(cleaned_up) == ["hang", "hang2"]  # the tools were cancelled, their finally ran
    assert provider.closed == 1  # aclose called once
    assert provider.active_streams == 0
    assert len(provider.inputs) == 1  # no resume was sent after the timeout
    exceptions = [md for name, _, md in seen.events if name == "rma.tool.exception"]
    assert sorted(md["tool"] for md in exceptions) == ["hang", "hang2"]
    assert {md["kind"] for md in exceptions} == {"Cancelled"}
    assert _task_count() == before  # nothing left running


async def test_S81_S83_timeout_tears_down_a_hung_stream(autojump_clock: trio.testing.MockClock) -> None:
    before = _task_count()
    provider = ScriptedProvider([[text("partial, never finishes")]], streaming=True)
    outcome = await run(provider, handler=lambda n, i, c: "ok", prompt="go", timeout=3)
    assert outcome == Failure(Timeout(timeout_s=3, remote_stop="not_needed"))
    assert provider.streams_opened == 1
    assert provider.active_streams == 0  # the stream task is gone
    assert provider.closed == 1
    assert _task_count() == before


async def test_S81_S83_timeout_cancels_a_hung_poll(autojump_clock: trio.testing.MockClock) -> None:
    before = _task_count()
    provider = ScriptedProvider([end()], turn_delay=1_000)
    start = anyio.current_time()
    outcome = await run(provider, handler=lambda n, i, c: "ok", prompt="go", timeout=2)
    assert outcome == Failure(Timeout(timeout_s=2, remote_stop="not_needed"))
    assert anyio.current_time() - start == pytest.approx(2)  # did not wait for the poll
    assert provider.turns  # the poll never completed: its turn is still scripted
    assert provider.closed == 1
    assert _task_count() == before


async def test_S84_a_blocking_sync_tool_does_not_prevent_the_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = threading.Event()
    entered = threading.Event()

    def blocking(name: str, input: dict[str, Any], ctx: Any) -> str:
        entered.set()
        gate.wait(10)  # blocks a worker thread; the thread cannot be cancelled
        return "late"

    before = _task_count()
    provider = ScriptedProvider([calls(tool("block", "t1")), end()])
    try:
        with anyio.fail_after(60):  # mock time: fails only if run() never returns
            outcome = await run(provider, handler=blocking, prompt="go", timeout=1)
    finally:
        gate.set()  # release the abandoned worker thread
    error = outcome.failure()
    assert error == Timeout(timeout_s=1, remote_stop="not_needed", result=error.result)
    assert error.result is not None and error.result.turns == 1
    assert provider.closed == 1
    assert len(provider.inputs) == 1  # the late result is never sent
    assert _task_count() == before


async def test_S84_cancelling_the_caller_cancels_tools_and_closes_the_provider(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cleaned_up: list[str] = []

    async def hang(name: str, input: dict[str, Any], ctx: Any) -> str:
        try:
            await anyio.sleep_forever()
        finally:
            cleaned_up.append(name)
        return "unreachable"  # pragma: no cover

    provider = ScriptedProvider([calls(tool("hang", "t1")), end()], streaming=True)
    with anyio.move_on_after(4) as scope:
        await run(provider, handler=hang, prompt="go", timeout=None)
    assert scope.cancelled_caught
    assert cleaned_up == ["hang"]
    assert provider.active_streams == 0
    assert provider.closed == 1


# ── S-90 / S-91: events that arrive while tools run belong to the next turn ────────


async def test_S90_S91_stream_events_arriving_while_tools_run_form_the_next_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    next_turn = [text("after the tools"), *end("")[1:]]
    provider = ScriptedProvider([calls(tool("work", "t1")), []], streaming=True)
    observed: list[Any] = []
    during_tool: list[Any] = []
    snapshot: dict[str, int] = {}

    class Handler:
        async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any) -> str:
            snapshot["before"] = len(observed)
            provider.emit(*next_turn)  # the host runs ahead: turn 2 is on the wire already
            await anyio.sleep(1)  # the stream delivers all of it while we are still running
            during_tool.extend(observed[snapshot["before"] :])
            return "ok"

        def handle_event(self, event: Any, ctx: Any) -> None:
            observed.append(event)

    outcome = await run(provider, handler=Handler(), prompt="go", timeout=60)
    assert isinstance(outcome, Success), outcome
    r = outcome.unwrap()
    # Not processed while the tools ran (no boundary for turn N+1 during turn N's tools)…
    assert during_tool == []
    # …not lost by the post-push reset, and they formed turn 2.
    assert (r.turns, r.text) == (2, "after the tools")
    assert list(r.events[-len(next_turn) :]) == next_turn
    assert provider.inputs[1] == [
        {"type": "tool_result", "tool_use_id": "t1", "text": "ok", "is_error": False}
    ]
    assert len(provider.inputs) == 2
    assert observed[-len(next_turn) - 1 :] == [
        next_turn[0],
        {"type": "rma.text_delta", "text": "after the tools"},
        *next_turn[1:],
    ]


async def test_S91_a_boundary_arriving_while_tools_run_is_not_taken_for_this_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A stale idle emitted during the tools must not end the request before the resume."""
    provider = ScriptedProvider([calls(tool("work", "t1")), end("real answer")], streaming=True)

    async def handler(name: str, input: dict[str, Any], ctx: Any) -> str:
        provider.emit(idle("end_turn"))  # a stray boundary on the wire while we work
        await anyio.sleep(1)
        return "ok"

    outcome = await run(provider, handler=handler, prompt="go", timeout=60)
    assert isinstance(outcome, Success), outcome
    assert len(provider.inputs) == 2  # the resume was sent
    # The stray idle was processed after the resume as its own (empty) turn 2.
    r = outcome.unwrap()
    assert r.turns == 2
    assert r.stop_reason == {"type": "end_turn"}


# ── S-92 / S-67 / S-68: send_event ────────────────────────────────────────────────


async def test_S92_S67_send_event_mid_turn_is_pushed_at_once(autojump_clock: trio.testing.MockClock) -> None:
    provider = ScriptedProvider([[text("working")]], streaming=True)
    saw_text = anyio.Event()

    class Handler:
        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any) -> str:
            return "ok"

        def handle_event(self, event: Any, ctx: Any) -> None:
            if isinstance(event, dict) and event.get("type") == "text":
                saw_text.set()

    async with open_session(provider, handler=Handler(), prompt="go") as session:
        with anyio.fail_after(5):
            await saw_text.wait()  # mid-turn: no boundary yet
        start = anyio.current_time()
        reply = await session.send_event(INTERRUPT)
        assert reply == Success(None)
        assert anyio.current_time() == start  # pushed at once, no waiting for the boundary
        assert provider.inputs[-1] == [INTERRUPT]  # verbatim
        provider.emit(idle("end_turn"))
        with anyio.fail_after(5):
            result = await session.next_result()
    assert isinstance(result, Success), result
    r = result.unwrap()
    assert r.turns == 1 and r.text == "working"
    assert INTERRUPT not in r.events  # the pushed event is an input, not a provider event


async def test_S90_S92_send_event_while_tools_run_waits_for_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider([calls(tool("slow", "t1")), end("fin")], streaming=True)
    started, release = anyio.Event(), anyio.Event()

    async def handler(name: str, input: dict[str, Any], ctx: Any) -> str:
        started.set()
        await release.wait()
        return "ok"

    replies: list[Any] = []
    async with open_session(provider, handler=handler, prompt="go") as session:
        with anyio.fail_after(5):
            await started.wait()

        async def send() -> None:
            replies.append(await session.send_event(INTERRUPT, timeout=100))

        async with anyio.create_task_group() as nursery:
            nursery.start_soon(send)
            await anyio.sleep(10)
            assert [INTERRUPT] not in provider.inputs  # held while the tools run
            assert replies == []
            release.set()
        assert replies == [Success(None)]
        resume = [{"type": "tool_result", "tool_use_id": "t1", "text": "ok", "is_error": False}]
        assert provider.inputs.index(resume) < provider.inputs.index([INTERRUPT])
        with anyio.fail_after(5):
            result = await session.next_result()
    assert isinstance(result, Success), result
    assert result.unwrap().text == "fin"


async def test_S92_send_event_timeout_while_tools_run(autojump_clock: trio.testing.MockClock) -> None:
    provider = ScriptedProvider([calls(tool("slow", "t1")), end("fin")], streaming=True)
    started, release = anyio.Event(), anyio.Event()

    async def handler(name: str, input: dict[str, Any], ctx: Any) -> str:
        started.set()
        await release.wait()
        return "ok"

    async with open_session(provider, handler=handler, prompt="go") as session:
        await started.wait()
        reply = await session.send_event(INTERRUPT, timeout=2)
        assert reply == Failure(Timeout(timeout_s=2, operation="send_event"))
        release.set()
        with anyio.fail_after(5):
            result = await session.next_result()
        assert isinstance(result, Success), result


async def test_S68_send_event_on_a_request_response_host_is_unsupported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider = ScriptedProvider([end("a")], turn_delay=5)
    async with open_session(provider, handler=lambda n, i, c: "ok", prompt="go") as session:
        await anyio.sleep(1)  # mid-turn: the poll is in flight
        reply = await session.send_event(INTERRUPT)
        assert reply == Failure(Unsupported(operation="send_event"))
        with anyio.fail_after(10):
            result = await session.next_result()
        assert isinstance(result, Success), result
        assert session.idle
        reply = await session.send_event(INTERRUPT)  # idle: still unsupported
        assert reply == Failure(Unsupported(operation="send_event"))
    assert all(INTERRUPT not in (i if isinstance(i, list) else []) for i in provider.inputs)


async def test_S81_default_timeout_is_600_seconds(autojump_clock: trio.testing.MockClock) -> None:
    provider = ScriptedProvider([end()], turn_delay=10_000)
    start = anyio.current_time()
    outcome = await run(provider, handler=lambda n, i, c: "ok", prompt="go")
    assert outcome == Failure(Timeout(timeout_s=600.0, remote_stop="not_needed"))
    assert anyio.current_time() - start == pytest.approx(600)


async def test_S92_send_event_reply_is_the_push_result_and_the_session_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # inputs[0] is the kickoff; the push at index 1 (our send_event) is refused by the host.
    provider = ScriptedProvider([[text("working")]], streaming=True, push_failures=[1])
    async with open_session(provider, handler=lambda n, i, c: "ok", prompt="go") as session:
        await anyio.sleep(1)
        reply = await session.send_event(INTERRUPT)
        assert isinstance(reply, Failure)
        assert isinstance(reply.failure(), ProviderError)
        provider.emit(idle("end_turn"))
        with anyio.fail_after(5):
            result = await session.next_result()
    assert isinstance(result, Success), result
    assert result.unwrap().text == "working"
