"""An agent with typed tools, a spending cap and a required terminal tool, run from sync code.

Runs offline against the bundled loopback OpenAI emulator; point ``Local`` at a real endpoint
(``base_url=``, ``model=``, ``api_key=``) to use a real model:

    python examples/local_with_tools.py          # needs the tools extra
"""

from __future__ import annotations

from typing import Any

from rma_shell import CONTINUE, Agent, Failure, Halt, Success
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator
from rma_shell.tools import tool


@tool
def lookup_customer(email: str) -> str:
    """Find a customer by email.

    Args:
        email: the customer's email address
    """
    return f"Customer {email}: Pro plan, active since 2024."


@tool
def submit(answer: str) -> str:
    """Submit the final answer.

    Args:
        answer: the answer, in one sentence
    """
    return "submitted"


def token_cap(turn: dict[str, Any]) -> object:
    usage = turn["usage"]
    return Halt("token budget") if usage.input_tokens + usage.output_tokens > 50_000 else CONTINUE


support = Agent(
    instructions="You are support.",
    tools=[lookup_customer, submit],
    max_turns=8,
    turn_guard=token_cap,
    require_terminal_tool=True,
    terminal_tool="submit",
    timeout=60,
)

SCRIPT = [
    {"tool_calls": [{"id": "c1", "name": "lookup_customer", "arguments": {"email": "ada@example.com"}}]},
    {"tool_calls": [{"id": "c2", "name": "submit", "arguments": {"answer": "Ada is on the Pro plan."}}]},
    {"content": "Ada is on the Pro plan."},
]


def main() -> None:
    with OpenAIEmulator(SCRIPT) as emulator:
        host = Local(base_url=emulator.base_url, model="any")
        outcome = support.run_sync("Which plan is ada@example.com on?", host=host)  # no event loop needed
    match outcome:
        case Success(result):
            print(f"{result.terminal} after {result.turns} turns: {result.text}")
            print(f"tools: {[u.name for u in result.custom_tool_uses]}  tokens: {result.usage.total_tokens}")
        case Failure(error):
            print(f"failed: {error}")  # "kind: message", e.g. "http_error: HTTP 429 … (request id …)"


if __name__ == "__main__":
    main()
