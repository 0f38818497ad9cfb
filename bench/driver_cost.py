#!/usr/bin/env python3
"""What the session driver costs per stream event, deterministically: rma against the minimal client.

``bench/scale.py`` measures the real thing — thousands of live Claude Managed Agents sessions
against the loopback emulator in another process — but on a shared two-core host its CPU
figures move by ±5% from run to run, and so do instruction counts under valgrind (how the
kernel splits the emulator's writes into reads depends on timing). This benchmark takes the
network out: an in-process ``httpx`` transport (``FakeCMA``) plays the same script as
``bench/_cma_server.py`` — per round trip the echo of the follow-up, ``status_running``, a
model request with one ``agent.custom_tool_use``, a ``requires_action`` idle, then the echo of
the tool result, ``status_running``, a model request with the final ``agent.message`` and an
``end_turn`` idle: 12 events — and serves every event as one chunk of its own. What is left is
the client's own work per event: for ``rma``, ``open_session`` over ``ClaudeManagedAgents``
(its ``http_client=`` the fake's client, so the streams use it too); for ``minimal``, the
floor of ``bench/_scale_minimal.py`` over the same client — SSE decoding and ``json.loads``,
httpx's client layers, and for rma the session machine and its driver.

K sessions each play R round trips back to back (a follow-up, then waiting for its result).
``--instructions`` runs every (backend, client) under valgrind twice, with R₁ and R₂ rounds,
and reports the difference in instructions divided by the difference in events: the marginal
cost of one event, the same from run to run to a fraction of a percent. Without it, the CPU
time per event of a few in-process repetitions.

    python bench/driver_cost.py                    # CPU µs per event, both backends, both clients
    python bench/driver_cost.py --instructions     # instructions per event (needs valgrind)
    python bench/driver_cost.py --count            # reschedules, spawns, cancel scopes per event
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import statistics
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import _sched_counts  # noqa: E402
import anyio  # noqa: E402
import httpx  # noqa: E402
from _cachegrind import VALGRIND, instructions  # noqa: E402
from _scale_minimal import MinimalClient, MinimalSession  # noqa: E402
from returns.result import Success  # noqa: E402

API_KEY = "sk-ant-bench"
BASE_URL = "http://cma.invalid"
PROMPT = "Run the step."
EXPECTED = "done after 1 steps"


class _Stream(httpx.AsyncByteStream):
    """One session's event stream: every queued frame is one chunk; waits when there is none."""

    def __init__(self) -> None:
        self.frames: deque[bytes] = deque()
        self.waiter: anyio.Event | None = None

    def push(self, frames: list[bytes]) -> None:
        self.frames.extend(frames)
        if self.waiter is not None:
            self.waiter.set()
            self.waiter = None

    async def __aiter__(self) -> Any:
        while True:
            while self.frames:
                # A socket read is a schedule point even with data waiting (trio and asyncio
                # both yield to the loop once per read): one per frame, as a real stream's.
                await anyio.lowlevel.checkpoint()
                yield self.frames.popleft()
            self.waiter = anyio.Event()
            await self.waiter.wait()


