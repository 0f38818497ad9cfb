"""Claude multi-agent sessions (issue #25): a coordinator runs a sub-agent in a session thread;
the sub-agent's custom tool call is cross-posted to the primary stream with
``session_thread_id`` and answered exactly once; thread lifecycle and messages are live
updates that name the thread; the thread's events and stream are reachable from the live
session. Through ``run`` / ``open_session`` with the CMA emulator, on both backends."""

from __future__ import annotations

from typing import Any

import anyio

from rma.live import LiveUpdate, TextDelta, ThreadActivity, ToolCallFinished, ToolCallStarted
from rma.vocabulary import Terminal
from rma_shell import open_session, run
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.testing import CMAEmulator
from rma_shell.testing.claude import (
    agent_message,
    custom_tool_use,
    idle_end_turn,
    idle_requires_action,
    in_thread,
    model_request_end,
    pause,
    status_running,
    thread_created,
    thread_message_received,
    thread_message_sent,
    thread_status,
)
from tests.helpers import cma_agent_and_environment

KEY = "sk-ant-test-threads"
T = "sthr_researcher01"


def script() -> list[Any]:
    """Turn 1: the coordinator delegates; the researcher calls ``lookup`` (a custom tool, run
    here); everything waits. Turn 2: the researcher answers the coordinator, who answers us."""
    first = [
        status_running(),
        agent_message("Delegating to the researcher."),
        thread_created(T, "researcher"),
        thread_message_sent(T, "Find customer c9.", to_agent_name="researcher"),
        thread_status(T, "researcher", "running"),
        in_thread(T, agent_message("Looking c9 up.")),
        custom_tool_use("lookup", {"id": "c9"}, id="sevt_lookup01", session_thread_id=T),
        thread_status(T, "researcher", "idle", {"type": "requires_action", "event_ids": ["sevt_lookup01"]}),
        model_request_end(),
        idle_requires_action(),
    ]
    second = [
        status_running(),
        thread_status(T, "researcher", "running"),
        in_thread(T, agent_message("c9 is gold.")),
        thread_message_received(T, "c9 is gold.", from_agent_name="researcher"),
        thread_status(T, "researcher", "idle"),
        agent_message("Ada (c9) is a gold customer."),
        model_request_end(),
        idle_end_turn(),
    ]
    return [first, second]


class Team:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.updates: list[LiveUpdate] = []

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        self.calls.append((name, input))
        return "gold tier"

    async def handle_update(self, update: LiveUpdate, ctx: object, info: object) -> None:
        self.updates.append(update)


def provider(emu: CMAEmulator, **options: Any) -> ClaudeManagedAgents:
    ids = cma_agent_and_environment(emu, KEY)
    return ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={}, **ids, **options)


def answers(emu: CMAEmulator) -> list[dict[str, Any]]:
    return [
        e
        for q in emu.requests
        if q.method == "POST" and q.path.endswith("/events")
        for e in q.body["events"]
        if e["type"] == "user.custom_tool_result"
    ]


async def test_a_sub_agents_tool_call_runs_here_once_and_its_thread_is_narrated_live() -> None:
    for deltas in (("agent.message",), ()):
        with CMAEmulator(script(), api_key=KEY, delta_chars=4) as emu:
            p, team = provider(emu, event_deltas=deltas), Team()
            try:
                with anyio.fail_after(30):
                    result = (await run(p, handler=team, prompt="Who is c9?")).unwrap()
            finally:
                await p.close()
            posted = answers(emu)
        assert result.terminal is Terminal.END_TURN and result.text.endswith("Ada (c9) is a gold customer.")
        assert team.calls == [("lookup", {"id": "c9"})], "the cross-posted call runs once"
        assert [a["custom_tool_use_id"] for a in posted] == ["sevt_lookup01"], "and is answered once"
        started = [u for u in team.updates if isinstance(u, ToolCallStarted)]
        assert started == [ToolCallStarted("sevt_lookup01", "lookup", T)]
        assert [u for u in team.updates if isinstance(u, ToolCallFinished)] == [
            ToolCallFinished("sevt_lookup01", "lookup", False)
        ]
        activity = [
            (u.activity, u.thread, u.agent_name) for u in team.updates if isinstance(u, ThreadActivity)
        ]
        assert activity == [
            ("created", T, "researcher"),
            ("message_sent", T, "researcher"),
            ("running", T, "researcher"),
            ("idle", T, "researcher"),
            ("running", T, "researcher"),
            ("message_received", T, "researcher"),
            ("idle", T, "researcher"),
        ]
        received = next(
            u for u in team.updates if isinstance(u, ThreadActivity) and u.activity == "message_received"
        )
        assert received.text == "c9 is gold."
        # The sub-agent's own messages stay in its thread: the session's text is the coordinator's.
        assert "Looking c9 up." not in "".join(u.text for u in team.updates if isinstance(u, TextDelta))


async def test_a_threads_events_and_stream_are_reachable_from_the_live_session() -> None:
    turn = [
        status_running(),
        thread_created(T, "researcher"),
        thread_status(T, "researcher", "running"),
        pause(),  # the researcher works on; we watch its stream
    ]
    with CMAEmulator([turn], api_key=KEY) as emu:
        p = provider(emu)
        try:
            with anyio.fail_after(30):
                async with open_session(p, handler=Team()) as session:
                    async with session.updates() as updates:
                        await session.message("Research c9.")
                        async for u in updates:
                            if isinstance(u, ThreadActivity) and u.activity == "running":
                                break
                    threads = (await session.threads()).unwrap()
                    assert [(t["id"], t["parent_thread_id"] is None) for t in threads][1:] == [(T, False)]
                    assert threads[0]["parent_thread_id"] is None
                    async with session.thread_stream(T) as events:
                        await _wait_for_subscriber(emu, session.session_id)
                        emu.emit(session.session_id, in_thread(T, agent_message("Halfway there.")))
                        seen = []
                        async for event in events:
                            seen.append(event)
                            if event["type"] == "agent.message":
                                break
                    # Raw, previews included (the provider's event_deltas apply here too).
                    assert seen[0]["type"] == "event_start"
                    assert seen[-1]["content"][0]["text"] == "Halfway there."
                    listed = (await session.thread_events(T)).unwrap()
                    assert [e["type"] for e in listed] == [
                        "session.thread_status_running",
                        "agent.message",
                    ]
                    assert session.stream_error is None
        finally:
            await p.close()


async def _wait_for_subscriber(emu: CMAEmulator, session_id: str | None) -> None:
    assert session_id is not None
    for _ in range(2000):
        if emu.thread_subscribers(session_id, T):
            return
        await anyio.sleep(0.005)
    raise AssertionError("the thread stream never subscribed")


async def test_other_hosts_say_threads_are_unsupported() -> None:
    from rma_shell.testing.scripted import ScriptedProvider

    p = ScriptedProvider([[{"type": "text", "text": "hi"}]])
    async with open_session(p, handler=Team()) as session:
        error = (await session.threads()).failure()
    assert error.kind == "unsupported"
