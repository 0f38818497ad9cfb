"""Render a session's progress live, the same way on every host: ``agent.stream``.

Local with ``stream=True`` against the loopback OpenAI emulator (``rma_shell.testing``), which
paces its chunks like a model producing tokens, so it runs offline:

    python examples/streaming_ui.py

Swap the host for ``ClaudeManagedAgents(...)`` or ``BedrockAgentCore(...)`` and the same loop
renders the same updates (a handler's ``handle_update(update, ctx)`` receives them too).
"""

from __future__ import annotations

import sys

import trio

from rma_shell import (
    Agent,
    AttemptDiscarded,
    RunFinished,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
)
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator, pace

LOOKUP = {"name": "lookup", "description": "Look a customer up", "input_schema": {"type": "object"}}
SCRIPT = [
    {"content": "Let me look that up. ", "tool_calls": [{"name": "lookup", "arguments": {"id": "c9"}}]},
    {"content": "Ada is on the Pro plan."},
]


async def main() -> None:
    with OpenAIEmulator(SCRIPT, faults={0: pace(0.02), 1: pace(0.02)}) as emu:
        host = Local(base_url=emu.base_url, model="demo", stream=True)
        agent = Agent(tools=[LOOKUP], handler=lambda name, input, ctx: "plan: pro", host=host)
        async with agent.stream("Which plan is c9 on?") as updates:
            async for update in updates:
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
                    case RunFinished(result=outcome):
                        result = outcome.unwrap()
                sys.stdout.flush()
        await host.close()
    print(f"{result.terminal} after {result.turns} turns: {result.text}")


if __name__ == "__main__":
    trio.run(main)
