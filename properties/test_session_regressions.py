"""Minimal reproductions of machine bugs found by the properties.

Each test is the shrunk, hand-cleaned form of a counterexample. A bug not fixed yet is
marked ``xfail(strict=True)``: the fix makes the test pass, the strict xfail then fails,
and whoever fixed the bug removes the mark and flips the matching ``KNOWN_BUG_*`` flag
(the generated properties steer around a known bug while its flag is True).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from returns.result import Success

from rma.codec_json import dumps, loads
from rma.errors import StreamDropped
from rma.providers.scripted import ScriptedCodec, ScriptedStreamingCodec
from rma.session import commands as C
from rma.session.events import (
    Event,
    Opened,
    PushFinished,
    Reconnected,
    ReconnectFinished,
    ReconnectTimerFired,
    StreamConnected,
    StreamEvent,
    StreamFailed,
    ToolsFinished,
    TurnPolled,
    UserMessage,
)
from rma.session.machine import State, initial_state, step
from rma.session.options import SessionConfig
from rma.vocabulary import JSON, ToolResult, ToolUse


def run(config: SessionConfig, events: Sequence[Event]) -> tuple[State, list[tuple[C.Command, ...]]]:
    state = initial_state(config)
    outputs = []
    for ev in events:
        state, out = step(state, ev)
        outputs.append(out)
    return state, outputs


def streaming_live(prompt: str | None = "go") -> SessionConfig:
    codec = ScriptedStreamingCodec()
    return SessionConfig(codec=codec, live=True, prompt=prompt, provider_name=codec.name)


def idle(stop: str, id: str, event_ids: list[str] | None = None) -> dict[str, JSON]:
    ev: dict[str, JSON] = {"type": "idle", "stop_reason": {"type": stop}, "id": id}
    if event_ids is not None:
        ev["event_ids"] = event_ids
    return ev


def test_a_follow_up_sent_mid_turn_does_not_block_that_turns_events() -> None:
    # S-70 Better queues the follow-up; S-91: events that arrive during the push wait.
    state, outputs = run(
        streaming_live(),
        [
            Opened("s"),
            StreamConnected(0),  # -> PushInput(kickoff)
            UserMessage("more"),  # mid-turn: deferred until the request ends
            StreamEvent(0, {"type": "text", "text": "hi", "id": "e1"}),  # deferred: PUSHING
            StreamEvent(0, idle("end_turn", "e2")),  # deferred: PUSHING
            PushFinished(Success(None)),
        ],
    )
    last = outputs[-1]
    # Expected: the kickoff's turn finishes, then the follow-up goes out.
    assert any(isinstance(c, C.Finish) for c in last), (state.phase, state.deferred)
    assert any(isinstance(c, C.PushInput) and c.purpose == "message" for c in last)


def test_the_armed_prompt_waits_until_a_reconnect_lands_idle() -> None:
    _, outputs = run(
        streaming_live(prompt="go"),
        [
            Opened("s", resumed=True),  # R-1; the prompt is armed (S-19)
            # the pending call is redriven first; the prompt stays armed.
            ReconnectFinished(Success(Reconnected("s", pending=[ToolUse("t1", "lookup")]))),
            ToolsFinished(1, [ToolResult("t1", "ok")]),  # -> PushInput(resume)
            PushFinished(Success(None)),
            StreamConnected(1),
            StreamEvent(1, {"type": "text", "text": "working", "id": "e1"}),
            StreamFailed(1, StreamDropped(detail="reset")),  # -> ScheduleReconnect
            ReconnectTimerFired(),  # -> Reconnect(2)
            # The host is still producing the resume's turn: not idle, nothing pending.
            ReconnectFinished(Success(Reconnected("s", seen=["e1"], idle=False))),
        ],
    )
    assert not any(isinstance(c, C.PushInput) for c in outputs[-1]), outputs[-1]


def test_recovery_never_puts_a_duplicate_id_into_custom_tool_uses() -> None:
    codec = ScriptedCodec()

    def use(i: str) -> dict[str, JSON]:
        return {"type": "tool_use", "id": i, "name": "lookup", "input": {}}

    _, outputs = run(
        SessionConfig(codec=codec, provider_name=codec.name),
        [
            Opened("s"),
            # The host sent "a" twice but asked only for "b" ...
            TurnPolled([use("a"), use("a"), use("b"), idle("requires_action", "e1", ["b"])]),
            ToolsFinished(1, [ToolResult("b", "ok")]),
            # ... then asks for "a" without repeating it: S-52 recovers [a, a] from history.
            TurnPolled([idle("requires_action", "e2", ["a"])]),
            ToolsFinished(2, [ToolResult("a", "1"), ToolResult("a", "2")]),
            TurnPolled([idle("end_turn", "e3")]),
        ],
    )
    finish = next(c for c in outputs[-1] if isinstance(c, C.Finish))
    ids = [u.id for u in finish.outcome.unwrap().custom_tool_uses]
    assert len(ids) == len(set(ids)), ids  # got ['b', 'a', 'a']


@pytest.mark.parametrize(
    "command",
    [
        C.RunTools(1, (ToolUse("t1", "lookup"),)),
        C.Reconnect(2, ("e1",)),
    ],
    ids=["RunTools", "Reconnect"],
)
def test_every_command_round_trips_through_codec_json(command: C.Command) -> None:
    assert loads(dumps(command)) == command


@pytest.mark.parametrize("tokens", [-1, "many", [1]], ids=["negative", "text", "list"])
def test_step_survives_a_malformed_usage_event(tokens: JSON) -> None:
    codec = ScriptedCodec()
    state, _ = run(SessionConfig(codec=codec, provider_name=codec.name), [Opened("s")])
    step(state, TurnPolled([{"type": "usage", "input_tokens": tokens}, idle("end_turn", "e1")]))


@pytest.mark.parametrize(
    "odd",
    [{"type": "tool_result", "tool_use_id": {"id": "t1"}}, {"type": "tool_use", "id": ["t1"], "name": "x"}],
    ids=["echoed-id-is-a-map", "tool-use-id-is-a-list"],
)
def test_recovery_survives_a_malformed_id_in_the_history(odd: JSON) -> None:
    codec = ScriptedCodec()
    state, _ = run(SessionConfig(codec=codec, provider_name=codec.name), [Opened("s")])
    # requires_action naming nothing this turn holds: S-52 recovery reads the history.
    step(state, TurnPolled([odd, idle("requires_action", "e1", [])]))
