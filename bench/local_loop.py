#!/usr/bin/env python3
"""Per-turn loop overhead of the Local provider, side by side with the peers.

One loopback OpenAI-compatible server process (``bench/_chat_server.py``: stdlib,
HTTP/1.1 keep-alive, ``TCP_NODELAY``) answers a tool call ``step`` until the request holds
N tool results, then a final text. The same conversation — system prompt, user prompt, one
tool, N tool calls, a final answer, so T = N + 1 model calls ("turns") — is run by:

- ``httpx-asyncio`` / ``httpx-trio``: the floor, a plain ``httpx.AsyncClient`` loop (POST,
  parse, run the tool, append the assistant and tool messages, repeat), one client for all runs;
- ``h11-asyncio`` / ``h11-trio``: the wire floor, the same loop over one keep-alive socket with
  ``h11`` framing (``bench/_h11_floor.py``: no pool, no client object, no timeouts);
- ``rma``: ``rma_shell.run(Local(...), ...)`` under trio, the provider built once, as documented
  (Local builds one ``httpx.AsyncClient`` on first use; its sessions share it);
- ``rma+client``: the same with ``Local(http_client=...)``, one caller-owned client for all runs;
- ``rma-asyncio`` / ``rma+client-asyncio``: the same two under ``asyncio.run`` (one shell on anyio);
- ``agent`` / ``agent-asyncio``: ``rma_shell.Agent(...).run`` with the same tool and handler (the
  agent and its host built once), under trio / asyncio: what the Agent surface adds to ``run``;
- ``openai-agents``: ``Runner.run`` with tracing disabled and ``max_turns`` raised (asyncio);
- ``pydantic-ai``: ``Agent.run`` with ``UsageLimits(request_limit=…)`` raised (asyncio).

Every client's tool is an ``async def`` returning ``"step {n} done"``. Each (client, scenario)
runs in a fresh worker process, warms up with one run, then times the scenario — wall time
(``perf_counter``) and the worker's CPU time (``process_time``; the server's CPU is not
counted) — ``--inner`` times; the workers are interleaved over ``--rounds`` rounds and the
medians of all samples are reported per turn, with the ratios to the ``httpx-asyncio`` floor.
The server's request count is checked after every worker.

    python bench/local_loop.py             # full: 100×2, 20×10, 1×200
    python bench/local_loop.py --quick     # CI smoke: 3×2, 1×10, peers skipped if absent
    python bench/local_loop.py --profile rma --scenarios 1x200   # cProfile one worker
    python bench/local_loop.py --profile rma --sampler pyinstrument   # needs pyinstrument
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import hashlib
import importlib.util
import io
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

SYSTEM = "You are a benchmark agent. Call step until told to stop."
PROMPT = "Run the steps."
STEP_SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}
STEP_DESCRIPTION = "Run step n."

FLOOR = "httpx-asyncio"
CLIENTS = (
    "httpx-asyncio",
    "httpx-trio",
    "h11-asyncio",
    "h11-trio",
    "rma",
    "rma+client",
    "rma-asyncio",
    "rma+client-asyncio",
    "agent",
    "agent-asyncio",
    "openai-agents",
    "pydantic-ai",
)
NEEDS = {"openai-agents": "agents", "pydantic-ai": "pydantic_ai"}
FULL_SCENARIOS = ((100, 2), (20, 10), (1, 200))
QUICK_SCENARIOS = ((3, 2), (1, 10))


async def step_tool(n: int) -> str:
    return f"step {n} done"


def expected_text(turns: int) -> str:
    return f"done after {turns - 1} steps"


# ── clients: each returns (setup, run_once) ───────────────────────────────────────────────
# ``setup`` (async) builds what is shared by all runs; ``run_once(shared)`` runs one
# conversation and returns its final text. ``make_client`` adds the event loop to run them on.

Runner_ = Callable[[Any], Awaitable[str]]


def client_httpx(
    base_url: str, model: str, turns: int, *, wire: str = "httpx"
) -> tuple[Callable[[], Awaitable[Any]], Runner_]:
    import httpx
    from _h11_floor import H11Floor

    url = base_url + "/chat/completions"
    target = httpx.URL(url).raw_path.decode()
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}
    tools = [
        {
            "type": "function",
            "function": {"name": "step", "description": STEP_DESCRIPTION, "parameters": STEP_SCHEMA},
        }
    ]

    async def setup() -> Any:
        return httpx.AsyncClient(timeout=60) if wire == "httpx" else H11Floor(base_url)

    async def post(client: Any, body: bytes) -> bytes:
        if wire == "httpx":
            response = await client.post(url, content=body, headers=headers)
            response.raise_for_status()
            return bytes(response.content)
        status, _, chunks = await client.request("POST", target, list(headers.items()), body)
        content = await client.read(chunks)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {content[:300]!r}")
        return content

    async def run_once(client: Any) -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT},
        ]
        for _ in range(turns + 10):
            body = json.dumps({"model": model, "messages": messages, "tools": tools}).encode()
            message = json.loads(await post(client, body))["choices"][0]["message"]
            calls = message.get("tool_calls")
            if not calls:
                return str(message["content"])
            messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": calls})
            for call in calls:
                args = json.loads(call["function"]["arguments"])
                output = await step_tool(**args)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        raise RuntimeError("the conversation did not end")

    return setup, run_once


def client_rma(
    base_url: str, model: str, turns: int, *, shared_client: bool
) -> tuple[Callable[[], Awaitable[Any]], Runner_]:
    import httpx

    from rma_shell import Failure, run
    from rma_shell.providers.local import Local

    class Handler:
        async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            return await step_tool(**input)

    handler = Handler()
    tools = [{"name": "step", "description": STEP_DESCRIPTION, "input_schema": STEP_SCHEMA}]

    async def setup() -> Any:
        client = httpx.AsyncClient(timeout=60) if shared_client else None
        return Local(
            base_url=base_url,
            model=model,
            api_key="sk-bench",
            system_prompt=SYSTEM,
            tools=tools,
            http_client=client,
        )

    async def run_once(provider: Any) -> str:
        outcome = await run(provider, handler=handler, prompt=PROMPT, max_turns=turns + 10, timeout=120)
        if isinstance(outcome, Failure):
            raise RuntimeError(f"rma run failed: {outcome.failure()!r}")
        result = outcome.unwrap()
        if result.turns != turns:
            raise RuntimeError(f"rma counted {result.turns} turns, expected {turns}")
        return str(result.text)

    return setup, run_once


def client_agent(base_url: str, model: str, turns: int) -> tuple[Callable[[], Awaitable[Any]], Runner_]:
    """``rma_shell.Agent``: the same declared tool and handler as ``rma``, configured once."""
    from rma_shell import Agent, Failure
    from rma_shell.providers.local import Local

    async def handle(name: str, input: dict[str, Any], ctx: object) -> str:
        return await step_tool(**input)

    tools = [{"name": "step", "description": STEP_DESCRIPTION, "input_schema": STEP_SCHEMA}]

    async def setup() -> Any:
        host = Local(base_url=base_url, model=model, api_key="sk-bench")
        return Agent(
            instructions=SYSTEM, tools=tools, handler=handle, host=host, max_turns=turns + 10, timeout=120
        )

    async def run_once(agent: Any) -> str:
        outcome = await agent.run(PROMPT)
        if isinstance(outcome, Failure):
            raise RuntimeError(f"Agent.run failed: {outcome.failure()!r}")
        result = outcome.unwrap()
        if result.turns != turns:
            raise RuntimeError(f"Agent.run counted {result.turns} turns, expected {turns}")
        return str(result.text)

    return setup, run_once


def client_openai_agents(
    base_url: str, model: str, turns: int
) -> tuple[Callable[[], Awaitable[Any]], Runner_]:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        RunConfig,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool(name_override="step", description_override=STEP_DESCRIPTION)
    async def step(n: int) -> str:
        return await step_tool(n)

    run_config = RunConfig(tracing_disabled=True)

    async def setup() -> Any:
        client = AsyncOpenAI(base_url=base_url, api_key="sk-bench")
        return Agent(
            name="bench",
            instructions=SYSTEM,
            model=OpenAIChatCompletionsModel(model=model, openai_client=client),
            tools=[step],
        )

    async def run_once(agent: Any) -> str:
        result = await Runner.run(agent, PROMPT, max_turns=turns + 10, run_config=run_config)
        return str(result.final_output)

    return setup, run_once


def client_pydantic_ai(base_url: str, model: str, turns: int) -> tuple[Callable[[], Awaitable[Any]], Runner_]:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    limits = UsageLimits(request_limit=turns + 10)

    async def setup() -> Any:
        chat_model = OpenAIChatModel(model, provider=OpenAIProvider(base_url=base_url, api_key="sk-bench"))
        agent: Agent[None, str] = Agent(chat_model, instructions=SYSTEM)

        @agent.tool_plain(name="step", description=STEP_DESCRIPTION)
        async def step(n: int) -> str:
            return await step_tool(n)

        return agent

    async def run_once(agent: Any) -> str:
        result = await agent.run(PROMPT, usage_limits=limits)
        return str(result.output)

    return setup, run_once


def make_client(name: str, base_url: str, turns: int) -> tuple[str, Callable[[], Awaitable[Any]], Runner_]:
    model = f"step-{turns - 1}"
    if name == "httpx-asyncio":
        return ("asyncio", *client_httpx(base_url, model, turns))
    if name == "httpx-trio":
        return ("trio", *client_httpx(base_url, model, turns))
    if name in ("h11-asyncio", "h11-trio"):
        return (name.split("-")[1], *client_httpx(base_url, model, turns, wire="h11"))
    if name == "rma":
        return ("trio", *client_rma(base_url, model, turns, shared_client=False))
    if name == "rma+client":
        return ("trio", *client_rma(base_url, model, turns, shared_client=True))
    if name == "rma-asyncio":  # the same code on the other anyio backend
        return ("asyncio", *client_rma(base_url, model, turns, shared_client=False))
    if name == "rma+client-asyncio":
        return ("asyncio", *client_rma(base_url, model, turns, shared_client=True))
    if name == "agent":
        return ("trio", *client_agent(base_url, model, turns))
    if name == "agent-asyncio":
        return ("asyncio", *client_agent(base_url, model, turns))
    if name == "openai-agents":
        return ("asyncio", *client_openai_agents(base_url, model, turns))
    if name == "pydantic-ai":
        return ("asyncio", *client_pydantic_ai(base_url, model, turns))
    raise SystemExit(f"unknown client {name!r}")


# ── the worker: one client, its scenarios, in a process of its own ────────────────────────


class Sampler:
    """The profiler of a worker: pyinstrument (statistical, wall clock, 1 ms) when the
    output path ends in ``.pyisession``, else cProfile on a CPU-time clock (deterministic, but
    its per-call cost inflates call-heavy code)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pyi = path.endswith(".pyisession")
        self.sessions: list[Any] = []
        if self.pyi:
            from pyinstrument import Profiler

            self.profiler: Any = Profiler(interval=0.001, async_mode="disabled")
        else:
            self.profiler = cProfile.Profile(time.process_time)

    def start(self) -> None:
        if self.pyi:
            self.profiler.start()
        else:
            self.profiler.enable()

    def stop(self) -> None:
        if self.pyi:
            self.sessions.append(self.profiler.stop())
            self.profiler.reset()
        else:
            self.profiler.disable()

    def save(self) -> None:
        if not self.pyi:
            self.profiler.dump_stats(self.path)
            return
        from pyinstrument.session import Session

        combined = self.sessions[0]
        for more in self.sessions[1:]:
            combined = Session.combine(combined, more)
        combined.save(self.path)


