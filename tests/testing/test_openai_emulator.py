"""The loopback OpenAI emulator speaks the same wire as the API: the official SDK is the oracle."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from rma.wire.openai_chat import ChunkAssembler
from rma_shell.testing import (
    OpenAIEmulator,
    Turn,
    cut_off,
    delay,
    drop_mid_stream,
    malformed_chunk,
    status,
)

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
WEATHER_CALL_WIRE = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
WEATHER_CALL = {
    "tool_calls": [{"id": "call_w1", "name": "get_weather", "arguments": {"city": "San Francisco"}}]
}


def client(emu: OpenAIEmulator, **kwargs: Any) -> openai.OpenAI:
    kwargs.setdefault("max_retries", 0)
    return openai.OpenAI(base_url=emu.base_url, api_key="sk-test", **kwargs)


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def test_sdk_non_streamed_text() -> None:
    with OpenAIEmulator([{"content": "Hello there!"}]) as emu:
        completion = client(emu).chat.completions.create(model="m", messages=user("hi"))
    assert completion.object == "chat.completion"
    assert completion.model == "m"
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "Hello there!"
    assert choice.finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens > 0
    assert emu.requests[0].body["messages"] == user("hi")
    assert emu.requests[0].headers["authorization"] == "Bearer sk-test"
    assert emu.requests[0].path == "/v1/chat/completions"


def test_sdk_streamed_text_with_usage_chunk() -> None:
    usage = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    with OpenAIEmulator([Turn({"content": "Hello there, streaming!"}, usage=usage)], chunk_chars=5) as emu:
        stream = client(emu).chat.completions.create(
            model="m", messages=user("hi"), stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there, streaming!"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 5
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 14
    assert all(c.object == "chat.completion.chunk" for c in chunks)


def test_sdk_stream_without_include_usage_has_no_usage_chunk() -> None:
    with OpenAIEmulator([{"content": "x"}]) as emu:
        chunks = list(client(emu).chat.completions.create(model="m", messages=user("hi"), stream=True))
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_sdk_tool_calls_non_streamed_and_streamed_agree() -> None:
    with OpenAIEmulator([WEATHER_CALL, WEATHER_CALL], chunk_chars=3) as emu:
        sdk = client(emu)
        plain = sdk.chat.completions.create(model="m", messages=user("weather?"), tools=TOOLS)
        chunks = list(
            sdk.chat.completions.create(
                model="m",
                messages=user("weather?"),
                tools=TOOLS,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    message = plain.choices[0].message
    assert plain.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls is not None
    call = message.tool_calls[0]
    assert call.id == "call_w1"
    assert call.type == "function"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "San Francisco"}
    # Arguments arrive in several fragments; our assembler rebuilds the same message.
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.tool_calls) > 3
    asm = ChunkAssembler()
    for c in chunks:
        asm.feed(c.model_dump(exclude_unset=True)).unwrap()
    assembled = asm.finish().unwrap()
    assert assembled["choices"][0]["message"]["tool_calls"] == [call.model_dump(exclude_none=True)]
    assert assembled["choices"][0]["finish_reason"] == "tool_calls"


def test_sdk_tool_round_trip_validates_tool_messages() -> None:
    with OpenAIEmulator([WEATHER_CALL, {"content": "It is sunny."}]) as emu:
        sdk = client(emu)
        first = sdk.chat.completions.create(model="m", messages=user("weather?"), tools=TOOLS)
        assistant = first.choices[0].message.model_dump(exclude_none=True)
        messages = [
            *user("weather?"),
            assistant,
            {"role": "tool", "tool_call_id": "call_w1", "content": "sunny"},
        ]
        second = sdk.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "It is sunny."


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([{"role": "tool", "tool_call_id": "nope", "content": "x"}], "messages[0].role"),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL_WIRE]},
                {"role": "user", "content": "no answer"},
            ],
            "messages",
        ),
        (
            [
                {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL_WIRE]},
                {"role": "tool", "tool_call_id": "other", "content": "x"},
            ],
            "messages[1].role",
        ),
        ([{"role": "wizard", "content": "x"}], "messages[0].role"),
        ([], "messages"),
    ],
)
def test_emulator_rejects_invalid_conversations_like_the_api(messages: list[Any], param: str) -> None:
    with OpenAIEmulator([{"content": "unused"}]) as emu, pytest.raises(openai.BadRequestError) as info:
        client(emu).chat.completions.create(model="m", messages=messages)
    body = info.value.body
    assert isinstance(body, dict)
    assert body["param"] == param
    assert body["type"] == "invalid_request_error"
    assert emu.answered == 0


def test_emulator_requires_model() -> None:
    with OpenAIEmulator([{"content": "x"}]) as emu:
        response = httpx.post(f"{emu.base_url}/chat/completions", json={"messages": user("hi")})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "model"


def test_emulator_rejects_stream_options_without_stream() -> None:
    with OpenAIEmulator([{"content": "x"}]) as emu, pytest.raises(openai.BadRequestError):
        client(emu).chat.completions.create(
            model="m", messages=user("hi"), stream_options={"include_usage": True}
        )


def test_emulator_model_check_and_models_list() -> None:
    with OpenAIEmulator([{"content": "x"}], model="llama3") as emu:
        sdk = client(emu)
        assert [m.id for m in sdk.models.list()] == ["llama3"]
        with pytest.raises(openai.NotFoundError):
            sdk.chat.completions.create(model="other", messages=user("hi"))


def test_emulator_api_key_check() -> None:
    with OpenAIEmulator([{"content": "x"}], api_key="sk-right") as emu:
        with pytest.raises(openai.AuthenticationError) as info:
            client(emu).chat.completions.create(model="m", messages=user("hi"))
        assert info.value.status_code == 401
        ok = openai.OpenAI(base_url=emu.base_url, api_key="sk-right", max_retries=0)
        assert ok.chat.completions.create(model="m", messages=user("hi")).choices[0].message.content == "x"


def test_emulator_callable_turn_sees_the_request() -> None:
    def echo(body: dict[str, Any]) -> dict[str, Any]:
        return {"content": "echo: " + body["messages"][-1]["content"]}

    with OpenAIEmulator([echo, lambda body: Turn({"content": "t"}, finish_reason="length")]) as emu:
        sdk = client(emu)
        assert (
            sdk.chat.completions.create(model="m", messages=user("ping")).choices[0].message.content
            == "echo: ping"
        )
        assert sdk.chat.completions.create(model="m", messages=user("x")).choices[0].finish_reason == "length"


def test_emulator_script_exhausted_is_a_clear_400() -> None:
    with OpenAIEmulator([]) as emu, pytest.raises(openai.BadRequestError, match="no scripted turn left"):
        client(emu).chat.completions.create(model="m", messages=user("hi"))


def test_emulator_429_once_then_the_same_turn() -> None:
    with OpenAIEmulator([{"content": "after retry"}], faults={0: status(429, retry_after_ms=10)}) as emu:
        completion = client(emu, max_retries=2).chat.completions.create(model="m", messages=user("hi"))
    assert completion.choices[0].message.content == "after retry"
    assert len(emu.requests) == 2
    assert emu.answered == 1


def test_emulator_status_fault_shapes() -> None:
    with OpenAIEmulator([{"content": "x"}], faults={0: status(429, retry_after=3), 1: status(500)}) as emu:
        first = httpx.post(f"{emu.base_url}/chat/completions", json={"model": "m", "messages": user("a")})
        assert first.status_code == 429
        assert first.headers["retry-after"] == "3"
        assert first.json()["error"]["code"] == "rate_limit_exceeded"
        with pytest.raises(openai.InternalServerError):
            client(emu).chat.completions.create(model="m", messages=user("hi"))


def test_emulator_drop_mid_stream_breaks_the_body() -> None:
    body = {"model": "m", "messages": user("hi"), "stream": True}
    with OpenAIEmulator([{"content": "a long enough reply"}], faults={0: drop_mid_stream(2)}) as emu:
        with (
            httpx.Client() as http,
            http.stream("POST", f"{emu.base_url}/chat/completions", json=body) as resp,
        ):
            assert resp.status_code == 200
            with pytest.raises(httpx.RemoteProtocolError):
                b"".join(resp.iter_bytes())
        assert emu.answered == 0
        # Non-streamed: the body stops short of its Content-Length.
        with (
            OpenAIEmulator([{"content": "x"}], faults={0: drop_mid_stream()}) as emu2,
            pytest.raises(httpx.RemoteProtocolError),
        ):
            httpx.post(f"{emu2.base_url}/chat/completions", json={"model": "m", "messages": user("hi")})


def test_emulator_malformed_chunk() -> None:
    body = {"model": "m", "messages": user("hi"), "stream": True}
    with OpenAIEmulator(
        [{"content": "abcdefgh"}], faults={0: malformed_chunk(1), 1: malformed_chunk(2)}
    ) as emu:
        text = httpx.post(f"{emu.base_url}/chat/completions", json=body).text
        with pytest.raises(json.JSONDecodeError):
            list(client(emu).chat.completions.create(model="m", messages=user("hi"), stream=True))
    data_lines = [line for line in text.split("\n") if line.startswith("data: ")]
    assert data_lines[-1] == "data: [DONE]"
    bad = [line for line in data_lines[:-1] if not _is_json(line[6:])]
    assert len(bad) == 1


TWO_CALLS = {
    "content": "ok",
    "tool_calls": [
        {"id": "c1", "name": "get_weather", "arguments": '{"city":"SF"}'},
        {"id": "c2", "name": "get_weather", "arguments": '{"city":"NYC"}'},
    ],
}


@pytest.mark.parametrize(
    ("after_chars", "content", "calls"),
    [
        (1, "o", None),  # inside the content: no call was reached
        (2, "ok", [("c1", "")]),  # a call's id and name come before its arguments
        (7, "ok", [("c1", '{"cit')]),
        (15, "ok", [("c1", '{"city":"SF"}'), ("c2", "")]),
    ],
)
def test_emulator_cut_off_ends_the_reply_at_the_token_limit_in_both_modes(
    after_chars: int, content: str, calls: list[tuple[str, str]] | None
) -> None:
    with OpenAIEmulator(
        [TWO_CALLS, TWO_CALLS], faults={0: cut_off(after_chars), 1: cut_off(after_chars)}
    ) as emu:
        sdk = client(emu)
        plain = sdk.chat.completions.create(model="m", messages=user("hi"), tools=TOOLS)
        chunks = list(sdk.chat.completions.create(model="m", messages=user("hi"), tools=TOOLS, stream=True))
    assert emu.answered == 2  # a cut-off reply is a complete answer
    asm = ChunkAssembler()
    for c in chunks:
        asm.feed(c.model_dump(exclude_unset=True)).unwrap()
    streamed = asm.finish().unwrap()["choices"][0]
    for choice in (plain.choices[0].model_dump(), streamed):
        assert choice["finish_reason"] == "length"
        assert choice["message"]["content"] == content
        got = choice["message"].get("tool_calls") or []
        assert [(c["id"], c["function"]["arguments"]) for c in got] == (calls or [])


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_emulator_delay_fault() -> None:
    # 10 s against the client's 0.1 s: no stall of a busy machine lets the answer win. The
    # emulator's exit ends the delay; the second request is served meanwhile.
    with OpenAIEmulator([{"content": "late"}], faults={0: delay(10.0)}) as emu:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{emu.base_url}/chat/completions", json={"model": "m", "messages": user("hi")}, timeout=0.1
            )
        ok = httpx.post(f"{emu.base_url}/chat/completions", json={"model": "m", "messages": user("hi")})
        assert ok.json()["choices"][0]["message"]["content"] == "late"


def test_emulator_keeps_connections_alive() -> None:
    with OpenAIEmulator([{"content": "a"}, {"content": "b"}]) as emu, httpx.Client() as http:
        url = f"{emu.base_url}/chat/completions"
        first = http.post(url, json={"model": "m", "messages": user("1")})
        second = http.post(url, json={"model": "m", "messages": user("2")})
    assert first.http_version == second.http_version == "HTTP/1.1"
    assert first.headers.get("connection", "keep-alive").lower() != "close"
    assert [
        first.json()["choices"][0]["message"]["content"],
        second.json()["choices"][0]["message"]["content"],
    ] == [
        "a",
        "b",
    ]


def test_emulator_pace_spaces_every_chunk_and_hold_waits_for_its_release() -> None:
    import threading
    import time

    from rma_shell.testing import hold, pace

    release = threading.Event()
    with OpenAIEmulator(
        [{"content": "abcdefgh"}], faults={0: [pace(0.03), hold(2, release)]}, chunk_chars=2
    ) as emu:
        arrivals: list[float] = []
        started = time.monotonic()
        stream = client(emu).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        for n, _ in enumerate(stream):
            arrivals.append(time.monotonic())
            if n == 1:
                release.set()  # the chunks after the second wait for this
    # Chunk k cannot leave the server before (k + 1) paces have passed. Measured from the
    # request, not between arrivals: a reader that falls behind on a busy machine gets two
    # chunks at once, but never a chunk early.
    assert len(arrivals) == 6  # role, 4 content pieces, finish
    assert all(at - started >= 0.03 * (k + 1) * 0.9 for k, at in enumerate(arrivals)), arrivals
    assert emu.holds == [True]
