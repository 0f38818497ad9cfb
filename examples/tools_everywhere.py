"""Typed tools, an MCP server and a typed answer — one agent, three hosts, one line apart.

One ``Agent`` (a typed Python function, the tools of an MCP server spawned over stdio, and an
``output_type``) runs on Local, Bedrock AgentCore and Claude Managed Agents, here against the
bundled loopback emulators, under ``asyncio.run``. The agent declares itself to each host: the
request's tools on Local, the harness's per-invoke overrides (and a fresh runtime session id)
on AgentCore, a provisioned agent and environment on Claude. Each host's scripted model first
sends arguments that do not validate (they never reach the function), then good ones, then its
typed final answer:

    python examples/tools_everywhere.py            # needs the tools and mcp extras

Point the hosts at real endpoints (see ``emulators``) to use real models.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import sys
from collections.abc import Iterator
from typing import Any

import pydantic

from rma_shell import Agent
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.testing import CMAEmulator, OpenAIEmulator, cma
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.tools import tool
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


# What each scripted model does: a bad call, two good ones, the typed answer, a last word.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("lookup_customer", {"email": 7}),
    ("lookup_customer", {"email": "ada@example.com"}),
    ("invoice_total", {"email": "ada@example.com", "months": 3}),
    ("final_result", {"email": "ada@example.com", "plan": "pro", "invoice_total": 87.0}),
]
PROMPT = "What plan is ada@example.com on, and what did we invoice in 3 months?"


def agent() -> Agent:
    """The agent, configured once: nothing in it names a host."""
    billing = MCPServer.stdio(sys.executable, [__file__, "--mcp-server"], name="billing")
    return Agent(
        name="support_bot",
        instructions="Answer billing questions.",
        tools=[lookup_customer, billing],
        output_type=Answer,
    )


async def main() -> None:
    async with agent() as support:  # starts the MCP server once for every run; stopped on the way out
        with emulators() as (local, agentcore, claude):
            for name, host in (("local", local), ("agentcore", agentcore), ("claude", claude)):
                result = await support.run_or_raise(PROMPT, host=host)  # the one line that differs
                answer: Answer = result.output
                print(f"{name}: {answer.email} is on {answer.plan.value}, invoiced {answer.invoice_total:g}")
                await host.close()


@contextlib.contextmanager
def emulators() -> Iterator[tuple[Local, BedrockAgentCore, ClaudeManagedAgents]]:
    """The three hosts, each a bundled loopback emulator playing the same scripted model.

    Against real hosts these are ``Local(base_url=..., model="qwen3:8b")``,
    ``BedrockAgentCore(harness_arn=...)`` and ``ClaudeManagedAgents(model="claude-sonnet-4-6")``
    (credentials from the environment)."""
    local_turns: list[Any] = [
        {"tool_calls": [{"id": f"c{i}", "name": n, "arguments": a}]} for i, (n, a) in enumerate(CALLS)
    ]
    agentcore_turns = [ace.tool_turn((n, a, f"tooluse_{i}")) for i, (n, a) in enumerate(CALLS)]
    claude_turns = [cma.tool_turn((n, a)) for n, a in CALLS]
    with (
        OpenAIEmulator([*local_turns, {"content": "Done."}]) as openai_emu,
        AgentCoreEmulator([*agentcore_turns, ace.text_turn("Done.")]) as agentcore_emu,
        CMAEmulator([*claude_turns, cma.text_turn("Done.")], api_key="sk-ant-example") as claude_emu,
    ):
        yield (
            Local(base_url=openai_emu.base_url, model="qwen3:8b"),
            BedrockAgentCore(
                harness_arn=agentcore_emu.harness_arn,
                data_url=agentcore_emu.base_url,
                control_url=agentcore_emu.base_url,
                env=agentcore_emu.credentials_env(),
            ),
            ClaudeManagedAgents(
                api_key="sk-ant-example", base_url=claude_emu.base_url, env={}, model="claude-sonnet-4-6"
            ),
        )


if __name__ == "__main__":
    if "--mcp-server" in sys.argv:
        mcp_server_main()
    else:
        asyncio.run(main())
