"""``rma.providers.local.stream.StreamedReply``: what each streamed chunk brings, as Local's live
events (issue #14) — one start per call whatever the server repeats, the conversation's own ids
for calls sent without one, and the same reply as the plain assembler."""

from __future__ import annotations

from typing import Any

from rma.live import TextDelta, ToolCallFinished, ToolCallStarted
from rma.providers.local.codec import CODEC, apply_response, prepare_request, start
from rma.providers.local.stream import StreamedReply
from rma.wire.openai_chat import ChunkAssembler

TOOL = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def call(
    index: int, *, id: str | None = None, name: str | None = None, arguments: Any = ""
) -> dict[str, Any]:
    fragment: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if id is not None:
        fragment["id"] = id
    if name is not None:
        fragment["function"]["name"] = name
    return chunk({"tool_calls": [fragment]})


def feed_all(reply: StreamedReply, chunks: list[dict[str, Any]]) -> list[Any]:
    return [event for c in chunks for event in reply.feed(c).unwrap()]


def test_a_name_repeated_on_every_fragment_starts_the_call_once() -> None:
    chunks = [
        chunk({"role": "assistant", "content": "Let me see"}),
        call(0, id="call_a", name="get_weather", arguments='{"ci'),
        call(0, name="get_weather", arguments='ty": "SF"}'),
        chunk({}, "tool_calls"),
    ]
    events = feed_all(StreamedReply(poll=1), chunks)
    assert events[0] == {"type": "local.text_delta", "text": "Let me see"}
    deltas = events[1:]
    assert [(d["id"], d["name"]) for d in deltas] == [("call_a", "get_weather"), (None, None)]
    assert "".join(d["arguments"] for d in deltas) == '{"city": "SF"}'
    updates = [u for e in events for u in CODEC.live_updates(e)]
    assert updates == [TextDelta("Let me see"), ToolCallStarted("call_a", "get_weather")]


def test_calls_without_ids_start_with_the_ids_the_conversation_gives_them() -> None:
    conv = start(None, [TOOL]).unwrap()
    conv, _, _ = prepare_request(conv, stream=True)
    reply = StreamedReply(poll=conv.polls)
    chunks = [
        call(0, name="get_weather", arguments='{"city": "SF"}'),
        call(1, name="get_weather", arguments='{"city": "LA"}'),
        chunk({}, "tool_calls"),
    ]
    started = [e["id"] for e in feed_all(reply, chunks) if e["name"]]
    _, turn_events = apply_response(conv, reply.finish().unwrap(), streamed=True).unwrap()
    surfaced = [
        c["id"]
        for e in turn_events
        if e["type"] == "local.model_response"
        for c in e["message"]["tool_calls"]
    ]
    assert started == surfaced == [f"call_{conv.polls}_0", f"call_{conv.polls}_1"]
    # The streamed reply's own events add no second start and no text.
    assert [u for e in turn_events for u in CODEC.live_updates(e)] == []


def test_the_streamed_reply_assembles_what_the_plain_assembler_does() -> None:
    chunks = [
        chunk({"role": "assistant", "content": "Hi"}),
        call(0, id="x", name="get_weather", arguments={"city": "SF"}),
        chunk({"content": " there"}),
        chunk({}, "tool_calls"),
    ]
    plain = ChunkAssembler()
    for c in chunks:
        plain.feed(c).unwrap()
    reply = StreamedReply(poll=1)
    events = feed_all(reply, chunks)
    assert reply.finish().unwrap() == plain.finish().unwrap()
    assert events[1]["arguments"] == '{"city":"SF"}'  # a decoded object is passed on as JSON text
    assert reply.live_events == len(events) == 3


def test_a_call_local_refuses_finishes_as_an_error_once_streamed() -> None:
    conv = start(None, [TOOL]).unwrap()
    conv, _, _ = prepare_request(conv, stream=True)
    reply = StreamedReply(poll=conv.polls)
    feed_all(reply, [call(0, id="bad", name="nope", arguments="{}"), chunk({}, "tool_calls")])
    _, turn_events = apply_response(conv, reply.finish().unwrap(), streamed=True).unwrap()
    updates = [u for e in turn_events for u in CODEC.live_updates(e)]
    assert updates == [ToolCallFinished("bad", "nope", True)]
    # Without streaming the same event starts the call too.
    _, plain_events = apply_response(conv, reply.finish().unwrap()).unwrap()
    assert [u for e in plain_events for u in CODEC.live_updates(e)] == [
        ToolCallStarted("bad", "nope"),
        ToolCallFinished("bad", "nope", True),
    ]
