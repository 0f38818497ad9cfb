"""Tool input the model did not send never reaches a tool (issue #12 item 17).

Input that does not parse to a JSON object — AgentCore's streamed fragments, a Claude tool use
whose ``input`` is not an object, Local's arguments — is answered with an ``is_error`` result the
model sees, the way Local answers bad arguments; the handler is not called with ``{}``. Input
nested hundreds of levels deep is answered the same way, and never crashes the session.
"""

from __future__ import annotations

import json
from typing import Any

from returns.result import Success

from rma.vocabulary import MAX_TOOL_INPUT_DEPTH, Terminal
from rma_shell import run
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.local import Local
from rma_shell.testing import CMAEmulator, OpenAIEmulator, cma, text_turn, tool_turn
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.testing.scripted import ScriptedProvider
from tests.helpers import calls, end, tool
from tests.providers.test_cma_session import KEY as CMA_KEY
from tests.providers.test_cma_session import setup as cma_setup

SID = "rma-session-0123456789abcdef0123456789"
LOOKUP = {"name": "lookup", "description": "Find", "input_schema": {"type": "object"}}
SUBMIT = {"name": "submit", "description": "Finish", "input_schema": {"type": "object"}}


class Tools:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        self.calls.append((name, input))
        return f"{name} ran"


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def nested_text(depth: int) -> str:
    return '{"a": ' * (depth - 1) + '{"leaf": 1}' + "}" * (depth - 1)


def agentcore(emu: AgentCoreEmulator, **kw: Any) -> BedrockAgentCore:
    return BedrockAgentCore(
        harness_arn=emu.harness_arn,
        data_url=emu.base_url,
        env=emu.credentials_env(),
        tools=[LOOKUP, SUBMIT],
        **kw,
    )


def raw_tool_turn(*blocks: tuple[str, str, str]) -> list[Any]:
    """A turn asking for client tools whose input fragments are given verbatim."""
    frames: list[Any] = [ace.message_start()]
    for index, (tool_use_id, name, fragment) in enumerate(blocks):
        frames += [
            ace.tool_use_start(tool_use_id, name, index=index),
            ace.tool_input_delta(fragment, index=index),
            ace.block_stop(index),
        ]
    return [*frames, ace.message_stop("tool_use"), ace.metadata()]


