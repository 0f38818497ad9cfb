#!/usr/bin/env python3
"""The loopback Claude Managed Agents emulator in a process of its own, for the CMA benchmarks.

``bench/cma_tool_loop.py`` and ``bench/scale.py`` start it so that the server's CPU is not
billed to the client being measured. It runs ``rma_shell.testing.CMAEmulator`` with a fixed
script, creates one agent (with the custom tool ``step``) and one environment over its own
HTTP API, and prints one line once it is listening::

    READY <port> <agent_id> <environment_id>

Every session plays the same script: ``--requests`` times (the kickoff, then each follow-up
message) ``--steps`` tool turns — one ``agent.custom_tool_use`` ``step`` with input
``{"n": k}`` and a ``requires_action`` idle each — then a text turn ``done after N steps``
ending on ``end_turn``. ``--drop-after K`` arms ``drop_stream_after(K)`` once *per session*
(on its first stream), so every session in a run loses its stream exactly once at the same
point of its script. ``--scale`` prepares the process for thousands of open streams (one
thread each): the fd limit raised to its hard limit, 256 KiB thread stacks and a listen
backlog of 4,096 instead of socketserver's 5 (a full accept queue makes connecting clients
wait out a 1 s SYN retransmit).

It exits when its stdin closes (the parent died or is done) or on SIGTERM.

    python bench/_cma_server.py --steps 10 [--requests 1] [--drop-after 4] [--scale]
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rma_shell.testing import CMAEmulator, drop_stream_after, text_turn, tool_turn
from rma_shell.testing._loopback import LoopbackHTTPServer

API_KEY = "sk-ant-bench"
STEP_TOOL = {
    "type": "custom",
    "name": "step",
    "description": "Run step n.",
    "input_schema": {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
    },
}
HEADERS = {
    "authorization": f"Bearer {API_KEY}",
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "managed-agents-2026-04-01",
    "content-type": "application/json",
}


def final_text(steps: int) -> str:
    return f"done after {steps} steps"


def script(steps: int, requests: int) -> list[Any]:
    one = [tool_turn(("step", {"n": k})) for k in range(1, steps + 1)] + [text_turn(final_text(steps))]
    return one * requests


class _ScaleServer(LoopbackHTTPServer):
    request_queue_size = 4096


class BenchEmulator(CMAEmulator):
    """The emulator plus, optionally, one stream drop armed for each session it creates."""

    def __init__(self, *args: Any, drop_after: int | None = None, scale: bool = False, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._drop_after = drop_after
        if scale:
            self.server_class = _ScaleServer

    def _create_session(self, body: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = super()._create_session(body)
        if self._drop_after is not None:
            self.inject(drop_stream_after(self._drop_after), session_id=created["id"])
        return created


def _post(base_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        base_url + path, data=json.dumps(body).encode(), headers=HEADERS, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        data: dict[str, Any] = json.loads(response.read())
        return data


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, required=True, help="tool round trips per request")
    parser.add_argument("--requests", type=int, default=1, help="requests per session (kickoff + follow-ups)")
    parser.add_argument("--drop-after", type=int, help="drop each session's first stream after K events")
    parser.add_argument("--scale", action="store_true", help="tune the process for thousands of streams")
    args = parser.parse_args()
    if args.scale:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        threading.stack_size(256 * 1024)
    emulator = BenchEmulator(
        script(args.steps, args.requests), api_key=API_KEY, drop_after=args.drop_after, scale=args.scale
    )
    emulator.start()
    agent = _post(
        emulator.base_url, "/v1/agents", {"name": "bench", "model": "claude-sonnet-4-6", "tools": [STEP_TOOL]}
    )
    environment = _post(
        emulator.base_url,
        "/v1/environments",
        {"name": "bench", "config": {"type": "cloud", "networking": {"type": "unrestricted"}}},
    )
    print(f"READY {emulator.port} {agent['id']} {environment['id']}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    finally:
        emulator.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