def worker(
    name: str, base_url: str, scenarios: list[tuple[int, int]], inner: int, profile: str | None
) -> list[dict[str, Any]]:
    """Time ``name`` on each (runs, turns) scenario: a warm-up run, then ``inner`` samples."""
    out = []
    profiler = Sampler(profile) if profile else None
    for runs, turns in scenarios:
        loop, setup, run_once = make_client(name, base_url, turns)
        expected = expected_text(turns)

        async def body(
            setup: Callable[[], Awaitable[Any]] = setup,
            run_once: Runner_ = run_once,
            expected: str = expected,
            runs: int = runs,
        ) -> tuple[list[float], list[float]]:
            shared = await setup()
            if await run_once(shared) != expected:  # warm-up, and a check of the conversation
                raise RuntimeError(f"{name}: unexpected final text")
            walls, cpus = [], []
            for _ in range(inner):
                gc.collect()
                w0, c0 = time.perf_counter(), time.process_time()
                if profiler:
                    profiler.start()
                for _ in range(runs):
                    text = await run_once(shared)
                    if text != expected:
                        raise RuntimeError(f"{name}: final text {text!r}, expected {expected!r}")
                if profiler:
                    profiler.stop()
                cpus.append(time.process_time() - c0)
                walls.append(time.perf_counter() - w0)
            return walls, cpus

        if loop == "trio":
            import trio

            walls, cpus = trio.run(body)
        else:
            walls, cpus = asyncio.run(body())
        out.append({"client": name, "runs": runs, "turns": turns, "wall": walls, "cpu": cpus})
    if profiler:
        profiler.save()
    return out


