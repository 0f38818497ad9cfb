"""The Local provider's wire contract through ``run`` over real HTTP (issue #12): what the
request bodies carry (tool declarations, tool results in call order) and how the edges of a
reply are handled (a call cut off by max_tokens, a corrupt stream chunk, the stream's end)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from rma.vocabulary import TEXT_DELTA_TYPE, Terminal
from rma_shell import run
from rma_shell.providers.base import OpenRequest
from rma_shell.providers.local import Local
from rma_shell.seams import Seams
from rma_shell.testing import OpenAIEmulator, cut_off, malformed_chunk

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


class Recorder:
    """A handler that records every call and answers with its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        self.calls.append((name, dict(input)))
        return f"{name} ran with {json.dumps(input, sort_keys=True)}"


async def no_sleep(_: float) -> None:
    await anyio.lowlevel.checkpoint()


def local(emu: OpenAIEmulator, **kw: Any) -> Local:
    kw.setdefault("model", "m")
    kw.setdefault("tools", [{"name": "get_weather", "description": "Weather", "input_schema": SCHEMA}])
    return Local(base_url=emu.base_url, _seams=Seams(sleep=no_sleep, rand=lambda: 0.0), **kw)


# --- item 9: tool declarations reach the wire as declared --------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_declared_tools_reach_the_wire_unchanged_strict_included(stream: bool) -> None:
    declared = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather",
                "parameters": SCHEMA,
                "strict": True,
            },
        },
        {
            "type": "function",
            "function": {"name": "submit", "description": "Finish", "parameters": {"type": "object"}},
            "x-vendor-hint": {"cache": "ephemeral"},
        },
    ]
    with OpenAIEmulator([{"content": "ok"}]) as emu:
        result = await run(local(emu, tools=declared, stream=stream), handler=Recorder(), prompt="x")
    assert result.unwrap().text == "ok"
    assert emu.requests[0].body["tools"] == declared


async def test_a_flat_tool_with_strict_is_declared_strict_on_the_wire() -> None:
    flat = {"name": "get_weather", "description": "Weather", "input_schema": SCHEMA, "strict": True}
    with OpenAIEmulator([{"content": "ok"}]) as emu:
        await run(local(emu, tools=[flat]), handler=Recorder(), prompt="x")
    assert emu.requests[0].body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather",
                "parameters": SCHEMA,
                "strict": True,
            },
        }
    ]


# --- item 8: tool results go back in tool-call order --------------------------------------


def weather_call(call_id: str, city: str) -> dict[str, Any]:
    return {"id": call_id, "name": "get_weather", "arguments": {"city": city}}


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_results_go_back_in_call_order_duplicate_directives_included(stream: bool) -> None:
    turns = [
        {"tool_calls": [weather_call("c_sf", "SF")]},
        # A fresh call, a repeat of c_sf (answered by Local with the directive), a fresh call.
        {
            "tool_calls": [
                weather_call("c_nyc", "NYC"),
                weather_call("c_sf_again", "SF"),
                weather_call("c_la", "LA"),
            ]
        },
        {"content": "done"},
    ]
    handler = Recorder()
    with OpenAIEmulator(turns) as emu:
        result = (await run(local(emu, stream=stream), handler=handler, prompt="weather?")).unwrap()
    assert result.text == "done"
    # The repeat never reached the handler (the two fresh calls run concurrently, in any order).
    assert handler.calls[0] == ("get_weather", {"city": "SF"})
    assert sorted(c["city"] for _, c in handler.calls[1:]) == ["LA", "NYC"]
    messages = emu.requests[2].body["messages"]
    at = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    call_ids = [c["id"] for c in messages[at]["tool_calls"]]
    assert call_ids == ["c_nyc", "c_sf_again", "c_la"]
    answers = messages[at + 1 :]
    # Position n answers call n: what a template that drops tool_call_id relies on.
    assert [m["tool_call_id"] for m in answers] == call_ids
    assert answers[0]["content"] == 'get_weather ran with {"city": "NYC"}'
    assert json.loads(answers[1]["content"])["duplicate"] is True
    assert answers[2]["content"] == 'get_weather ran with {"city": "LA"}'
    assert result.transcript is not None
    assert list(result.transcript[: len(messages)]) == messages


