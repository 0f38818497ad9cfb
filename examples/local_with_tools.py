"""A Local run with tools, a spending cap and a required terminal tool.

Runs offline against the bundled loopback OpenAI emulator; point ``Local`` at a real endpoint
(``base_url=``, ``model=``, ``api_key=``) to use a real model:

    python examples/local_with_tools.py
"""

from __future__ import annotations

from typing import Any

import trio

from rma_shell import CONTINUE, Failure, Halt, Success, run
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator

TOOLS = [
    {
        "name": "lookup_customer",
        "description": "Find a customer by email",
        "input_schema": {
            "type": "object",
            "properties": {"email": {"type": "string"}},
            "required": ["email"],
        },
    },
    {
        "name": "submit",
        "description": "Submit the final answer",
        "input_schema": {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
        },
    },
]

SCRIPT = [
    {"tool_calls": [{"id": "c1", "name": "lookup_customer", "arguments": {"email": "ada@example.com"}}]},
    {"tool_calls": [{"id": "c2", "name": "submit", "arguments": {"answer": "Ada is on the Pro plan."}}]},
    {"content": "Ada is on the Pro plan."},
]


class Support:
    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> object:
        if name == "lookup_customer":
            return f"Customer {input['email']}: Pro plan, active since 2024."
        if name == "submit":
            return "submitted"
        return Failure(f"unknown tool {name}")


def token_cap(turn: dict[str, Any]) -> object:
    usage = turn["usage"]
    return Halt("token budget") if usage.input_tokens + usage.output_tokens > 50_000 else CONTINUE


async def main() -> None:
    with OpenAIEmulator(SCRIPT) as emulator:
        provider = Local(
            base_url=emulator.base_url, model="any", tools=TOOLS, system_prompt="You are support."
        )
        outcome = await run(
            provider,
            handler=Support(),
            prompt="Which plan is ada@example.com on?",
            max_turns=8,
            turn_guard=token_cap,
            require_terminal_tool=True,
            terminal_tool="submit",
            timeout=60,
        )
        await provider.close()  # its HTTP client; a provider is reusable until then
    match outcome:
        case Success(result):
            print(f"{result.terminal} after {result.turns} turns: {result.text}")
            print(f"tools: {[u.name for u in result.custom_tool_uses]}  tokens: {result.usage.total_tokens}")
        case Failure(error):
            print(f"failed: {error}")  # "kind: message", e.g. "http_error: HTTP 429 … (request id …)"


if __name__ == "__main__":
    trio.run(main)
