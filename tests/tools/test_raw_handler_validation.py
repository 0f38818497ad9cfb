"""Raw handlers with hand-written schemas get their arguments checked too (issue #14): the
model's ``{"a": "2"}`` for a number never reaches ``handle_tool_call``; the model gets one
line per bad field, the text typed tools give — on Local and AgentCore, where the schema is
declared locally."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rma_shell import run
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.local import Local
from rma_shell.seams import Seams
from rma_shell.testing import OpenAIEmulator
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator

KEY = "sk-test-raw"
SID = "rma-session-0123456789abcdef0123456789"
ADD = {
    "name": "add",
    "description": "Add two numbers",
    "input_schema": {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    },
}
BAD = {"a": "2"}
REFUSAL = (
    "invalid arguments for add:\n- (arguments): 'b' is a required property\n- a: '2' is not of type 'number'"
)


class Adder:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        self.calls.append(input)
        return str(input["a"] + input["b"])


async def test_local_refuses_arguments_that_break_the_declared_schema() -> None:
    turns: list[Any] = [
        {"tool_calls": [{"id": "c1", "name": "add", "arguments": BAD}]},
        {"tool_calls": [{"id": "c2", "name": "add", "arguments": {"a": 2, "b": 3}}]},
        {"content": "5"},
    ]
    with OpenAIEmulator(turns, api_key=KEY) as emu:
        adder = Adder()
        provider = Local(
            base_url=emu.base_url,
            model="m",
            api_key=KEY,
            tools=[ADD],
            _seams=Seams(rand=lambda: 0.0),
        )
        result = (await run(provider, handler=adder, prompt="2+3?")).unwrap()
        messages = emu.requests[-1].body["messages"]
    assert result.text == "5" and adder.calls == [{"a": 2, "b": 3}]
    tool_messages = [m["content"] for m in messages if m["role"] == "tool"]
    assert json.loads(tool_messages[0])["error"] == REFUSAL
    assert tool_messages[1] == "5"


async def test_agentcore_refuses_arguments_that_break_the_declared_schema() -> None:
    script = [ace.tool_turn(("add", BAD, "tooluse_1")), ace.text_turn("could not add")]
    with AgentCoreEmulator(script) as emu:
        adder = Adder()
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
            tools=[ADD],
        )
        try:
            result = (await run(provider, handler=adder, prompt="2+3?", runtime_session_id=SID)).unwrap()
        finally:
            await provider.close()
        second = [r.body for r in emu.requests if r.path.startswith("/harnesses/invoke")][1]
    assert result.text == "could not add" and adder.calls == []
    [block] = second["messages"][-1]["content"]
    assert block["toolResult"]["status"] == "error"
    assert block["toolResult"]["content"][0]["text"] == REFUSAL


@pytest.mark.parametrize("schema", [{"type": "object"}, {"type": "object", "properties": {}}])
async def test_an_open_schema_lets_any_object_through(schema: dict[str, Any]) -> None:
    turns: list[Any] = [
        {"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"x": [1]}}]},
        {"content": "ok"},
    ]
    seen: list[dict[str, Any]] = []

    def echo(name: str, input: dict[str, Any], ctx: object) -> str:
        seen.append(input)
        return "echoed"

    with OpenAIEmulator(turns, api_key=KEY) as emu:
        tools = [{"name": "echo", "description": "Echo", "input_schema": schema}]
        provider = Local(
            base_url=emu.base_url,
            model="m",
            api_key=KEY,
            tools=tools,
            _seams=Seams(rand=lambda: 0.0),
        )
        assert (await run(provider, handler=echo, prompt="go")).unwrap().text == "ok"
    assert seen == [{"x": [1]}]