def answers(invoke_body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    user = invoke_body["messages"][-1]
    return {b["toolResult"]["toolUseId"]: b["toolResult"] for b in user["content"] if "toolResult" in b}


# ── AgentCore ────────────────────────────────────────────────────────────────────────


async def test_B23_streamed_input_that_does_not_parse_is_answered_as_an_error_not_run_with_empty() -> None:
    script = [raw_tool_turn(("tu_bad", "lookup", '{"q": "al')), ace.text_turn("sorry")]
    with AgentCoreEmulator(script) as emu:
        provider, tools = agentcore(emu), Tools()
        try:
            result = (await run(provider, handler=tools, prompt="x", runtime_session_id=SID)).unwrap()
        finally:
            await provider.close()
        invokes = [json.loads(r.raw) for r in emu.requests if r.path.startswith("/harnesses/invoke")]
    assert tools.calls == []  # never run with {}
    answer = answers(invokes[1])["tu_bad"]
    assert answer["status"] == "error"
    (block,) = answer["content"]
    assert "not a valid JSON object" in block["text"] and '{"q": "al' in block["text"]
    assert result.text == "sorry" and result.custom_tool_uses[0].input_error is not None


async def test_B23_in_a_mixed_batch_the_good_input_runs_and_the_bad_one_is_answered_in_its_place() -> None:
    script = [
        raw_tool_turn(
            ("tu_1", "lookup", '{"q": "ok"}'), ("tu_2", "lookup", "[1, 2]"), ("tu_3", "lookup", '"x"')
        ),
        ace.text_turn("done"),
    ]
    with AgentCoreEmulator(script) as emu:
        provider, tools = agentcore(emu), Tools()
        try:
            got = await run(provider, handler=tools, prompt="x", runtime_session_id=SID)
        finally:
            await provider.close()
        invokes = [json.loads(r.raw) for r in emu.requests if r.path.startswith("/harnesses/invoke")]
    assert got.unwrap().text == "done" and tools.calls == [("lookup", {"q": "ok"})]
    results = invokes[1]["messages"][-1]["content"]
    assert [b["toolResult"]["toolUseId"] for b in results] == ["tu_1", "tu_2", "tu_3"]  # T-1 order
    assert [b["toolResult"]["status"] for b in results] == ["success", "error", "error"]
    assert "got an array" in results[1]["toolResult"]["content"][0]["text"]
    assert "got a string" in results[2]["toolResult"]["content"][0]["text"]


async def test_a_terminal_tool_call_whose_input_was_rejected_does_not_count_as_called() -> None:
    script = [
        raw_tool_turn(("tu_s", "submit", "{broken")),
        ace.text_turn("I submitted."),
        ace.tool_turn(("submit", {"answer": 42})),
        ace.text_turn("ok"),
    ]
    with AgentCoreEmulator(script) as emu:
        provider, tools = agentcore(emu), Tools()
        try:
            result = (
                await run(
                    provider,
                    handler=tools,
                    prompt="x",
                    runtime_session_id=SID,
                    require_terminal_tool=True,
                    terminal_tool="submit",
                )
            ).unwrap()
        finally:
            await provider.close()
    assert tools.calls == [("submit", {"answer": 42})]
    assert result.stop_reason == "end_turn" and result.turns == 4  # re-prompted, not ended early


# ── Claude Managed Agents ────────────────────────────────────────────────────────────


async def test_C14_a_tool_use_whose_input_is_not_an_object_is_answered_as_an_error() -> None:
    bad = [
        {**cma.custom_tool_use("lookup"), "input": "q=alpha"},
        {**cma.custom_tool_use("lookup"), "input": [1]},
    ]
    fine = {**cma.custom_tool_use("lookup"), "input": None}  # null: a tool without parameters
    with CMAEmulator([tool_turn(*bad, fine), text_turn("done")], api_key=CMA_KEY) as emu:
        provider, tools = cma_setup(emu), Tools()
        try:
            result = (await run(provider, handler=tools, prompt="go", timeout=30)).unwrap()
        finally:
            await provider.close()
        (session_id,) = [
            q.path.split("/")[3] for q in emu.requests if q.path.split("?")[0].endswith("/events/stream")
        ]
        posted = [e for e in emu.history(session_id) if e.get("type") == "user.custom_tool_result"]
    assert tools.calls == [("lookup", {})]  # only the null input ran, as {}
    assert [e["is_error"] for e in posted] == [True, True, False]
    assert "got a string" in posted[0]["content"][0]["text"] and "q=alpha" in posted[0]["content"][0]["text"]
    assert "got an array" in posted[1]["content"][0]["text"]
    assert result.text == "done"


async def test_a_Claude_tool_input_nested_hundreds_deep_is_an_error_result_not_a_crash() -> None:
    deep = {**cma.custom_tool_use("lookup"), "input": nested(400)}
    with CMAEmulator([tool_turn(deep), text_turn("done")], api_key=CMA_KEY) as emu:
        provider, tools = cma_setup(emu), Tools()
        try:
            outcome = await run(provider, handler=tools, prompt="go", timeout=30)
        finally:
            await provider.close()
        (session_id,) = [
            q.path.split("/")[3] for q in emu.requests if q.path.split("?")[0].endswith("/events/stream")
        ]
        posted = [e for e in emu.history(session_id) if e.get("type") == "user.custom_tool_result"]
    assert outcome.unwrap().text == "done" and tools.calls == []
    assert posted[0]["is_error"] is True
    assert f"nested more than {MAX_TOOL_INPUT_DEPTH} levels deep" in posted[0]["content"][0]["text"]


# ── Local ────────────────────────────────────────────────────────────────────────────


async def test_L23_Local_arguments_nested_hundreds_deep_are_rejected_like_bad_arguments() -> None:
    call = {"tool_calls": [{"id": "call_d", "name": "lookup", "arguments": nested_text(400)}]}
    with OpenAIEmulator([call, {"content": "fine"}]) as emu:
        provider, tools = Local(base_url=emu.base_url, model="m", tools=[LOOKUP], max_retries=0), Tools()
        try:
            outcome = await run(provider, handler=tools, prompt="go")
        finally:
            await provider.close()
        second = emu.requests[1].body["messages"]
    assert outcome.unwrap().text == "fine" and tools.calls == []
    tool_message = next(m for m in second if m["role"] == "tool")
    assert "nested more than" in json.dumps(tool_message)


# ── any provider: the handler adapter never crashes on depth ─────────────────────────


async def test_a_provider_handing_over_input_too_deep_to_copy_gets_an_error_result_not_Crashed() -> None:
    deep_use = tool("lookup", "t1")
    deep_use["input"] = nested(5_000)  # a codec that checks nothing: deeper than a deep copy can go
    provider, tools = ScriptedProvider([calls(deep_use), end("after")]), Tools()
    outcome = await run(provider, handler=tools, prompt="go")
    assert isinstance(outcome, Success), outcome  # before: Failure(Crashed(RecursionError))
    result = outcome.unwrap()
    assert result.terminal is Terminal.END_TURN and result.text == "after" and tools.calls == []
    (answer,) = provider.inputs[1]
    assert answer["is_error"] is True and "nested too deeply" in answer["text"]
