"""A one-shot Claude Managed Agents run() against the loopback emulator survives what a live
session survives (issue #12): a dropped stream (R-14 Better), a 429/529/5xx on the stream's
connect (C-46 Better), the keep-alive race on a POST; and the stream lifecycle telemetry
(M-4: ``rma.stream.connected`` / ``.done`` / ``.error``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from rma_shell import run
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.seams import Seams
from rma_shell.telemetry import Telemetry
from rma_shell.testing import (
    CMAEmulator,
    close_idle_connection,
    drop_stream_after,
    error_frame,
    status_once,
    terminal_while_disconnected,
    text_turn,
    tool_turn,
)
from tests.providers.test_cma_session import KEY, Tools, setup

STREAM = r"/events/stream$"


@pytest.fixture
async def providers() -> AsyncIterator[list[ClaudeManagedAgents]]:
    made: list[ClaudeManagedAgents] = []
    yield made
    for p in made:
        await p.close()


def script() -> list[Any]:
    return [tool_turn(("fetch", {"n": 1})), tool_turn(("fetch", {"n": 2})), text_turn("all done")]


async def a_run(emu: CMAEmulator, providers: list[ClaudeManagedAgents], **kw: Any) -> Any:
    provider = setup(
        emu,
        _seams=Seams(rand=lambda: 0.0),
    )
    providers.append(provider)
    tools = Tools()
    with anyio.fail_after(30):
        outcome = await run(provider, handler=tools, prompt="go", timeout=25, **kw)
    return outcome, tools


def comparable(outcome: Any) -> tuple[Any, ...]:
    r = outcome.unwrap()
    kinds = [e.get("type") for e in r.events]
    return (r.text, r.terminal, r.turns, [u.name for u in r.custom_tool_uses], kinds, r.usage)


async def test_R14_Better_a_sync_run_survives_drops_and_ends_as_undisturbed(
    providers: list[ClaudeManagedAgents],
) -> None:
    with CMAEmulator(script(), api_key=KEY) as emu:
        base, base_tools = await a_run(emu, providers)
    # Drops at several positions, each once per stream: mid-turn, around tool uses, at the end.
    for at in (0, 1, 3, 5, 8):
        with CMAEmulator(script(), api_key=KEY, faults=[drop_stream_after(at, times=2)]) as emu:
            outcome, tools = await a_run(emu, providers)
            streams = [
                q
                for q in emu.requests
                if q.method == "GET" and q.path.split("?")[0].endswith("/events/stream")
            ]
            posts = [q for q in emu.requests if q.method == "POST" and q.path.endswith("/events")]
        assert comparable(outcome) == comparable(base), f"drop after {at}"
        assert tools.calls == base_tools.calls, f"drop after {at}: each tool use runs once"
        assert len(streams) >= 2 and len(posts) == 3, f"drop after {at}: one kickoff, two resumes"


async def test_R14_R18_a_terminal_while_a_sync_run_is_disconnected_is_observed(
    providers: list[ClaudeManagedAgents],
) -> None:
    with CMAEmulator(script(), api_key=KEY, faults=[terminal_while_disconnected()]) as emu:
        outcome, tools = await a_run(emu, providers)
    r = outcome.unwrap()
    assert r.text == "all done" and len(tools.calls) == 2


@pytest.mark.parametrize(
    "fault",
    [
        status_once(429, method="GET", path=STREAM),
        status_once(429, retry_after=0.2, method="GET", path=STREAM),
        status_once(529, retry_after_ms=150, method="GET", path=STREAM),
        status_once(503, method="GET", path=STREAM, times=2),
        status_once(500, method="GET", path=STREAM),
    ],
    ids=["429", "429-retry-after", "529-retry-after-ms", "503-twice", "500"],
)
async def test_C46_Better_a_transient_answer_on_the_stream_connect_is_retried(
    fault: Any, providers: list[ClaudeManagedAgents]
) -> None:
    # Issue #12: this ended the run with http_error 429.
    with CMAEmulator([text_turn("ok")], api_key=KEY, faults=[fault]) as emu:
        outcome, _ = await a_run(emu, providers)
        streams = [
            q for q in emu.requests if q.method == "GET" and q.path.split("?")[0].endswith("/events/stream")
        ]
    assert outcome.unwrap().text == "ok"
    assert len(streams) == 1 + fault.times


async def test_C46_the_stream_connect_honours_retry_after(providers: list[ClaudeManagedAgents]) -> None:
    fault = status_once(429, retry_after=0.4, method="GET", path=STREAM)
    with CMAEmulator([text_turn("ok")], api_key=KEY, faults=[fault]) as emu:
        start = anyio.current_time()
        outcome, _ = await a_run(emu, providers)
        elapsed = anyio.current_time() - start
    assert outcome.unwrap().text == "ok" and elapsed >= 0.4


async def test_a_kickoff_post_on_a_connection_the_server_closed_is_retried_on_a_fresh_one(
    providers: list[ClaudeManagedAgents],
) -> None:
    # The create POST leaves a kept-alive connection; the kickoff goes out on it and the
    # server, having closed it, never answers. Today's Claude client failed with transport_error.
    fault = close_idle_connection(method="POST", path=r"/events$")
    with CMAEmulator([text_turn("ok")], api_key=KEY, faults=[fault]) as emu:
        outcome, _ = await a_run(emu, providers)
        kickoffs = [q for q in emu.requests if q.method == "POST" and q.path.endswith("/events")]
        closed = emu.closed_idle
    assert outcome.unwrap().text == "ok"
    assert closed == 1 and len(kickoffs) == 1  # the dropped one never reached the server


async def test_M4_stream_lifecycle_telemetry_carries_the_callers_metadata(
    providers: list[ClaudeManagedAgents],
) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    telemetry = Telemetry()
    telemetry.attach("t", "rma.stream.*", lambda n, m, md: seen.append((n, dict(md))))
    with CMAEmulator(script(), api_key=KEY, faults=[drop_stream_after(2)]) as emu:
        outcome, _ = await a_run(
            emu, providers, telemetry=telemetry, metadata={"team": "x", "session_id": "spoof"}
        )
    r = outcome.unwrap()
    lifecycle = [(n, md) for n, md in seen if n != "rma.stream.event"]
    names = [n for n, _ in lifecycle]
    assert names[:3] == ["rma.stream.connected", "rma.stream.error", "rma.stream.connected"]
    assert all(md["team"] == "x" and md["session_id"] == r.session_id for _, md in lifecycle)  # M-8
    error = lifecycle[1][1]
    assert error["reason"] == "stream_dropped" and error["gen"] == 0
    assert lifecycle[2][1]["gen"] == 1
    assert any(n == "rma.stream.event" for n, _ in seen)


async def test_M4_an_sse_error_frame_is_reported_as_a_stream_error(
    providers: list[ClaudeManagedAgents],
) -> None:
    seen: list[tuple[str, Any]] = []
    telemetry = Telemetry()
    names = ["rma.stream.connected", "rma.stream.done", "rma.stream.error"]
    telemetry.attach("t", names, lambda n, m, md: seen.append((n, md.get("reason"))))
    with CMAEmulator([text_turn("never")], api_key=KEY, faults=[error_frame(0)]) as emu:
        outcome, _ = await a_run(emu, providers, telemetry=telemetry)
    # A definite answer from the server: the run fails typed and does not reconnect.
    assert outcome.failure().kind == "provider_error"
    assert seen == [("rma.stream.connected", None), ("rma.stream.error", "provider_error")]


async def test_C46_R14_a_stream_connect_throttled_past_the_clients_retries_is_reconnected(
    providers: list[ClaudeManagedAgents],
) -> None:
    # max_retries=2: three 429s exhaust the client; the machine's reconnect (R-12 backoff)
    # opens the stream again, which gets two more 429s and then connects.
    fault = status_once(429, retry_after_ms=10, method="GET", path=STREAM, times=5)
    with CMAEmulator([text_turn("ok")], api_key=KEY, faults=[fault]) as emu:
        outcome, _ = await a_run(emu, providers)
        streams = [
            q for q in emu.requests if q.method == "GET" and q.path.split("?")[0].endswith("/events/stream")
        ]
        kickoffs = [q for q in emu.requests if q.method == "POST" and q.path.endswith("/events")]
    assert outcome.unwrap().text == "ok"
    assert len(streams) == 6 and len(kickoffs) == 1
