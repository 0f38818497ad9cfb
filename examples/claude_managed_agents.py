"""Claude Managed Agents: the loop runs on Anthropic's servers, the tool runs here.

    python examples/claude_managed_agents.py --emulator   # offline, against the loopback emulator
    ANTHROPIC_API_KEY=sk-ant-... python examples/claude_managed_agents.py   # the real API

It creates an agent with one custom tool and a cloud environment, runs a session to
completion with a token guard, prints the result, and archives what it created.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

import trio

from rma_shell import CONTINUE, Failure, Halt, Success, run, unwrap
from rma_shell.providers.claude_managed_agents import ClaudeManagedAgents, output_path

TOOL = {
    "type": "custom",
    "name": "lookup_customer",
    "description": "Fetch a customer's plan by email",
    "input_schema": {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
}


class Support:
    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> object:
        if name == "lookup_customer":
            return f"{input['email']}: Pro plan, active since 2024"  # your private data stays here
        return Failure(f"unknown tool {name}")


def guard(turn: dict[str, Any]) -> object:
    return Halt("token budget") if turn["usage"].total_tokens > 100_000 else CONTINUE


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
        provider = ClaudeManagedAgents(**settings)
        client = unwrap(provider.client())  # the client, or the SessionError raised as itself
        agent = unwrap(
            await client.create_agent(
                {
                    "name": "rma-example-support",
                    "model": "claude-sonnet-4-6",
                    "system": f"Answer support questions. Save any report as {output_path('answer.md')}.",
                    "tools": [TOOL],
                }
            )
        )
        environment = unwrap(
            await client.create_environment(
                {
                    "name": "rma-example-env",
                    "config": {"type": "cloud", "networking": {"type": "unrestricted"}},
                }
            )
        )
        try:
            outcome = await run(
                provider,
                handler=Support(),
                prompt="Which plan is ada@example.com on?",
                agent=agent,
                environment=environment,
                turn_guard=guard,
                timeout=300,
            )
        finally:
            await client.archive_agent(agent["id"])
            await client.archive_environment(environment["id"])
            await provider.close()
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
