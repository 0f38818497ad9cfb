"""rma.wire.openai_chat: request bodies (L-5) and streamed-chunk assembly."""

from __future__ import annotations

import json
from typing import Any

import pytest
from returns.result import Failure, Success

from rma.errors import MalformedResponse, ProviderError
from rma.wire.openai_chat import (
    ChunkAssembler,
    RequestTemplate,
    build_request_body,
    encode_json,
    error_from_body,
    tool_declaration,
)


def test_L5_tool_declaration_defaults() -> None:
    assert tool_declaration("t") == {
        "type": "function",
        "function": {"name": "t", "description": "", "parameters": {"type": "object"}},
    }
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    assert tool_declaration("w", "Weather", schema)["function"] == {
        "name": "w",
        "description": "Weather",
        "parameters": schema,
    }


def test_tool_declaration_carries_strict_only_when_given() -> None:
    assert tool_declaration("t", strict=True)["function"]["strict"] is True
    assert tool_declaration("t", strict=False)["function"]["strict"] is False
    assert "strict" not in tool_declaration("t")["function"]


def test_build_request_body_non_streaming() -> None:
    body = build_request_body("m", [{"role": "user", "content": "hi"}], params={"temperature": 0.2})
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": False,
        "temperature": 0.2,
    }


def test_build_request_body_streaming_asks_for_usage_and_keeps_reserved_keys() -> None:
    tools = [tool_declaration("t")]
    body = build_request_body(
        "m", [], tools, stream=True, params={"stream": False, "messages": [], "top_p": 1}
    )
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["tools"] == tools
    assert body["messages"] == []
    assert body["top_p"] == 1


def test_build_request_body_without_model_or_tools_leaves_keys_out() -> None:
    body = build_request_body(None, [])
    assert "model" not in body
    assert "tools" not in body


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", [None, "gpt-x"])
@pytest.mark.parametrize(
    "tools", [[], [tool_declaration("a"), tool_declaration("b", "d", {"type": "object"})]]
)
def test_request_template_bytes_match_dict_builder(stream: bool, model: str | None, tools: list[Any]) -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "héllo \ud800"}]
    params = {"temperature": 0.5, "max_tokens": 10}
    template = RequestTemplate.build(model, tools, params)
    raw = template.body_bytes((encode_json(m) for m in messages), stream=stream)
    raw.decode("ascii")  # lone surrogates and non-ASCII are escaped
    assert json.loads(raw) == build_request_body(model, messages, tools, stream=stream, params=params)


def test_request_template_empty_history() -> None:
    raw = RequestTemplate.build("m").body_bytes([], stream=False)
    assert json.loads(raw) == {"model": "m", "messages": [], "stream": False}


def test_encode_json_rejects_nan() -> None:
    with pytest.raises(ValueError):
        encode_json(float("nan"))


# --- assembler --------------------------------------------------------------------------


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [choice],
        **extra,
    }


def assemble(chunks: list[Any]) -> Any:
    asm = ChunkAssembler()
    for c in chunks:
        fed = asm.feed(c)
        if isinstance(fed, Failure):
            return fed
    return asm.finish()


def test_assembler_content_role_finish_usage() -> None:
    asm = ChunkAssembler()
    assert asm.feed(chunk({"role": "assistant", "content": ""})) == Success("")
    assert asm.feed(chunk({"content": "Hel"})) == Success("Hel")
    assert asm.feed(chunk({"content": "lo"})) == Success("lo")
    assert asm.feed(chunk({}, "stop")) == Success("")
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert asm.feed(
        {"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": usage}
    ) == Success("")
    out = asm.finish().unwrap()
    assert out["object"] == "chat.completion"
    assert out["id"] == "c1"
    assert out["model"] == "m"
    assert out["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}
    ]
    assert out["usage"] == usage


def test_assembler_tool_call_fragments_keyed_by_index() -> None:
    chunks = [
        chunk({"role": "assistant", "content": None}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "w", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "x", "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty":"SF"}'}}]}),
        chunk({}, "tool_calls"),
    ]
    message = assemble(chunks).unwrap()["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "w", "arguments": '{"city":"SF"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "x", "arguments": "{}"}},
    ]


