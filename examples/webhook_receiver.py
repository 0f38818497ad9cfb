"""Webhooks: the host tells you when a session needs you; nobody holds a stream open meanwhile.

    python examples/webhook_receiver.py      # offline: the Claude emulator delivers the webhooks

A process starts a journaled run and goes away (here: killed — a deploy, a crash) while the
agent is still at work on the host. When the host needs the session's tools it sends a signed
``session.requires_action`` webhook; the receiver — an ASGI app, served here by uvicorn —
verifies it, finds the journal of the session it names and resumes it: the tool runs here,
its result goes back, the run ends and its outcome is journaled. The receiver answers every
delivery at once (202) and runs the resume in the task group its lifespan owns.

With the real API, create the webhook endpoint in the Claude Console, keep its signing secret
(``whsec_…``) and serve ``WebhookReceiver(agent, secret=...)`` behind HTTPS.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import trio

from rma_shell import Agent
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.tools import tool
from rma_shell.webhooks import WebhookReceiver, journal_key_of

API_KEY = "sk-ant-emulator"
KEY = "ticket-42"


@tool
def lookup_customer(email: str) -> str:
    """Fetch a customer's plan by email.

    Args:
        email: the customer's email address
    """
    return f"{email}: Pro plan, active since 2024"


def support(base_url: str, journal: str) -> Agent:
    host = ClaudeManagedAgents(api_key=API_KEY, base_url=base_url, env={}, model="claude-sonnet-4-6")
    return Agent(
        name="rma-example-webhooks",
        instructions="Answer support questions.",
        tools=[lookup_customer],
        host=host,
        journal=journal,
    )


def start(base_url: str, journal: str) -> None:
    """The process that starts the run (it is killed before the host needs the tool)."""
    run = functools.partial(support(base_url, journal).run, journal_key=KEY)
    trio.run(run, "Which plan is ada@example.com on?")


class Served:
    """The receiver under uvicorn on a loopback port, in a thread (its own event loop)."""

    def __init__(self, receiver: WebhookReceiver) -> None:
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self.server = uvicorn.Server(uvicorn.Config(receiver, lifespan="on", log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


def main() -> int:
    from rma_shell.testing import CMAEmulator, cma
    from rma_shell.testing.claude.webhooks import new_secret

    script = [
        [cma.status_running(), cma.pause()],  # the agent at work: the rest comes from the host below
        cma.text_turn("ada@example.com is on the Pro plan."),
    ]
    done = threading.Event()
    outcomes: list[Any] = []

    def on_outcome(key: str, event: Any, outcome: Any) -> None:
        outcomes.append((key, event.type, outcome))
        done.set()

    with tempfile.TemporaryDirectory() as tmp:
        journal = os.path.join(tmp, "journal.db")
        secret = new_secret()  # the endpoint's signing secret (the Console shows the real one)
        resumer = _Resumer(Agent(tools=[lookup_customer], journal=journal))
        receiver = WebhookReceiver(resumer, secret=secret, journal=journal, on_outcome=on_outcome)
        with (
            Served(receiver) as served,
            CMAEmulator(script, api_key=API_KEY, webhook_url=served.url, webhook_secret=secret) as emu,
        ):
            resumer.base_url = emu.base_url
            # 1. a process starts the run, then goes away while the host is still at work
            child = subprocess.Popen(
                [sys.executable, __file__, "--start", emu.base_url, journal],
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
            session_id = _wait_for_journaled_session(emu, journal)
            child.send_signal(signal.SIGKILL)
            child.wait()
            print(f"started {KEY} as {session_id}; the process that started it is gone")
            # 2. the host finishes its work and needs the tool: it sends session.requires_action
            emu.emit(
                session_id,
                cma.custom_tool_use("lookup_customer", {"email": "ada@example.com"}),
                cma.idle_requires_action(),
            )
            # 3. the receiver resumes the journaled session: the tool runs here, the run ends
            if not done.wait(timeout=30):
                print("no outcome within 30 s")
                return 1
    key, kind, outcome = outcomes[0]
    result = outcome.unwrap()
    print(f"{key} resumed on {kind}: {result.terminal}: {result.text}")
    return 0


class _Resumer:
    """The receiver's agent, with a host of its own (made in the receiver's event loop)."""

    def __init__(self, agent: Agent) -> None:
        self.agent, self.journal = agent, agent.journal
        self.base_url = ""

    async def resume(self, key: str) -> Any:
        host = ClaudeManagedAgents(api_key=API_KEY, base_url=self.base_url, env={}, model="claude-sonnet-4-6")
        try:
            return await self.agent.resume(key, host=host)
        finally:
            await host.close()


def _wait_for_journaled_session(emu: Any, journal: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for session_id in emu.session_ids:
            if os.path.exists(journal) and journal_key_of(journal, session_id) == KEY:
                return str(session_id)
        time.sleep(0.05)
    raise TimeoutError("the run never journaled its session")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--start"]:
        start(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(main())