def parse_scenarios(text: str) -> list[tuple[int, int]]:
    pairs = []
    for item in text.split(","):
        runs, turns = item.lower().split("x")
        pairs.append((int(runs), int(turns)))
    return pairs


def format_scenarios(scenarios: Any) -> str:
    return ",".join(f"{runs}x{turns}" for runs, turns in scenarios)


# ── the driver ────────────────────────────────────────────────────────────────────────────


class ChatServer:
    def __init__(self, *args: str) -> None:
        """``bench/_chat_server.py`` in a process of its own; ``args`` go to its command line."""
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "_chat_server.py"), *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.proc.kill()
            raise SystemExit(f"the chat server did not start: {line!r}")
        self.base = f"http://127.0.0.1:{int(line.split()[1])}"
        self.base_url = self.base + "/v1"

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(self.base + "/stats", timeout=10) as response:
            data: dict[str, int] = json.loads(response.read())
            return data

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


TREES: dict[str, Path] = {}
"""``--tree NAME=PATH``: another checkout whose rma a client ``CLIENT@NAME`` measures."""


def run_worker(
    server: ChatServer, name: str, scenarios: list[tuple[int, int]], inner: int, timeout: float
) -> list[dict[str, Any]]:
    before = server.stats()["requests"]
    client, _, tree = name.partition("@")
    script = TREES[tree] / "bench" / "local_loop.py" if tree else Path(__file__).resolve()
    cmd = [
        sys.executable,
        str(script),
        "--worker",
        client,
        "--base-url",
        server.base_url,
        "--scenarios",
        format_scenarios(scenarios),
        "--inner",
        str(inner),
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"worker {name} did not finish within {timeout:.0f} s") from None
    if done.returncode != 0:
        raise SystemExit(f"worker {name} failed:\n{done.stderr[-4000:]}")
    results: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    for result in results:
        result["client"] = name
    made = server.stats()["requests"] - before
    want = sum((1 + runs * inner) * turns for runs, turns in scenarios)
    if made != want:
        raise SystemExit(f"worker {name} made {made} requests, expected {want}")
    return results


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in ("rma-agents", "trio", "httpx", "openai", "openai-agents", "pydantic-ai", "anyio"):
        with contextlib.suppress(PackageNotFoundError):
            out[dist] = version(dist)
    return out