class FakeCMA(httpx.AsyncBaseTransport):
    """The bench script of ``bench/_cma_server.py`` (one tool step per request), in process."""

    def __init__(self) -> None:
        self.streams: dict[str, _Stream] = {}
        self.ids = itertools.count(1)

    def _event(self, event: dict[str, Any]) -> bytes:
        final = {"type": event["type"], "id": f"sevt_{next(self.ids):012d}", **event}
        final["processed_at"] = "2026-12-01T22:00:00.000000Z"
        return f"event: {final['type']}\ndata: {json.dumps(final)}\n\n".encode()

    def _answer(self, stream: _Stream, inputs: list[dict[str, Any]]) -> None:
        frames = [self._event(dict(event)) for event in inputs]
        usage = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 0}
        usage["cache_creation_input_tokens"] = 0
        start = f"sevt_{next(self.ids):012d}"
        running = {"type": "session.status_running"}
        opened = {"type": "span.model_request_start", "id": start}
        closed = {"type": "span.model_request_end", "model_request_start_id": start, "model_usage": usage}
        if inputs[-1].get("type") == "user.message":
            use = f"sevt_{next(self.ids):012d}"
            call = {"type": "agent.custom_tool_use", "id": use, "name": "step", "input": {"n": 1}}
            idle = {
                "type": "session.status_idle",
                "stop_reason": {"type": "requires_action", "event_ids": [use]},
            }
            frames += [self._event(e) for e in (running, opened, call, closed, idle)]
        else:
            text = {"type": "agent.message", "content": [{"type": "text", "text": EXPECTED}]}
            idle = {"type": "session.status_idle", "stop_reason": {"type": "end_turn"}}
            frames += [self._event(e) for e in (running, opened, text, closed, idle)]
        stream.push(frames)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "POST" and path == "/v1/sessions":
            session_id = f"sesn_{next(self.ids):012d}"
            self.streams[session_id] = _Stream()
            agent = {"id": "agent_bench", "name": "bench", "model": "claude-sonnet-4-6"}
            return httpx.Response(200, json={"id": session_id, "type": "session", "agent": agent})
        parts = path.split("/")
        stream = self.streams[parts[3]]
        if request.method == "GET" and path.endswith("/events/stream"):
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)
        if request.method == "POST" and path.endswith("/events"):
            inputs = json.loads(await request.aread())["events"]
            self._answer(stream, inputs)
            return httpx.Response(200, json={"data": inputs})
        return httpx.Response(404, json={"error": {"type": "not_found_error", "message": path}})


async def play(client_name: str, sessions: int, rounds: int, count: bool, backend: str) -> dict[str, Any]:
    """Open ``sessions`` live sessions, then play ``rounds`` round trips on each; CPU and events."""
    if count:
        _sched_counts.install(backend)
    http = httpx.AsyncClient(transport=FakeCMA())
    events = [0]
    results: list[deque[anyio.Event]] = [deque() for _ in range(sessions)]
    failures: list[str] = []

    def finished(slot: int, text: str) -> None:
        if text != EXPECTED:
            failures.append(text)
        results[slot].popleft().set()

    async def rma_session(slot: int, task_status: Any) -> None:
        from rma_shell import open_session

        async with open_session(
            provider, handler=tools, prompt=PROMPT, max_turns=1_000_000, telemetry=telemetry
        ) as session:
            task_status.started(session)
            while True:
                outcome = await session.next_result()
                finished(slot, outcome.unwrap().text if isinstance(outcome, Success) else repr(outcome))

    async def minimal_session(slot: int, task_status: Any) -> None:
        session = MinimalSession(minimal)
        task_status.started(session)

        def on_event(event: dict[str, Any]) -> None:
            events[0] += 1

        await session.run(
            PROMPT, lambda i: f"step {i['n']} done", on_event, lambda _: None, lambda t: finished(slot, t)
        )

    provider: Any = None
    from rma_shell.telemetry import Telemetry

    # As in bench/scale.py, which times tool starts through telemetry: one handler attached,
    # so every event's telemetry is built and offered to it.
    telemetry = Telemetry()
    telemetry.attach("bench", "rma.tool.start", lambda name, measurements, metadata: None)
    if client_name == "rma":
        from rma_shell.providers.claude import ClaudeManagedAgents

        class Counted(ClaudeManagedAgents):
            async def stream(self, conn: Any, on_connected: Any, on_event: Any) -> Any:
                async def counted(event: Any) -> None:
                    events[0] += 1
                    await on_event(event)

                return await super().stream(conn, on_connected, counted)

        provider = Counted(
            api_key=API_KEY, base_url=BASE_URL, env={}, agent_id="agent_bench", environment_id="env_bench",
            http_client=http,
        )  # fmt: skip

    class Tools:
        async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            return f"step {input['n']} done"

    tools = Tools()
    out: dict[str, Any] = {}
    async with anyio.create_task_group() as nursery:
        minimal = MinimalClient(BASE_URL, API_KEY, "agent_bench", "env_bench", nursery)
        minimal.http, minimal.stream_pools = http, False
        opened = []
        for slot in range(sessions):
            first = anyio.Event()
            results[slot].append(first)
            body = rma_session if client_name == "rma" else minimal_session
            opened.append(await nursery.start(body, slot))
            await first.wait()

        async def drive(slot: int) -> None:
            for _ in range(rounds):
                done = anyio.Event()
                results[slot].append(done)
                await opened[slot].message("again")
                await done.wait()

        events[0] = 0
        counted0 = _sched_counts.snapshot()
        blocks0, gc0 = sys.getallocatedblocks(), gc.get_stats()[0]["collections"]
        c0 = time.process_time()
        async with anyio.create_task_group() as drivers:
            for slot in range(sessions):
                drivers.start_soon(drive, slot)
        out["cpu_s"] = time.process_time() - c0
        out["gc0_per_event"] = (gc.get_stats()[0]["collections"] - gc0) / max(1, events[0])
        out["blocks_per_session"] = (sys.getallocatedblocks() - blocks0) / sessions
        out["events"] = events[0]
        out["per_event"] = {
            k: (v - counted0.get(k, 0)) / max(1, events[0]) for k, v in _sched_counts.snapshot().items()
        }
        out["failures"] = failures[:3]
        nursery.cancel_scope.cancel()
    return out


