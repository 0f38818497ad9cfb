"""Local with ``stream=True`` delivers live (issue #14): chunk deltas reach ``handle_event`` and
``handle_update`` while the reply is still streaming; each event reaches the handler once (E-5);
a failed attempt's deltas are followed by ``rma.attempt_discarded``; the cut-off rule holds."""

from __future__ import annotations

import json
import threading
from typing import Any

import anyio

from rma.live import (
    ATTEMPT_DISCARDED_TYPE,
    AttemptDiscarded,
    LiveUpdate,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
)
from rma.vocabulary import TEXT_DELTA_TYPE, Terminal
from rma_shell import run
from rma_shell.providers.local import Local
from rma_shell.seams import Seams
from rma_shell.testing import OpenAIEmulator, cut_off, drop_mid_stream, hold, pace

WEATHER = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}
CALL = {"tool_calls": [{"id": "call_w", "name": "get_weather", "arguments": {"city": "San Francisco"}}]}
TEXT = "It is sunny in San Francisco today."


async def _no_sleep(_: float) -> None:
    await anyio.lowlevel.checkpoint()


def local(emu: OpenAIEmulator, **kw: Any) -> Local:
    return Local(
        base_url=emu.base_url,
        model="m",
        tools=[WEATHER],
        stream=True,
        _seams=Seams(sleep=_no_sleep, rand=lambda: 0.0),
        **kw,
    )


class Watcher:
    """Records raw events and updates; opens ``release`` at the first live text or argument delta."""

    def __init__(self, release: threading.Event | None = None) -> None:
        self.events: list[Any] = []
        self.updates: list[LiveUpdate] = []
        self.tools: list[dict[str, Any]] = []
        self.release = release

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        self.tools.append(input)
        return "sunny"

    def handle_event(self, event: Any, ctx: object) -> None:
        self.events.append(event)
        kind = event.get("type") if isinstance(event, dict) else None
        if self.release is not None and kind in ("local.text_delta", "local.tool_call_delta"):
            self.release.set()

    def handle_update(self, update: LiveUpdate, ctx: object) -> None:
        self.updates.append(update)

    def of_type(self, kind: str) -> list[Any]:
        return [e for e in self.events if isinstance(e, dict) and e.get("type") == kind]


async def test_E10_stream_true_text_deltas_reach_the_handler_before_the_reply_ends() -> None:
    # The server stops after three chunks until the handler has seen a delta: only live
    # delivery can open it (a batch would arrive after the whole reply, when the hold timed out).
    release = threading.Event()
    with OpenAIEmulator([{"content": TEXT}], faults={0: hold(3, release, timeout=10)}) as emu:
        watcher = Watcher(release)
        with anyio.fail_after(30):
            result = (await run(local(emu), handler=watcher, prompt="weather?")).unwrap()
    assert emu.holds == [True]
    deltas = [e["text"] for e in watcher.of_type("local.text_delta")]
    assert len(deltas) > 3 and "".join(deltas) == TEXT == result.text
    # E-9 stays exact: one rma.text_delta per streamed piece, the whole reply not repeated.
    assert [e["text"] for e in watcher.of_type(TEXT_DELTA_TYPE)] == deltas
    texts = [u.text for u in watcher.updates if isinstance(u, TextDelta)]
    assert texts == deltas


async def test_E10_tool_call_argument_deltas_stream_with_one_start_per_call() -> None:
    release = threading.Event()
    script = [CALL, {"content": "Sunny."}]
    with OpenAIEmulator(script, faults={0: hold(3, release, timeout=10)}, chunk_chars=3) as emu:
        watcher = Watcher(release)
        with anyio.fail_after(30):
            result = (await run(local(emu), handler=watcher, prompt="weather?")).unwrap()
    assert emu.holds == [True]
    deltas = watcher.of_type("local.tool_call_delta")
    assert len(deltas) > 2 and all(d["index"] == 0 for d in deltas)
    assert [(d["id"], d["name"]) for d in deltas if d["name"] is not None] == [("call_w", "get_weather")]
    assert json.loads("".join(d["arguments"] for d in deltas)) == {"city": "San Francisco"}
    assert watcher.tools == [{"city": "San Francisco"}] and result.terminal is Terminal.END_TURN
    started, turn, finished = watcher.updates[:3]
    assert started == ToolCallStarted("call_w", "get_weather")
    assert (turn.turn, turn.terminal, turn.stop_reason) == (1, Terminal.REQUIRES_ACTION, "tool_calls")
    assert turn.usage is not None and turn.usage.input_tokens == result.usage.raw[0]["prompt_tokens"]
    assert finished == ToolCallFinished("call_w", "get_weather", False)