def test_assembler_repeated_name_and_id_not_concatenated() -> None:
    frag = {"index": 0, "id": "call_a", "function": {"name": "w", "arguments": "{}"}}
    message = assemble([chunk({"tool_calls": [frag]}), chunk({}, "tool_calls")]).unwrap()["choices"][0][
        "message"
    ]
    assert message["tool_calls"][0]["function"]["name"] == "w"
    frag2 = {"index": 0, "id": "call_a", "function": {"name": "w", "arguments": ""}}
    message = assemble(
        [chunk({"tool_calls": [frag]}), chunk({"tool_calls": [frag2]}), chunk({}, "tool_calls")]
    )
    calls = message.unwrap()["choices"][0]["message"]["tool_calls"]
    assert len(calls) == 1
    assert calls[0]["function"] == {"name": "w", "arguments": "{}"}


def test_assembler_same_index_new_id_starts_new_call() -> None:
    # Some servers number every call 0; a new id means a new call.
    a = {"index": 0, "id": "call_a", "function": {"name": "w", "arguments": '{"a":1}'}}
    b = {"index": 0, "id": "call_b", "function": {"name": "w", "arguments": '{"b":2}'}}
    calls = assemble([chunk({"tool_calls": [a]}), chunk({"tool_calls": [b]}), chunk({}, "tool_calls")])
    got = [
        (c["id"], c["function"]["arguments"]) for c in calls.unwrap()["choices"][0]["message"]["tool_calls"]
    ]
    assert got == [("call_a", '{"a":1}'), ("call_b", '{"b":2}')]


def test_assembler_whole_calls_without_index_and_dict_arguments() -> None:
    a = {"id": "call_a", "function": {"name": "w", "arguments": {"city": "SF"}}}
    calls = assemble([chunk({"tool_calls": [a]}), chunk({}, "stop")]).unwrap()["choices"][0]["message"][
        "tool_calls"
    ]
    assert calls == [
        {"id": "call_a", "type": "function", "function": {"name": "w", "arguments": '{"city":"SF"}'}}
    ]


def test_assembler_keeps_other_string_fields() -> None:
    chunks = [
        chunk({"reasoning_content": "thin"}),
        chunk({"reasoning_content": "king", "content": "x"}),
        chunk({}, "stop"),
    ]
    message = assemble(chunks).unwrap()["choices"][0]["message"]
    assert message["reasoning_content"] == "thinking"
    assert message["content"] == "x"


def test_assembler_ignores_other_choices() -> None:
    c = chunk({"content": "a"})
    c["choices"].append({"index": 1, "delta": {"content": "b"}, "finish_reason": None})
    message = assemble([c, chunk({}, "stop")]).unwrap()["choices"][0]["message"]
    assert message["content"] == "a"


@pytest.mark.parametrize(
    "bad",
    [
        "not a dict",
        {"choices": "x"},
        {"no": "choices"},
        {"choices": ["x"]},
        {"choices": [{"index": "0", "delta": {}}]},
        {"choices": [{"index": 0, "delta": "x"}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": "x"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": ["x"]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": "x"}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 3}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": 3}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0.5}]}}]},
        {"choices": [{"index": 0, "delta": {"role": 1}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": 3}]},
        {"choices": [], "usage": "x"},
    ],
)
def test_assembler_malformed_chunk_is_a_failure_value(bad: Any) -> None:
    result = ChunkAssembler().feed(bad)
    assert isinstance(result, Failure)
    assert isinstance(result.failure(), MalformedResponse)


def test_assembler_error_chunk_is_a_provider_error() -> None:
    result = ChunkAssembler().feed({"error": {"message": "overloaded", "type": "server_error"}})
    assert isinstance(result, Failure)
    err = result.failure()
    assert isinstance(err, ProviderError)
    assert err.detail == "overloaded"
    assert err.error_type == "server_error"


def test_assembler_finish_without_choice_or_finish_reason_fails() -> None:
    assert isinstance(ChunkAssembler().finish().failure(), MalformedResponse)
    asm = ChunkAssembler()
    asm.feed(chunk({"content": "partial"}))
    err = asm.finish().failure()
    assert isinstance(err, MalformedResponse)
    assert "finish_reason" in err.detail


def test_error_from_body() -> None:
    assert error_from_body({"choices": []}) is None
    assert error_from_body("x") is None
    err = error_from_body({"error": "boom"})
    assert isinstance(err, ProviderError)
    assert err.detail == "boom"


def test_assembler_many_fragments_join_once() -> None:
    asm = ChunkAssembler()
    asm.feed(chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "w", "arguments": ""}}]}))
    for _ in range(10_000):
        asm.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "x"}}], "content": "y"}))
    asm.feed(chunk({}, "tool_calls"))
    message = asm.finish().unwrap()["choices"][0]["message"]
    assert len(message["tool_calls"][0]["function"]["arguments"]) == 10_000
    assert len(message["content"]) == 10_000
    assert asm.chunks == 10_002
