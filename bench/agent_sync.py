#!/usr/bin/env python3
"""What a synchronous entry point costs per run, side by side with the peers' own.

One loopback chat server (``bench/_chat_server.py``) answers a conversation of one tool call
and a final text (2 turns). Each client runs it ``--runs`` times from synchronous code, in a
worker process of its own, after one warm-up run; the worker's CPU time (``process_time``)
and wall time per run are reported, with ratios to ``loop-once``:

- ``loop-once``: the floor — one ``asyncio.run`` around every run, ``await agent.run(...)``
  (what an async program pays; no loop started per run);
- ``asyncio.run-each``: ``asyncio.run(main())`` per run, the hand-written way to call async code
  from sync code: ``main`` builds the agent and its host, runs, and closes the host (a host's
  connections belong to the loop that opened them, so one cannot serve two ``asyncio.run``s);
- ``run_sync``: ``agent.run_sync(...)`` per run (a loop per run, the host's connections closed
  at its end so the next run starts clean);
- ``openai-agents``: ``Runner.run_sync`` (asyncio; tracing off), ``pydantic-ai``:
  ``Agent.run_sync``, when the ``bench`` extra is installed.

    python bench/agent_sync.py             # 200 runs a client, 3 rounds
    python bench/agent_sync.py --quick     # CI smoke: 5 runs, peers skipped if absent
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from local_loop import ChatServer, load, machine  # noqa: E402

SYSTEM = "You are a benchmark agent. Call step until told to stop."
PROMPT = "Run the steps."
MODEL = "step-1"  # one tool call, then the final text: 2 turns
CLIENTS = ("loop-once", "asyncio.run-each", "run_sync", "openai-agents", "pydantic-ai")
NEEDS = {"openai-agents": "agents", "pydantic-ai": "pydantic_ai"}
STEP_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def rma_agent(base_url: str) -> Any:
    from rma_shell import Agent
    from rma_shell.providers.local import Local

    async def handle(name: str, input: dict[str, Any], ctx: object) -> str:
        return f"step {input['n']} done"

    tools = [{"name": "step", "description": "Run step n.", "input_schema": STEP_SCHEMA}]
    host = Local(base_url=base_url, model=MODEL, api_key="sk-bench")
    return Agent(instructions=SYSTEM, tools=tools, handler=handle, host=host, max_turns=10)


def check(text: str) -> None:
    if text != "done after 1 steps":
        raise RuntimeError(f"unexpected final text {text!r}")


def runs_of(name: str, base_url: str, runs: int) -> list[float]:
    """``runs`` + 1 runs of ``name``; the CPU seconds of each run after the first."""
    cpu: list[float] = []
    if name == "loop-once":
        agent = rma_agent(base_url)

        async def main() -> None:
            for i in range(runs + 1):
                t0 = time.process_time()
                check((await agent.run_or_raise(PROMPT)).text)
                if i:
                    cpu.append(time.process_time() - t0)

        asyncio.run(main())
        return cpu
    if name == "asyncio.run-each":

        async def each() -> str:
            agent = rma_agent(base_url)
            try:
                return str((await agent.run_or_raise(PROMPT)).text)
            finally:
                await agent.host.close()

        for i in range(runs + 1):
            t0 = time.process_time()
            check(asyncio.run(each()))
            if i:
                cpu.append(time.process_time() - t0)
        return cpu
    if name == "run_sync":
        agent = rma_agent(base_url)
        for i in range(runs + 1):
            t0 = time.process_time()
            check(agent.run_sync_or_raise(PROMPT).text)
            if i:
                cpu.append(time.process_time() - t0)
        return cpu
    if name == "openai-agents":
        from agents import Agent, Runner, function_tool, set_tracing_disabled
        from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
        from openai import AsyncOpenAI

        set_tracing_disabled(True)

        @function_tool
        async def step(n: int) -> str:
            """Run step n."""
            return f"step {n} done"

        client = AsyncOpenAI(base_url=base_url, api_key="sk-bench")
        peer = Agent(
            name="bench", instructions=SYSTEM, tools=[step], model=OpenAIChatCompletionsModel(MODEL, client)
        )
        for i in range(runs + 1):
            t0 = time.process_time()
            check(str(Runner.run_sync(peer, PROMPT, max_turns=10).final_output))
            if i:
                cpu.append(time.process_time() - t0)
        return cpu
    if name == "pydantic-ai":
        from pydantic_ai import Agent as PAgent
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base_url, api_key="sk-bench"))
        pagent = PAgent(model, instructions=SYSTEM)

        @pagent.tool_plain
        async def step(n: int) -> str:
            """Run step n."""
            return f"step {n} done"

        for i in range(runs + 1):
            t0 = time.process_time()
            check(str(pagent.run_sync(PROMPT).output))
            if i:
                cpu.append(time.process_time() - t0)
        return cpu
    raise SystemExit(f"unknown client {name!r}")


def worker(name: str, base_url: str, runs: int) -> None:
    t0 = time.perf_counter()
    cpu = runs_of(name, base_url, runs)
    wall = (time.perf_counter() - t0) / (runs + 1)
    print(json.dumps({"cpu_ms": statistics.median(cpu) * 1000, "wall_ms": wall * 1000}))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--worker", nargs=2, metavar=("CLIENT", "BASE_URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], args.runs)
        return
    runs, rounds = (5, 1) if args.quick else (args.runs, args.rounds)
    clients = [c for c in args.clients.split(",") if c not in NEEDS or importlib.util.find_spec(NEEDS[c])]
    print(f"machine: {machine()}; load average at start {load()}")
    server = ChatServer()
    samples: dict[str, list[dict[str, float]]] = {c: [] for c in clients}
    try:
        for _ in range(rounds):  # interleaved: each round runs every client once
            for name in clients:
                done = subprocess.run(
                    [sys.executable, __file__, "--runs", str(runs), "--worker", name, server.base_url],
                    capture_output=True,
                    text=True,
                    timeout=600,
                    check=False,
                )
                if done.returncode != 0:
                    raise SystemExit(f"{name} failed:\n{done.stderr[-2000:]}")
                samples[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        server.close()
    floor = statistics.median(s["cpu_ms"] for s in samples[CLIENTS[0]]) if CLIENTS[0] in samples else None
    print(f"\n{runs} runs of a 2-turn conversation from sync code, {rounds} round(s), medians")
    print(f"  {'client':<18} {'CPU ms/run':>10} {'wall ms/run':>11} {'CPU × loop-once':>16}")
    for name, got in samples.items():
        cpu = statistics.median(s["cpu_ms"] for s in got)
        wall = statistics.median(s["wall_ms"] for s in got)
        ratio = f"{cpu / floor:.2f}" if floor else "-"
        print(f"  {name:<18} {cpu:>10.3f} {wall:>11.3f} {ratio:>16}")
    print(f"\nload average at end {load()}")


if __name__ == "__main__":
    main()