async def test_E5_E8_each_event_reaches_the_handler_once_and_deltas_stay_out_of_the_record() -> None:
    with OpenAIEmulator([CALL, {"content": TEXT}], faults={1: pace(0.002)}) as emu:
        watcher = Watcher()
        result = (await run(local(emu), handler=watcher, prompt="weather?")).unwrap()
    recorded = [json.dumps(e, sort_keys=True) for e in result.events]
    delivered = [json.dumps(e, sort_keys=True) for e in watcher.events]
    for event in recorded:
        assert delivered.count(event) == 1
    kinds = {e.get("type") for e in result.events}
    assert "local.model_response" in kinds and not kinds & {"local.text_delta", "local.tool_call_delta"}
    streamed = [e for e in result.events if e.get("type") == "local.model_response"]
    assert all(e["streamed"] is True for e in streamed)


async def test_a_dropped_stream_is_re_sent_and_its_deltas_are_discarded_first() -> None:
    with OpenAIEmulator([{"content": TEXT}], faults={0: drop_mid_stream(after_chunks=4)}) as emu:
        watcher = Watcher()
        result = (await run(local(emu), handler=watcher, prompt="weather?")).unwrap()
    assert len(emu.requests) == 2 and result.text == TEXT
    kinds = [e.get("type") for e in watcher.events if isinstance(e, dict)]
    cut = kinds.index(ATTEMPT_DISCARDED_TYPE)
    first = [e["text"] for e in watcher.events[:cut] if e.get("type") == "local.text_delta"]
    second = [e["text"] for e in watcher.events[cut:] if e.get("type") == "local.text_delta"]
    assert first and TEXT.startswith("".join(first)) and "".join(second) == TEXT
    assert watcher.events[cut]["attempt"] == 0 and watcher.events[cut]["error"] == "transport_error"
    assert ATTEMPT_DISCARDED_TYPE not in {e.get("type") for e in result.events}  # E-8
    at = next(i for i, u in enumerate(watcher.updates) if isinstance(u, AttemptDiscarded))
    after = "".join(u.text for u in watcher.updates[at:] if isinstance(u, TextDelta))
    assert after == TEXT and isinstance(watcher.updates[-1], TurnFinished)


async def test_a_reply_cut_off_at_the_token_limit_starts_its_call_and_finishes_it_unrun() -> None:
    with OpenAIEmulator([CALL], faults={0: cut_off(after_chars=6)}) as emu:
        watcher = Watcher()
        result = (await run(local(emu), handler=watcher, prompt="weather?")).unwrap()
    assert result.terminal is Terminal.TERMINATED and result.stop_reason == "length"
    assert watcher.tools == []
    started, finished, turn = watcher.updates
    assert started == ToolCallStarted("call_w", "get_weather")
    assert finished == ToolCallFinished("call_w", "get_weather", True)
    assert (
        isinstance(turn, TurnFinished)
        and turn.terminal is Terminal.TERMINATED
        and turn.stop_reason == "length"
    )
    rejected = watcher.of_type("local.rejected_tool_call")
    assert len(rejected) == 1 and rejected[0]["reason"] == "cut_off"


async def test_without_stream_the_whole_reply_is_one_delta_and_one_start_per_call() -> None:
    with OpenAIEmulator([CALL, {"content": TEXT}]) as emu:
        watcher = Watcher()
        provider = Local(base_url=emu.base_url, model="m", tools=[WEATHER])
        result = (await run(provider, handler=watcher, prompt="weather?")).unwrap()
    assert not watcher.of_type("local.text_delta")
    shapes = [type(u).__name__ for u in watcher.updates]
    assert shapes == ["ToolCallStarted", "TurnFinished", "ToolCallFinished", "TextDelta", "TurnFinished"]
    assert watcher.updates[3] == TextDelta(TEXT) and result.turns == 2
