"""Cancellation that reaches the host (issue #15), through ``run`` and ``open_session``.

A run that times out or is cancelled, or a live session left mid-request, stops the host's
loop too: Claude Managed Agents gets a ``user.interrupt`` (and is confirmed once the session
reads idle), AgentCore a ``StopRuntimeSession`` (confirmed by its 200). The stop is shielded,
bounded by the run's ``stop_grace`` (``test_stop_grace``), and reported in
``Timeout.remote_stop``, the telemetry event ``rma.session.remote_stop`` and the ``rma.session``
log.

A run's timeout (or the caller's cancellation) lands where the test waits for it: once the
emulator has got the turn under way (``RunDeadline``, ``cancel_after``), not after a second of
wall time that a busy machine may spend before the session even exists.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest
import trio.testing
from returns.result import Failure, Success

from rma.errors import Timeout
from rma.session.options import DEFAULT_STOP_GRACE_S
from rma_shell import MemoryJournal, Telemetry, open_session, run
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator, delay
from rma_shell.testing import agentcore as ace
from rma_shell.testing import claude as cma
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.testing.claude import CMAEmulator
from tests.helpers import RunDeadline, cancel_after, cma_agent_and_environment

KEY = "sk-ant-test-5c1f"
SID = "rma-session-0123456789abcdef0123456789"
SESSION_HEADER = "x-amzn-bedrock-agentcore-runtime-session-id"

# A turn the host is still working on: the session reads running, the rest never comes unasked.
CMA_WORKING = [
    cma.status_running(),
    cma.model_request_start(),
    cma.agent_message("working"),
    cma.pause(),
    cma.agent_message("late"),
    cma.idle_end_turn(),
]
AC_WORKING = [
    ace.message_start(),
    ace.text_delta("working"),
    ace.pause(60),
    ace.text_delta("late"),
    ace.message_stop("end_turn"),
    ace.metadata(),
]


class Quiet:
    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return "ok"


class Stops:
    """Collects ``rma.session.remote_stop``."""

    def __init__(self) -> None:
        self.telemetry = Telemetry()
        self.events: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.telemetry.attach("stops", "rma.session.remote_stop", self)

    def __call__(self, name: str, measurements: Any, metadata: Any) -> None:
        self.events.append((dict(measurements), dict(metadata)))


@pytest.fixture
async def made() -> AsyncIterator[list[Any]]:
    providers: list[Any] = []
    yield providers
    for p in providers:
        await p.close()


def claude(emu: CMAEmulator, made: list[Any]) -> ClaudeManagedAgents:
    p = ClaudeManagedAgents(
        api_key=KEY, base_url=emu.base_url, env={}, max_retries=2, **cma_agent_and_environment(emu, KEY)
    )
    made.append(p)
    return p


def agentcore(emu: AgentCoreEmulator, made: list[Any]) -> BedrockAgentCore:
    p = BedrockAgentCore(
        harness_arn=emu.harness_arn,
        data_url=emu.base_url,
        control_url=emu.base_url,
        env=emu.credentials_env(),
        backoff_base=0.01,
        backoff_cap=0.02,
    )
    made.append(p)
    return p


def until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Wait in a worker thread (real time) for the emulator to get somewhere."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the emulator never got there")
        time.sleep(0.005)


def stop_requests(emu: AgentCoreEmulator) -> list[Any]:
    return [r for r in emu.requests if r.path.endswith("/stopruntimesession")]


@pytest.fixture
def deadline(monkeypatch: pytest.MonkeyPatch) -> RunDeadline:
    return RunDeadline(monkeypatch)


def cma_mid_turn(emu: CMAEmulator, nth_session: int = 1) -> Callable[[], None]:
    """Blocks until the emulator's ``nth_session`` has played "working" (and waits on its pause)."""

    def ready() -> None:
        until(lambda: len(emu.session_ids) >= nth_session, 30)
        emu.wait_for_event(emu.session_ids[nth_session - 1], "agent.message", 30)

    return ready


def agentcore_mid_turn(emu: AgentCoreEmulator) -> Callable[[], None]:
    """Blocks until the emulator has taken the invoke (its turn then pauses for 60 s)."""
    return lambda: until(lambda: SID in emu.sessions and emu.sessions[SID].invocations >= 1, 30)


