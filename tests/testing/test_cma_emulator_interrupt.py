"""The Claude Managed Agents emulator's paused turns and ``user.interrupt``, through the SDK."""

from __future__ import annotations

import pytest

from rma_shell.testing.claude import (
    CMAEmulator,
    agent_message,
    idle_end_turn,
    model_request_start,
    pause,
    slow_interrupt,
    status_running,
    text_turn,
)
from tests.testing.test_cma_emulator import client, new_session, user_message

WORKING = [status_running(), model_request_start(), agent_message("working"), pause()]


def test_a_paused_turn_leaves_the_session_running() -> None:
    with CMAEmulator([[*WORKING, agent_message("late"), idle_end_turn()]]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[user_message("go")])
        assert sdk.beta.sessions.retrieve(session_id).status == "running"
        assert [e["type"] for e in emu.history(session_id)][-1] == "agent.message"
        assert emu.interrupts(session_id) == []


def test_an_interrupt_stops_the_paused_turn_and_is_recorded() -> None:
    with CMAEmulator([[*WORKING, agent_message("late"), idle_end_turn()]]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[user_message("go")])
        sdk.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
        assert sdk.beta.sessions.retrieve(session_id).status == "idle"
        [interrupt] = emu.interrupts(session_id)
        assert interrupt["type"] == "user.interrupt" and interrupt["id"].startswith("sevt_")
        history = emu.history(session_id)
        assert history[-1]["type"] == "session.status_idle"
        assert history[-1]["stop_reason"] == {"type": "end_turn"}
        assert "late" not in str(history)  # the rest of the turn never happens


def test_a_timed_pause_resumes_the_turn() -> None:
    with CMAEmulator([[status_running(), pause(0.05), agent_message("later"), idle_end_turn()]]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[user_message("go")])
        emu.wait_for_event(session_id, "session.status_idle")
        assert [e["type"] for e in emu.history(session_id)][-2:] == ["agent.message", "session.status_idle"]


def test_the_next_message_after_an_interrupt_plays_the_next_turn() -> None:
    with CMAEmulator([[*WORKING, agent_message("late")], text_turn("fresh")]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[user_message("go")])
        sdk.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
        sdk.beta.sessions.events.send(session_id, events=[user_message("again")])
        texts = [e["content"][0]["text"] for e in emu.history(session_id) if e["type"] == "agent.message"]
        assert texts == ["working", "fresh"]


def test_a_slow_interrupt_is_taken_but_the_session_reads_running_until_the_next() -> None:
    with CMAEmulator([[*WORKING, agent_message("late"), idle_end_turn()]], faults=[slow_interrupt()]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[user_message("go")])
        sdk.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
        assert len(emu.interrupts(session_id)) == 1
        assert sdk.beta.sessions.retrieve(session_id).status == "running"  # not acknowledged
        sdk.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
        assert sdk.beta.sessions.retrieve(session_id).status == "idle"  # the second one, at once
        assert "late" not in str(emu.history(session_id))  # the turn's rest was dropped all along


def test_a_slow_interrupt_with_a_time_goes_idle_after_it() -> None:
    with CMAEmulator([WORKING], faults=[slow_interrupt(0.05)]) as emu:
        sdk = client(emu)
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[user_message("go")])
        sdk.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
        emu.wait_for_event(session_id, "session.status_idle")
        assert sdk.beta.sessions.retrieve(session_id).status == "idle"


def test_pause_refuses_a_negative_time() -> None:
    with pytest.raises(ValueError):
        pause(-0.1)
    with pytest.raises(ValueError):
        slow_interrupt(-1)
