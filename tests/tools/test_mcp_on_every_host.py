"""MCP servers in one toolbox with an own tool, on all three hosts (issue #14): two servers
(the SDK-built test server, on streamable HTTP) are declared to the host like local tools,
their calls forwarded, invalid arguments refused by the schema, a tool error and a call past
``call_timeout`` sent back as ``is_error`` results while the run goes on — through ``run``
against each host's emulator; and a stdio server crashing mid-run, respawned, on Local."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rma.provisioning import AgentSpec, EnvironmentSpec
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
from rma_shell.tools.mcp import MCPServer
from tests.tools._mcp import http_server, pid_alive, stdio_server
from tests.tools._wire import agentcore_tool_results, cma_tool_results, local_tool_results

KEY = "sk-test-mcp"
SID = "rma-session-0123456789abcdef0123456789"


@pytest.fixture(scope="module")
def urls() -> Iterator[tuple[str, str]]:
    with http_server(env={"RMA_MCP_LABEL": "web"}) as web, http_server(env={"RMA_MCP_LABEL": "api"}) as api:
        yield web, api


@tool
def double(x: int) -> int:
    """Double a number."""
    return 2 * x


def box(urls: tuple[str, str]) -> Toolbox:
    web, api = urls
    return Toolbox(
        double,
        MCPServer.http(web, name="web", prefix="w_", allowed_tools={"echo", "add"}),
        MCPServer.http(api, name="api", prefix="a_", allowed_tools={"add", "fail", "wait"}, call_timeout=1),
    )


DECLARED = ["double", "w_echo", "w_add", "a_add", "a_wait", "a_fail"]
SCRIPT: list[tuple[str, dict[str, Any]]] = [
    ("double", {"x": 21}),
    ("w_echo", {"text": "hi"}),
    ("a_add", {"a": 2, "b": 3}),
    ("w_add", {"a": "2", "b": 3}),
    ("a_fail", {"why": "no"}),
    ("a_wait", {"seconds": 30}),
]
EXPECTED = [
    ("42", False),
    ("web:hi", False),
    ("5", False),
    ("invalid arguments for w_add:\n- a: '2' is not of type 'integer'", True),
    ("Error executing tool fail: refused: no", True),
    ("MCP server api: a_wait did not answer within 1 s and was cancelled", True),
]


async def run_local(
    script: list[tuple[str, dict[str, Any]]], tools: Toolbox
) -> tuple[list[tuple[str, bool]], Any, list[str], dict[str, Any]]:
    turns: list[Any] = [
        {"tool_calls": [{"id": f"call_{i}", "name": n, "arguments": a}]} for i, (n, a) in enumerate(script)
    ]
    with OpenAIEmulator([*turns, {"content": "done"}], api_key=KEY) as emu:
        async with tools:
            provider = Local(
                base_url=emu.base_url,
                model="m",
                api_key=KEY,
                tools=tools.tools(),
                _seams=Seams(rand=lambda: 0.0),
            )
            outcome = await run(provider, handler=tools, prompt="go", timeout=60)
        declared = {t["function"]["name"]: t["function"]["parameters"] for t in emu.requests[0].body["tools"]}
        results = local_tool_results(emu.requests[-1].body["messages"])
    return results, outcome, list(declared), declared.get("w_add", {})


async def run_agentcore(
    script: list[tuple[str, dict[str, Any]]], tools: Toolbox
) -> tuple[list[tuple[str, bool]], Any, list[str], dict[str, Any]]:
    frames = [ace.tool_turn((n, a, f"tooluse_{i}")) for i, (n, a) in enumerate(script)]
    with AgentCoreEmulator([*frames, ace.text_turn("done")]) as emu:
        async with tools:
            provider = BedrockAgentCore(
                harness_arn=emu.harness_arn,
                data_url=emu.base_url,
                control_url=emu.base_url,
                env=emu.credentials_env(),
                tools=tools.tools(),
            )
            try:
                outcome = await run(provider, handler=tools, prompt="go", runtime_session_id=SID, timeout=60)
            finally:
                await provider.close()
        invokes = [r.body for r in emu.requests if r.path.startswith("/harnesses/invoke")]
    results = agentcore_tool_results(invokes[1:])
    specs = {t["name"]: t["config"]["inlineFunction"]["inputSchema"] for t in invokes[0]["tools"]}
    return results, outcome, list(specs), specs["w_add"]


async def run_cma(
    script: list[tuple[str, dict[str, Any]]], tools: Toolbox
) -> tuple[list[tuple[str, bool]], Any, list[str], dict[str, Any]]:
    turns = [cma.tool_turn((n, a)) for n, a in script]
    with CMAEmulator([*turns, cma.text_turn("done")], api_key=KEY) as emu:
        async with tools:
            provider = ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={})
            try:
                agent = AgentSpec.create(
                    "mcp_bot",
                    system_prompt="Use tools.",
                    tools=tools.tools(),
                    model_config="claude-sonnet-4-6",
                ).unwrap()
                made = await provision(
                    provider, agent, EnvironmentSpec.create("sandbox").unwrap(), store=MemoryStore()
                )
                handles = made.unwrap()
                outcome = await run(
                    provider, handler=tools, prompt="go", agent=handles, environment=handles, timeout=60
                )
            finally:
                await provider.close()
        posts = [q.body for q in emu.requests if q.method == "POST" and q.path.endswith("/events")]
        agent_body = next(q.body for q in emu.requests if q.method == "POST" and q.path == "/v1/agents")
    results = cma_tool_results(posts[1:])
    specs = {t["name"]: t["input_schema"] for t in agent_body["tools"]}
    return results, outcome, list(specs), specs["w_add"]


HOSTS: dict[str, Callable[..., Any]] = {"local": run_local, "agentcore": run_agentcore, "cma": run_cma}


@pytest.mark.parametrize("host", sorted(HOSTS))
async def test_mcp_tools_mix_with_own_tools_and_give_the_same_results_on_every_host(
    host: str, urls: tuple[str, str]
) -> None:
    results, outcome, declared, add_schema = await HOSTS[host](SCRIPT, box(urls))
    result = outcome.unwrap()
    assert result.text == "done" and result.turns == len(SCRIPT) + 1
    assert declared == DECLARED
    # the server's inputSchema reaches the host as it is
    assert add_schema["properties"]["a"] == {"title": "A", "type": "integer"}
    assert add_schema["required"] == ["a", "b"]
    assert results == EXPECTED


async def test_a_server_crashing_mid_run_is_one_error_result_and_the_run_goes_on() -> None:
    script: list[tuple[str, dict[str, Any]]] = [("s_pid", {}), ("s_crash", {}), ("s_pid", {"note": "after"})]
    tools = Toolbox(stdio_server(name="fragile", prefix="s_", allowed_tools={"crash", "pid"}))
    results, outcome, declared, _ = await run_local(script, tools)
    assert outcome.unwrap().text == "done"
    assert declared == ["s_pid", "s_crash"]
    (first, ok1), crashed, (second, ok2) = results
    assert crashed == (
        "MCP server fragile closed the connection during s_crash; it will be restarted on the next call",
        True,
    )
    # the next call spawned a new server; leaving the toolbox stopped it
    assert not ok1 and not ok2 and first.isdigit() and second.isdigit() and first != second
    assert not pid_alive(int(first)) and not pid_alive(int(second))