async def timing_out_mid_turn(
    deadline: RunDeadline, emu: AgentCoreEmulator, provider: BedrockAgentCore, **options: Any
) -> Any:
    """``run`` on AgentCore whose timeout (``timeout=1.0``) elapses once the turn is under way.
    The stop's grace is a real-time bound on waiting for the host's confirmation (a retried
    conflict included): 30 s, so a loaded machine cannot turn "confirmed" into "unconfirmed";
    a confirmed stop returns as soon as it is confirmed."""
    options.setdefault("stop_grace", 30.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(deadline.fire_after, agentcore_mid_turn(emu))
        return await run(
            provider, handler=Quiet(), prompt="go", runtime_session_id=SID, timeout=1.0, **options
        )


# ── Claude Managed Agents: user.interrupt ─────────────────────────────────────────────


async def test_a_run_timing_out_mid_turn_interrupts_the_claude_session(
    made: list[Any], deadline: RunDeadline
) -> None:
    stops = Stops()
    with CMAEmulator([CMA_WORKING], api_key=KEY) as emu:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(deadline.fire_after, cma_mid_turn(emu))
                got = await run(
                    claude(emu, made),
                    handler=Quiet(),
                    prompt="go",
                    timeout=1.0,
                    stop_grace=30.0,  # a bound on the confirmation, not a delay (see timing_out_mid_turn)
                    telemetry=stops.telemetry,
                )
        error = got.failure()
        assert isinstance(error, Timeout) and error.remote_stop == "confirmed"
        assert str(error) == "timeout: run timed out after 1.0s; the host's loop was stopped (confirmed)"
        [session_id] = emu.session_ids
        assert emu.session(session_id)["status"] == "idle"
        assert len(emu.interrupts(session_id)) == 1
        texts = [e["content"][0]["text"] for e in emu.history(session_id) if e["type"] == "agent.message"]
        assert texts == ["working"]  # the host stopped mid-turn: the rest never came
    [(measurements, meta)] = stops.events
    assert (meta["outcome"], meta["reason"], meta["session_id"]) == ("confirmed", "timeout", session_id)
    assert meta["provider"] == "claude_managed_agents" and measurements["duration"] >= 0


async def test_a_cancelled_run_interrupts_the_claude_session_and_logs_it(
    made: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    stops = Stops()
    with CMAEmulator([CMA_WORKING], api_key=KEY) as emu:
        provider = claude(emu, made)
        with caplog.at_level(logging.INFO, logger="rma.session"), anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_after, scope, cma_mid_turn(emu))
                await run(provider, handler=Quiet(), prompt="go", timeout=60, telemetry=stops.telemetry)
        assert scope.cancelled_caught
        [session_id] = emu.session_ids
        assert emu.session(session_id)["status"] == "idle"
        assert len(emu.interrupts(session_id)) == 1
    [(_, meta)] = stops.events
    assert (meta["outcome"], meta["reason"]) == ("confirmed", "cancelled")
    [record] = [r for r in caplog.records if "stopping the host's loop" in r.getMessage()]
    assert record.getMessage() == "stopping the host's loop (cancelled): confirmed"
    assert (record.remote_stop, record.session_id) == ("confirmed", session_id)  # type: ignore[attr-defined]


async def test_leaving_a_live_session_mid_request_interrupts_it(made: list[Any]) -> None:
    stops = Stops()
    with CMAEmulator([CMA_WORKING], api_key=KEY) as emu:
        async with open_session(
            claude(emu, made), handler=Quiet(), prompt="go", telemetry=stops.telemetry
        ) as live:
            await anyio.to_thread.run_sync(until, lambda: bool(emu.session_ids))
            session_id = emu.session_ids[0]
            await anyio.to_thread.run_sync(emu.wait_for_event, session_id, "agent.message")
            assert not live.idle
        assert len(emu.interrupts(session_id)) == 1
        assert emu.session(session_id)["status"] == "idle"
    [(_, meta)] = stops.events
    assert (meta["outcome"], meta["reason"]) == ("confirmed", "closed")


async def test_a_session_left_idle_or_a_run_that_ended_asks_the_host_nothing(made: list[Any]) -> None:
    stops = Stops()
    with CMAEmulator([cma.text_turn("hi"), cma.text_turn("again")], api_key=KEY) as emu:
        provider = claude(emu, made)
        done = await run(provider, handler=Quiet(), prompt="go", telemetry=stops.telemetry)
        assert isinstance(done, Success)
        async with open_session(provider, handler=Quiet(), prompt="go", telemetry=stops.telemetry) as live:
            assert isinstance(await live.next_result(), Success)
        assert all(emu.interrupts(s) == [] for s in emu.session_ids)
    assert stops.events == []


async def test_a_journaled_run_cancelled_leaves_its_host_to_resume_but_a_timeout_stops_it(
    made: list[Any], deadline: RunDeadline
) -> None:
    with CMAEmulator([CMA_WORKING, CMA_WORKING], api_key=KEY) as emu:
        provider = claude(emu, made)
        journal = MemoryJournal()
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_after, scope, cma_mid_turn(emu))
                await run(provider, handler=Quiet(), prompt="go", journal=journal, journal_key="cancelled")
        [cancelled] = emu.session_ids
        assert emu.interrupts(cancelled) == []  # resume carries it on: the host keeps working
        assert emu.session(cancelled)["status"] == "running"
        async with anyio.create_task_group() as tg:
            tg.start_soon(deadline.fire_after, cma_mid_turn(emu, nth_session=2))
            got = await run(
                provider,
                handler=Quiet(),
                prompt="go",
                timeout=1.0,
                stop_grace=30.0,
                journal=journal,
                journal_key="timed_out",
            )
        assert got.failure().remote_stop == "confirmed"  # type: ignore[attr-defined]
        timed_out = next(s for s in emu.session_ids if s != cancelled)
        assert len(emu.interrupts(timed_out)) == 1


