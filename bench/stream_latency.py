#!/usr/bin/env python3
"""Live streaming latency: a text delta's time from the server's socket to the handler, per host.

One loopback server process (``bench/_stream_server.py``) streams every reply as N text deltas,
one every ``--interval-ms``, each carrying the ``time.monotonic_ns()`` read just before its bytes
were written (CLOCK_MONOTONIC: one clock for both processes on Linux). The loopback hop itself
is a few tens of µs and is in every figure alike. Measured, for every delta, at the moment the
client hands it to user code:

- ``rma-local`` / ``rma-local-asyncio``: ``rma_shell.run(Local(stream=True))`` under trio /
  asyncio, at ``handle_update`` (the ``TextDelta``), the provider built once;
- ``rma-agentcore`` / ``rma-agentcore-asyncio``: ``BedrockAgentCore`` (SigV4 + event-stream
  frames) under trio / asyncio, ``handle_update``;
- ``rma-cma`` / ``rma-cma-asyncio``: ``ClaudeManagedAgents`` (SSE session stream, with its
  default ``event_deltas=("agent.message",)``: one message previewed delta by delta) under trio /
  asyncio, at ``handle_update`` (each preview's ``TextDelta``; the final message adds none);
- ``rma-cma-messages``: the same with ``event_deltas=()``: one ``agent.message`` per delta;
- ``openai-sdk``: ``AsyncOpenAI().chat.completions.create(stream=True)``, at each chunk the
  iterator yields (asyncio) — the peer for Local;
- ``anthropic-sdk``: ``AsyncAnthropic().beta.sessions.events.stream()``, at each
  ``agent.message`` the iterator yields (asyncio) — the peer for ``rma-cma-messages``;
- ``anthropic-sdk-deltas``: the same stream with ``event_deltas=["agent.message"]``, at each
  ``event_delta`` the iterator yields — the peer for ``rma-cma``;
- ``httpx-sse``: the floor, ``httpx.AsyncClient.stream`` + ``aiter_lines`` + ``json.loads``.

Each client runs one warm-up reply, then ``--runs`` replies; p50 and p99 are over all deltas of
the timed replies. Clients run one after another in this process (the server has its own).

    python bench/stream_latency.py            # 5 runs × 200 deltas, 5 ms apart
    python bench/stream_latency.py --quick    # CI smoke: 1 run × 20 deltas, peers if installed
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HARNESS_ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/bench-AbCdEfGhIj"
SID = "rma-bench-session-0123456789abcdef01234567"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "AKIDBENCHBENCHBENCH0",
    "AWS_SECRET_ACCESS_KEY": "bench-secret-bench-secret-bench-secret00",
    "AWS_REGION": "us-east-1",
}
CLIENTS = (
    "httpx-sse",
    "openai-sdk",
    "rma-local",
    "rma-local-asyncio",
    "rma-agentcore",
    "rma-agentcore-asyncio",
    "anthropic-sdk",
    "rma-cma-messages",
    "anthropic-sdk-deltas",
    "rma-cma",
    "rma-cma-asyncio",
)
NEEDS = {"openai-sdk": "openai", "anthropic-sdk": "anthropic", "anthropic-sdk-deltas": "anthropic"}


class Samples:
    def __init__(self) -> None:
        self.ns: list[int] = []
        self.deltas = 0

    def record(self, text: str) -> None:
        now = time.monotonic_ns()
        for part in text.split(";"):
            if part:
                self.ns.append(now - int(part))
                self.deltas += 1


class Updates:
    """The rma handler: no tools; measures each ``TextDelta`` at ``handle_update``."""

    def __init__(self, samples: Samples) -> None:
        self.samples = samples

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return "unused"

    def handle_update(self, update: Any, ctx: object) -> None:
        text = getattr(update, "text", None)
        if isinstance(text, str):
            self.samples.record(text)


Once = Callable[[Samples], Awaitable[None]]


def rma_client(
    kind: str, base: str, deltas: bool = True
) -> tuple[Callable[[], Any], Callable[[Any, Samples], Awaitable[None]]]:
    from rma_shell import run

    def make() -> Any:
        if kind == "local":
            from rma_shell.providers.local import Local

            return Local(base_url=base + "/v1", model="bench", stream=True)
        if kind == "agentcore":
            from rma_shell.providers.agentcore import BedrockAgentCore

            return BedrockAgentCore(harness_arn=HARNESS_ARN, data_url=base, control_url=base, env=AWS_ENV)
        from rma_shell.providers.claude import ClaudeManagedAgents

        return ClaudeManagedAgents(
            api_key="sk-ant-bench",
            base_url=base,
            env={},
            agent_id="agent_b",
            environment_id="env_b",
            event_deltas=("agent.message",) if deltas else (),
        )

    async def once(provider: Any, samples: Samples) -> None:
        opts = {"runtime_session_id": SID} if kind == "agentcore" else {}
        result = await run(provider, handler=Updates(samples), prompt="go", timeout=120, **opts)
        result.unwrap()

    return make, once


async def openai_once(client: Any, samples: Samples) -> None:
    stream = await client.chat.completions.create(
        model="bench", messages=[{"role": "user", "content": "go"}], stream=True
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            samples.record(chunk.choices[0].delta.content)


async def anthropic_once(client: Any, samples: Samples, deltas: bool = False) -> None:
    session = await client.beta.sessions.create(agent="agent_b", environment_id="env_b")
    if deltas:
        stream = await client.beta.sessions.events.stream(session.id, event_deltas=["agent.message"])
    else:
        stream = await client.beta.sessions.events.stream(session.id)
    await client.beta.sessions.events.send(
        session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "go"}]}]
    )
    async for event in stream:
        if event.type == "event_delta" and deltas:
            samples.record(event.delta.content.text)
        elif event.type == "agent.message" and not deltas:
            samples.record(event.content[0].text)
        elif event.type == "session.status_idle":
            break
    await stream.close()


async def httpx_once(client: Any, samples: Samples, url: str) -> None:
    body = {"model": "bench", "messages": [{"role": "user", "content": "go"}], "stream": True}
    async with client.stream("POST", url, json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                samples.record(chunk["choices"][0]["delta"]["content"])


def measure(name: str, base: str, runs: int) -> Samples:
    samples = Samples()
    warm = Samples()

    async def loop(setup: Callable[[], Any], once: Callable[[Any, Samples], Awaitable[None]]) -> None:
        shared = setup()
        if asyncio.iscoroutine(shared):
            shared = await shared
        try:
            await once(shared, warm)
            for _ in range(runs):
                await once(shared, samples)
        finally:
            close = getattr(shared, "close", None) or getattr(shared, "aclose", None)
            if close is not None:
                done = close()
                if asyncio.iscoroutine(done):
                    await done

    if name.startswith("rma-"):
        kind = name.split("-")[1]
        make, once = rma_client(kind, base, deltas=not name.endswith("-messages"))
        if name.endswith("-asyncio"):
            asyncio.run(loop(make, once))
        else:
            import trio

            trio.run(loop, make, once)
    elif name == "openai-sdk":
        import openai

        asyncio.run(loop(lambda: openai.AsyncOpenAI(base_url=base + "/v1", api_key="sk-bench"), openai_once))
    elif name.startswith("anthropic-sdk"):
        import anthropic

        deltas = name.endswith("-deltas")
        asyncio.run(
            loop(
                lambda: anthropic.AsyncAnthropic(api_key="sk-ant-bench", base_url=base),
                lambda c, s: anthropic_once(c, s, deltas),
            )
        )
    else:
        import httpx

        url = base + "/v1/chat/completions"
        asyncio.run(loop(lambda: httpx.AsyncClient(timeout=60), lambda c, s: httpx_once(c, s, url)))
    return samples


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


def versions() -> str:
    names = ("httpx", "anyio", "trio", "openai", "anthropic")
    found = []
    for n in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found.append(f"{n} {importlib.metadata.version(n)}")
    return ", ".join(found)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--chunks", type=int, default=None)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    args = parser.parse_args()
    runs = args.runs or (1 if args.quick else 5)
    chunks = args.chunks or (20 if args.quick else 200)
    server = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "_stream_server.py"),
            "--chunks",
            str(chunks),
            "--interval-ms",
            str(args.interval_ms),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline().split()
        base = f"http://127.0.0.1:{line[1]}"
        print(
            f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
            f"CPython {platform.python_version()}, {versions()}; load {os.getloadavg()[0]:.1f}"
        )
        print(f"# {runs} runs × {chunks} deltas, {args.interval_ms} ms apart; latencies in µs")
        results: dict[str, tuple[float, float, int]] = {}
        for name in args.clients.split(","):
            module = NEEDS.get(name)
            if module is not None and importlib.util.find_spec(module) is None:
                print(f"{name:<22} skipped ({module} not installed)")
                continue
            samples = measure(name, base, runs)
            if samples.deltas != runs * chunks:
                raise SystemExit(f"{name}: got {samples.deltas} deltas, expected {runs * chunks}")
            p50, p99 = percentile(samples.ns, 0.5), percentile(samples.ns, 0.99)
            results[name] = (p50, p99, samples.deltas)
            print(
                f"{name:<22} p50 {p50:8.0f}  p99 {p99:8.0f}  mean {statistics.fmean(samples.ns) / 1000:8.0f}"
            )
        peer = results.get("openai-sdk")
        if peer is not None:
            print("# p50 / p99 ratio to openai-sdk:")
            for name, (p50, p99, _) in results.items():
                print(f"{name:<22} {p50 / peer[0]:5.2f}  {p99 / peer[1]:5.2f}")
        for mine, theirs in (("rma-cma", "anthropic-sdk-deltas"), ("rma-cma-messages", "anthropic-sdk")):
            if mine in results and theirs in results:
                a, b = results[mine], results[theirs]
                print(f"# {mine} / {theirs}: p50 {a[0] / b[0]:5.2f}  p99 {a[1] / b[1]:5.2f}")
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