def source_digest() -> str:
    """A digest of the rma and rma_shell sources measured (the library moves under benchmarks)."""
    digest = hashlib.sha256()
    for path in sorted([*ROOT.glob("rma/**/*.py"), *ROOT.glob("rma_shell/**/*.py")]):
        if "testing" in path.parts:
            continue
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPU {cpu}, {platform.system()} {platform.release()}"


def load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def report(
    samples: dict[tuple[int, int], dict[str, dict[str, list[float]]]], clients: list[str]
) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for (runs, turns), by_client in samples.items():
        print(f"\n{runs} runs × {turns} turns ({runs * turns} turns a sample)")
        print(
            f"  {'client':<20} {'ms/turn':>8} {'CPU ms/turn':>12} {'× floor':>8} {'CPU × floor':>12}"
            f" {'× trio floor':>13}  samples"
        )
        n = runs * turns
        rows = {}
        for name in clients:
            if name not in by_client:
                continue
            wall = statistics.median(by_client[name]["wall"]) / n * 1000
            cpu = statistics.median(by_client[name]["cpu"]) / n * 1000
            rows[name] = {
                "ms_per_turn": wall,
                "cpu_ms_per_turn": cpu,
                "samples": len(by_client[name]["wall"]),
            }
        floor, trio_floor = rows.get(FLOOR), rows.get("httpx-trio")
        for name, row in rows.items():
            if floor:
                row["x_floor"] = row["ms_per_turn"] / floor["ms_per_turn"]
                row["cpu_x_floor"] = row["cpu_ms_per_turn"] / floor["cpu_ms_per_turn"]
            if trio_floor:
                row["x_trio_floor"] = row["ms_per_turn"] / trio_floor["ms_per_turn"]
            ratio = f"{row['x_floor']:8.2f} {row['cpu_x_floor']:12.2f}" if floor else f"{'-':>8} {'-':>12}"
            ratio += f" {row['x_trio_floor']:13.2f}" if trio_floor else f" {'-':>13}"
            spread = by_client[name]["wall"]
            lo, hi = min(spread) / n * 1000, max(spread) / n * 1000
            print(
                f"  {name:<20} {row['ms_per_turn']:8.3f} {row['cpu_ms_per_turn']:12.3f} {ratio}"
                f"  {row['samples']} (wall {lo:.3f}–{hi:.3f})"
            )
        summary[f"{runs}x{turns}"] = rows
    return summary


