"""Drops, reconnects, consolidation and resume (R-1…R-16, S-19, S-21, S-24, S-25), live and sync."""

from __future__ import annotations

import anyio
import trio

from rma.errors import ProviderError, StreamDropped
from rma.session.machine import reconnect_backoff_ms
from rma.session.resilience import SYNC_RECONNECT_ATTEMPTS
from rma.vocabulary import Terminal
from rma_shell import open_session, run
from rma_shell.testing.scripted import CLOSE, DROP, ScriptedProvider
from tests.helpers import Recorder, end, idle, text, tool


def test_R12_backoff_schedule_doubles_from_500ms_and_caps_at_64s() -> None:
    assert [reconnect_backoff_ms(n) for n in range(10)] == [
        500,
        1000,
        2000,
        4000,
        8000,
        16000,
        32000,
        64000,
        64000,
        64000,
    ]


async def test_R14_Better_a_sync_run_reconnects_after_a_drop_and_ends_as_undisturbed(
    autojump_clock: trio.abc.Clock,
) -> None:
    provider = ScriptedProvider([[text("work", id="m1"), DROP]], streaming=True, remote_idle=False)

    async def the_turn_goes_on_server_side() -> None:
        await anyio.sleep(5)  # after the reconnect (500 ms backoff)
        provider.emit(text("done", id="m2"), idle("end_turn"))

    async with anyio.create_task_group() as nursery:
        nursery.start_soon(the_turn_goes_on_server_side)
        r = (await run(provider, handler=Recorder(), prompt="go")).unwrap()
    assert len(provider.reconnects) == 1 and provider.streams_opened == 2
    assert r.text == "workdone" and [e.get("id") for e in r.events if e["type"] == "text"] == ["m1", "m2"]
    assert provider.inputs == [[{"type": "user.message", "text": "go"}]]  # no second kickoff


async def test_R14_R4_Better_a_sync_run_recovers_a_tool_use_left_unanswered_by_a_drop() -> None:
    # Real time (one 500 ms backoff): the sync handler runs in a worker thread, which a
    # MockClock would race to the run's deadline.
    provider = ScriptedProvider([[tool("fetch", "t1"), DROP], end("after")], streaming=True)
    handler = Recorder()

    async def the_host_records_the_idle_while_disconnected() -> None:
        await anyio.sleep(0.1)
        provider.history.append(idle("requires_action", ["t1"]))

    async with anyio.create_task_group() as nursery:
        nursery.start_soon(the_host_records_the_idle_while_disconnected)
        r = (await run(provider, handler=handler, prompt="go")).unwrap()
    assert r.text == "after" and [c[0] for c in handler.calls] == ["fetch"]
    assert [u.id for u in r.custom_tool_uses] == ["t1"]
    assert provider.inputs[1] == [
        {"type": "tool_result", "tool_use_id": "t1", "text": "ok:fetch", "is_error": False}
    ]


