#!/usr/bin/env python3
"""rma's Temporal workflow beside the peers' Temporal integrations, on the same loop and server.

One scripted tool loop — ``--turns`` model calls: ``charge`` 0, 1, … then the answer, computed
from the request (how many tool results it carries) — run through four paths, each on its
own worker process, against one Temporal dev server and one loopback OpenAI emulator (Chat
Completions) in this process:

- ``rma``: ``run_session`` on ``session_worker`` (a turn and each tool call an activity);
- ``rma_turns_local``: the same with ``SessionSpec(local_activities="turns")`` (the model's
  turns local activities, each tool call a regular one: the shape of ``openai_agents_local``);
- ``rma_local``: the same with ``SessionSpec(local_activities=True)`` (every step local);
- ``rma_fused``: the same with ``SessionSpec(fused_turns=True)`` (a tool batch and the turn
  after it one regular activity: the kickoff turn, then one activity per turn);
- ``openai_agents``: the OpenAI Agents SDK's ``temporalio.contrib.openai_agents`` (the model
  call an activity, the tool ``activity_as_tool``);
- ``openai_agents_local``: the same with ``ModelActivityParameters(use_local_activity=True)``
  (the model call a local activity; the tool stays an activity: it has no local option);
- ``pydantic_ai``: Pydantic AI's ``pydantic_ai.durable_exec.temporal`` (``TemporalAgent``: the
  model request an activity, the function tool an activity).

Per round, for each path in turn (the order rotates per round, so drift hits all alike): start
its worker, warm it with one session, run ``--sessions`` sessions one at a time, then
``--concurrent`` at once. Reported per path (median over rounds): the worker process's CPU,
the server's CPU and the wall time per turn of the one-at-a-time sessions, and the concurrent
batch's turns per second on its one worker; ratios of rma's paths to the peers (rma's default
to the peers' defaults, turns-local to the Agents SDK's local model calls, and every path to the
cheapest peer). CPU is read from ``/proc`` (user + system, all threads). The client (this
process) and the emulator are outside both figures.

What a turn asks of the server, counted from a finished session's history (``fetch_history``,
one per path and round; the counts are the same every round): regular activities (each one
activity task: scheduled, started, completed), local-activity markers (recorded with their
workflow task's completion), workflow tasks (each a poll and a completion by the worker),
history events and their bytes — per turn, and per session in ``history``.

Needs the ``bench`` extra and ``temporalio-openai-agents`` in a venv of its own (the extra
upgrades packages the main venv pins; ``temporalio-openai-agents`` 1.1.0 declares
``openai-agents<0.23`` but runs on the extra's 0.24.0, hence ``--no-deps``)::

    python3 -m venv /tmp/peers && /tmp/peers/bin/pip install -e ".[dev,temporal,bench]"
    /tmp/peers/bin/pip install --no-deps temporalio-openai-agents==1.1.0

    /tmp/peers/bin/python bench/temporal_peers.py            # 3 rounds: 10 sessions of 6 turns, 20 at once
    /tmp/peers/bin/python bench/temporal_peers.py --quick    # 1 round: 3 sessions, 5 at once
    # docs/benchmarks.md's figures: --sessions 5 --concurrent 10 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from rma_shell.temporal import DevServer, SessionSpec, Timeouts, connect, start_session  # noqa: E402
from rma_shell.testing import OpenAIEmulator  # noqa: E402

PATHS = (
    "rma",
    "rma_turns_local",
    "rma_local",
    "rma_fused",
    "openai_agents",
    "openai_agents_local",
    "pydantic_ai",
)
LOCAL = {"rma": False, "rma_turns_local": "turns", "rma_local": True, "rma_fused": False}
"""Each rma path's ``SessionSpec.local_activities`` (``rma_fused``: with ``fused_turns``)."""
PEERS = ("openai_agents", "openai_agents_local", "pydantic_ai")
LA_MARKER = "core_local_activity"  # the marker a local activity's result is recorded under
PROMPT = "Charge 0, 1, … then say done."


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scripted(turns: int, emu: list[OpenAIEmulator]) -> Any:
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        if emu and len(emu[0].requests) > 100:
            emu[0].requests.clear()  # the bodies would fill memory over a long run
        answered = sum(1 for m in body["messages"] if m.get("role") == "tool")
        if answered >= turns - 1:
            return {"content": "done"}
        return {
            "tool_calls": [{"id": f"call_{answered}", "name": "charge", "arguments": {"amount": answered}}]
        }

    return reply


class Worker:
    def __init__(self, path: str, address: str, queue: str, base_url: str) -> None:
        kind = "rma" if path.startswith("rma") else path
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "_temporal_peers_worker.py"), kind, address, queue, base_url],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.log.seek(0)
            tail = self.log.read().decode()[-3000:]
            self.stop()
            raise RuntimeError(f"{path} worker did not start:\n{tail}")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()


async def one(client: Any, path: str, queue: str, turns: int) -> str:
    """Run one session of ``path``; its workflow id."""
    wid = f"{path}-{uuid.uuid4().hex[:10]}"
    if path.startswith("rma"):
        spec = SessionSpec(
            provider="local",
            handler="tools",
            prompt=PROMPT,
            max_turns=turns + 1,
            timeouts=Timeouts(heartbeat=10.0),
            local_activities=LOCAL[path],
            fused_turns=path == "rma_fused",
        )
        handle = await start_session(client, spec, task_queue=queue, id=wid)
        out = await handle.result()
        assert out.unwrap().turns == turns, out
        return wid
    workflow = "AgentsWorkflow" if path.startswith("openai_agents") else "PydanticWorkflow"
    text = await client.execute_workflow(workflow, PROMPT, id=wid, task_queue=queue)
    assert "done" in text, text
    return wid


