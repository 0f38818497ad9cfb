"""Local's own connection pool: many sessions on one provider queue fairly for its connections.

The figures live in ``bench/scale.py --local`` (its ``--quick`` runs the 1,000-session case);
these tests pin the behaviour: no more requests reach the server at once than the pool has
connections, 1,000 concurrent sessions on one provider all finish, and the option is checked.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import httpx
import pytest
from returns.result import Failure

from rma.errors import InvalidOpts
from rma_shell import run
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator

STEP = {"name": "step", "description": "Run the step", "input_schema": {"type": "object"}}


class Handler:
    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return "step done"


class Overlap:
    """A scripted reply (tool call, then text) that records how many requests overlap.

    The first ``size`` requests wait (up to 10 s) until ``size`` are in flight at once, so a
    pool that fills every connection shows it however the OS schedules a busy machine; a
    pool that opens fewer leaves them waiting out the 10 s and the peak short."""

    def __init__(self, size: int) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.peak = 0
        self.arrived = 0
        self.size = size
        self.full = threading.Event()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.in_flight += 1
            self.arrived += 1
            self.peak = max(self.peak, self.in_flight)
            first = self.arrived <= self.size
            if self.in_flight >= self.size:
                self.full.set()
        if first:
            self.full.wait(10)
        time.sleep(0.01)  # later requests overlap too: a pool that opened more would show it
        with self.lock:
            self.in_flight -= 1
        if any(m.get("role") == "tool" for m in body["messages"]):
            return {"content": "done"}
        return {"tool_calls": [{"name": "step", "arguments": {}}]}


async def _run_many(provider: Local, sessions: int) -> list[Any]:
    results: list[Any] = []

    async def one() -> None:
        results.append(await run(provider, handler=Handler(), prompt="go", max_turns=5, timeout=60))

    async with anyio.create_task_group() as tg:
        for _ in range(sessions):
            tg.start_soon(one)
    return results


@pytest.mark.parametrize("size", [1, 3])
async def test_max_connections_bounds_the_requests_in_flight_and_every_session_finishes(size: int) -> None:
    overlap = Overlap(size)
    sessions = 24
    with OpenAIEmulator([overlap] * (2 * sessions)) as emu:
        provider = Local(base_url=emu.base_url, model="m", tools=[STEP], max_connections=size)
        try:
            results = await _run_many(provider, sessions)
        finally:
            await provider.close()
    assert [r.unwrap().turns for r in results] == [2] * sessions
    assert overlap.peak == size  # the queue fills every connection and never more
    assert len(emu.requests) == 2 * sessions  # nothing was retried


def two_turns(body: dict[str, Any]) -> dict[str, Any]:
    if any(m.get("role") == "tool" for m in body["messages"]):
        return {"content": "done"}
    return {"tool_calls": [{"name": "step", "arguments": {}}]}


@pytest.mark.trio_only  # ~7 s on the reference backend; the bench measures both
async def test_1000_concurrent_two_turn_sessions_on_one_default_provider_all_finish() -> None:
    # Before the lanes, not one of them finished within 40 s (httpcore's pool bookkeeping).
    sessions = 1_000
    with OpenAIEmulator([two_turns] * (2 * sessions)) as emu:
        provider = Local(base_url=emu.base_url, model="m", tools=[STEP])
        started = time.monotonic()
        try:
            with anyio.fail_after(50):
                results = await _run_many(provider, sessions)
        finally:
            await provider.close()
        elapsed = time.monotonic() - started
    assert len(results) == sessions and all(r.unwrap().turns == 2 for r in results), elapsed
    assert len(emu.requests) == 2 * sessions


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10"])
async def test_a_bad_max_connections_is_refused_by_name(bad: Any) -> None:
    got = await run(Local(model="m", max_connections=bad), handler=Handler(), prompt="go", timeout=5)
    assert isinstance(got, Failure)
    error = got.failure()
    assert isinstance(error, InvalidOpts) and error.option == "max_connections"


async def test_max_connections_with_a_caller_client_or_chat_is_refused_not_ignored() -> None:
    async with httpx.AsyncClient() as mine:
        with_client = await run(
            Local(model="m", http_client=mine, max_connections=5), handler=Handler(), prompt="go", timeout=5
        )

    def chat(body: Any) -> dict[str, Any]:
        return {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}

    with_chat = await run(Local(chat=chat, max_connections=5), handler=Handler(), prompt="go", timeout=5)
    for got in (with_client, with_chat):
        assert isinstance(got, Failure)
        error = got.failure()
        assert isinstance(error, InvalidOpts) and error.option == "max_connections"
