"""A run's ``timeout`` is a deadline (issue #23): stopping the host's loop takes at most ``stop_grace``.

When a run's deadline passes mid-request, rma asks the host to stop its loop (issue #15) — but
a host slow to acknowledge (a Claude session that keeps reading ``running`` after its
``user.interrupt``, a ``StopRuntimeSession`` that hangs) used to hold the run up to 5 s past its
deadline. Now the stop gets ``stop_grace`` seconds (default 1), confirmed or not, and
``Timeout.remote_stop`` says which; a cancelled run and a live session left mid-request are
bounded the same way.

The wall-clock tests bound the overrun generously (3 s past the deadline, where it was 5 s and
more before the fix), so a loaded machine cannot fail them; the exact bound is checked in
virtual time (trio's ``MockClock``).
"""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest
import trio.testing

from rma.errors import InvalidOpts, Timeout
from rma_shell import open_session, run
from rma_shell.testing import OpenAIEmulator
from rma_shell.testing import agentcore as ace
from rma_shell.testing import claude as cma
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.testing.claude import CMAEmulator
from tests.session.test_remote_stop import (
    AC_WORKING,
    CMA_WORKING,
    KEY,
    SID,
    Quiet,
    Stops,
    agentcore,
    claude,
    made,
    stop_requests,
    until,
)

__all__ = ["made"]  # the fixture, shared with test_remote_stop

SLACK_S = 3.0
"""How far past its deadline a run may return here: generous (machine load), yet short of the
5 s the stop alone took before the fix."""


async def _timed_run(provider: Any, **options: Any) -> tuple[Any, float]:
    start = anyio.current_time()
    with anyio.fail_after(60):
        got = await run(provider, handler=Quiet(), prompt="go", **options)
    return got, anyio.current_time() - start


# ── the deadline holds, whatever the host does ────────────────────────────────────────


async def test_a_claude_session_slow_to_obey_its_interrupt_costs_the_run_no_more_than_the_grace(
    made: list[Any],
) -> None:
    stops = Stops()
    with CMAEmulator([CMA_WORKING], api_key=KEY, faults=[cma.slow_interrupt()]) as emu:
        got, took = await _timed_run(claude(emu, made), timeout=1.0, telemetry=stops.telemetry)
        error = got.failure()
        assert isinstance(error, Timeout) and error.remote_stop == "unconfirmed"
        [session_id] = emu.session_ids
        assert len(emu.interrupts(session_id)) == 1  # asked within the grace
        assert emu.session(session_id)["status"] == "running"  # and never acknowledged
    assert took < 1.0 + SLACK_S
    [(_, meta)] = stops.events
    assert (meta["outcome"], meta["reason"]) == ("unconfirmed", "timeout")
    assert meta["detail"] == "no confirmation within 1.0s"


async def test_an_agentcore_stop_that_hangs_costs_the_run_no_more_than_the_grace(made: list[Any]) -> None:
    with AgentCoreEmulator([AC_WORKING], faults=[ace.hang_stop()]) as emu:
        got, took = await _timed_run(agentcore(emu, made), runtime_session_id=SID, timeout=1.0)
        error = got.failure()
        assert isinstance(error, Timeout) and error.remote_stop == "unconfirmed"
        assert len(stop_requests(emu)) == 1 and emu.stops == ()
    assert took < 1.0 + SLACK_S