async def test_a_refused_interrupt_says_failed(made: list[Any], deadline: RunDeadline) -> None:
    with CMAEmulator([CMA_WORKING], api_key=KEY) as emu:
        provider = claude(emu, made)
        outcome: list[Any] = []

        async def go() -> None:
            outcome.append(await run(provider, handler=Quiet(), prompt="go", timeout=1.0))

        async with anyio.create_task_group() as tg:
            tg.start_soon(go)
            await anyio.to_thread.run_sync(cma_mid_turn(emu))
            session_id = emu.session_ids[0]
            emu.inject(cma.status_once(403, method="POST", path=r"/events$"))  # past the kickoff
            deadline.fire()
        [got] = outcome
        error = got.failure()
        assert isinstance(error, Timeout) and error.remote_stop == "failed"
        assert str(error).endswith("stopping the host's loop failed: it may still be running")
        assert emu.interrupts(session_id) == []


# ── Bedrock AgentCore: StopRuntimeSession ─────────────────────────────────────────────


async def test_a_run_timing_out_mid_turn_stops_the_runtime_session(
    made: list[Any], deadline: RunDeadline
) -> None:
    stops = Stops()
    with AgentCoreEmulator([AC_WORKING]) as emu:
        with anyio.fail_after(30):
            got = await timing_out_mid_turn(deadline, emu, agentcore(emu, made), telemetry=stops.telemetry)
        error = got.failure()
        assert isinstance(error, Timeout) and error.remote_stop == "confirmed"
        [stop] = emu.stops
        assert (stop.runtime_session_id, stop.target, stop.qualifier) == (SID, emu.harness_arn, None)
        assert emu.sessions[SID].turns_played == 0  # the turn was cut, not played
    [(_, meta)] = stops.events
    assert (meta["outcome"], meta["reason"], meta["provider"]) == (
        "confirmed",
        "timeout",
        "bedrock_agentcore",
    )


async def test_the_stop_request_is_the_one_botocore_builds(made: list[Any], deadline: RunDeadline) -> None:
    with AgentCoreEmulator([AC_WORKING]) as emu:
        got = await timing_out_mid_turn(deadline, emu, agentcore(emu, made))
        assert got.failure().remote_stop == "confirmed"  # type: ignore[attr-defined]
        boto = _boto_client(emu)
        await anyio.to_thread.run_sync(
            lambda: boto.stop_runtime_session(agentRuntimeArn=emu.harness_arn, runtimeSessionId=SID)
        )
        ours, theirs = stop_requests(emu)
    assert (ours.method, ours.path) == (theirs.method, theirs.path)
    assert set(ours.body) == set(theirs.body) == {"clientToken"}
    assert len(ours.body["clientToken"]) >= 33
    assert ours.headers[SESSION_HEADER] == theirs.headers[SESSION_HEADER] == SID
    assert ours.headers["content-type"] == "application/json"


async def test_a_retryable_conflict_is_retried_with_the_same_client_token(
    made: list[Any], deadline: RunDeadline
) -> None:
    conflict = ace.error_once(409, "RetryableConflictException", operation="StopRuntimeSession")
    with AgentCoreEmulator([AC_WORKING], faults=[conflict]) as emu:
        got = await timing_out_mid_turn(deadline, emu, agentcore(emu, made))
        assert got.failure().remote_stop == "confirmed"  # type: ignore[attr-defined]
        first, second = stop_requests(emu)
        assert first.body["clientToken"] == second.body["clientToken"]
        assert len(emu.stops) == 1