def targets(summary: dict[str, Any], scenarios: list[tuple[int, int]]) -> None:
    print("\ntargets (issue #17: CPU per turn ≤ 1.1× the httpx floor at 2 and 10 turns, < 1× at 200)")
    for runs, turns in scenarios:
        rows = summary.get(f"{runs}x{turns}", {})
        bound = 1.0 if turns >= 200 else 1.1
        for name in ("rma", "rma+client", "rma-asyncio", "rma+client-asyncio"):
            if name in rows and "cpu_x_floor" in rows[name]:
                x = rows[name]["cpu_x_floor"]
                verdict = "holds" if (x < bound if bound == 1.0 else x <= bound) else "FAILS"
                print(f"  {name} {runs}×{turns}: CPU {x:.2f}× the httpx floor (≤ {bound}): {verdict}")
    long, mid = summary.get("1x200", {}), summary.get("20x10", {})
    for name in (FLOOR, "httpx-trio"):
        if name in long and name in mid:
            g = long[name]["ms_per_turn"] / mid[name]["ms_per_turn"]
            print(f"  (for reference, {name} 200-turn / 10-turn per-turn cost: {g:.2f} wall)")
    for name in ("rma", "rma+client", "rma-asyncio", "rma+client-asyncio"):
        if name in long and name in mid:
            g = long[name]["ms_per_turn"] / mid[name]["ms_per_turn"]
            c = long[name]["cpu_ms_per_turn"] / mid[name]["cpu_ms_per_turn"]
            verdict = "holds" if g <= 1.3 else "FAILS"
            print(f"  {name} 200-turn / 10-turn per-turn cost: {g:.2f} wall, {c:.2f} CPU (≤ 1.3): {verdict}")


