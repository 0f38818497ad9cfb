"""Bedrock AgentCore: the loop runs in an AWS harness, the tool runs here.

    python examples/bedrock_agent_core.py --emulator    # offline, against the loopback emulator
    AWS_PROFILE=dev python examples/bedrock_agent_core.py \\
        --harness-arn arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/support_1a2b3c4d-AbCdEfGhIj

Against AWS it needs credentials (keys in the environment, or a profile/SSO/role with
``pip install 'rma-agents[aws]'``) and a harness whose execution role may call your model. It runs one
session with a client tool, prints the result, then reads the session's storage mount
(if the harness declares one) through a runtime command.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any

import trio

from rma_shell import CONTINUE, Agent, Failure, Halt, Success
from rma_shell.providers.agentcore import BedrockAgentCore
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


support = Agent(tools=[lookup_customer], turn_guard=guard, timeout=330)


@contextlib.contextmanager
def target(use_emulator: bool, harness_arn: str | None) -> Iterator[dict[str, Any]]:
    if not use_emulator:
        if not harness_arn:
            raise SystemExit("give --harness-arn (or --emulator)")
        yield {"harness_arn": harness_arn}
        return
    from rma_shell.testing import agentcore as ace

    script = [
        ace.tool_turn(("lookup_customer", {"email": "ada@example.com"})),
        ace.text_turn("ada@example.com is on the Pro plan."),
    ]
    with ace.AgentCoreEmulator(script) as emu:
        yield {
            "harness_arn": emu.harness_arn,
            "data_url": emu.base_url,
            "control_url": emu.base_url,
            "env": emu.credentials_env(),
        }


async def main(use_emulator: bool, harness_arn: str | None) -> int:
    with target(use_emulator, harness_arn) as settings:
        host = BedrockAgentCore(invoke_timeout=300, max_iterations=20, **settings)
        try:
            # Each run is a fresh runtime session (result.session_id names it); the agent's
            # tools reach the harness as the invoke's overrides.
            outcome = await support.run("Which plan is ada@example.com on?", host=host)
            listed = (
                await host.storage(outcome.unwrap().session_id).list()
                if isinstance(outcome, Success)
                else None
            )
        finally:
            await host.close()
    match outcome:
        case Success(result):
            print(f"{result.terminal} after {result.turns} turns: {result.text}")
            print(f"runtime session {result.session_id}, tokens {result.usage.total_tokens}")
            match listed:
                case Success(artifacts):
                    print(f"session storage: {[a.name for a in artifacts] or 'empty'}")
                case Failure(error):
                    print(f"session storage not listed: {error}")
            return 0
        case Failure(error):
            print(f"failed: {error}")  # "kind: message", e.g. "http_error: HTTP 429 … (request id …)"
    return 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--emulator", action="store_true", help="run against the loopback emulator")
    parser.add_argument("--harness-arn", help="the harness to invoke (AWS)")
    args = parser.parse_args()
    raise SystemExit(trio.run(main, args.emulator, args.harness_arn))
