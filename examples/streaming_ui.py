"""Render a session's progress live, the same way on every host: ``handle_update``.

Local with ``stream=True`` against the loopback OpenAI emulator (``rma_shell.testing``), which
paces its chunks like a model producing tokens, so it runs offline:

    python examples/streaming_ui.py

Swap the provider for ``ClaudeManagedAgents(...)`` or ``BedrockAgentCore(...)`` and the same
handler renders the same updates.
"""

from __future__ import annotations

import sys
from typing import Any

import trio

from rma_shell import AttemptDiscarded, TextDelta, ToolCallFinished, ToolCallStarted, TurnFinished, run
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator, pace

LOOKUP = {"name": "lookup", "description": "Look a customer up", "input_schema": {"type": "object"}}
SCRIPT = [
    {"content": "Let me look that up. ", "tool_calls": [{"name": "lookup", "arguments": {"id": "c9"}}]},
    {"content": "Ada is on the Pro plan."},
]


class UI:
    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return "plan: pro"

    def handle_update(self, update: object, ctx: object) -> None:
        match update:
            case TextDelta(text=text):
                sys.stdout.write(text)  # as it streams
            case ToolCallStarted(name=name):
                sys.stdout.write(f"\n[{name} …")
            case ToolCallFinished(is_error=failed):
                sys.stdout.write(" failed]\n" if failed else " done]\n")
            case AttemptDiscarded():
                sys.stdout.write(" [retrying]\n")
            case TurnFinished(turn=turn, terminal=terminal):
                sys.stdout.write(f"\n(turn {turn}: {terminal})\n")
        sys.stdout.flush()


async def main() -> None:
    with OpenAIEmulator(SCRIPT, faults={0: pace(0.02), 1: pace(0.02)}) as emu:
        provider = Local(base_url=emu.base_url, model="demo", tools=[LOOKUP], stream=True)
        result = (await run(provider, handler=UI(), prompt="Which plan is c9 on?")).unwrap()
        await provider.close()
    print(f"{result.terminal} after {result.turns} turns: {result.text}")


if __name__ == "__main__":
    trio.run(main)