def profile_worker(args: argparse.Namespace) -> int:
    server = ChatServer()
    out = Path(args.profile_out)
    if args.sampler == "pyinstrument" and out.suffix != ".pyisession":
        out = out.with_suffix(".pyisession")
    scenarios = parse_scenarios(args.scenarios or "1x200")
    try:
        print(f"profiling {args.profile} on {format_scenarios(scenarios)}, {args.inner} samples → {out}")
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            args.profile,
            "--base-url",
            server.base_url,
            "--scenarios",
            format_scenarios(scenarios),
            "--inner",
            str(args.inner),
            "--worker-profile",
            str(out),
        ]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    finally:
        server.close()
    turns = sum(runs * turns for runs, turns in scenarios) * args.inner
    if out.suffix == ".pyisession":
        print_pyinstrument(out, turns, args.profile_lines)
        return 0
    buf = io.StringIO()
    stats = pstats.Stats(str(out), stream=buf)
    stats.sort_stats("cumulative").print_stats(args.profile_lines)
    stats.sort_stats("tottime").print_stats(args.profile_lines)
    print(buf.getvalue())
    totals: dict[str, float] = {}
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    for (filename, _line, function), (_cc, _nc, tottime, _ct, _callers) in raw.items():
        key = _package(filename, function)
        totals[key] = totals.get(key, 0.0) + tottime
    print_totals(
        "own CPU time by package (cProfile inflates call-heavy code)", totals, turns, args.profile_lines
    )
    return 0


def _is_syscall(function: str) -> bool:
    return any(word in function for word in ("socket", "epoll", "select", "send", "recv", "poll"))


def _package(filename: str | None, function: str) -> str:
    """The package a profiled function belongs to (cProfile's "~" entries are builtins)."""
    if not filename or filename == "~":
        if _is_syscall(function):
            return "syscalls (socket, epoll)"
        if "load_verify_locations" in function:
            return "ssl (CA bundle load)"
        return "builtins"
    path = Path(filename)
    parts = path.parts
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1]
    for top in ("rma_shell", "rma", "bench"):
        if top in parts:
            index = parts.index(top)
            return "/".join(parts[index : index + 2]) if top != "bench" else "bench"
    return "stdlib " + path.stem


def print_totals(title: str, totals: dict[str, float], turns: int, lines: int) -> None:
    grand = sum(totals.values()) or 1.0
    print(f"{title} — {turns} turns")
    for key, value in sorted(totals.items(), key=lambda kv: -kv[1])[:lines]:
        print(f"  {value / grand:6.1%}  {value / turns * 1000:8.3f} ms/turn  {key}")
    print(f"  total   {grand / turns * 1000:8.3f} ms/turn")


