#!/usr/bin/env python3
"""One long session: does the cost of a turn stay flat over 10,000 turns?

One ``rma_shell.run`` of T turns (T - 1 tool calls, then a final answer), in a fresh worker
process per provider and anyio backend (``--backends trio,asyncio``, both by default):

- ``scripted``: ``rma_shell.testing.ScriptedProvider`` in request/response mode, no network:
  per turn one ``tool_use`` ``step``, a ``usage`` and a ``requires_action`` idle (each with its
  own event id, as a real host sends them); the last turn a text and an ``end_turn`` idle.
  This is rma's own cost per turn: the core's ``step``, the shell's driver, the handler.
- ``local``: the ``Local`` provider against the loopback chat-completions server of
  ``bench/_chat_server.py`` (model ``step-{T-1}``), one shared ``httpx.AsyncClient``. The
  chat-completions wire makes every request carry the whole history, so its request grows by
  one assistant and one tool message per turn: the bytes per request are reported beside the
  time, and so is the server process's CPU (the client's CPU is measured on its own).

The handler stamps every tool call (``perf_counter``, the worker's ``process_time``) and every
100th call the resident set (``VmRSS``); with ``--tracemalloc`` a second worker run per provider
stamps the traced Python heap instead, after a ``gc.collect()`` (tracing and collecting slow the
run, so its times are not used).
Windows of ``--window`` turns (1,000 by default, 100 in ``--quick``) are compared: the median
and mean wall time per turn, CPU per turn, and memory growth per turn, in the first and the last
window. Flat means last/first ≈ 1 for time and for memory growth per turn (memory itself grows
linearly: the session's result holds every event of the request).

    python bench/long_session.py             # full: 10,000 turns, both providers, tracemalloc
    python bench/long_session.py --quick     # CI smoke: 500 turns, no figures to quote
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from local_loop import ChatServer, load, machine, source_digest  # noqa: E402

PROVIDERS = ("scripted", "local")
BACKENDS = ("trio", "asyncio")
RSS_EVERY = 100
STEP_SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def scripted_turns(turns: int) -> list[Any]:
    script: list[Any] = []
    for k in range(1, turns):
        use = {"type": "tool_use", "id": f"toolu_{k}", "name": "step", "input": {"n": k}}
        usage = {"type": "usage", "input_tokens": 20 + 10 * k, "output_tokens": 8, "id": f"u_{k}"}
        idle = {"type": "idle", "stop_reason": "requires_action", "event_ids": [use["id"]], "id": f"i_{k}"}
        script.append([use, usage, idle])
    final = f"done after {turns - 1} steps"
    script.append(
        [
            {"type": "text", "text": final, "id": "t_final"},
            {"type": "usage", "input_tokens": 10 * turns, "output_tokens": 8, "id": "u_final"},
            {"type": "idle", "stop_reason": "end_turn", "id": "i_final"},
        ]
    )
    return script


# ── the worker: one provider, one long session ────────────────────────────────────────────


async def worker(args: argparse.Namespace, name: str) -> dict[str, Any]:
    import httpx

    from rma_shell import Failure, run
    from rma_shell.providers.local import Local
    from rma_shell.testing import ScriptedProvider

    turns = args.turns
    traced = args.tracemalloc
    stamps: list[tuple[float, float]] = []
    memory: list[tuple[int, int]] = []  # (tool calls so far, bytes)
    sizes: list[int] = []

    def measure_memory() -> int:
        if not traced:
            return rss_bytes()
        # Traced runs are not timed: collect first, so that garbage a cycle still holds (a
        # request body of up to 2 MB late in a Local session) does not pass for growth.
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    class Handler:
        async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            stamps.append((time.perf_counter(), time.process_time()))
            if len(stamps) % RSS_EVERY == 0:
                memory.append((len(stamps), measure_memory()))
            return f"step {input['n']} done"

    tools = [{"name": "step", "description": "Run step n.", "input_schema": STEP_SCHEMA}]
    client: httpx.AsyncClient | None = None

    async def record_size(request: httpx.Request) -> None:
        sizes.append(len(request.content))

    def provider(n_turns: int) -> Any:
        nonlocal client
        if name == "scripted":
            return ScriptedProvider(scripted_turns(n_turns))
        if client is None:
            client = httpx.AsyncClient(timeout=120, event_hooks={"request": [record_size]})
        return Local(
            base_url=args.base_url,
            model=f"step-{n_turns - 1}",
            api_key="sk-bench",
            system_prompt="You are a benchmark agent. Call step until told to stop.",
            tools=tools,
            http_client=client,
        )

    async def session(n_turns: int, prepared: Any) -> Any:
        outcome = await run(
            prepared, handler=Handler(), prompt="Run the steps.", max_turns=n_turns + 10, timeout=None
        )
        if isinstance(outcome, Failure):
            raise SystemExit(f"{name}: the session failed: {outcome.failure()!r}")
        result = outcome.unwrap()
        if result.turns != n_turns or result.text != f"done after {n_turns - 1} steps":
            raise SystemExit(f"{name}: {result.turns} turns, text {result.text!r}")
        return result

    await session(20, provider(20))  # warm-up: imports, first-use caches, the connection
    stamps.clear()
    memory.clear()
    sizes.clear()
    prepared = provider(turns)
    gc.collect()
    if traced:
        tracemalloc.start()
    memory.append((0, measure_memory()))
    w0, c0 = time.perf_counter(), time.process_time()
    stamps.append((w0, c0))
    result = await session(turns, prepared)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    memory.append((len(stamps), measure_memory()))
    events = len(result.events)
    if traced:
        tracemalloc.stop()
    if client is not None:
        await client.aclose()
    return {
        "provider": name,
        "turns": turns,
        "traced": traced,
        "wall_s": wall,
        "cpu_s": cpu,
        "stamps": stamps,
        "memory": memory,
        "sizes": sizes,
        "result_events": events,
    }


# ── the driver ────────────────────────────────────────────────────────────────────────────


def run_worker(
    providers: list[str], backend: str, args: argparse.Namespace, server: ChatServer | None, traced: bool
) -> list[dict[str, Any]]:
    """Run ``providers`` one after the other in a fresh worker process, under ``backend``."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", ",".join(providers)]
    cmd += ["--turns", str(args.turns), "--backend", backend]
    if server is not None:
        cmd += ["--base-url", server.base_url]
    if traced:
        cmd.append("--tracemalloc")
    server_cpu = server_cpu_s(server)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"the {providers} worker failed:\n{done.stderr[-4000:]}")
    results: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    for result in results:
        result["backend"] = backend
        if result["provider"] == "local":  # the only one that talks to the server
            result["server_cpu_s"] = server_cpu_s(server) - server_cpu
    return results