async def test_a_refused_stop_says_failed(made: list[Any], deadline: RunDeadline) -> None:
    stops = Stops()
    denied = ace.error_once(403, "AccessDeniedException", operation="StopRuntimeSession")
    with AgentCoreEmulator([AC_WORKING], faults=[denied]) as emu:
        got = await timing_out_mid_turn(deadline, emu, agentcore(emu, made), telemetry=stops.telemetry)
        error = got.failure()
        assert isinstance(error, Timeout) and error.remote_stop == "failed"
        assert str(error).endswith("stopping the host's loop failed: it may still be running")
        assert emu.stops == ()
    [(_, meta)] = stops.events
    assert (meta["outcome"], meta["error"]) == ("failed", "http_error")
    assert "AccessDeniedException" in meta["detail"]


# ── a stop that hangs: bounded by its own deadline (virtual time) ─────────────────────


async def test_a_hanging_stop_returns_within_its_grace_unconfirmed(
    mock_clock: trio.testing.MockClock, made: list[Any]
) -> None:
    stops = Stops()
    with AgentCoreEmulator([AC_WORKING], faults=[ace.hang_stop()]) as emu:
        provider = agentcore(emu, made)
        outcome: list[Any] = []

        async def go() -> None:
            got = await run(
                provider,
                handler=Quiet(),
                prompt="go",
                runtime_session_id=SID,
                timeout=1,
                stop_grace=0.5,
                telemetry=stops.telemetry,
            )
            outcome.append((got, anyio.current_time()))

        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(go)
            await anyio.to_thread.run_sync(until, lambda: SID in emu.sessions)
            mock_clock.jump(1)  # the run's deadline: the stop goes out, and hangs
            await anyio.to_thread.run_sync(until, lambda: bool(stop_requests(emu)))
            mock_clock.jump(0.5)
        [(got, ended)] = outcome
        assert got.failure().remote_stop == "unconfirmed"
        assert ended - start <= 1 + 0.5  # virtual seconds: no more than the deadline and its grace
        assert emu.stops == ()  # the emulator never got to stop anything
    [(measurements, meta)] = stops.events
    assert meta["outcome"] == "unconfirmed" and meta["detail"] == "no confirmation within 0.5s"
    assert measurements["duration"] >= 0


async def test_an_interrupt_whose_answer_never_comes_is_unconfirmed(
    mock_clock: trio.testing.MockClock, made: list[Any]
) -> None:
    with CMAEmulator([CMA_WORKING], api_key=KEY) as emu:
        provider = claude(emu, made)
        outcome: list[Any] = []

        async def go() -> None:
            outcome.append(await run(provider, handler=Quiet(), prompt="go", timeout=1))

        async with anyio.create_task_group() as tg:
            tg.start_soon(go)
            await anyio.to_thread.run_sync(until, lambda: bool(emu.session_ids))
            session_id = emu.session_ids[0]
            await anyio.to_thread.run_sync(emu.wait_for_event, session_id, "agent.message")
            # The interrupt is taken, but its answer trickles in far slower than the deadline.
            emu.inject(cma.trickle(method="POST", path=r"/events$", interval=60))
            mock_clock.jump(1)
            await anyio.to_thread.run_sync(until, lambda: bool(emu.interrupts(session_id)))
            mock_clock.jump(DEFAULT_STOP_GRACE_S)
        [got] = outcome
        assert got.failure().remote_stop == "unconfirmed"


# ── Local: the loop is in this process ────────────────────────────────────────────────


async def test_a_local_timeout_says_no_host_loop_needed_stopping() -> None:
    stops = Stops()
    with OpenAIEmulator([[delay(30), {"content": "late"}]], api_key="sk-local") as emu:
        provider = Local(base_url=emu.base_url, model="m", api_key="sk-local")
        try:
            got = await run(provider, handler=Quiet(), prompt="go", timeout=0.5, telemetry=stops.telemetry)
        finally:
            await provider.close()
    assert isinstance(got, Failure)
    error = got.failure()
    assert isinstance(error, Timeout) and error.remote_stop == "not_needed"
    assert str(error) == "timeout: run timed out after 0.5s; no host loop to stop"
    [(_, meta)] = stops.events
    assert (meta["outcome"], meta["provider"]) == ("not_needed", "local")


def _boto_client(emu: AgentCoreEmulator) -> Any:
    import boto3
    from botocore.config import Config

    session = boto3.session.Session(
        aws_access_key_id=emu.access_key_id,
        aws_secret_access_key=emu.secret_access_key,
        region_name=emu.region,
    )
    config = Config(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=10)
    return session.client("bedrock-agentcore", endpoint_url=emu.base_url, config=config)
