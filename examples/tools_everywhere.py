"""Typed tools, an MCP server and a typed answer — one toolbox, one handler, three hosts.

The same ``Toolbox`` (a typed Python function and the tools of an MCP server spawned over
stdio) and the same ``output_type`` run on Local, Bedrock AgentCore and Claude Managed Agents,
here against the bundled loopback emulators, under ``asyncio.run``. Each host's scripted model
first sends arguments that do not validate (they never reach the function), then good ones,
then its typed final answer:

    python examples/tools_everywhere.py            # needs the tools and mcp extras

Point the providers at real hosts (``base_url=``/``api_key=``, ``harness_arn=``, ``agent=``) to
use real models.
"""

from __future__ import annotations

import asyncio
import enum
import sys
from typing import Any

import pydantic

from rma.provisioning import AgentSpec, EnvironmentSpec
from rma_shell import run_or_raise, unwrap
from rma_shell.providers.bedrock_agentcore import BedrockAgentCore
from rma_shell.providers.claude_managed_agents import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.provisioning import provision
from rma_shell.stores import MemoryStore
from rma_shell.testing import CMAEmulator, OpenAIEmulator, cma
from rma_shell.testing import agentcore_emulator as ace
from rma_shell.testing.agentcore_emulator import AgentCoreEmulator
from rma_shell.tools import Toolbox, output_tool, tool
from rma_shell.tools.mcp import MCPServer


class Plan(enum.Enum):
    FREE = "free"
    PRO = "pro"


class Customer(pydantic.BaseModel):
    email: str
    plan: Plan


class Answer(pydantic.BaseModel):
    """What the agent concludes about the customer."""

    email: str
    plan: Plan
    invoice_total: float


@tool
def lookup_customer(email: str) -> Customer:
    """Find a customer by email.

    Args:
        email: the customer's email address
    """
    return Customer(email=email, plan=Plan.PRO)


def mcp_server_main() -> None:
    """The MCP server this example spawns: one tool, written with the official SDK."""
    from mcp.server.fastmcp import FastMCP

    app = FastMCP("billing", log_level="WARNING")

    @app.tool()
    def invoice_total(email: str, months: int = 1) -> float:
        """The customer's invoiced total over the last ``months`` months."""
        return 29.0 * months

    app.run("stdio")


def toolbox() -> Toolbox:
    billing = MCPServer.stdio(sys.executable, [__file__, "--mcp-server"], name="billing")
    return Toolbox(lookup_customer, billing)


# What each scripted model does: a bad call, two good ones, the typed answer, a last word.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("lookup_customer", {"email": 7}),
    ("lookup_customer", {"email": "ada@example.com"}),
    ("invoice_total", {"email": "ada@example.com", "months": 3}),
    ("final_result", {"email": "ada@example.com", "plan": "pro", "invoice_total": 87.0}),
]
PROMPT = "What plan is ada@example.com on, and what did we invoice in 3 months?"


async def on_local(tools: Toolbox) -> Answer:
    turns: list[Any] = [
        {"tool_calls": [{"id": f"c{i}", "name": n, "arguments": a}]} for i, (n, a) in enumerate(CALLS)
    ]
    with OpenAIEmulator([*turns, {"content": "Done."}]) as emu:
        provider = Local(base_url=emu.base_url, model="qwen3:8b", tools=tools.tools())
        result = await run_or_raise(provider, handler=tools, prompt=PROMPT, output_type=Answer)
        await provider.close()
    return result.output


async def on_agentcore(tools: Toolbox) -> Answer:
    script = [ace.tool_turn((n, a, f"tooluse_{i}")) for i, (n, a) in enumerate(CALLS)]
    with AgentCoreEmulator([*script, ace.text_turn("Done.")]) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
            tools=tools.tools(),
        )
        result = await run_or_raise(
            provider,
            handler=tools,
            prompt=PROMPT,
            output_type=Answer,
            runtime_session_id="rma-example-0123456789abcdef0123456789",
        )
        await provider.close()
    return result.output


async def on_claude(tools: Toolbox) -> Answer:
    script = [*(cma.tool_turn((n, a)) for n, a in CALLS), cma.text_turn("Done.")]
    with CMAEmulator(script, api_key="sk-ant-example") as emu:
        provider = ClaudeManagedAgents(api_key="sk-ant-example", base_url=emu.base_url, env={})
        # A Claude agent's tools live on Anthropic's side: the toolbox's declarations and the
        # answer's tool become the agent's custom tools.
        agent = unwrap(
            AgentSpec.create(
                "support_bot",
                system_prompt="Answer billing questions.",
                model_config="claude-sonnet-4-6",
                tools=[*tools.tools(), output_tool(Answer)],
            )
        )
        environment = unwrap(EnvironmentSpec.create("sandbox"))
        handles = unwrap(await provision(provider, agent, environment, store=MemoryStore()))
        result = await run_or_raise(
            provider, handler=tools, prompt=PROMPT, output_type=Answer, agent=handles, environment=handles
        )
        await provider.close()
    return result.output


async def main() -> None:
    async with toolbox() as tools:  # spawns the MCP server; stopped (no orphan) on the way out
        for host, on_host in (("local", on_local), ("agentcore", on_agentcore), ("claude", on_claude)):
            answer = await on_host(tools)
            print(f"{host}: {answer.email} is on {answer.plan.value}, invoiced {answer.invoice_total:g}")


if __name__ == "__main__":
    if "--mcp-server" in sys.argv:
        mcp_server_main()
    else:
        asyncio.run(main())
