"""What a tool may return and what reaches the wire (T-4, T-5, T-6, T-7; issue #13 §6).

A tool returns ``str``, a JSON-serialisable ``dict``/``list`` (sent as JSON text) or
``Success``/``Failure`` of those; anything else is an ``is_error`` result naming the type.
A raising tool is logged at WARNING on ``rma.handler`` with its traceback. Each case runs a
real session through Local against the loopback OpenAI emulator and reads the ``tool``
message the model received.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from returns.result import Failure, Success

from rma_shell import run
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator

TOOL = {"name": "probe", "description": "returns whatever the test says", "input_schema": {"type": "object"}}
CALL = {"tool_calls": [{"id": "call_1", "name": "probe", "arguments": {}}]}


class Returns:
    def __init__(self, value: Any) -> None:
        self.value = value

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> Any:
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value


async def _tool_message(value: Any) -> dict[str, Any]:
    """Run one tool call answering ``value``; return the tool message the model got."""
    with OpenAIEmulator([CALL, {"content": "done"}]) as emu:
        provider = Local(base_url=emu.base_url, model="m", tools=[TOOL])
        outcome = await run(provider, handler=Returns(value), prompt="go", timeout=30)
        await provider.close()
        assert isinstance(outcome, Success), outcome
        [message] = [m for m in emu.requests[1].body["messages"] if m["role"] == "tool"]
    return dict(message)


async def test_T4_a_dict_is_sent_as_its_json_text() -> None:
    value = {"plan": "Pro", "seats": 3, "tags": ["vip", "é"], "trial": None}
    message = await _tool_message(value)
    assert json.loads(message["content"]) == value
    assert "é" in message["content"]  # non-ASCII kept, not \\u-escaped


async def test_T4_a_list_is_sent_as_its_json_text() -> None:
    message = await _tool_message([1, "two", {"three": 3.5}])
    assert json.loads(message["content"]) == [1, "two", {"three": 3.5}]


async def test_T4_success_of_a_dict_is_json_and_T5_failure_of_a_dict_is_an_error() -> None:
    ok = await _tool_message(Success({"ok": True}))
    assert json.loads(ok["content"]) == {"ok": True}
    bad = await _tool_message(Failure({"error": "not found", "id": 7}))
    # Local sends an error result as {"error": <text>, "isError": true}; the text is the JSON.
    wrapped = json.loads(bad["content"])
    assert wrapped["isError"] is True
    assert json.loads(wrapped["error"]) == {"error": "not found", "id": 7}


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (None, "NoneType"),
        (42, "int"),
        (("a", "b"), "tuple"),
        (object(), "object"),
        (Success(3), "Success(int)"),
        (Failure(ValueError("x")), "Failure(ValueError)"),
    ],
    ids=["None", "int", "tuple", "object", "Success-int", "Failure-exception"],
)
async def test_T7_any_other_value_is_an_error_result_naming_its_type(value: Any, named: str) -> None:
    message = await _tool_message(value)
    assert f"handler returned {named};" in message["content"]
    assert "expected str, a JSON dict or list" in message["content"]


async def test_T7_a_dict_that_is_not_json_is_an_error_result_saying_why() -> None:
    message = await _tool_message({"when": {1, 2}})
    assert "handler returned a dict that is not JSON" in message["content"]
    assert "set" in message["content"]
    nan = await _tool_message([float("nan")])
    assert "handler returned a list that is not JSON" in nan["content"]


async def test_T6_a_raising_tool_is_logged_at_warning_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="rma.handler"):
        message = await _tool_message(ZeroDivisionError("division by zero"))
    assert "ZeroDivisionError" in message["content"]  # the model still gets the is_error result
    [record] = [r for r in caplog.records if r.name == "rma.handler"]
    assert record.levelno == logging.WARNING
    assert record.exc_info is not None and record.exc_info[0] is ZeroDivisionError
    assert getattr(record, "tool", None) == "probe"
    assert "handle_tool_call" in caplog.text  # the traceback names the frame that raised


async def test_a_raising_confirm_tool_use_denies_and_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from rma_shell.providers.claude import ClaudeManagedAgents
    from rma_shell.testing import CMAEmulator, cma, text_turn

    class Confirms:
        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            return "unused"

        def confirm_tool_use(self, name: str, input: dict[str, Any], ctx: object) -> bool:
            raise KeyError("policy table missing")

    gated = [
        cma.status_running(),
        cma.agent_tool_use("bash", {"command": "ls"}, evaluated_permission="ask"),
        cma.idle_requires_action(),
    ]
    with CMAEmulator([gated, text_turn("fine")], api_key="sk-ant-t") as emu:
        provider = ClaudeManagedAgents(api_key="sk-ant-t", base_url=emu.base_url, env={})
        client = provider.client().unwrap()
        agent = (await client.create_agent({"name": "a", "model": "claude-sonnet-4-6"})).unwrap()
        env = (await client.create_environment({"name": "e", "config": {"type": "cloud"}})).unwrap()
        with caplog.at_level(logging.WARNING, logger="rma.handler"):
            outcome = await run(
                provider, handler=Confirms(), prompt="go", agent=agent, environment=env, timeout=20
            )
        await provider.close()
        posts = [q.body for q in emu.requests if q.method == "POST" and q.path.endswith("/events")]
    assert outcome.unwrap().text == "fine"
    [confirmation] = posts[1]["events"]
    assert confirmation["result"] == "deny" and "policy table missing" in confirmation["deny_message"]
    [record] = [r for r in caplog.records if r.name == "rma.handler"]
    assert record.levelno == logging.WARNING and record.exc_info is not None
    assert record.exc_info[0] is KeyError
