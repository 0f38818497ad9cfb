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

from rma_shell import CONTINUE, Failure, Halt, Success, run
from rma_shell.providers.bedrock_agentcore import BedrockAgentCore, new_runtime_session_id

LOOKUP = {
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
def target(use_emulator: bool, harness_arn: str | None) -> Iterator[dict[str, Any]]:
    if not use_emulator:
        if not harness_arn:
            raise SystemExit("give --harness-arn (or --emulator)")
        yield {"harness_arn": harness_arn}
        return
    from rma_shell.testing import agentcore_emulator as ace

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
        provider = BedrockAgentCore(tools=[LOOKUP], invoke_timeout=300, max_iterations=20, **settings)
        session = new_runtime_session_id()
        try:
            outcome = await run(
                provider,
                handler=Support(),
                prompt="Which plan is ada@example.com on?",
                runtime_session_id=session,
                turn_guard=guard,
                timeout=330,
            )
            listed = await provider.storage(session).list()
        finally:
            await provider.close()
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