async def test_R14_Better_a_sync_run_gives_up_after_a_bounded_number_of_reconnects(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Every stream dies at once and the host never says anything new: no progress.
    provider = ScriptedProvider([[text("w", id="m1"), *[DROP] * 20]], streaming=True, remote_idle=False)
    start = anyio.current_time()
    outcome = await run(provider, handler=Recorder(), prompt="go", timeout=None)
    err = outcome.failure()
    assert isinstance(err, StreamDropped) and f"gave up after {SYNC_RECONNECT_ATTEMPTS}" in err.message
    assert len(provider.reconnects) == SYNC_RECONNECT_ATTEMPTS
    # R-12 backoff before each attempt: 0.5 + 1 + 2 + 4 + 8 + 16 s.
    waited = sum(reconnect_backoff_ms(n) for n in range(SYNC_RECONNECT_ATTEMPTS)) / 1000
    assert waited <= anyio.current_time() - start < waited + 1


async def test_R14_Better_progress_between_drops_resets_the_bound(autojump_clock: trio.abc.Clock) -> None:
    drops = SYNC_RECONNECT_ATTEMPTS + 2
    provider = ScriptedProvider([[text("w", id="m0"), DROP]], streaming=True, remote_idle=False)

    async def each_stream_carries_one_new_event_then_dies() -> None:
        for n in range(1, drops):
            await anyio.sleep(200)  # longer than any backoff: the new stream is up
            provider.emit(text(".", id=f"m{n}"), DROP)
        await anyio.sleep(200)
        provider.emit(idle("end_turn"))

    async with anyio.create_task_group() as nursery:
        nursery.start_soon(each_stream_carries_one_new_event_then_dies)
        r = (await run(provider, handler=Recorder(), prompt="go", timeout=None)).unwrap()
    assert len(provider.reconnects) == drops
    assert r.text == "w" + "." * (drops - 1)


async def test_R11_a_definite_reconnect_failure_ends_a_sync_run(autojump_clock: trio.abc.Clock) -> None:
    provider = ScriptedProvider([[text("w"), DROP]], streaming=True, reconnect_errors=1)
    outcome = await run(provider, handler=Recorder(), prompt="go")
    assert isinstance(outcome.failure(), ProviderError) and len(provider.reconnects) == 1


async def test_S25_Better_clean_close_without_terminal_fails_fast_instead_of_hanging() -> None:
    # The sync run reconnects (R-14 Better); the host reports itself idle with no terminal
    # for the request, so nothing will ever end it: the run fails at once.
    provider = ScriptedProvider([[text("partial"), CLOSE]], streaming=True)
    with anyio.fail_after(5):
        outcome = await run(provider, handler=Recorder(), prompt="go", timeout=600)
    err = outcome.failure()
    assert isinstance(err, StreamDropped) and err.clean_close and "host is idle" in err.message
    assert len(provider.reconnects) == 1


async def test_R15_R4_R5_live_drop_reconnects_and_redrives_unanswered_tools(
    autojump_clock: trio.abc.Clock,
) -> None:
    # The requires_action idle never arrives: the stream dies right after the tool use.
    provider = ScriptedProvider([[tool("fetch", "t1"), DROP], end("after")], streaming=True)
    handler = Recorder()
    async with open_session(provider, handler=handler, prompt="go") as session:
        await anyio.sleep(0.1)  # the stream is down; the host records the idle meanwhile
        provider.history.append(idle("requires_action", ["t1"]))
        r = (await session.next_result()).unwrap()
    assert r.text == "after"
    assert len(provider.reconnects) == 1
    assert [c[0] for c in handler.calls] == ["fetch"]
    assert [u.id for u in r.custom_tool_uses] == ["t1"]  # R-5 Better: redriven uses are accumulated
    assert provider.inputs[1] == [
        {"type": "tool_result", "tool_use_id": "t1", "text": "ok:fetch", "is_error": False}
    ]


async def test_R3_R8_S21_fresh_session_reconnect_never_resends_the_kickoff(
    autojump_clock: trio.abc.Clock,
) -> None:
    provider = ScriptedProvider([[text("working"), DROP]], streaming=True)
    async with open_session(provider, handler=Recorder(), prompt="go") as session:
        await anyio.sleep(5)
        provider.emit(text("done"), idle("end_turn"))
        r = (await session.next_result()).unwrap()
    # R-3 discards the partial buffer; R-18 Better refolds the open turn from the host's history.
    assert r.text == "workingdone"
    assert provider.inputs == [[{"type": "user.message", "text": "go"}]]
    assert provider.streams_opened == 2


async def test_R11_R13_live_reconnect_failures_back_off_and_escalate(autojump_clock: trio.abc.Clock) -> None:
    provider = ScriptedProvider([[DROP]], streaming=True, reconnect_errors=2)
    async with open_session(provider, handler=Recorder(), prompt="go") as session:
        start = anyio.current_time()
        await anyio.sleep(3.45)
        assert len(provider.reconnects) == 2
        await anyio.sleep(0.1)
        assert len(provider.reconnects) == 3
        elapsed = anyio.current_time() - start
        assert session.session_id == "sess_scripted"
    # 500 ms, then 1 s, then 2 s: the counter does not reset on a failed attempt.
    assert 3.5 <= elapsed <= 3.6


async def test_R1_R6_S19_resume_delivers_the_prompt_when_nothing_is_pending() -> None:
    provider = ScriptedProvider([end("resumed answer")], streaming=True)
    r = (await run(provider, handler=Recorder(), prompt="next question", session_id="sess_old")).unwrap()
    assert provider.opened[0].session_id == "sess_old"
    assert provider.reconnects == [()]
    assert provider.inputs == [[{"type": "user.message", "text": "next question"}]]
    assert r.text == "resumed answer" and r.resumed and r.session_id == "sess_old"


async def test_R9_pending_tool_uses_win_over_the_prompt() -> None:
    history = [tool("fetch", "t7"), idle("requires_action", ["t7"])]
    provider = ScriptedProvider([end("tools answered")], streaming=True, history=history)
    handler = Recorder()
    r = (await run(provider, handler=handler, prompt="never sent", session_id="sess_old")).unwrap()
    assert [c[0] for c in handler.calls] == ["fetch"]
    assert provider.inputs == [
        [{"type": "tool_result", "tool_use_id": "t7", "text": "ok:fetch", "is_error": False}]
    ]
    assert r.text == "tools answered"


async def test_R10_Better_sync_resume_with_nothing_to_do_returns_at_once() -> None:
    provider = ScriptedProvider([], streaming=True)
    with anyio.fail_after(5):
        outcome = await run(provider, handler=Recorder(), session_id="sess_old", timeout=600)
    r = outcome.unwrap()
    assert r.reason == "resumed_idle" and r.resumed and r.turns == 0
    assert provider.inputs == []


async def test_R7_sync_resume_of_a_running_session_waits_for_its_events() -> None:
    provider = ScriptedProvider([], streaming=True, remote_idle=False)

    async def the_running_turn_ends_later() -> None:
        await anyio.sleep(0.05)
        provider.emit(text("late"), idle("end_turn"))

    async with anyio.create_task_group() as nursery:
        nursery.start_soon(the_running_turn_ends_later)
        outcome = await run(provider, handler=Recorder(), session_id="sess_old", timeout=10)
    r = outcome.unwrap()
    assert r.text == "late" and r.terminal is Terminal.END_TURN


async def test_R16_E11_events_already_seen_are_not_processed_again(autojump_clock: trio.abc.Clock) -> None:
    first = text("hello ", id="m1")
    provider = ScriptedProvider([[first, DROP]], streaming=True)
    handler = Recorder()
    async with open_session(provider, handler=handler, prompt="go") as session:
        await anyio.sleep(2)
        provider.emit(first, text("world", id="m2"), idle("end_turn"))  # m1 re-delivered after reconnect
        r = (await session.next_result()).unwrap()
    # m1 is refolded once from history (the open turn); its re-delivery on the new stream is skipped.
    assert [e.get("id") for e in r.events if e.get("type") == "text"] == ["m1", "m2"]
    assert sum(1 for e in handler.events if e.get("id") == "m1") == 2  # E-7: at least once


async def test_R2_L28_request_response_resume_uses_the_default_reconnect() -> None:
    provider = ScriptedProvider([end("again")])
    r = (await run(provider, handler=Recorder(), prompt="continue", session_id="local_x")).unwrap()
    assert provider.inputs == [[{"type": "user.message", "text": "continue"}]]
    assert r.resumed and r.text == "again"


async def test_open_failure_of_reconnect_in_sync_resume_is_returned() -> None:
    provider = ScriptedProvider([], streaming=True, reconnect_errors=1)
    outcome = await run(provider, handler=Recorder(), session_id="sess_old", prompt="x")
    assert isinstance(outcome.failure(), ProviderError)