async def history_counts(client: Any, wid: str) -> dict[str, int]:
    """What one finished session's history holds: see the module docstring."""
    from temporalio.api.enums.v1 import EventType

    history = await client.get_workflow_handle(wid).fetch_history()
    kinds = [e.event_type for e in history.events]
    return {
        "activities": kinds.count(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED),
        "local_activity_markers": sum(
            1
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
            and e.marker_recorded_event_attributes.marker_name == LA_MARKER
        ),
        "workflow_tasks": kinds.count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
        "events": len(kinds),
        "bytes": sum(e.ByteSize() for e in history.events),
    }


async def measure(
    server: DevServer, base_url: str, path: str, sessions: int, concurrent: int, turns: int
) -> tuple[dict[str, float], dict[str, int]]:
    queue = f"{path}-{uuid.uuid4().hex[:6]}"
    worker = Worker(path, server.address, queue, base_url)
    assert server._process is not None
    spid = server._process.pid
    try:
        client = await connect(server.address)
        await one(client, path, queue, turns)  # warm: imports, sandbox, sticky cache
        w0, s0, t0 = cpu_s(worker.proc.pid), cpu_s(spid), time.perf_counter()
        for _ in range(sessions):
            wid = await one(client, path, queue, turns)
        w1, s1, t1 = cpu_s(worker.proc.pid), cpu_s(spid), time.perf_counter()
        await asyncio.gather(*(one(client, path, queue, turns) for _ in range(concurrent)))
        t2 = time.perf_counter()
        counts = await history_counts(client, wid)  # after the CPU figures: not in them
    finally:
        worker.stop()
    n = sessions * turns
    return {
        "worker_cpu_ms": (w1 - w0) / n * 1000,
        "server_cpu_ms": (s1 - s0) / n * 1000,
        "wall_ms": (t1 - t0) / n * 1000,
        "turns_per_s": concurrent * turns / (t2 - t1),
    }, counts


async def main(args: argparse.Namespace) -> dict[str, Any]:
    samples: dict[str, list[dict[str, float]]] = {p: [] for p in args.paths}
    history: dict[str, dict[str, int]] = {}
    emu_ref: list[OpenAIEmulator] = []
    calls = args.rounds * len(args.paths) * (args.sessions + args.concurrent + 1) * args.turns + 10
    with (
        DevServer() as server,
        OpenAIEmulator([scripted(args.turns, emu_ref)] * calls) as emu,
    ):
        emu_ref.append(emu)
        for r in range(args.rounds):
            order = list(args.paths[r % len(args.paths) :]) + list(args.paths[: r % len(args.paths)])
            for path in order:
                got, counts = await measure(
                    server, emu.base_url, path, args.sessions, args.concurrent, args.turns
                )
                samples[path].append(got)
                history[path] = counts
                print(
                    f"round {r + 1} {path}: " + ", ".join(f"{k} {v:.2f}" for k, v in got.items()), flush=True
                )
    med = {p: {k: statistics.median(s[k] for s in v) for k in v[0]} for p, v in samples.items() if v}
    for m in med.values():
        m["worker_plus_server_cpu_ms"] = m["worker_cpu_ms"] + m["server_cpu_ms"]
    return {
        "turns": args.turns,
        "sessions": args.sessions,
        "concurrent": args.concurrent,
        "rounds": args.rounds,
        "per_turn": {p: {k: round(v, 2) for k, v in m.items()} for p, m in med.items()},
        "cpu_ratio_worker_plus_server": ratios(med),
        "history_per_turn": {
            p: {k: round(v / args.turns, 2) for k, v in c.items()} for p, c in history.items()
        },
        "history_per_session": history,
        "load_average": os.getloadavg(),
    }


def ratios(med: dict[str, dict[str, float]]) -> dict[str, float]:
    """rma's worker + server CPU per turn over the peers': like for like, and the cheapest."""
    cpu = {p: m["worker_plus_server_cpu_ms"] for p, m in med.items()}
    pairs = [
        ("rma", "openai_agents"),
        ("rma", "pydantic_ai"),
        ("rma_turns_local", "openai_agents_local"),
        ("rma_local", "openai_agents"),
        ("rma_local", "pydantic_ai"),
        ("rma_local", "openai_agents_local"),
        ("rma_fused", "openai_agents"),
        ("rma_fused", "pydantic_ai"),
        ("rma_fused", "openai_agents_local"),
    ]
    peers = [p for p in PEERS if p in cpu]
    if peers:
        cheapest = min(peers, key=cpu.__getitem__)
        pairs += [(p, cheapest) for p in LOCAL if p in cpu]
    known = [(a, b) for a, b in dict.fromkeys(pairs) if a in cpu and b in cpu]
    return {f"{a}_vs_{b}": round(cpu[a] / cpu[b], 3) for a, b in known}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--concurrent", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    parser.add_argument("--quick", action="store_true")
    parsed = parser.parse_args()
    if parsed.quick:
        parsed.sessions, parsed.concurrent, parsed.rounds = 3, 5, 1
    print(json.dumps(asyncio.run(main(parsed)), indent=2))