async def test_a_cancelled_run_and_a_live_session_left_are_bounded_by_the_grace_too(
    made: list[Any],
) -> None:
    stops = Stops()
    slow = cma.slow_interrupt(times=2)
    with CMAEmulator([CMA_WORKING, CMA_WORKING], api_key=KEY, faults=[slow]) as emu:
        provider = claude(emu, made)
        start = anyio.current_time()
        with anyio.move_on_after(1.0):
            await run(provider, handler=Quiet(), prompt="go", timeout=60, telemetry=stops.telemetry)
        cancelled_took = anyio.current_time() - start
        async with open_session(
            provider, handler=Quiet(), prompt="go", stop_grace=0.5, telemetry=stops.telemetry
        ) as live:
            await anyio.to_thread.run_sync(until, lambda: len(emu.session_ids) == 2)
            await anyio.to_thread.run_sync(emu.wait_for_event, emu.session_ids[1], "agent.message")
            assert not live.idle
            left = anyio.current_time()
        closed_took = anyio.current_time() - left
        assert all(len(emu.interrupts(s)) == 1 for s in emu.session_ids)
    assert cancelled_took < 1.0 + SLACK_S and closed_took < SLACK_S
    assert [(m["outcome"], m["reason"]) for _, m in stops.events] == [
        ("unconfirmed", "cancelled"),
        ("unconfirmed", "closed"),
    ]
    assert stops.events[1][1]["detail"] == "no confirmation within 0.5s"


async def test_a_host_that_confirms_within_the_grace_is_confirmed(made: list[Any]) -> None:
    # The session reads idle 0.3 s after its interrupt: a grace of 10 s waits for that.
    with CMAEmulator([CMA_WORKING], api_key=KEY, faults=[cma.slow_interrupt(0.3)]) as emu:
        got, _ = await _timed_run(claude(emu, made), timeout=1.0, stop_grace=10.0)
        assert got.failure().remote_stop == "confirmed"
        [session_id] = emu.session_ids
        assert emu.session(session_id)["status"] == "idle"


# ── the exact bound, in virtual time ──────────────────────────────────────────────────


async def test_the_grace_bounds_the_stop_exactly(mock_clock: trio.testing.MockClock, made: list[Any]) -> None:
    with CMAEmulator([CMA_WORKING], api_key=KEY, faults=[cma.slow_interrupt()]) as emu:
        provider = claude(emu, made)
        outcome: list[Any] = []

        async def go() -> None:
            got = await run(provider, handler=Quiet(), prompt="go", timeout=1, stop_grace=0.2)
            outcome.append((got, anyio.current_time()))

        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            tg.start_soon(go)
            await anyio.to_thread.run_sync(until, lambda: bool(emu.session_ids))
            session_id = emu.session_ids[0]
            await anyio.to_thread.run_sync(emu.wait_for_event, session_id, "agent.message")
            mock_clock.jump(1)  # the run's deadline: the interrupt goes out, and is not obeyed
            await anyio.to_thread.run_sync(until, lambda: bool(emu.interrupts(session_id)))
            mock_clock.jump(0.2)  # the grace, and not a moment more
            await anyio.to_thread.run_sync(until, lambda: bool(outcome))
        [(got, ended)] = outcome
        assert got.failure().remote_stop == "unconfirmed"
        assert ended - start == pytest.approx(1.2)  # virtual seconds: the deadline plus the grace


# ── the option ────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("value", [0, -1.0, math.nan, math.inf, None, True, "1"])
async def test_a_bad_grace_is_refused_before_any_request(value: Any) -> None:
    with OpenAIEmulator([], api_key="sk-local") as emu:
        from rma_shell.providers.local import Local

        provider = Local(base_url=emu.base_url, model="m", api_key="sk-local")
        try:
            outcome = await run(provider, handler=Quiet(), prompt="go", stop_grace=value)
            with pytest.raises(InvalidOpts) as raised:
                async with open_session(provider, handler=Quiet(), prompt="go", stop_grace=value):
                    pass
        finally:
            await provider.close()
        assert emu.requests == []
    error = outcome.failure()
    assert isinstance(error, InvalidOpts) and error.option == "stop_grace"
    assert raised.value.option == "stop_grace"


async def test_a_misspelled_grace_gets_did_you_mean() -> None:
    with OpenAIEmulator([], api_key="sk-local") as emu:
        from rma_shell.providers.local import Local

        provider = Local(base_url=emu.base_url, model="m", api_key="sk-local")
        try:
            outcome = await run(provider, handler=Quiet(), prompt="go", stop_grase=0.5)
        finally:
            await provider.close()
    error = outcome.failure()
    assert isinstance(error, InvalidOpts) and (error.option, error.suggestion) == ("stop_grase", "stop_grace")