def server_cpu_s(server: ChatServer | None) -> float:
    if server is None:
        return 0.0
    fields = Path(f"/proc/{server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def window_stats(result: dict[str, Any], first: bool, window: int) -> dict[str, float]:
    """Per-turn figures over the first or last ``window`` turns of the timed session."""
    stamps = result["stamps"]  # stamps[0] = the start; stamps[i] = the i-th tool call
    n = len(stamps) - 1
    lo, hi = (0, min(window, n)) if first else (max(0, n - window), n)
    walls = [(stamps[i + 1][0] - stamps[i][0]) * 1000 for i in range(lo, hi)]
    cpus = [(stamps[i + 1][1] - stamps[i][1]) * 1000 for i in range(lo, hi)]
    memory = [(calls, size) for calls, size in result["memory"] if lo <= calls <= hi]
    grown = (memory[-1][1] - memory[0][1]) / max(1, memory[-1][0] - memory[0][0]) if len(memory) > 1 else 0.0
    sizes = result["sizes"][lo:hi]
    return {
        "turns": f"{lo + 1}–{hi}",
        "wall_median_ms": statistics.median(walls),
        "wall_mean_ms": statistics.fmean(walls),
        "cpu_mean_ms": statistics.fmean(cpus),
        "bytes_per_turn": grown,
        "request_kib": statistics.fmean(sizes) / 1024 if sizes else 0.0,
    }


def report(results: dict[str, dict[str, Any]], window: int) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for provider, got in results.items():
        timed = got["timed"]
        first, last = window_stats(timed, True, window), window_stats(timed, False, window)
        row: dict[str, Any] = {
            "turns": timed["turns"],
            "wall_s": timed["wall_s"],
            "cpu_s": timed["cpu_s"],
            "first": first,
            "last": last,
            "ratio_wall_median": last["wall_median_ms"] / first["wall_median_ms"],
            "ratio_cpu": last["cpu_mean_ms"] / first["cpu_mean_ms"],
            "rss_per_turn": (timed["memory"][-1][1] - timed["memory"][0][1]) / timed["turns"],
            "result_events": timed["result_events"],
            "server_cpu_s": timed.get("server_cpu_s", 0.0),
        }
        if "traced" in got:
            traced = got["traced"]
            row["traced_first"] = window_stats(traced, True, window)["bytes_per_turn"]
            row["traced_last"] = window_stats(traced, False, window)["bytes_per_turn"]
            row["traced_per_turn"] = (traced["memory"][-1][1] - traced["memory"][0][1]) / traced["turns"]
        summary[provider] = row
        print(
            f"\n{provider}: {row['turns']:,} turns in {row['wall_s']:.1f} s "
            f"({row['wall_s'] / row['turns'] * 1000:.3f} ms/turn), client CPU {row['cpu_s']:.1f} s"
            + (f", server CPU {row['server_cpu_s']:.1f} s" if row["server_cpu_s"] else "")
            + "; "
            f"the result holds {row['result_events']:,} events"
        )
        print(
            f"  {'window':<13} {'wall ms/turn':>12} {'(mean)':>8} {'CPU ms/turn':>12} "
            f"{'RSS B/turn':>11} {'request KiB':>12}"
        )
        for label, w in (("first", first), ("last", last)):
            print(
                f"  {label + ' ' + w['turns']:<13} {w['wall_median_ms']:12.3f} {w['wall_mean_ms']:8.3f} "
                f"{w['cpu_mean_ms']:12.3f} {w['bytes_per_turn']:11.0f} {w['request_kib']:12.1f}"
            )
        line = (
            f"  last / first: wall {row['ratio_wall_median']:.2f}, CPU {row['ratio_cpu']:.2f}; "
            f"RSS growth {row['rss_per_turn']:.0f} B/turn over the session"
        )
        if "traced_per_turn" in row:
            line += (
                f"; traced heap {row['traced_per_turn']:.0f} B/turn "
                f"(first window {row['traced_first']:.0f}, last {row['traced_last']:.0f})"
            )
        print(line)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="CI smoke run: 500 turns, no figures to quote")
    parser.add_argument("--turns", type=int, help="turns in the session (default 10,000; 500 with --quick)")
    parser.add_argument("--window", type=int, help="turns per compared window (default 1,000; 100 quick)")
    parser.add_argument("--providers", default=",".join(PROVIDERS))
    parser.add_argument("--backends", default=",".join(BACKENDS), help="anyio backends, each its own worker")
    parser.add_argument("--no-tracemalloc", action="store_true", help="skip the tracemalloc runs")
    parser.add_argument("--json", help="write the summary here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--tracemalloc", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", choices=BACKENDS, default="trio", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.turns = args.turns or (500 if args.quick else 10_000)
    window = args.window or (100 if args.quick else 1_000)

    if args.worker:
        import anyio

        names = args.worker.split(",")
        print(json.dumps([anyio.run(worker, args, name, backend=args.backend) for name in names]))
        return 0

    providers = [p for p in args.providers.split(",") if p]
    for name in providers:
        if name not in PROVIDERS:
            raise SystemExit(f"unknown provider {name!r}; known: {', '.join(PROVIDERS)}")
    backends = [b for b in args.backends.split(",") if b]
    for name in backends:
        if name not in BACKENDS:
            raise SystemExit(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    print(f"machine: {machine()}; load average at start {load()}")
    from importlib.metadata import version

    print(
        f"versions: python {sys.version.split()[0]}, rma {version('rma-agents')}, trio {version('trio')}, "
        f"anyio {version('anyio')}, "
        f"httpx {version('httpx')}"
    )
    digest = source_digest()
    print(f"rma sources: {digest}")
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    server = ChatServer() if "local" in providers else None
    try:
        # --quick: one worker for both (a process start is a good part of a smoke run). Full: a
        # fresh process per provider, so that each one's memory figures are its own.
        batches = [providers] if args.quick else [[name] for name in providers]
        for backend in backends:
            for batch in batches:
                for got in run_worker(batch, backend, args, server, False):
                    results[f"{got['provider']} ({backend})"] = {"timed": got}
                if not args.quick and not args.no_tracemalloc:
                    for got in run_worker(batch, backend, args, server, True):
                        results[f"{got['provider']} ({backend})"]["traced"] = got
    finally:
        if server is not None:
            server.close()
    summary = report(results, window)
    if source_digest() != digest:
        print("\nWARNING: the rma sources changed during the run; the figures mix two versions")
    print(f"\nload average at end {load()}; {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"machine": machine(), "sources": digest, "results": summary}, indent=2)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
