"""Claude token deltas (issue #25): a stream asks ``event_deltas``, previews become token-sized
``TextDelta``s, the final event stays the source of truth (result, recording, replay), and a
preview that never gets its final event — cut by the model (``cut_message``) or by a dropped
stream (``cut_preview``) — is discarded through ``AttemptDiscarded``, after which what stands is
said again. Through ``run`` with the CMA emulator, on both backends."""

from __future__ import annotations

import io
from typing import Any

import anyio
import pytest

from rma.live import AttemptDiscarded, LiveUpdate, TextDelta, TurnFinished
from rma.provider import codec_for
from rma.replay import replay_lines
from rma.session.commands import DeliverUpdate
from rma.vocabulary import Terminal
from rma_shell import run
from rma_shell.options import InvalidOptions
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.testing import CMAEmulator
from rma_shell.testing.claude import (
    agent_message,
    cut_message,
    cut_preview,
    idle_end_turn,
    model_request_end,
    model_request_start,
    status_running,
    text_turn,
    tool_turn,
)
from tests.helpers import cma_agent_and_environment

KEY = "sk-ant-test-deltas"
ANSWER = "The answer, after some thought, is forty-two."


class Watcher:
    def __init__(self) -> None:
        self.updates: list[LiveUpdate] = []
        self.calls = 0

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        self.calls += 1
        return "42"

    async def handle_update(self, update: LiveUpdate, ctx: object, info: object) -> None:
        self.updates.append(update)


def screen(updates: list[LiveUpdate]) -> str:
    """What a UI that follows ``rma.live`` shows: text appended, cleared on a discard."""
    shown = ""
    for u in updates:
        if isinstance(u, AttemptDiscarded):
            shown = ""
        elif isinstance(u, TextDelta):
            shown += u.text
        elif isinstance(u, TurnFinished):
            shown = ""  # each turn starts a fresh line here
    return shown


def texts(updates: list[LiveUpdate]) -> list[str]:
    return [u.text for u in updates if isinstance(u, TextDelta)]


async def run_on(emu: CMAEmulator, watcher: Watcher, **provider: Any) -> Any:
    p = ClaudeManagedAgents(
        api_key=KEY, base_url=emu.base_url, env={}, **cma_agent_and_environment(emu, KEY), **provider
    )
    log = io.StringIO()
    try:
        with anyio.fail_after(30):
            outcome = await run(p, handler=watcher, prompt="go", record=log)
    finally:
        await p.close()
    return outcome.unwrap(), log.getvalue()


def stream_queries(emu: CMAEmulator) -> list[str]:
    return [q.path.partition("?")[2] for q in emu.requests if q.path.split("?")[0].endswith("/events/stream")]


async def test_a_message_arrives_token_by_token_and_the_result_and_replay_are_the_final_events() -> None:
    with CMAEmulator([text_turn(ANSWER)], api_key=KEY, delta_chars=5) as emu:
        watcher = Watcher()
        result, log = await run_on(emu, watcher)
        queries = stream_queries(emu)
    assert queries == ["event_deltas%5B%5D=agent.message"]  # the SDK's bracket encoding
    pieces = texts(watcher.updates)
    assert len(pieces) == -(-len(ANSWER) // 5) and all(len(p) <= 5 for p in pieces)
    assert "".join(pieces) == ANSWER == result.text
    # The previews never enter the result: its events are the final ones.
    assert not [e for e in result.events if e["type"] in ("event_start", "event_delta")]
    replayed = replay_lines(log.splitlines(), codec_for).unwrap()
    assert [c.update for c in replayed.commands if isinstance(c, DeliverUpdate)] == watcher.updates
    assert replayed.results[-1].unwrap() == result


async def test_event_deltas_off_gives_one_delta_per_message_and_asks_for_none() -> None:
    with CMAEmulator([text_turn(ANSWER)], api_key=KEY, delta_chars=5) as emu:
        watcher = Watcher()
        result, _ = await run_on(emu, watcher, event_deltas=())
        queries = stream_queries(emu)
    assert queries == [""] and texts(watcher.updates) == [ANSWER] == [result.text]


async def test_thinking_previews_are_asked_for_and_start_only() -> None:
    with CMAEmulator([text_turn(ANSWER)], api_key=KEY, delta_chars=50) as emu:
        watcher = Watcher()
        result, _ = await run_on(emu, watcher, event_deltas=("agent.message", "agent.thinking"))
        queries = stream_queries(emu)
    assert queries == ["event_deltas%5B%5D=agent.message&event_deltas%5B%5D=agent.thinking"]
    assert "".join(texts(watcher.updates)) == ANSWER == result.text


def test_an_event_type_the_api_does_not_preview_is_refused_naming_the_option() -> None:
    p = ClaudeManagedAgents(
        api_key=KEY, base_url="http://127.0.0.1:9", env={}, event_deltas=("agent.tool_use",)
    )
    error = p.client().failure()
    assert error.kind == "invalid_opts" and error.option == "event_deltas"
    with pytest.raises(InvalidOptions):
        ClaudeManagedAgents(api_key=KEY, event_deltaz=())  # type: ignore[call-arg]


async def test_a_message_the_model_never_finished_is_discarded_and_the_screen_ends_as_the_result() -> None:
    turn = [
        status_running(),
        model_request_start(),
        cut_message("I will say someth"),
        model_request_end(),  # the request ended early: it closes the preview
        model_request_start(),
        agent_message(ANSWER),
        model_request_end(),
        idle_end_turn(),
    ]
    with CMAEmulator([turn], api_key=KEY, delta_chars=4) as emu:
        watcher = Watcher()
        result, log = await run_on(emu, watcher)
    kinds = [type(u).__name__ for u in watcher.updates]
    discard = kinds.index("AttemptDiscarded")
    assert "".join(texts(watcher.updates[:discard])) == "I will say someth"
    assert watcher.updates[discard] == AttemptDiscarded(0, "preview_cut")
    assert "".join(texts(watcher.updates[discard:])) == ANSWER == result.text
    replayed = replay_lines(log.splitlines(), codec_for).unwrap()
    assert [c.update for c in replayed.commands if isinstance(c, DeliverUpdate)] == watcher.updates


async def test_a_stream_dropped_mid_preview_discards_the_turn_and_the_reconnect_says_what_stands() -> None:
    script = [tool_turn(("lookup", {"id": 1}), text="Let me look that up."), text_turn(ANSWER)]
    with CMAEmulator(script, api_key=KEY, delta_chars=3, faults=[cut_preview(after_deltas=2)]) as emu:
        watcher = Watcher()
        result, log = await run_on(emu, watcher)
        streams = len(stream_queries(emu))
    assert streams >= 2 and watcher.calls == 1
    assert result.text == ANSWER and result.terminal is Terminal.END_TURN
    discards = [u for u in watcher.updates if isinstance(u, AttemptDiscarded)]
    assert len(discards) == 1 and discards[0].error == "stream_dropped"
    # Before the cut: two previews; after it, the turn's text once, whole, from the history.
    first_turn = watcher.updates[
        : next(i for i, u in enumerate(watcher.updates) if isinstance(u, TurnFinished))
    ]
    assert texts(first_turn) == ["Let", " me", "Let me look that up."]
    assert screen(first_turn) == "Let me look that up."
    assert "".join(texts(watcher.updates[len(first_turn) :])) == ANSWER
    replayed = replay_lines(log.splitlines(), codec_for).unwrap()
    assert [c.update for c in replayed.commands if isinstance(c, DeliverUpdate)] == watcher.updates