# --- item 7: a call cut off by max_tokens never runs -------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "after_chars",
    [
        0,  # id and name sent, no arguments yet (vLLM): today's {} run
        9,  # half the arguments: today's rejection, then another model call
        len('{"city": "SF"}') + 5,  # the first call whole, the second cut: neither runs
    ],
)
async def test_a_tool_call_cut_off_by_max_tokens_ends_the_turn_terminated_length(
    stream: bool, after_chars: int
) -> None:
    reply = {"tool_calls": [weather_call("c1", "SF"), weather_call("c2", "NYC")]}
    handler = Recorder()
    with OpenAIEmulator([reply, {"content": "never asked for"}], faults={0: cut_off(after_chars)}) as emu:
        result = (await run(local(emu, stream=stream), handler=handler, prompt="weather?")).unwrap()
    assert handler.calls == []
    assert (result.terminal, result.stop_reason) == (Terminal.TERMINATED, "length")
    assert len(emu.requests) == 1
    assert result.custom_tool_uses == ()
    rejected = [e for e in result.events if e.get("type") == "local.rejected_tool_call"]
    assert rejected
    assert {e["reason"] for e in rejected} == {"cut_off"}


async def test_after_a_cut_off_call_the_history_is_valid_input_again() -> None:
    reply = {"tool_calls": [weather_call("c1", "SF")]}
    with OpenAIEmulator([reply, {"content": "fine"}], faults={0: cut_off(3)}) as emu:
        first = (await run(local(emu, stream=True), handler=Recorder(), prompt="weather?")).unwrap()
        second = await run(local(emu), handler=Recorder(), prompt="go on", history=first.transcript)
    # The emulator answers 400 to an unanswered call or a tool message out of place.
    assert second.unwrap().text == "fine"
    sent = emu.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]


# --- item 10: a stream chunk that is not JSON is a dropped stream ------------------------


class Watcher(Recorder):
    """A handler that also keeps the text deltas it is shown, clearing them when an attempt is
    discarded (as a UI does: with ``stream=True`` deltas are live, issue #14)."""

    def __init__(self) -> None:
        super().__init__()
        self.deltas: list[str] = []
        self.discarded = 0

    def handle_event(self, event: Any, ctx: object) -> None:
        if isinstance(event, dict) and event.get("type") == TEXT_DELTA_TYPE:
            self.deltas.append(event["text"])
        if isinstance(event, dict) and event.get("type") == "rma.attempt_discarded":
            self.deltas.clear()
            self.discarded += 1


async def test_a_corrupt_stream_chunk_re_sends_the_request_and_leaves_no_partial_text() -> None:
    text = "The weather in SF is sunny, 18 degrees."
    handler = Watcher()
    with OpenAIEmulator([{"content": text}], faults={0: malformed_chunk(4)}, chunk_chars=5) as emu:
        result = (await run(local(emu, stream=True), handler=handler, prompt="weather?")).unwrap()
    assert len(emu.requests) == 2
    assert emu.requests[1].body == emu.requests[0].body  # the same request, re-sent
    assert result.text == text
    assert "".join(handler.deltas) == text and handler.discarded == 1
    assert sum(1 for e in result.events if e.get("type") == "local.model_response") == 1


# --- item 23: a successful SSE turn closes its stream ------------------------------------


@contextmanager
def loop_finalised() -> Iterator[list[str]]:
    """The async generators the event loop is left to finalise (garbage-collected while still
    suspended) while the block runs — on trio and asyncio alike, via the asyncgen hooks."""
    hooks = sys.get_asyncgen_hooks()
    seen: list[str] = []

    def finalizer(agen: Any) -> None:
        seen.append(agen.__qualname__)
        if hooks.finalizer is not None:
            hooks.finalizer(agen)

    sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=finalizer)
    try:
        yield seen
    finally:
        sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=hooks.finalizer)


async def test_a_successful_sse_turn_closes_its_byte_iterator_itself() -> None:
    with OpenAIEmulator([{"content": "a reply in several chunks"}]) as emu:
        provider = local(emu, stream=True)
        conn = (await provider.open(OpenRequest())).unwrap()
        try:
            with loop_finalised() as finalised:
                outcome = await provider.poll_turn(conn, provider.codec.kickoff_input("hi", None), None)
                for _ in range(5):  # let a finaliser the loop scheduled cascade, if there was one
                    await anyio.lowlevel.checkpoint()
        finally:
            await provider.close()
    assert provider.codec.normalize(outcome.result.unwrap()).text == "a reply in several chunks"
    assert finalised == []


async def test_streamed_turns_reuse_one_keep_alive_connection() -> None:
    turns = [{"tool_calls": [weather_call("c1", "SF")]}, {"content": "sunny"}]
    with OpenAIEmulator(turns) as emu:
        provider = local(emu, stream=True)
        try:
            result = (await run(provider, handler=Recorder(), prompt="weather?")).unwrap()
        finally:
            await provider.close()
    assert result.text == "sunny"
    # The first stream was read to its end, so its connection went back to the pool.
    assert emu.requests[0].client_port == emu.requests[1].client_port
