"""rma.providers.local.codec: the pure half of the Local provider (L-1…L-30, S-56)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from returns.result import Failure, Success

from rma.errors import InvalidOpts, MalformedResponse, ProviderError
from rma.provider import DEFAULT_PROMPT, Mode
from rma.providers.local import codec as local
from rma.providers.local.codec import (
    CODEC,
    CORRECTIVE_TEMPLATE,
    DUPLICATE_DIRECTIVE,
    FINAL_TURN_DIRECTIVE,
    FINAL_TURN_TERMINAL_TEMPLATE,
    Conversation,
    LocalCodec,
    apply_input,
    apply_response,
    prepare_request,
    request_body,
    request_body_bytes,
    start,
    transcript,
)
from rma.vocabulary import Terminal, ToolResult, ToolUse, Usage

WEATHER = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}
SUBMIT = {"name": "submit", "description": "Finish", "input_schema": {"type": "object"}}


def conv_of(**kwargs: Any) -> Conversation:
    kwargs.setdefault("model_config", {"model": "m"})
    kwargs.setdefault("tools", [WEATHER, SUBMIT])
    result = start(**kwargs)
    assert isinstance(result, Success), result
    conv = result.unwrap()
    assert isinstance(conv, Conversation)
    return conv


def call(name: str, args: Any = None, id: str | None = "call_1") -> dict[str, Any]:
    arguments = args if isinstance(args, str) else json.dumps(args or {})
    out: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if id is not None:
        out["id"] = id
    return out


def response(
    content: Any = None,
    calls: list[dict[str, Any]] | None = None,
    finish: str | None = None,
    usage: Any = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls is not None:
        message["tool_calls"] = calls
    if finish is None:
        finish = "tool_calls" if calls else "stop"
    body: dict[str, Any] = {"id": "x", "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return body


def poll(conv: Conversation, input: Any, resp: Any) -> tuple[Conversation, dict[str, Any], tuple[Any, ...]]:
    """One Local poll: input, request, response. Returns (conv, sent body, events)."""
    conv = apply_input(conv, input).unwrap()
    conv, body, _ = prepare_request(conv, stream=False)
    conv, events = apply_response(conv, resp).unwrap()
    return conv, json.loads(body), events


def user(text: str) -> Any:
    return CODEC.user_input(text)


def resume(uses: list[ToolUse], results: list[ToolResult]) -> Any:
    return CODEC.resume_input(uses, results)


def types(events: tuple[Any, ...]) -> list[str]:
    return [e["type"] if e["type"] != "local.directive" else f"directive:{e['role']}" for e in events]


# --- L-1, codec capabilities ------------------------------------------------------------


def test_L1_codec_capabilities() -> None:
    codec = LocalCodec()
    assert codec.name == "local"
    assert codec.mode is Mode.REQUEST_RESPONSE
    assert not codec.supports_outcomes
    assert not codec.supports_budget
    assert codec.has_text_delta
    assert codec.pending_tool_uses([]) == ()


def test_S56_codec_declares_empty_resume_safe() -> None:
    assert LocalCodec.empty_resume_safe is True


# --- open: L-2…L-5, L-7 -----------------------------------------------------------------


def test_L2_tools_accepted_as_mappings_or_objects() -> None:
    @attrs.frozen
    class Tool:
        name: str
        description: str | None
        input_schema: dict[str, Any] | None

    from_objects = conv_of(
        tools=[Tool("get_weather", "Weather", {"type": "object"}), Tool("submit", "Finish", None)]
    )
    from_maps = conv_of(tools=[WEATHER, {"name": "submit", "description": "Finish"}])
    assert from_objects.tools == from_maps.tools


def test_L2_openai_shaped_tools_accepted() -> None:
    declared = {"type": "function", "function": {"name": "x", "parameters": {"type": "object"}}}
    conv = conv_of(tools=[declared])
    assert conv.tools[0]["function"] == {"name": "x", "description": "", "parameters": {"type": "object"}}


def test_declared_tools_keep_strict_and_every_other_field_as_declared() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    declared = {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather", "parameters": schema, "strict": True},
        "x-gateway-lane": "fast",
    }
    conv = conv_of(tools=[declared])
    assert json.loads(request_body_bytes(conv, stream=False))["tools"] == [declared]
    assert request_body(conv)["tools"] == [declared]


def test_flat_tools_carry_strict_to_the_declaration() -> None:
    @attrs.frozen
    class Tool:
        name: str
        description: str
        input_schema: dict[str, Any]
        strict: bool

    conv = conv_of(tools=[{**WEATHER, "strict": True}, Tool("submit", "Finish", {"type": "object"}, False)])
    functions = [tool["function"] for tool in json.loads(request_body_bytes(conv, stream=False))["tools"]]
    assert [(f["name"], f["strict"]) for f in functions] == [("get_weather", True), ("submit", False)]
    # No strict given: none sent (a server's default stays the server's).
    assert "strict" not in conv_of(tools=[WEATHER]).tools[0]["function"]


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"tools": [{"name": "x", "strict": "yes"}]}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "x", "strict": 1}}]}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "x", "parameters": "object"}}]}, "tools"),
        ({"tools": [{"description": "no name"}]}, "tools"),
        ({"tools": [WEATHER, WEATHER]}, "tools"),
        ({"tools": [{"name": "x", "input_schema": "string"}]}, "tools"),
        ({"tools": "get_weather"}, "tools"),
        ({"max_turns": 0}, "max_turns"),
        ({"max_history_messages": 0}, "max_history_messages"),
        ({"model_config": {"model": 3}}, "model_config"),
        ({"model_config": {"model": "m", "messages": []}}, "model_config"),
        ({"model_config": {"model": "m", "temperature": float("nan")}}, "model_config"),
        ({"history": [{"content": "no role"}]}, "history"),
        ({"history": [{"role": "user", "content": {1, 2}}]}, "history"),
        ({"terminal_tool": ""}, "terminal_tool"),
    ],
)
def test_start_rejects_invalid_options_as_values(kwargs: dict[str, Any], option: str) -> None:
    kwargs.setdefault("model_config", {"model": "m"})
    result = start(**kwargs)
    assert isinstance(result, Failure)
    err = result.failure()
    assert isinstance(err, InvalidOpts)
    assert err.option == option


def test_L3_model_config_shapes() -> None:
    assert conv_of(model_config=None).model is None
    assert conv_of(model_config="llama3").model == "llama3"
    conv = conv_of(
        model_config={
            "model": "m",
            "base_url": "http://x",
            "api_key": "sk-secret",
            "metadata": {},
            "temperature": 0,
        }
    )
    assert conv.model == "m"
    assert dict(conv.params) == {"temperature": 0}
    body = request_body_bytes(conv, stream=False)
    assert b"sk-secret" not in body
    assert json.loads(body)["temperature"] == 0


def test_L4_fresh_history_is_system_prompt_or_empty() -> None:
    with_prompt = conv_of(system_prompt="Be brief.")
    assert transcript(with_prompt) == ({"role": "system", "content": "Be brief."},)
    assert not with_prompt.resumed
    assert transcript(conv_of()) == ()
    assert transcript(conv_of(history=[], system_prompt="S")) == ({"role": "system", "content": "S"},)


def test_L4_history_seeded_verbatim_and_resumed() -> None:
    history = [
        {"role": "system", "content": "old"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
    ]
    conv = conv_of(history=history, system_prompt="ignored")
    assert conv.resumed
    assert transcript(conv) == tuple(history)


def test_L5_tools_declared_in_request() -> None:
    conv = conv_of(tools=[{"name": "t"}])
    body = json.loads(request_body_bytes(conv, stream=False))
    assert body["tools"] == [
        {"type": "function", "function": {"name": "t", "description": "", "parameters": {"type": "object"}}}
    ]


def test_L5_no_tools_key_without_tools() -> None:
    body = json.loads(request_body_bytes(conv_of(tools=[]), stream=False))
    assert "tools" not in body


def test_L7_default_max_turns_is_50() -> None:
    assert conv_of().max_turns == 50


# --- inputs: L-12…L-14 ------------------------------------------------------------------


def test_L12_kickoff_user_and_resume_inputs() -> None:
    assert CODEC.kickoff_input(None, None) == {
        "kind": "messages",
        "messages": [{"role": "user", "content": "Begin."}],
    }
    assert DEFAULT_PROMPT == "Begin."
    assert CODEC.kickoff_input("Go", None) == {
        "kind": "messages",
        "messages": [{"role": "user", "content": "Go"}],
    }
    assert user("hi") == {"kind": "messages", "messages": [{"role": "user", "content": "hi"}]}
    uses = [ToolUse("a", "get_weather", {}), ToolUse("b", "submit", {})]
    results = [ToolResult("b", "done"), ToolResult("a", "bad", is_error=True)]
    assert resume(uses, results) == {
        "kind": "resume",
        "results": [
            {"tool_use_id": "a", "name": "get_weather", "text": "bad", "is_error": True},
            {"tool_use_id": "b", "name": "submit", "text": "done", "is_error": False},
        ],
    }


def test_L14_resume_appends_tool_messages_in_use_order_with_error_json() -> None:
    conv = conv_of()
    calls = [call("get_weather", {"city": "SF"}, "a"), call("submit", {"x": 1}, "b")]
    conv, _, events = poll(conv, user("go"), response(calls=calls))
    uses = list(local.normalize(events).custom_tool_uses)
    assert [u.id for u in uses] == ["a", "b"]
    conv = apply_input(
        conv, resume(uses, [ToolResult("b", "ok"), ToolResult("a", "boom", is_error=True)])
    ).unwrap()
    tail = transcript(conv)[-2:]
    assert tail == (
        {"role": "tool", "tool_call_id": "a", "content": '{"error":"boom","isError":true}'},
        {"role": "tool", "tool_call_id": "b", "content": "ok"},
    )


def test_L14_missing_result_is_a_clear_error_value() -> None:
    conv = conv_of()
    conv, _, _ = poll(conv, user("go"), response(calls=[call("get_weather", {}, "a")]))
    input = resume([ToolUse("a", "get_weather", {})], [ToolResult("zzz", "x")])
    assert input["missing"] == ["a"]
    result = apply_input(conv, input)
    assert isinstance(result, Failure)
    err = result.failure()
    assert isinstance(err, ProviderError)
    assert err.error_type == "missing_tool_result"
    assert "'a'" in err.detail


@pytest.mark.parametrize(
    "bad",
    [
        "text",
        {"kind": "other"},
        {"kind": "messages", "messages": "x"},
        {"kind": "messages", "messages": [{"content": "no role"}]},
        {"kind": "messages", "messages": [{"role": "user", "content": float("nan")}]},
        {"kind": "resume"},
        {"kind": "resume", "results": ["x"]},
        {"kind": "resume", "results": [{"tool_use_id": 1, "text": "", "is_error": False}]},
    ],
)
def test_invalid_inputs_are_error_values(bad: Any) -> None:
    result = apply_input(conv_of(), bad)
    assert isinstance(result, Failure)
    assert result.failure().error_type == "invalid_input"


def test_L13_user_message_resets_request_state() -> None:
    conv = conv_of(max_turns=3)
    conv, _, _ = poll(conv, user("go"), response(calls=[call("get_weather", {"c": 1}, "a")]))
    conv = apply_input(conv, resume([ToolUse("a", "get_weather")], [ToolResult("a", "e", True)])).unwrap()
    conv, _, _ = prepare_request(conv, stream=False)
    conv, _ = apply_response(conv, response("hi")).unwrap()
    assert conv.polls == 2
    assert conv.seen_calls
    assert conv.error_counts == {"get_weather": 1}
    conv = apply_input(conv, user("again")).unwrap()
    assert (conv.polls, conv.seen_calls, dict(conv.error_counts)) == (0, frozenset(), {})
    # The identical call in the new request is not a duplicate.
    conv, _, events = poll(conv, user("x"), response(calls=[call("get_weather", {"c": 1}, "b")]))
    assert [u.id for u in local.normalize(events).custom_tool_uses] == ["b"]


# --- polls: L-8, L-9, L-15 --------------------------------------------------------------


def test_L8_request_carries_model_full_history_and_tools() -> None:
    conv = conv_of(system_prompt="S")
    conv = apply_input(conv, user("hello")).unwrap()
    conv, raw, directives = prepare_request(conv, stream=False)
    body = json.loads(raw)
    assert body["model"] == "m"
    assert body["messages"] == [{"role": "system", "content": "S"}, {"role": "user", "content": "hello"}]
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "submit"]
    assert body["stream"] is False
    assert directives == ()
    assert request_body(conv) == body


def test_L8_streaming_request_asks_for_usage() -> None:
    conv = apply_input(conv_of(), user("x")).unwrap()
    _, raw, _ = prepare_request(conv, stream=True)
    body = json.loads(raw)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_L8_only_first_choice_used() -> None:
    conv = apply_input(conv_of(), user("x")).unwrap()
    conv, _, _ = prepare_request(conv, stream=False)
    resp = response("first")
    resp["choices"].append(
        {"index": 1, "message": {"role": "assistant", "content": "second"}, "finish_reason": "stop"}
    )
    _, events = apply_response(conv, resp).unwrap()
    assert local.normalize(events).text == "first"


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"choices": []},
        {"choices": "x"},
        {"choices": [{"message": {"content": "x"}}]},
        {"choices": [{"finish_reason": "stop"}]},
        {"choices": [{"message": "x", "finish_reason": "stop"}]},
        {"choices": [{"message": {"content": "x"}, "finish_reason": 7}]},
        {"choices": [{"message": {"tool_calls": "x"}, "finish_reason": "stop"}]},
        {"choices": [{"message": {"tool_calls": [{"id": "a"}]}, "finish_reason": "stop"}]},
        {"choices": [{"message": {"tool_calls": [{"function": {"name": 1}}]}, "finish_reason": "stop"}]},
        {"choices": [{"message": {"content": [float("nan")]}, "finish_reason": "stop"}]},
        "nope",
        None,
    ],
)
def test_L9_malformed_response_is_malformed_response(bad: Any) -> None:
    conv = apply_input(conv_of(), user("x")).unwrap()
    conv, _, _ = prepare_request(conv, stream=False)
    result = apply_response(conv, bad)
    assert isinstance(result, Failure)
    err = result.failure()
    assert isinstance(err, MalformedResponse)
    assert err.response == bad or err.response is bad


def test_L9_error_body_is_provider_error() -> None:
    conv = apply_input(conv_of(), user("x")).unwrap()
    conv, _, _ = prepare_request(conv, stream=False)
    result = apply_response(conv, {"error": {"message": "model not found", "type": "not_found"}})
    err = result.failure()
    assert isinstance(err, ProviderError)
    assert err.detail == "model not found"


def test_L15_poll_counts_and_appends_assistant_with_all_calls() -> None:
    conv = conv_of()
    calls = [call("get_weather", {"c": 1}, "a"), call("get_weather", {"c": 1}, "b")]
    conv, _, events = poll(conv, user("go"), response("thinking", calls))
    assert conv.polls == 1
    assistant = transcript(conv)[1]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == "thinking"
    assert [c["id"] for c in assistant["tool_calls"]] == ["a", "b"]
    assert types(events) == ["local.duplicate_tool_call", "local.model_response"]
    assert events[-1]["finish_reason"] == "tool_calls"


def test_L15_response_only_fields_stay_in_event_not_history() -> None:
    conv = apply_input(conv_of(), user("x")).unwrap()
    conv, _, _ = prepare_request(conv, stream=False)
    resp = response("answer")
    resp["choices"][0]["message"]["reasoning_content"] = "hmm"
    resp["choices"][0]["message"]["refusal"] = None
    conv, events = apply_response(conv, resp).unwrap()
    assert transcript(conv)[-1] == {"role": "assistant", "content": "answer"}
    assert events[-1]["message"]["reasoning_content"] == "hmm"


# --- loop guards: L-16…L-20 -------------------------------------------------------------


def test_L16_duplicate_call_is_answered_not_surfaced() -> None:
    conv = conv_of()
    conv, _, _ = poll(conv, user("go"), response(calls=[call("get_weather", {"city": "SF", "u": 1}, "a")]))
    conv = apply_input(conv, resume([ToolUse("a", "get_weather")], [ToolResult("a", "sunny")])).unwrap()
    conv, _, _ = prepare_request(conv, stream=False)
    # Same arguments, different key order and spacing: still the same call.
    dup = call("get_weather", '{"u": 1, "city": "SF"}', "b")
    fresh = call("get_weather", {"city": "NYC"}, "c")
    conv, events = apply_response(conv, response(calls=[dup, fresh])).unwrap()
    assert types(events) == ["local.duplicate_tool_call", "local.model_response"]
    assert events[0] == {
        "type": "local.duplicate_tool_call",
        "id": "b",
        "name": "get_weather",
        "input": {"u": 1, "city": "SF"},
    }
    surfaced = events[-1]["message"]["tool_calls"]
    assert [c["id"] for c in surfaced] == ["c"]
    assert [u.id for u in local.normalize(events).custom_tool_uses] == ["c"]
    assert conv.pending_calls == (("c", "get_weather"),)
    # The duplicate's answer goes back with c's result, in call order (b, then c).
    assert transcript(conv)[-1]["role"] == "assistant"
    conv = apply_input(conv, resume([ToolUse("c", "get_weather")], [ToolResult("c", "cloudy")])).unwrap()
    answer, result = transcript(conv)[-2:]
    assert (answer["tool_call_id"], result["tool_call_id"]) == ("b", "c")
    assert json.loads(answer["content"]) == {"duplicate": True, "message": DUPLICATE_DIRECTIVE}
    assert result["content"] == "cloudy"


def test_L16_duplicate_within_one_response() -> None:
    conv = conv_of()
    calls = [call("get_weather", {"c": 1}, "a"), call("get_weather", {"c": 1}, "b")]
    conv, _, events = poll(conv, user("go"), response(calls=calls))
    assert [u.id for u in local.normalize(events).custom_tool_uses] == ["a"]


def test_L16_a_repeatable_tool_runs_every_identical_call() -> None:
    clock = {"name": "now", "description": "The time", "input_schema": {"type": "object"}, "repeatable": True}
    conv = conv_of(tools=[WEATHER, clock])
    calls = [
        call("now", {}, "a"),
        call("now", {}, "b"),
        call("get_weather", {}, "c"),
        call("get_weather", {}, "d"),
    ]
    conv, body, events = poll(conv, user("go"), response(calls=calls))
    assert [u.id for u in local.normalize(events).custom_tool_uses] == ["a", "b", "c"]
    assert types(events) == ["local.duplicate_tool_call", "local.model_response"]
    # rma's flag is never declared to the server.
    assert all("repeatable" not in json.dumps(tool) for tool in body["tools"])


def test_L16_an_already_declared_repeatable_tool_loses_the_flag_on_the_wire() -> None:
    declared = {"type": "function", "function": {"name": "now"}, "repeatable": True}
    conv = conv_of(tools=[declared])
    assert conv.repeatable == frozenset({"now"})
    assert conv.tools == (
        {
            "type": "function",
            "function": {"name": "now", "description": "", "parameters": {"type": "object"}},
        },
    )


def test_L16_the_terminal_tool_is_never_answered_as_a_duplicate() -> None:
    conv = conv_of(terminal_tool="submit")
    conv, _, _ = poll(conv, user("go"), response(calls=[call("submit", {"x": 1}, "a")]))
    conv = apply_input(
        conv, resume([ToolUse("a", "submit")], [ToolResult("a", "bad", is_error=True)])
    ).unwrap()
    conv, _ = prepare_request(conv, stream=False)[:2]
    conv, events = apply_response(conv, response(calls=[call("submit", {"x": 1}, "b")])).unwrap()
    assert types(events) == ["local.model_response"]
    assert [u.id for u in local.normalize(events).custom_tool_uses] == ["b"]


def test_L17_all_duplicates_is_requires_action_with_zero_uses() -> None:
    conv = conv_of()
    conv, _, _ = poll(conv, user("go"), response(calls=[call("get_weather", {}, "a")]))
    conv = apply_input(conv, resume([ToolUse("a", "get_weather")], [ToolResult("a", "r")])).unwrap()
    conv, _ = prepare_request(conv, stream=False)[:2]
    conv, events = apply_response(
        conv, response(calls=[call("get_weather", {}, "b")], finish="stop")
    ).unwrap()
    turn = local.normalize(events)
    assert turn.terminal is Terminal.REQUIRES_ACTION
    assert turn.custom_tool_uses == ()
    assert turn.stop_reason == "stop"


def test_S56_empty_resume_drives_the_next_model_call() -> None:
    conv = conv_of()
    conv, _, _ = poll(conv, user("go"), response(calls=[call("get_weather", {}, "a")]))
    conv = apply_input(conv, resume([ToolUse("a", "get_weather")], [ToolResult("a", "r")])).unwrap()
    conv, _ = prepare_request(conv, stream=False)[:2]
    conv, _ = apply_response(conv, response(calls=[call("get_weather", {}, "b")])).unwrap()
    empty = CODEC.resume_input([], [])
    assert empty == {"kind": "resume", "results": []}
    conv, body, events = poll(conv, empty, response("The weather is r."))
    # The model saw its duplicate answered, nothing else was added by the empty resume.
    assert body["messages"][-1]["role"] == "tool"
    assert body["messages"][-1]["tool_call_id"] == "b"
    assert local.normalize(events).terminal is Terminal.END_TURN
    assert conv.polls == 3


def test_L18_second_consecutive_error_gets_a_corrective() -> None:
    conv = conv_of()
    conv, _, _ = poll(conv, user("go"), response(calls=[call("get_weather", {"c": 1}, "a")]))
    conv = apply_input(
        conv, resume([ToolUse("a", "get_weather")], [ToolResult("a", "bad city", True)])
    ).unwrap()
    conv, _, first_directives = prepare_request(conv, stream=False)
    assert first_directives == ()
    conv, _ = apply_response(conv, response(calls=[call("get_weather", {"c": 2}, "b")])).unwrap()
    conv = apply_input(
        conv, resume([ToolUse("b", "get_weather")], [ToolResult("b", "still bad", True)])
    ).unwrap()
    text = CORRECTIVE_TEMPLATE.format(name="get_weather", error="still bad")
    assert text.startswith("STOP \u2014 the get_weather tool rejected your input again: still bad.")
    assert transcript(conv)[-1] == {"role": "user", "content": text}
    assert transcript(conv)[-2]["role"] == "tool"
    conv, _, directives = prepare_request(conv, stream=False)
    assert directives == ({"type": "local.directive", "role": "corrective", "text": text},)
    conv, events = apply_response(conv, response("ok")).unwrap()
    assert types(events) == ["directive:corrective", "local.model_response"]


def test_L18_success_in_between_resets_the_count() -> None:
    conv = apply_input(conv_of(), user("go")).unwrap()
    for n, is_error in enumerate([True, False, True]):
        conv, _, directives = prepare_request(conv, stream=False)
        assert directives == ()
        conv, _ = apply_response(conv, response(calls=[call("get_weather", {"n": n}, f"c{n}")])).unwrap()
        results = [ToolResult(f"c{n}", "e", is_error)]
        conv = apply_input(conv, resume([ToolUse(f"c{n}", "get_weather")], results)).unwrap()
    assert not any(m["role"] == "user" and m["content"].startswith("STOP") for m in transcript(conv))
    assert conv.error_counts == {"get_weather": 1}


def test_L19_final_turn_directive_on_poll_max_turns_and_after() -> None:
    conv = conv_of(max_turns=2, terminal_tool="submit")
    conv, _, events = poll(conv, user("go"), response(calls=[call("get_weather", {}, "a")]))
    assert "directive:final_turn" not in types(events)
    conv = apply_input(conv, resume([ToolUse("a", "get_weather")], [ToolResult("a", "r")])).unwrap()
    conv, raw, directives = prepare_request(conv, stream=False)
    text = FINAL_TURN_TERMINAL_TEMPLATE.format(tool="submit")
    assert "terminal tool (submit)" in text
    assert json.loads(raw)["messages"][-1] == {"role": "user", "content": text}
    assert directives == ({"type": "local.directive", "role": "final_turn", "text": text},)
    conv, events = apply_response(conv, response(calls=[call("get_weather", {"x": 1}, "b")])).unwrap()
    assert types(events)[0] == "directive:final_turn"
    conv = apply_input(conv, resume([ToolUse("b", "get_weather")], [ToolResult("b", "r")])).unwrap()
    _, _, directives = prepare_request(conv, stream=False)
    assert [d["role"] for d in directives] == ["final_turn"]


def test_L19_final_turn_without_terminal_tool_on_first_poll_when_max_turns_1() -> None:
    conv = apply_input(conv_of(max_turns=1), user("go")).unwrap()
    _, raw, directives = prepare_request(conv, stream=False)
    assert json.loads(raw)["messages"][-1]["content"] == FINAL_TURN_DIRECTIVE
    assert directives[0]["text"] == FINAL_TURN_DIRECTIVE


def test_L20_event_order_directives_then_duplicates_then_response() -> None:
    conv = conv_of(max_turns=2)
    conv, _, _ = poll(conv, user("go"), response(calls=[call("get_weather", {"c": 1}, "a")]))
    conv = apply_input(conv, resume([ToolUse("a", "get_weather")], [ToolResult("a", "e1", True)])).unwrap()
    conv, _, _ = prepare_request(conv, stream=False)
    conv, _ = apply_response(conv, response(calls=[call("get_weather", {"c": 2}, "b")])).unwrap()
    conv = apply_input(conv, resume([ToolUse("b", "get_weather")], [ToolResult("b", "e2", True)])).unwrap()
    conv, _, _ = prepare_request(conv, stream=False)
    dup = call("get_weather", {"c": 1}, "d")
    _, events = apply_response(conv, response(calls=[dup])).unwrap()
    assert types(events) == [
        "directive:corrective",
        "directive:final_turn",
        "local.duplicate_tool_call",
        "local.model_response",
    ]


# --- normalize: L-21…L-26 ---------------------------------------------------------------


def test_L21_no_model_response_is_terminated() -> None:
    turn = local.normalize([{"type": "local.directive", "role": "final_turn", "text": "x"}])
    assert turn.terminal is Terminal.TERMINATED
    assert turn.stop_reason is None
    assert len(turn.events) == 1


def test_P4_P6_normalize_keeps_poll_events_verbatim_and_has_no_server_tools() -> None:
    conv = conv_of(max_turns=1)
    calls = [call("get_weather", {"c": 1}, "a"), call("get_weather", {"c": 1}, "b"), call("nope", {}, "c")]
    _, _, events = poll(conv, user("go"), response("x", calls, usage={"prompt_tokens": 1}))
    turn = local.normalize(events)
    assert turn.events == events
    assert len(events) == 4
    assert turn.server_tool_uses == ()


def model_response(message: dict[str, Any], finish: Any, usage: Any = None) -> dict[str, Any]:
    return {"type": "local.model_response", "message": message, "finish_reason": finish, "usage": usage}


@pytest.mark.parametrize(
    ("message", "finish", "terminal"),
    [
        ({"content": "x", "tool_calls": [call("get_weather")]}, "stop", Terminal.REQUIRES_ACTION),
        ({"content": "x"}, "stop", Terminal.END_TURN),
        ({"content": "x"}, "tool_calls", Terminal.REQUIRES_ACTION),
        ({"content": "x"}, "length", Terminal.TERMINATED),
        ({"content": "x"}, None, Terminal.TERMINATED),
    ],
)
def test_L22_terminal_mapping(message: dict[str, Any], finish: Any, terminal: Terminal) -> None:
    turn = local.normalize([model_response(message, finish)])
    assert turn.terminal is terminal
    assert turn.stop_reason == finish


def test_L22_uses_first_model_response() -> None:
    turn = local.normalize(
        [model_response({"content": "a"}, "stop"), model_response({"content": "b"}, "length")]
    )
    assert (turn.text, turn.terminal) == ("a", Terminal.END_TURN)


def test_L23_text_and_tool_use_decoding() -> None:
    calls = [
        call("a", {"x": 1}, "1"),
        {"id": "2", "function": {"name": "b", "arguments": {"y": 2}}},
        call("c", "not json", "3"),
        call("d", "[1]", "4"),
    ]
    turn = local.normalize([model_response({"content": None, "tool_calls": calls}, "tool_calls")])
    assert turn.text == ""
    assert turn.custom_tool_uses == (
        ToolUse("1", "a", {"x": 1}),
        ToolUse("2", "b", {"y": 2}),
        ToolUse("3", "c", {}),
        ToolUse("4", "d", {}),
    )
    assert turn.server_tool_uses == ()


def test_L23_content_parts_joined() -> None:
    content = [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]
    assert local.normalize([model_response({"content": content}, "stop")]).text == "ab"


def test_L24_usage_only_with_integer_prompt_tokens() -> None:
    raw = {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 4}}
    turn = local.normalize([model_response({"content": "x"}, "stop", raw)])
    assert turn.usage == Usage(input_tokens=10, output_tokens=5, cache_read_input_tokens=4, raw=(raw,))
    assert local.normalize([model_response({}, "stop", {"prompt_tokens": None})]).usage is None
    assert local.normalize([model_response({}, "stop", {"prompt_tokens": -1})]).usage is None
    assert local.normalize([model_response({}, "stop", {"prompt_tokens": True})]).usage is None
    only_prompt = local.normalize(
        [model_response({}, "stop", {"prompt_tokens": 3, "completion_tokens": "x"})]
    )
    assert only_prompt.usage == Usage(
        input_tokens=3, output_tokens=0, raw=({"prompt_tokens": 3, "completion_tokens": "x"},)
    )


def test_L25_terminal_tool_only_words_the_final_turn_directive() -> None:
    conv = conv_of(terminal_tool="submit")
    conv, body, events = poll(conv, user("go"), response("done without submit"))
    assert local.normalize(events).terminal is Terminal.END_TURN
    assert all("submit" not in json.dumps(m) for m in body["messages"])


def test_L26_E10_text_delta_is_the_whole_reply() -> None:
    assert CODEC.text_delta(model_response({"content": "hi"}, "stop")) == "hi"
    assert CODEC.text_delta(model_response({"content": ""}, "stop")) is None
    assert CODEC.text_delta(model_response({"content": None}, "stop")) is None
    assert CODEC.text_delta({"type": "local.directive", "text": "x"}) is None
    assert CODEC.text_delta("junk") is None


# --- transcript and reattach: L-27…L-29 -------------------------------------------------


def test_L27_transcript_holds_every_message_kind() -> None:
    conv = conv_of(system_prompt="S", max_turns=2)
    conv, _, _ = poll(conv, user("go"), response(calls=[call("get_weather", {}, "a")]))
    conv = apply_input(conv, resume([ToolUse("a", "get_weather")], [ToolResult("a", "sun")])).unwrap()
    conv, _, _ = prepare_request(conv, stream=False)
    conv, _ = apply_response(conv, response("done")).unwrap()
    roles = [m["role"] for m in transcript(conv)]
    assert roles == ["system", "user", "assistant", "tool", "user", "assistant"]
    assert transcript(conv)[4]["content"] == FINAL_TURN_DIRECTIVE


def test_L28_reattach_sees_prior_transcript_plus_new_prompt() -> None:
    first = conv_of(system_prompt="S")
    first, _, _ = poll(first, user("one"), response("answer one"))
    old = transcript(first)
    second = conv_of(system_prompt="S", history=list(old))
    assert second.resumed
    second, body, _ = poll(second, user("two"), response("answer two"))
    assert body["messages"] == [*old, {"role": "user", "content": "two"}]
    assert transcript(second)[: len(old)] == old


def test_L28_reattach_answers_calls_left_open_by_the_previous_run() -> None:
    first = conv_of()
    first, _, _ = poll(first, user("go"), response(calls=[call("submit", {"r": 1}, "s1")]))
    second = conv_of(history=list(transcript(first)))
    assert second.pending_calls == (("s1", "submit"),)
    _, body, _ = poll(second, user("more"), response("ok"))
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "user"]
    assert body["messages"][2]["tool_call_id"] == "s1"
    assert json.loads(body["messages"][2]["content"])["isError"] is True


def test_L29_kickoff_tool_call_resume_end_turn() -> None:
    conv = conv_of()
    conv, _, events1 = poll(
        conv, CODEC.kickoff_input(None, None), response(calls=[call("get_weather", {"c": "SF"}, "a")])
    )
    turn1 = local.normalize(events1)
    assert turn1.terminal is Terminal.REQUIRES_ACTION
    results = [ToolResult(u.id, "sunny") for u in turn1.custom_tool_uses]
    conv, _, events2 = poll(
        conv, CODEC.resume_input(turn1.custom_tool_uses, results), response("It is sunny.")
    )
    turn2 = local.normalize(events2)
    assert (turn2.terminal, turn2.text) == (Terminal.END_TURN, "It is sunny.")
    assert turn1.custom_tool_uses == (ToolUse("a", "get_weather", {"c": "SF"}),)
    assert [e["type"] for e in (*events1, *events2)] == ["local.model_response"] * 2


# --- L-30: no quadratic history, optional truncation -------------------------------------


def test_L30_history_shares_one_store_and_messages_encode_once() -> None:
    conv = conv_of()
    conv = apply_input(conv, user("0")).unwrap()
    store_before = conv.history._store
    for n in range(1, 50):
        conv = apply_input(conv, user(str(n))).unwrap()
    assert conv.history._store is store_before
    assert len(conv.encoded) == len(conv.history) == 50
    assert conv.encoded[7] == b'{"role":"user","content":"7"}'


def test_L30_forked_versions_keep_their_own_history() -> None:
    base = apply_input(conv_of(), user("base")).unwrap()
    a = apply_input(base, user("a")).unwrap()
    b = apply_input(base, user("b")).unwrap()
    assert [m["content"] for m in transcript(a)] == ["base", "a"]
    assert [m["content"] for m in transcript(b)] == ["base", "b"]
    assert json.loads(request_body_bytes(a, stream=False))["messages"][-1]["content"] == "a"


def test_L30_truncation_keeps_system_and_latest_messages() -> None:
    conv = conv_of(system_prompt="S", max_history_messages=3)
    for n in range(6):
        conv = apply_input(conv, user(str(n))).unwrap()
    body = json.loads(request_body_bytes(conv, stream=False))
    assert [m["content"] for m in body["messages"]] == ["S", "3", "4", "5"]
    assert len(transcript(conv)) == 7


def test_L30_truncation_never_splits_tool_calls_from_their_answers() -> None:
    conv = conv_of(system_prompt="S", max_history_messages=2)
    calls = [call("get_weather", {"c": 1}, "a"), call("get_weather", {"c": 2}, "b")]
    conv, _, events = poll(conv, user("go"), response(calls=calls))
    uses = list(local.normalize(events).custom_tool_uses)
    conv = apply_input(conv, resume(uses, [ToolResult("a", "1"), ToolResult("b", "2")])).unwrap()
    # Window of 2 would start at the first tool message: the group is kept whole instead.
    body = json.loads(request_body_bytes(conv, stream=False))
    assert [m["role"] for m in body["messages"]] == ["system", "assistant", "tool", "tool"]
    conv = apply_input(conv, user("next")).unwrap()
    body = json.loads(request_body_bytes(conv, stream=False))
    # Window of 2 = [tool b, user]: moves forward past the orphaned tool message.
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


def test_L30_truncation_off_by_default() -> None:
    conv = conv_of(system_prompt="S")
    for n in range(100):
        conv = apply_input(conv, user(str(n))).unwrap()
    assert len(json.loads(request_body_bytes(conv, stream=False))["messages"]) == 101


# --- weak-model handling ----------------------------------------------------------------


def test_invalid_json_arguments_are_answered_not_surfaced() -> None:
    conv = conv_of()
    bad = call("get_weather", '{"city": "SF"', "a")
    conv, _, events = poll(conv, user("go"), response(calls=[bad]))
    turn = local.normalize(events)
    assert turn.custom_tool_uses == ()
    assert turn.terminal is Terminal.REQUIRES_ACTION
    assert types(events) == ["local.rejected_tool_call", "local.model_response"]
    assert events[0]["reason"] == "invalid_arguments"
    assert events[0]["arguments"] == '{"city": "SF"'
    history = transcript(conv)
    # The history copy carries "{}" (servers re-parse history arguments); the model is told.
    assert history[1]["tool_calls"][0]["function"]["arguments"] == "{}"
    answer = json.loads(history[2]["content"])
    assert answer["isError"] is True
    assert "not a valid JSON object" in answer["error"]
    assert '{"city": "SF"' in answer["error"]
    # The session's empty resume drives the next call, which sees the explanation.
    conv, body, events = poll(conv, CODEC.resume_input([], []), response("sorry"))
    assert body["messages"][-1]["tool_call_id"] == "a"


@pytest.mark.parametrize("arguments", ["[1, 2]", '"x"', "NaN", '{"a": Infinity}'])
def test_non_object_or_non_strict_json_arguments_rejected(arguments: str) -> None:
    conv = conv_of()
    _, _, events = poll(conv, user("go"), response(calls=[call("get_weather", arguments, "a")]))
    assert events[0]["type"] == "local.rejected_tool_call"


@pytest.mark.parametrize("arguments", ["", "  ", None])
def test_empty_arguments_mean_empty_object(arguments: Any) -> None:
    raw = {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    _, _, events = poll(conv_of(), user("go"), response(calls=[raw]))
    assert local.normalize(events).custom_tool_uses == (ToolUse("a", "get_weather", {}),)
    assert events[-1]["message"]["tool_calls"][0]["function"]["arguments"] == "{}"


def test_unknown_tool_is_answered_with_available_tools() -> None:
    conv = conv_of(terminal_tool="finish")
    conv, _, events = poll(
        conv, user("go"), response(calls=[call("search_web", {}, "a"), call("submit", {}, "b")])
    )
    assert [u.name for u in local.normalize(events).custom_tool_uses] == ["submit"]
    assert events[0]["type"] == "local.rejected_tool_call"
    assert events[0]["reason"] == "unknown_tool"
    assert conv.pending_calls == (("b", "submit"),)
    conv = apply_input(conv, resume([ToolUse("b", "submit")], [ToolResult("b", "ok")])).unwrap()
    assert [m.get("tool_call_id") for m in transcript(conv)[2:]] == ["a", "b"]
    error = json.loads(transcript(conv)[2]["content"])["error"]
    assert '"search_web"' in error
    assert "get_weather, submit, finish" in error


def test_terminal_tool_counts_as_known() -> None:
    conv = conv_of(tools=[WEATHER], terminal_tool="finish")
    _, _, events = poll(conv, user("go"), response(calls=[call("finish", {"answer": 1}, "a")]))
    assert local.normalize(events).custom_tool_uses == (ToolUse("a", "finish", {"answer": 1}),)


def test_tool_call_without_declared_tools() -> None:
    conv = conv_of(tools=[])
    conv, _, _ = poll(conv, user("go"), response(calls=[call("anything", {}, "a")]))
    assert "No tools are available" in json.loads(transcript(conv)[-1]["content"])["error"]


def test_empty_reply_nudged_once_then_accepted() -> None:
    conv = conv_of(terminal_tool="submit")
    conv, _, events = poll(conv, user("go"), response(None))
    turn = local.normalize(events)
    assert turn.terminal is Terminal.REQUIRES_ACTION
    assert turn.custom_tool_uses == ()
    assert types(events) == ["directive:empty_reply", "local.model_response"]
    nudge = transcript(conv)[-1]
    assert nudge["role"] == "user"
    assert "(submit)" in nudge["content"]
    # The empty assistant reply is kept as valid input ("" content).
    assert transcript(conv)[-2] == {"role": "assistant", "content": ""}
    conv, body, events = poll(conv, CODEC.resume_input([], []), response("  "))
    assert body["messages"][-1] == nudge
    assert local.normalize(events).terminal is Terminal.END_TURN
    assert types(events) == ["local.model_response"]
    # A new user message re-arms the nudge.
    _, _, events = poll(conv, user("again"), response(""))
    assert types(events)[0] == "directive:empty_reply"


def test_empty_reply_with_length_finish_is_not_nudged() -> None:
    _, _, events = poll(conv_of(), user("go"), response(None, finish="length"))
    assert local.normalize(events).terminal is Terminal.TERMINATED


def test_missing_and_repeated_ids_get_unique_synthetic_ids() -> None:
    conv = conv_of()
    calls = [
        call("get_weather", {"c": 1}, None),
        call("get_weather", {"c": 2}, "x"),
        call("get_weather", {"c": 3}, "x"),
    ]
    conv, _, events = poll(conv, user("go"), response(calls=calls))
    ids = [u.id for u in local.normalize(events).custom_tool_uses]
    assert ids == ["call_1_0", "x", "call_1_2"]
    assert [c["id"] for c in transcript(conv)[-1]["tool_calls"]] == ids


def test_unanswered_surfaced_calls_are_closed_before_a_user_message() -> None:
    conv = conv_of()
    conv, _, _ = poll(conv, user("go"), response(calls=[call("get_weather", {}, "a")]))
    conv, body, _ = poll(conv, user("never mind"), response("ok"))
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "user"]


def test_tool_messages_follow_the_replys_call_order_with_answers_local_made_itself() -> None:
    conv = conv_of()
    conv, _, _ = poll(conv, user("go"), response(calls=[call("get_weather", {"city": "SF"}, "first")]))
    conv = apply_input(conv, resume([ToolUse("first", "get_weather")], [ToolResult("first", "sun")])).unwrap()
    reply = [
        call("get_weather", {"city": "NYC"}, "fresh1"),
        call("get_weather", {"city": "SF"}, "dup"),  # a repeat of "first"
        call("search_web", {}, "unknown"),
        call("get_weather", '{"city": ', "broken"),
        call("get_weather", {"city": "LA"}, "fresh2"),
    ]
    conv, _, events = poll(conv, resume([], []), response(calls=reply))
    uses = local.normalize(events).custom_tool_uses
    assert [u.id for u in uses] == ["fresh1", "fresh2"]
    # Results handed over in another order still go back in the reply's order.
    results = [
        {"tool_use_id": "fresh2", "text": "r-LA", "is_error": False},
        {"tool_use_id": "fresh1", "text": "r-NYC", "is_error": False},
    ]
    conv = apply_input(conv, {"kind": "resume", "results": results}).unwrap()
    conv, body, _ = prepare_request(conv, stream=False)
    messages = json.loads(body)["messages"]
    assistant_at = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    assert [c["id"] for c in messages[assistant_at]["tool_calls"]] == [c["id"] for c in reply]
    answers = messages[assistant_at + 1 :]
    assert [m["tool_call_id"] for m in answers] == [c["id"] for c in reply]
    assert answers[0]["content"] == "r-NYC"
    assert json.loads(answers[1]["content"])["duplicate"] is True
    assert "no tool named" in json.loads(answers[2]["content"])["error"]
    assert "not a valid JSON object" in json.loads(answers[3]["content"])["error"]
    assert answers[4]["content"] == "r-LA"


def test_a_user_message_closes_a_reply_in_call_order_too() -> None:
    conv = conv_of()
    conv, _, _ = poll(conv, user("go"), response(calls=[call("get_weather", {"c": 1}, "a")]))
    conv = apply_input(conv, resume([ToolUse("a", "get_weather")], [ToolResult("a", "r")])).unwrap()
    reply = [call("get_weather", {"c": 2}, "fresh"), call("get_weather", {"c": 1}, "dup")]
    conv, _, _ = poll(conv, resume([], []), response(calls=reply))
    _, body, _ = poll(conv, user("never mind"), response("ok"))
    tail = body["messages"][-3:]
    assert [(m["role"], m.get("tool_call_id")) for m in tail] == [
        ("tool", "fresh"),
        ("tool", "dup"),
        ("user", None),
    ]
    assert json.loads(tail[0]["content"])["isError"] is True
    assert json.loads(tail[1]["content"])["duplicate"] is True


@pytest.mark.parametrize(
    "arguments",
    [
        "",  # vLLM streamed the id and name, then hit max_tokens: would have run with {}
        '{"city": "S',  # half the arguments: would have been rejected and retried
        '{"city": "SF"}',  # even arguments that parse are not known to be what was meant
    ],
)
def test_a_reply_cut_off_by_the_token_limit_runs_none_of_its_calls(arguments: str) -> None:
    conv = conv_of()
    calls = [call("get_weather", {"city": "LA"}, "a"), call("get_weather", arguments, "b")]
    conv, _, events = poll(conv, user("go"), response("Checking.", calls, finish="length"))
    turn = local.normalize(events)
    assert (turn.terminal, turn.stop_reason, turn.custom_tool_uses) == (Terminal.TERMINATED, "length", ())
    assert turn.text == "Checking."
    assert [(e["type"], e["id"], e["reason"]) for e in events[:-1]] == [
        ("local.rejected_tool_call", "a", "cut_off"),
        ("local.rejected_tool_call", "b", "cut_off"),
    ]
    assert events[0]["arguments"] == json.dumps({"city": "LA"})  # what the model sent, kept
    assistant, *answers = transcript(conv)[1:]
    assert [c["function"]["arguments"] for c in assistant["tool_calls"]] == ["{}", "{}"]
    assert [m["tool_call_id"] for m in answers] == ["a", "b"]
    assert all("cut off at the token limit" in json.loads(m["content"])["error"] for m in answers)
    assert conv.pending_calls == ()


def test_a_text_reply_cut_off_by_the_token_limit_is_terminated() -> None:
    _, _, events = poll(conv_of(), user("go"), response("Half an ans", finish="length"))
    turn = local.normalize(events)
    assert (turn.terminal, turn.stop_reason, turn.text) == (Terminal.TERMINATED, "length", "Half an ans")


def test_partial_resume_closes_the_rest() -> None:
    conv = conv_of()
    calls = [call("get_weather", {"c": 1}, "a"), call("get_weather", {"c": 2}, "b")]
    conv, _, _ = poll(conv, user("go"), response(calls=calls))
    conv = apply_input(
        conv, {"kind": "resume", "results": [{"tool_use_id": "a", "text": "x", "is_error": False}]}
    ).unwrap()
    assert [(m["tool_call_id"], m["content"][:9]) for m in transcript(conv)[-2:]] == [
        ("a", "x"),
        ("b", '{"error":'),
    ]
