"""Claude Managed Agents: the loop runs on Anthropic's servers, the tool runs here.

    python examples/claude_managed_agents.py --emulator   # offline, against the loopback emulator
    ANTHROPIC_API_KEY=sk-ant-... python examples/claude_managed_agents.py   # the real API

One ``Agent`` with a typed tool and a token guard: its first run provisions the Claude agent and
a cloud environment from its spec (reused by later runs: the same spec is the same agent), runs
a session to completion and prints the result. ``rma prune``/``rma teardown`` clean up.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

import trio

from rma_shell import CONTINUE, Agent, Failure, Halt, Success
from rma_shell.providers.claude.provider import ClaudeManagedAgents, output_path
from rma_shell.tools import tool


@tool
def lookup_customer(email: str) -> str:
    """Fetch a customer's plan by email.

    Args:
        email: the customer's email address
    """
    return f"{email}: Pro plan, active since 2024"  # your private data stays here


def guard(turn: dict[str, Any]) -> object:
    return Halt("token budget") if turn["usage"].total_tokens > 100_000 else CONTINUE


support = Agent(
    name="rma-example-support",
    instructions=f"Answer support questions. Save any report as {output_path('answer.md')}.",
    tools=[lookup_customer],
    turn_guard=guard,
    timeout=300,
)


@contextlib.contextmanager
def emulator(enabled: bool) -> Iterator[dict[str, Any]]:
    if not enabled:
        yield {}
        return
    from rma_shell.testing import CMAEmulator, cma, text_turn, tool_turn

    script = [
        tool_turn(cma.custom_tool_use("lookup_customer", {"email": "ada@example.com"})),
        text_turn("ada@example.com is on the Pro plan."),
    ]
    with CMAEmulator(script, api_key="sk-ant-emulator") as emu:
        yield {"api_key": "sk-ant-emulator", "base_url": emu.base_url, "env": {}}


async def main(use_emulator: bool) -> int:
    with emulator(use_emulator) as settings:
        host = ClaudeManagedAgents(model="claude-sonnet-4-6", **settings)
        try:
            # The first run provisions the agent (named from the spec's digest) and a cloud
            # environment; later runs, here or in another process, reuse them.
            outcome = await support.run("Which plan is ada@example.com on?", host=host)
        finally:
            await host.close()
    match outcome:
        case Success(result):
            print(f"{result.terminal} after {result.turns} turns: {result.text}")
            print(f"session {result.session_id}, tokens {result.usage.total_tokens}")
            return 0
        case Failure(error):
            print(f"failed: {error}")  # "kind: message", e.g. "http_error: HTTP 429 … (request id …)"
    return 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--emulator", action="store_true", help="run against the loopback emulator")
    raise SystemExit(trio.run(main, parser.parse_args().emulator))
