"""A live session: follow-ups, one result per request, and a drop survived.

Uses the scripted host from ``rma_shell.testing`` so it runs offline:

    python examples/live_session.py
"""

from __future__ import annotations

from typing import Any

import trio

from rma_shell import Agent, unwrap
from rma_shell.testing import DROP, ScriptedProvider


def turn(text: str, n: int) -> list[dict[str, Any]]:
    return [
        {"type": "text", "text": text, "id": f"m{n}"},
        {"type": "usage", "input_tokens": 10, "output_tokens": 5, "id": f"u{n}"},
        {"type": "idle", "stop_reason": {"type": "end_turn"}, "id": f"i{n}"},
    ]


async def main() -> None:
    provider = ScriptedProvider(
        [turn("Hello! What can I do?", 1), [{"type": "text", "text": "We said ", "id": "m2"}, DROP]],
        streaming=True,
    )
    agent = Agent(host=provider)
    async with agent.session("Hi") as session:
        # unwrap: the result, or its SessionError raised as itself (a typed exception whose
        # message names what failed) — never a bare UnwrapFailedError.
        print("first:", unwrap(await session.next_result()).text)
        await session.message("Summarise our chat.")  # the stream drops mid-answer…
        await trio.sleep(1)  # …the session reconnects (500 ms backoff) and keeps going
        provider.emit(*turn("hello.", 3))  # the host's history refolds "We said " first
        print("second:", unwrap(await session.next_result()).text)


if __name__ == "__main__":
    trio.run(main)
