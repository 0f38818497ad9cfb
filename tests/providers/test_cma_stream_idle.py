"""The CMA event stream's idle timeout: silence fails the stream, data arriving keeps it open."""

from __future__ import annotations

from typing import Any

import anyio
from returns.result import Failure

from rma.errors import StreamDropped
from rma_shell.providers.claude.provider import ClaudeManagedAgents, CMAConn
from rma_shell.testing import CMAEmulator, cma
from tests.helpers import cma_agent_and_environment

KEY = "sk-ant-test-idle"


async def _stream_until_silent(
    emu: CMAEmulator, idle_s: float, emits: int, every_s: float
) -> tuple[Any, list[Any]]:
    provider = ClaudeManagedAgents(
        api_key=KEY,
        base_url=emu.base_url,
        env={},
        stream_idle_timeout=idle_s,
        **cma_agent_and_environment(emu, KEY),
    )
    try:
        client = provider.client().unwrap()
        body = {"agent": provider.agent_id, "environment_id": provider.environment_id}
        session_id = (await client.create_session(body)).unwrap()["id"]
        received: list[Any] = []
        connected = anyio.Event()

        async def on_connected() -> None:
            connected.set()

        async def on_event(event: Any) -> None:
            received.append(event)

        async def emit() -> None:
            await connected.wait()
            for _ in range(emits):
                await anyio.sleep(every_s)
                emu.emit(session_id, cma.status_running())

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(emit)
                ended = await provider.stream(CMAConn(session_id), on_connected, on_event)
        return ended, received
    finally:
        await provider.close()


async def test_silence_beyond_stream_idle_timeout_s_fails_the_stream() -> None:
    with CMAEmulator([], api_key=KEY) as emu:
        ended, received = await _stream_until_silent(emu, idle_s=0.3, emits=0, every_s=0)
    assert received == []
    assert isinstance(ended, Failure)
    error = ended.failure()
    assert isinstance(error, StreamDropped)
    assert "no data for 0.3s" in error.detail


async def test_events_arriving_keep_the_stream_open_past_the_idle_timeout() -> None:
    # 8 events 0.25 s apart (2 s in all) against a 1 s idle timeout: the deadline moves on with
    # the data, so the stream fails only once they stop. Each gap leaves 0.75 s for a busy
    # machine's stalls (0.15 s against 0.4 s left 0.25 s, which a loaded CI can lose).
    with CMAEmulator([], api_key=KEY) as emu:
        ended, received = await _stream_until_silent(emu, idle_s=1.0, emits=8, every_s=0.25)
    assert [e["type"] for e in received] == ["session.status_running"] * 8
    assert isinstance(ended, Failure)
    assert isinstance(ended.failure(), StreamDropped)
