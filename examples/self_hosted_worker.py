"""A self-hosted Claude environment: the agent's own tools (bash, read, write, …) run on this
machine, in a sandboxed workspace, while the loop runs on Claude's servers.

    python examples/self_hosted_worker.py        # offline, against the loopback emulator

What a user elsewhere does: create a session on a ``self_hosted`` environment and send it a
message. What this machine does: a ``Worker`` claims the session's work item, answers every
``agent.tool_use`` from the session's own workspace (bash inside bubblewrap; no network, only
the workspace writable) and gives the item back when the turn ends. Against the real API, drop
the emulator and give ``api_key=`` (or run ``rma worker ENVIRONMENT_ID``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import httpx
import trio

from rma_shell.environments import Worker, WorkerEvent
from rma_shell.testing.claude import (
    DEFAULT_API_KEY,
    CMAEmulator,
    agent_message,
    agent_tool_use,
    idle_end_turn,
    idle_requires_action,
)

# What the model does in this rehearsal: write a script, run it, read what it wrote.
SCRIPT = [
    [
        agent_tool_use(
            "write",
            {
                "file_path": "fib.py",
                "content": "a, b = 0, 1\nfor _ in range(10): a, b = b, a + b\nprint(a)\n",
            },
        ),
        agent_tool_use("bash", {"command": "python3 fib.py > answer.txt && echo ran"}),
        idle_requires_action(),
    ],
    [agent_tool_use("read", {"file_path": "answer.txt"}), idle_requires_action()],
    [agent_message("The 10th Fibonacci number is 55."), idle_end_turn()],
]


def a_user_elsewhere_starts_a_session(base_url: str) -> tuple[str, str]:
    """(environment id, session id): the environment, agent and session a user would make."""
    h = {
        "x-api-key": DEFAULT_API_KEY,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "managed-agents-2026-04-01",
    }
    env = httpx.post(
        f"{base_url}/v1/environments", json={"name": "laptop", "config": {"type": "self_hosted"}}, headers=h
    )
    agent = httpx.post(
        f"{base_url}/v1/agents",
        json={"name": "coder", "model": "claude-sonnet-4-6", "tools": [{"type": "agent_toolset_20260401"}]},
        headers=h,
    )
    env_id, agent_id = env.json()["id"], agent.json()["id"]
    session = httpx.post(
        f"{base_url}/v1/sessions", json={"agent": agent_id, "environment_id": env_id}, headers=h
    )
    sid = session.json()["id"]
    message = {"type": "user.message", "content": [{"type": "text", "text": "What is fib(10)?"}]}
    httpx.post(f"{base_url}/v1/sessions/{sid}/events", json={"events": [message]}, headers=h)
    return env_id, sid


async def main() -> None:
    with CMAEmulator(script=SCRIPT) as emu, tempfile.TemporaryDirectory() as root:
        env_id, sid = a_user_elsewhere_starts_a_session(emu.base_url)

        def progress(event: WorkerEvent) -> None:
            print(event.line())

        async with Worker(
            environment_id=env_id,
            workspaces=root,
            api_key=DEFAULT_API_KEY,
            base_url=emu.base_url,
            block_ms=None,
            on_event=progress,
        ) as worker:
            await worker.serve(drain=True)
        answer = (Path(root) / sid / "answer.txt").read_text().strip()
        reply = next(e for e in reversed(emu.history(sid)) if e["type"] == "agent.message")
        print(f"workspace answer.txt: {answer}; the agent said: {reply['content'][0]['text']}")


if __name__ == "__main__":
    trio.run(main)