def run_child(
    client: str, backend: str, sessions: int, rounds: int, *, count: bool, wrap: tuple[str, ...] = ()
) -> dict[str, Any]:
    cmd = [
        *wrap,
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        client,
        backend,
        str(sessions),
        str(rounds),
    ]
    if count:
        cmd.append("--count")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{client} on {backend} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["failures"]:
        raise SystemExit(f"{client} on {backend}: wrong results {result['failures']}")
    if wrap:
        result["instructions"] = instructions(done.stderr)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default="trio,asyncio")
    parser.add_argument("--clients", default="rma,minimal")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--rounds", default="5,20", help="R1,R2 for --instructions; R2 otherwise")
    parser.add_argument("--repeat", type=int, default=5, help="CPU runs per cell (median)")
    parser.add_argument("--instructions", action="store_true", help="count instructions under valgrind")
    parser.add_argument("--count", action="store_true", help="reschedules, spawns, cancel scopes per event")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        client, backend, sessions, rounds = args.child
        result = anyio.run(play, client, int(sessions), int(rounds), args.count, backend, backend=backend)
        print(json.dumps(result))
        return 0
    small, big = (int(r) for r in args.rounds.split(","))
    table: dict[tuple[str, str], float] = {}
    for backend in args.backends.split(","):
        for client in args.clients.split(","):
            if args.instructions:
                a = run_child(client, backend, args.sessions, small, count=False, wrap=VALGRIND)
                b = run_child(client, backend, args.sessions, big, count=False, wrap=VALGRIND)
                value = (b["instructions"] - a["instructions"]) / (b["events"] - a["events"])
                print(f"  {client:>8} {backend:<7} {value:10,.0f} instructions per event", flush=True)
            else:
                runs = [
                    run_child(client, backend, args.sessions, big, count=args.count)
                    for _ in range(args.repeat)
                ]
                value = statistics.median(r["cpu_s"] / r["events"] * 1e6 for r in runs)
                counted = "".join(f", {k} {v:.2f}" for k, v in sorted(runs[0]["per_event"].items()))
                counted += f", gen-0 collections per 1,000 events {runs[0]['gc0_per_event'] * 1000:.1f}"
                print(f"  {client:>8} {backend:<7} {value:8.1f} µs CPU per event{counted}", flush=True)
            table[backend, client] = value
    for backend in args.backends.split(","):
        if (backend, "rma") in table and (backend, "minimal") in table:
            print(f"  {backend}: rma / minimal ×{table[backend, 'rma'] / table[backend, 'minimal']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
