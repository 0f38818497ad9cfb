"""One toolbox on all three hosts (issue #14): declarations each host accepts, invalid
arguments refused with the same text everywhere, valid ones reaching the typed function,
per-tool timeouts and result caps — through ``run`` against each host's emulator."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest

from rma.provisioning import AgentSpec, EnvironmentSpec
from rma.vocabulary import SessionInfo
from rma_shell import run
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.provisioning import provision
from rma_shell.seams import Seams
from rma_shell.stores import MemoryStore
from rma_shell.testing import CMAEmulator, OpenAIEmulator, cma
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.tools import Toolbox, tool
from tests.tools._wire import agentcore_tool_results, cma_tool_results, local_tool_results

KEY = "sk-test-toolbox"
SID = "rma-session-0123456789abcdef0123456789"
CALLS: list[tuple[str, dict[str, Any]]] = []


@tool
def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: the first number
        b: the second number
    """
    CALLS.append(("add", {"a": a, "b": b}))
    return a + b


@tool(timeout=0.2)
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return "woke up"


@tool
def whoami(info: SessionInfo) -> dict[str, Any]:
    """Say which session this is."""
    return {"session": info.session_id, "provider": info.provider}


@tool
def big() -> str:
    """Return a lot."""
    return "x" * 150


def box() -> Toolbox:
    return Toolbox(add, slow, whoami, big, max_result_chars=100)


# (tool name, arguments) the model sends, in order, then a final answer
SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("add", {"a": "2", "b": 3}),
    ("add", {"a": 2, "b": 3}),
    ("slow", {"seconds": 5}),
    ("whoami", {}),
    ("big", {}),
]
BAD_ADD = 'invalid arguments for add:\n- a: Input should be a valid number (got "2")'


def expected(session_id: str, provider: str) -> list[tuple[str, bool]]:
    return [
        (BAD_ADD, True),
        ("5.0", False),
        ("tool slow timed out after 0.2 s and was cancelled", True),
        (f'{{"session":"{session_id}","provider":"{provider}"}}', False),
        ("x" * 100 + "\n[truncated: 50 of 150 characters not shown]", False),
    ]


async def run_local() -> tuple[list[tuple[str, bool]], Any, list[Any]]:
    turns: list[Any] = [
        {"tool_calls": [{"id": f"call_{i}", "name": n, "arguments": a}]} for i, (n, a) in enumerate(SCRIPT)
    ]
    with OpenAIEmulator([*turns, {"content": "done"}], api_key=KEY) as emu:
        tools = box()
        provider = Local(
            base_url=emu.base_url,
            model="m",
            api_key=KEY,
            tools=tools.tools(),
            _seams=Seams(rand=lambda: 0.0),
        )
        outcome = await run(provider, handler=tools, prompt="go", timeout=30)
        last = emu.requests[-1].body["messages"]
        declared = emu.requests[0].body["tools"]
    return local_tool_results(last), outcome, declared


async def run_agentcore() -> tuple[list[tuple[str, bool]], Any, list[Any]]:
    script = [ace.tool_turn((n, a, f"tooluse_{i}")) for i, (n, a) in enumerate(SCRIPT)]
    with AgentCoreEmulator([*script, ace.text_turn("done")]) as emu:
        tools = box()
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
            tools=tools.tools(),
        )
        try:
            outcome = await run(provider, handler=tools, prompt="go", runtime_session_id=SID, timeout=30)
        finally:
            await provider.close()
        invokes = [r.body for r in emu.requests if r.path.startswith("/harnesses/invoke")]
    results = agentcore_tool_results(invokes[1:])
    return results, outcome, invokes[0]["tools"]


async def run_cma() -> tuple[list[tuple[str, bool]], Any, list[Any]]:
    script = [cma.tool_turn((n, a)) for n, a in SCRIPT]
    with CMAEmulator([*script, cma.text_turn("done")], api_key=KEY) as emu:
        tools = box()
        provider = ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={})
        try:
            # The toolbox's declarations become the agent's custom tools.
            agent = AgentSpec.create(
                "toolbox_bot",
                system_prompt="Use tools.",
                tools=tools.tools(),
                model_config="claude-sonnet-4-6",
            ).unwrap()
            made = await provision(
                provider, agent, EnvironmentSpec.create("sandbox").unwrap(), store=MemoryStore()
            )
            handles = made.unwrap()
            outcome = await run(
                provider, handler=tools, prompt="go", agent=handles, environment=handles, timeout=30
            )
        finally:
            await provider.close()
        posts = [q.body for q in emu.requests if q.method == "POST" and q.path.endswith("/events")]
        declared = next(q.body for q in emu.requests if q.method == "POST" and q.path == "/v1/agents")[
            "tools"
        ]
    results = cma_tool_results(posts[1:])
    return results, outcome, declared


HOSTS: dict[str, tuple[Callable[[], Any], str]] = {
    "local": (run_local, "local"),
    "agentcore": (run_agentcore, "bedrock_agentcore"),
    "cma": (run_cma, "claude_managed_agents"),
}


@pytest.fixture(autouse=True)
def _reset() -> AsyncIterator[None] | None:
    CALLS.clear()
    return None


@pytest.mark.parametrize("host", sorted(HOSTS))
async def test_one_toolbox_gives_the_same_results_on_every_host(host: str) -> None:
    runner, provider_name = HOSTS[host]
    results, outcome, declared = await runner()
    result = outcome.unwrap()
    assert result.text == "done" and result.turns == len(SCRIPT) + 1
    assert results == expected(str(result.session_id), provider_name)
    # the bad call never reached the function; the good one did, with floats
    assert CALLS == [("add", {"a": 2.0, "b": 3.0})]
    assert len(declared) == 4
