"""The shell on either event loop (issue #13 §1): ``run`` and ``open_session`` under
``asyncio.run``, uvloop and ``trio.run``; async tools and ``handle_event`` on the caller's own
loop (they can use the app's loop-bound resources); the run's timeout tearing down a hung
tool and a hung model call in real time on both backends."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import trio
import uvloop
from returns.result import Failure, Success

from rma.errors import Timeout
from rma_shell import open_session, run
from rma_shell.providers.local import Local
from rma_shell.seams import Seams
from rma_shell.testing import OpenAIEmulator, delay
from tests.helpers import RunDeadline

KEY = "sk-test-backends"
WEATHER = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}
CALL = {"tool_calls": [{"id": "call_w", "name": "get_weather", "arguments": {"city": "SF"}}]}


def local(emu: OpenAIEmulator, **kw: Any) -> Local:
    return Local(
        base_url=emu.base_url, model="m", api_key=KEY, tools=[WEATHER], _seams=Seams(rand=lambda: 0.0), **kw
    )


class Weather:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        self.calls.append(input)
        await anyio.lowlevel.checkpoint()
        return f"sunny in {input['city']}"


async def _two_turns() -> tuple[str, int, list[dict[str, Any]]]:
    with OpenAIEmulator([CALL, {"content": "Sunny in SF."}], api_key=KEY) as emu:
        handler = Weather()
        outcome = await run(local(emu), handler=handler, prompt="weather?", timeout=30)
    result = outcome.unwrap()
    return result.text, result.turns, handler.calls


def test_run_under_plain_asyncio_run() -> None:
    assert asyncio.run(_two_turns()) == ("Sunny in SF.", 2, [{"city": "SF"}])


def test_run_under_uvloop() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(_two_turns()) == ("Sunny in SF.", 2, [{"city": "SF"}])


def test_run_under_plain_trio_run() -> None:
    assert trio.run(_two_turns) == ("Sunny in SF.", 2, [{"city": "SF"}])


def test_a_live_session_under_plain_asyncio_run() -> None:
    async def main() -> list[str]:
        texts: list[str] = []
        with OpenAIEmulator([{"content": "one"}, {"content": "two"}], api_key=KEY) as emu:
            async with open_session(local(emu), handler=Weather(), prompt="first") as live:
                texts.append((await live.next_result()).unwrap().text)
                await live.message("second")
                async for outcome in live:  # an async iterator on every backend
                    texts.append(outcome.unwrap().text)
                    break
        return texts

    assert asyncio.run(main()) == ["one", "two"]


class _LoopBound:
    """A tool and an event observer that only work on the app's own event loop: the tool
    awaits a future the app created (asyncio) or an event the app owns (trio), and
    ``handle_event`` feeds the app's queue."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.seen: list[str] = []
        if backend == "asyncio":
            loop = asyncio.get_running_loop()
            self.started: Any = asyncio.Event()
            self.release: Any = loop.create_future()
            self.queue: Any = asyncio.Queue()
        else:
            self.started = trio.Event()
            self.release = trio.Event()
            self.send, self.queue = trio.open_memory_channel[str](100)

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        self.started.set()
        if self.backend == "asyncio":
            value = await self.release  # a future of the app's loop: fails on any other loop
        else:
            await self.release.wait()
            value = "released"
        return f"{name}: {value}"

    async def handle_event(self, event: dict[str, Any], ctx: object) -> None:
        kind = str(event.get("type"))
        if self.backend == "asyncio":
            self.queue.put_nowait(kind)
        else:
            self.send.send_nowait(kind)


async def test_async_tools_and_handle_event_run_on_the_callers_loop(anyio_backend_name: str) -> None:
    handler = _LoopBound(anyio_backend_name)
    outcomes: list[Any] = []
    with OpenAIEmulator([CALL, {"content": "done"}], api_key=KEY) as emu:

        async def session() -> None:
            outcomes.append(await run(local(emu), handler=handler, prompt="go", timeout=30))

        async with anyio.create_task_group() as tg:
            tg.start_soon(session)
            await handler.started.wait()
            if anyio_backend_name == "asyncio":
                handler.release.set_result("released")
            else:
                handler.release.set()
    result = outcomes[0].unwrap()
    assert result.text == "done"
    assert result.transcript is not None
    tool_messages = [m for m in result.transcript if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["get_weather: released"]
    kinds = []
    while True:
        try:
            queue = handler.queue
            kinds.append(queue.get_nowait() if anyio_backend_name == "asyncio" else queue.receive_nowait())
        except (asyncio.QueueEmpty, trio.WouldBlock):
            break
    assert "local.model_response" in kinds


async def test_the_timeout_cancels_a_hung_async_tool_in_real_time(monkeypatch: pytest.MonkeyPatch) -> None:
    cleaned: list[bool] = []
    hanging = anyio.Event()
    # Real time: real backends, a real HTTP host, the run's own timeout path. Only the moment
    # the deadline passes is the test's: once the tool hangs, however late a busy machine
    # gets there (at 0.5 s of wall time, the first model call could still be in flight).
    deadline = RunDeadline(monkeypatch)

    class Hangs:
        async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            try:
                hanging.set()
                await anyio.sleep_forever()
            finally:
                cleaned.append(True)  # the tool saw its cancellation
            raise AssertionError("unreachable")

    async def fire_once_hanging() -> None:
        await hanging.wait()
        deadline.fire()

    with OpenAIEmulator([CALL, {"content": "never"}], api_key=KEY) as emu:
        async with anyio.create_task_group() as tg:
            tg.start_soon(fire_once_hanging)
            outcome = await run(local(emu), handler=Hangs(), prompt="go", timeout=0.5)
    assert isinstance(outcome, Failure) and isinstance(outcome.failure(), Timeout)
    assert cleaned == [True]


async def test_the_timeout_tears_down_a_hung_model_call_in_real_time() -> None:
    with OpenAIEmulator([[delay(30), {"content": "late"}]], api_key=KEY) as emu:
        outcome = await run(local(emu), handler=Weather(), prompt="go", timeout=0.5)
        assert isinstance(outcome, Failure) and isinstance(outcome.failure(), Timeout)
    assert not isinstance(outcome, Success)


@pytest.mark.parametrize("stream", [False, True])
async def test_sync_tools_run_in_worker_threads_on_both_backends(stream: bool) -> None:
    import threading

    main_thread = threading.get_ident()
    threads: list[int] = []

    class Sync:
        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            threads.append(threading.get_ident())
            return "ok"

    with OpenAIEmulator([CALL, {"content": "done"}], api_key=KEY) as emu:
        outcome = await run(local(emu, stream=stream), handler=Sync(), prompt="go", timeout=30)
    assert outcome.unwrap().text == "done"
    assert threads and threads[0] != main_thread