def print_pyinstrument(path: Path, turns: int, lines: int) -> None:
    """Leaf (own) time by package, and inclusive time of the rma, rma_shell and bench functions."""
    from pyinstrument.session import Session

    session = Session.load(path)
    own: dict[str, float] = {}
    inclusive: dict[str, float] = {}
    for stack, seconds in session.frame_records:
        leaf = stack[-1].split("\x00")
        function, filename = leaf[0], leaf[1] if len(leaf) > 1 else None
        key = _package(filename, function)
        if key == "stdlib <built-in>" and not _is_syscall(function):
            # A C function (isinstance, dict.get, json's scanner…) is its Python caller's cost.
            for info in reversed(stack[:-1]):
                caller = info.split("\x00")
                caller_key = _package(caller[1] if len(caller) > 1 else None, caller[0])
                if caller_key != "stdlib <built-in>":
                    key = caller_key
                    break
        elif key == "stdlib <built-in>":
            key = "syscalls (socket, epoll)"
        own[key] = own.get(key, 0.0) + seconds
        seen = set()
        for info in stack:
            parts = info.split("\x00")
            if len(parts) < 3 or not any(f"/{top}/" in parts[1] for top in ("rma", "rma_shell", "bench")):
                continue
            name = f"{_package(parts[1], parts[0])}:{parts[0]}"
            if name not in seen:
                seen.add(name)
                inclusive[name] = inclusive.get(name, 0.0) + seconds
    title = "own wall time by package, C calls charged to their caller (pyinstrument, 1 ms samples)"
    print_totals(title, own, turns, lines)
    print(f"inclusive wall time of rma, rma_shell and bench functions — {turns} turns")
    for name, value in sorted(inclusive.items(), key=lambda kv: -kv[1])[:lines]:
        print(f"  {value / turns * 1000:8.3f} ms/turn  {name}")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="CI smoke run: tiny scenarios, no figures to quote"
    )
    parser.add_argument("--rounds", type=int, default=3, help="worker processes per (client, scenario)")
    parser.add_argument("--inner", type=int, default=3, help="timed samples per worker")
    parser.add_argument(
        "--clients", default=",".join(CLIENTS), help="comma-separated subset of " + ",".join(CLIENTS)
    )
    parser.add_argument("--scenarios", help="RUNSxTURNS,… instead of the built-in ones, e.g. 20x10,1x200")
    parser.add_argument("--json", help="write the summary here")
    parser.add_argument("--profile", metavar="CLIENT", help="profile one worker (default scenario 1x200)")
    parser.add_argument("--sampler", choices=("cprofile", "pyinstrument"), default="cprofile")
    parser.add_argument("--profile-out", default="/tmp/local_loop.prof")
    parser.add_argument("--profile-lines", type=int, default=40)
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="another checkout (with this bench/ copied in) measured as clients CLIENT@NAME, e.g. "
        "--tree pre=/tmp/d4efe6f --clients httpx-trio,rma,rma@pre",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--worker-profile", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        results = worker(
            args.worker, args.base_url, parse_scenarios(args.scenarios), args.inner, args.worker_profile
        )
        print(json.dumps(results))
        return 0
    if args.profile:
        return profile_worker(args)

    scenarios = (
        parse_scenarios(args.scenarios)
        if args.scenarios
        else list(QUICK_SCENARIOS if args.quick else FULL_SCENARIOS)
    )
    rounds, inner = (1, 1) if args.quick else (args.rounds, args.inner)
    for tree in args.tree:
        label, _, path = tree.partition("=")
        if not (Path(path) / "bench" / "local_loop.py").exists():
            raise SystemExit(f"--tree {tree}: copy bench/local_loop.py (and its helpers) into {path}/bench")
        TREES[label] = Path(path).resolve()
    clients = []
    for name in args.clients.split(","):
        base, _, tree = name.partition("@")
        if tree and tree not in TREES:
            raise SystemExit(f"client {name!r}: no --tree {tree}=PATH")
        if tree and base in CLIENTS:
            clients.append(name)
            continue
        if name not in CLIENTS:
            raise SystemExit(f"unknown client {name!r}; known: {', '.join(CLIENTS)}")
        module = NEEDS.get(name)
        if module and not _installed(module):
            print(f"note: {name} is not installed (pip install -e '.[bench]'); skipped")
            continue
        clients.append(name)

    print(f"machine: {machine()}; load average at start {load()}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()))
    digest = source_digest()
    print(f"rma sources: {digest}")
    server = ChatServer()
    samples: dict[tuple[int, int], dict[str, dict[str, list[float]]]] = {s: {} for s in scenarios}
    # --quick: one worker per client covering every scenario (few process starts). Full: one
    # worker per (client, scenario), interleaved over the rounds so load bursts hit all alike.
    batches = [scenarios] if args.quick else [[s] for s in scenarios]
    started = time.perf_counter()
    try:
        for batch in batches:
            for _ in range(rounds):
                for name in clients:
                    for result in run_worker(server, name, batch, inner, 300 if args.quick else 3600):
                        into = samples[(result["runs"], result["turns"])].setdefault(
                            name, {"wall": [], "cpu": []}
                        )
                        into["wall"] += result["wall"]
                        into["cpu"] += result["cpu"]
    finally:
        server.close()
    summary = report(samples, clients)
    if source_digest() != digest:
        print("\nWARNING: the rma sources changed during the run; the figures mix two versions")
    if not args.quick:
        targets(summary, scenarios)
    print(f"\nload average at end {load()}; {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"versions": versions(), "machine": machine(), "sources": digest, "results": summary},
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
