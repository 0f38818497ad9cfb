"""The context window on Local (issue #26): known by option or from the server, every request
kept inside it by the core's policy, a length refusal compacted and retried once, and a window
that cannot be kept a typed error — against the emulator's vLLM-shaped context limit."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from rma.errors import ContextWindowExceeded
from rma.live import ContextCompacted, LiveUpdate
from rma.providers.local.context import CONTEXT_COMPACTED, CONTEXT_WINDOW, SHORTENED_MARKER
from rma_shell import run
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator
from rma_shell.testing.local.emulator import prompt_tokens

LOOKUP = {"name": "lookup", "description": "Look a record up", "input_schema": {"type": "object"}}
RECORD = "record " + "x" * 600


class Records:
    def __init__(self) -> None:
        self.calls = 0
        self.updates: list[LiveUpdate] = []

    def handle_update(self, update: LiveUpdate, ctx: object) -> None:
        self.updates.append(update)

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        self.calls += 1
        return f"{RECORD} #{input.get('n')}"


def tool_turns(n: int) -> list[dict[str, Any]]:
    return [{"tool_calls": [{"id": f"c{i}", "name": "lookup", "arguments": {"n": i}}]} for i in range(n)]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_200_turn_tool_session_finishes_inside_a_2k_window(stream: bool) -> None:
    records = Records()
    with OpenAIEmulator([*tool_turns(200), {"content": "done"}], context_window=2048) as emu:
        provider = Local(
            base_url=emu.base_url, model="m", tools=[LOOKUP], context_window="auto", stream=stream
        )
        try:
            outcome = await run(provider, handler=records, prompt="look them all up", max_turns=250)
        finally:
            await provider.close()
        chats = [r for r in emu.requests if r.path.endswith("/chat/completions")]
        refused = emu.refused
    result = outcome.unwrap()
    assert result.text == "done" and result.turns == 201
    assert refused == 0  # every request was planned inside the window
    assert all(prompt_tokens(r.body) < 2048 for r in chats)
    first = chats[-1].body["messages"]
    assert first[0] == {"role": "user", "content": "look them all up"}  # the request survives
    window = [e for e in result.events if e.get("type") == CONTEXT_WINDOW]
    assert window == [{"type": CONTEXT_WINDOW, "tokens": 2048, "source": "vllm /v1/models max_model_len"}]
    assert any(isinstance(u, ContextCompacted) and u.dropped for u in records.updates)
    assert result.transcript is not None and len(result.transcript) == 1 + 2 * 200 + 1  # history whole


async def test_old_tool_results_are_shortened_with_a_marker_before_turns_are_dropped() -> None:
    with OpenAIEmulator([*tool_turns(4), {"content": "done"}], context_window=4096) as emu:
        provider = Local(base_url=emu.base_url, model="m", tools=[LOOKUP], context_window=800)
        outcome = await run(provider, handler=Records(), prompt="go", max_turns=10)
        last = emu.requests[-1].body["messages"]
    assert outcome.unwrap().text == "done"
    shortened = [m for m in last if m["role"] == "tool" and "shortened" in m["content"]]
    assert shortened and SHORTENED_MARKER.format(total=len(RECORD) + 3, kept=400) in shortened[0]["content"]
    assert last[-1]["role"] == "tool" and last[-1]["content"].startswith(RECORD)  # the latest stays whole


async def test_a_length_refusal_is_compacted_and_retried_once() -> None:
    # No window given or discovered: the server's refusal says it, and the request is retried.
    with OpenAIEmulator([*tool_turns(12), {"content": "done"}], context_window=1500) as emu:
        provider = Local(base_url=emu.base_url, model="m", tools=[LOOKUP])
        outcome = await run(provider, handler=Records(), prompt="go", max_turns=20)
        refused = emu.refused
    result = outcome.unwrap()
    assert result.text == "done" and refused == 1
    compacted = [e for e in result.events if e.get("type") == CONTEXT_COMPACTED]
    assert compacted[0]["reason"] == "refused" and compacted[0]["window"] == 1500


async def test_a_window_that_cannot_be_kept_is_a_typed_error_with_the_usage_so_far() -> None:
    huge = {"content": "y" * 9000}  # the current request alone exceeds the window

    class Huge:
        async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            return huge["content"]

    with OpenAIEmulator([*tool_turns(2), {"content": "done"}], context_window=1024) as emu:
        provider = Local(base_url=emu.base_url, model="m", tools=[LOOKUP], shorten_to=10_000)
        outcome = await run(provider, handler=Huge(), prompt="go", max_turns=10)
    error = outcome.failure()
    assert isinstance(error, ContextWindowExceeded) and error.host == "local"
    assert error.window == 1024 and error.tokens is not None and error.tokens > 1024
    assert error.usage is not None and error.usage.input_tokens > 0  # the first turn's


async def test_the_hook_rewrites_each_request_and_the_history_keeps_the_original() -> None:
    seen: list[int] = []

    def hook(messages: list[Any]) -> list[Any]:
        seen.append(len(messages))
        return [*messages[:-1], {**messages[-1], "content": messages[-1]["content"].upper()}]

    with OpenAIEmulator([{"content": "done"}]) as emu:
        provider = Local(base_url=emu.base_url, model="m", context_hook=hook)
        outcome = await run(provider, handler=Records(), prompt="shout")
        sent = emu.requests[0].body["messages"]
    assert sent == [{"role": "user", "content": "SHOUT"}] and seen == [1]
    assert outcome.unwrap().transcript[0] == {"role": "user", "content": "shout"}


async def test_the_window_is_a_run_option_and_refused_when_not_tokens() -> None:
    with OpenAIEmulator([{"content": "done"}]) as emu:
        provider = Local(base_url=emu.base_url, model="m")
        outcome = await run(provider, handler=Records(), prompt="hi", context_window=4000)
        assert next(e for e in outcome.unwrap().events if e.get("type") == CONTEXT_WINDOW)["tokens"] == 4000
        bad = await run(provider, handler=Records(), prompt="hi", context_window="big")
    assert bad.failure().option == "context_window"


@pytest.mark.parametrize("stream", [False, True])
async def test_tokenize_counts_feed_the_policy(stream: bool) -> None:
    with OpenAIEmulator([*tool_turns(30), {"content": "done"}], context_window=2048) as emu:
        provider = Local(
            base_url=emu.base_url, model="m", tools=[LOOKUP], context_window="auto", stream=stream
        )
        try:
            outcome = await run(provider, handler=Records(), prompt="go", max_turns=40)
        finally:
            await provider.close()
        paths = [r.path for r in emu.requests]
    assert outcome.unwrap().text == "done"
    assert "/tokenize" in paths and emu.refused == 0
    assert json.dumps(paths).count("/v1/models") == 1  # discovered once


async def test_summarize_condenses_the_dropped_turns_once_per_chunk_with_the_same_model() -> None:
    from rma.providers.local.context import SUMMARY_INSTRUCTION, SUMMARY_PREFIX

    state = {"turn": 0}

    def reply(body: dict[str, Any]) -> dict[str, Any]:
        if body["messages"][0].get("content") == SUMMARY_INSTRUCTION:
            assert "tools" not in body and body["max_tokens"] <= 512
            return {"content": "looked up records 0 to n; all had x"}
        n = state["turn"]
        state["turn"] += 1
        if n == 60:
            return {"content": "done"}
        return {"tool_calls": [{"id": f"c{n}", "name": "lookup", "arguments": {"n": n}}]}

    records = Records()
    with OpenAIEmulator([reply] * 200, context_window=2048) as emu:
        provider = Local(
            base_url=emu.base_url,
            model="m",
            tools=[LOOKUP],
            context_window=2048,
            summarize=True,
            system_prompt="S",
        )
        outcome = await run(provider, handler=records, prompt="go", max_turns=100)
        chats = [r.body for r in emu.requests]
    assert outcome.unwrap().text == "done"
    summaries = [b for b in chats if b["messages"][0]["content"] == SUMMARY_INSTRUCTION]
    assert (
        1 <= len(summaries) <= 60 // 3
    )  # once per compaction chunk (a quarter of the budget), not every turn
    last = chats[-1]["messages"]
    assert last[0] == {"role": "system", "content": "S"}
    assert last[1]["content"].startswith(SUMMARY_PREFIX) and "looked up records" in last[1]["content"]
    assert any(isinstance(u, ContextCompacted) and u.summarized for u in records.updates)
    assert emu.refused == 0


def test_a_snapshot_of_the_policy_restores_the_same_requests() -> None:
    from rma.providers.local.codec import CODEC, apply_input, apply_response, prepare_request, start
    from rma.providers.local.context import restored, saved, with_summary
    from rma.providers.local.request import request_body_bytes
    from rma.vocabulary import ToolResult, ToolUse

    conv = start("S", [LOOKUP], None, {"model": "m"}, 100, context_window=1500).unwrap()
    conv = apply_input(conv, CODEC.user_input("go")).unwrap()
    for n in range(12):
        conv, _, _ = prepare_request(conv, stream=False)
        reply = {
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": tool_turns(n + 1)[n]["tool_calls"],
                    },
                    "finish_reason": "tool_calls",
                }
            ]
        }
        reply["choices"][0]["message"]["tool_calls"] = [
            {"id": f"c{n}", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        ]
        conv, _ = apply_response(conv, reply).unwrap()
        conv = apply_input(
            conv, CODEC.resume_input([ToolUse(f"c{n}", "lookup", {})], [ToolResult(f"c{n}", RECORD)])
        ).unwrap()
    assert conv.context is not None
    conv = attrs.evolve(conv, context=with_summary(conv.context, "the gist"))
    again = start(
        "S", [LOOKUP], None, {"model": "m"}, 100, conv.history.to_tuple(), context_window=1500
    ).unwrap()
    assert again.context is not None
    again = attrs.evolve(
        again,
        context=restored(
            again.context, again.history, again.encoded, json.loads(json.dumps(saved(conv.context)))
        ),
    )
    assert request_body_bytes(again, stream=False) == request_body_bytes(conv, stream=False)
    assert again.context == conv.context


def test_discovery_reads_each_server_s_own_shape() -> None:
    from rma_shell.providers.local.window import (
        root_of,
        window_from_models,
        window_from_props,
        window_from_show,
    )

    # vLLM's /v1/models (ModelCard): max_model_len per served model.
    vllm = {"object": "list", "data": [{"id": "Qwen/Qwen3-8B", "object": "model", "max_model_len": 32768}]}
    assert window_from_models(vllm, "Qwen/Qwen3-8B") == 32768
    assert window_from_models(vllm, None) == 32768  # the only model served
    assert window_from_models({"data": [{"id": "a", "max_model_len": 1}, {"id": "b"}]}, "c") is None
    # llama.cpp's /v1/models has no max_model_len (its meta says n_ctx_train): /props says n_ctx.
    assert window_from_models({"data": [{"id": "m.gguf", "meta": {"n_ctx_train": 32768}}]}, "m.gguf") is None
    assert (
        window_from_props({"default_generation_settings": {"n_ctx": 8192, "params": {}}, "total_slots": 1})
        == 8192
    )
    assert window_from_props({"n_ctx": 4096}) == 4096
    assert window_from_props({"default_generation_settings": {}}) is None
    # Ollama's /api/show: model_info's "<architecture>.context_length".
    show = {"model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960}}
    assert window_from_show(show) == 40960
    assert root_of("http://localhost:11434/v1") == "http://localhost:11434"
    assert root_of("http://gw.example/openai/") == "http://gw.example/openai"


def test_length_refusals_of_each_server_are_read_for_their_numbers() -> None:
    from rma.providers.local.context import refusal_of

    vllm = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens. However, your request has 9000 "
            "input tokens. Please reduce the length of the input messages.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }
    assert refusal_of(vllm) == (8192, 9000)
    old_vllm = {
        "object": "error",
        "message": vllm["error"]["message"],
        "type": "BadRequestError",
        "code": 400,
    }
    assert refusal_of(old_vllm) == (8192, 9000)
    openai = {
        "error": {
            "message": "This model's maximum context length is 128000 tokens. However, you requested "
            "130000 tokens (130000 in the messages, 0 in the completion).",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    }
    assert refusal_of(openai) == (128000, 130000)
    llama_cpp = {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 5000,
            "n_ctx": 4096,
        }
    }
    assert refusal_of(llama_cpp) == (4096, 5000)
    assert refusal_of({"error": {"message": "model not found", "type": "invalid_request_error"}}) is None
