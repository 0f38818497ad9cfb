#!/usr/bin/env python3
"""The loopback AgentCore emulator in a process of its own, for ``bench/agentcore_tool_loop.py``.

It runs ``rma_shell.testing.AgentCoreEmulator`` (SigV4 checked with botocore, inputs checked
against botocore's model, the conversation rules of the service) so that the server's CPU is
not billed to the client being measured, and prints one line once it is listening::

    READY <port> <harness_arn>

Every runtime session plays the same callable script: the number of tool steps N is read from
the session id (``bench<N:04d>x…``, so one server serves every scenario); turn k < N is one
``toolUse`` ``step`` with input ``{"n": k + 1}`` and id ``tooluse_<k + 1>`` (8 frames:
messageStart, contentBlockStart, three input deltas, contentBlockStop, messageStop ``tool_use``,
metadata), then turn N is the text ``done after N steps`` (7 frames, ``end_turn``). The emulator
checks every resume against the tool uses it sent, so a client that echoes them wrong fails.

The parent talks over stdin: a line ``stats`` answers ``STATS <invokes>`` (InvokeHarness
requests served since start) on stdout; end of stdin (or SIGTERM) stops the server.

    python bench/_agentcore_server.py
"""

from __future__ import annotations

import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rma_shell.testing.agentcore import (
    AgentCoreEmulator,
    SessionView,
    text_turn,
    tool_turn,
)

_STEPS = re.compile(r"bench(\d{4})x")
MAX_STEPS = 999


def final_text(steps: int) -> str:
    return f"done after {steps} steps"


def session_id(steps: int, suffix: str) -> str:
    """A runtime session id (33–100 characters) that tells the server its N."""
    return f"bench{steps:04d}x{suffix}".ljust(33, "0")[:100]


def turn(view: SessionView, body: Any) -> list[Any]:
    match = _STEPS.match(view.id)
    steps = int(match.group(1)) if match else 0
    k = view.turns_played
    if k < steps:
        return tool_turn(("step", {"n": k + 1}, f"tooluse_{k + 1}"))
    return text_turn(final_text(steps))


def main() -> int:
    emulator = AgentCoreEmulator([turn] * (MAX_STEPS + 1))
    emulator.start()
    print(f"READY {emulator.port} {emulator.harness_arn}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())

    invokes = 0

    def commands() -> None:
        nonlocal invokes
        for line in sys.stdin:
            if line.strip() == "stats":
                with emulator._lock:  # the emulator records every request under this lock
                    invokes += sum(1 for r in emulator.requests if r.path.startswith("/harnesses/invoke"))
                    emulator.requests.clear()  # keep the process small over a long run
                print(f"STATS {invokes}", flush=True)
        done.set()

    threading.Thread(target=commands, daemon=True).start()
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        emulator.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
