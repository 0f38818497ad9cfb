"""An agent's tools as one handler (``rma_shell.tools.routing``): toolboxes kept whole and
started once, a raw handler beside typed functions, the agent's approval and at-most-once
names over every part."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from returns.result import Failure

from rma.journal import AwaitingApproval
from rma_shell import Agent
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator
from rma_shell.tools import Toolbox, ToolOutput, ToolSpec, tool


class CountingSource:
    """A tool source that counts how often it is started and called."""

    def __init__(self) -> None:
        self.entered = 0
        self.calls: list[dict[str, Any]] = []

    async def __aenter__(self) -> CountingSource:
        self.entered += 1
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def tools(self) -> list[ToolSpec]:
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        return [ToolSpec("count", "Count", schema)]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolOutput:
        self.calls.append(arguments)
        return ToolOutput(text=f"counted {arguments['n']}")


@tool
def double(n: int) -> int:
    """Double a number.

    Args:
        n: the number
    """
    return 2 * n


def calls(*names_args: tuple[str, dict[str, Any]]) -> list[Any]:
    turns: list[Any] = [
        {"tool_calls": [{"id": f"c{i}", "name": n, "arguments": a}]} for i, (n, a) in enumerate(names_args)
    ]
    return [*turns, {"content": "done"}]


async def test_a_toolbox_the_caller_started_is_used_as_it_is_and_never_started_twice() -> None:
    source = CountingSource()
    script = calls(("count", {"n": 1}), ("double", {"n": 2})) * 2
    async with Toolbox(source) as box:
        with OpenAIEmulator(script) as emu:
            host = Local(base_url=emu.base_url, model="m")
            agent = Agent(tools=[box, double], host=host)
            for _ in range(2):
                result = await agent.run_or_raise("go")
                assert result.text == "done"
            await host.close()
    assert source.entered == 1 and source.calls == [{"n": 1}, {"n": 1}]
    names = [t["function"]["name"] for t in emu.requests[0].body["tools"]]
    assert sorted(names) == ["count", "double"]


async def test_a_toolbox_nobody_started_starts_with_each_run_or_once_with_the_agent() -> None:
    source = CountingSource()
    with OpenAIEmulator(calls(("count", {"n": 1})) * 3) as emu:
        host = Local(base_url=emu.base_url, model="m")
        agent = Agent(tools=[Toolbox(source)], host=host)
        await agent.run_or_raise("go")
        assert source.entered == 1
        async with agent:
            await agent.run_or_raise("go")
            await agent.run_or_raise("go")
        await host.close()
    assert source.entered == 2


async def test_the_agents_require_approval_names_cover_a_given_toolbox_and_a_raw_handler(
    tmp_path: Any,
) -> None:
    declared = {"name": "refund", "description": "Refund", "input_schema": {"type": "object"}}
    ran: list[str] = []

    def handle(name: str, input: Any, ctx: Any) -> str:
        ran.append(name)
        return "ok"

    for tools, name in (([Toolbox(double)], "double"), ([declared], "refund")):
        with OpenAIEmulator(calls((name, {"n": 1}))) as emu:
            host = Local(base_url=emu.base_url, model="m")
            agent = Agent(
                tools=tools,
                handler=handle if name == "refund" else None,
                require_approval=[name],
                journal=str(tmp_path / f"{name}.db"),
                host=host,
            )
            outcome = await agent.run("go", journal_key="k")
            await host.close()
        assert isinstance(outcome, Failure) and isinstance(outcome.failure(), AwaitingApproval), name
        assert [p.name for p in agent.pending_approvals("k").unwrap()] == [name]
    assert ran == []


async def test_two_parts_declaring_one_name_is_refused() -> None:
    declared = {"name": "double", "description": "Another double", "input_schema": {"type": "object"}}
    with OpenAIEmulator(calls()) as emu:
        host = Local(base_url=emu.base_url, model="m")
        outcome = await Agent(tools=[double, declared], handler=lambda n, i, c: "x", host=host).run("go")
        await host.close()
    assert isinstance(outcome, Failure) and outcome.failure().option == "tools"
    assert "duplicate tool name 'double'" in str(outcome.failure())


class Observer:
    def __init__(self) -> None:
        self.updates: list[str] = []

    def handle_update(self, update: Any, ctx: Any) -> None:
        self.updates.append(type(update).__name__)


async def test_combine_gives_run_a_toolbox_and_an_observer_without_a_wrapper() -> None:
    from rma_shell import run
    from rma_shell.tools import combine

    ui, second = Observer(), Observer()
    async with Toolbox(double) as box:
        with OpenAIEmulator(calls(("double", {"n": 21}))) as emu:
            host = Local(base_url=emu.base_url, model="m", tools=box.tools())
            outcome = await run(host, handler=combine(box, ui, second), prompt="go")
            await host.close()
    assert outcome.unwrap().text == "done"
    assert emu.requests[1].body["messages"][-1]["content"] == "42"
    assert "ToolCallStarted" in ui.updates and "ToolCallFinished" in ui.updates
    assert ui.updates == second.updates  # every observer sees every update


async def test_an_agents_handler_may_be_an_observer_beside_its_typed_tools() -> None:
    ui = Observer()
    with OpenAIEmulator(calls(("double", {"n": 2}))) as emu:
        host = Local(base_url=emu.base_url, model="m")
        result = await Agent(tools=[double], handler=ui, host=host).run_or_raise("go")
        await host.close()
    assert result.text == "done" and "ToolCallFinished" in ui.updates


def test_a_handler_that_neither_answers_nor_observes_is_refused() -> None:
    import pytest

    from rma_shell.options import InvalidOptions

    with pytest.raises(InvalidOptions, match="handler"):
        Agent(tools=[double], handler=object())
