"""Many concurrent sessions on one ``Local`` provider: the ``--local`` case of ``bench/scale.py``.

One loopback OpenAI-compatible server process (``bench/_chat_server.py --latency-ms 500``,
one thread per connection) answers each request after 0.5 s — one tool call, then a final
text — so every session is a **two-turn** conversation (two chat-completions
requests). For each size K a fresh worker process builds **one** ``Local`` provider — its own
HTTP client, built on first use and shared by every session, exactly as documented — and
starts K ``rma_shell.run`` calls at once under trio. It reports the wall time until the last
one finishes (or how many had finished when ``--local-deadline`` ran out), the p50/p99 of a
session's own duration, the worker's CPU time, and the server's request and connection counts
(checked: exactly 2 K requests).

    python bench/scale.py --local                    # 100, 400, 700 and 1,000 sessions
    python bench/scale.py --quick                    # also runs the 1,000-session case
    python bench/scale.py --local --sizes 1000,2000  # other sizes
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from local_loop import STEP_DESCRIPTION, STEP_SCHEMA, SYSTEM, ChatServer  # noqa: E402

LATENCY_MS = 500.0
"""Each answer waits this long, as a model would: the server is slower than the client, so
requests queue in the client (with an instant server they hardly do)."""


class SlowChatServer(ChatServer):
    """``bench/_chat_server.py`` with a per-request latency."""

    def __init__(self, latency_ms: float) -> None:
        super().__init__("--latency-ms", str(latency_ms))


LOCAL_SIZES = (100, 400, 700, 1_000)
LOCAL_QUICK_SIZES = (1_000,)
TURNS = 2  # one tool call, then the final answer


async def local_worker(k: int, base_url: str, deadline_s: float) -> dict[str, Any]:
    """K concurrent two-turn sessions on one provider; what finished within ``deadline_s``."""
    import anyio

    from rma_shell import Failure, run
    from rma_shell.providers.local import Local

    class Handler:
        async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            return f"step {input.get('n')} done"

    tools = [{"name": "step", "description": STEP_DESCRIPTION, "input_schema": STEP_SCHEMA}]
    provider = Local(base_url=base_url, model="step-1", api_key="sk-bench", system_prompt=SYSTEM, tools=tools)
    handler = Handler()
    durations: list[float] = []
    failures: list[str] = []

    async def one() -> None:
        t0 = time.perf_counter()
        got = await run(provider, handler=handler, prompt="Run the step.", max_turns=10, timeout=deadline_s)
        if isinstance(got, Failure):
            failures.append(got.failure().kind)
        elif got.unwrap().turns != TURNS:
            failures.append(f"turns={got.unwrap().turns}")
        else:
            durations.append(time.perf_counter() - t0)

    await one()  # warm-up: the client, the first connection, imports
    durations.clear()
    cpu0, t0 = time.process_time(), time.perf_counter()
    with anyio.move_on_after(deadline_s):
        async with anyio.create_task_group() as tg:
            for _ in range(k):
                tg.start_soon(one)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    await provider.close()
    ordered = sorted(durations)

    def pct(q: float) -> float | None:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] if ordered else None

    return {
        "sessions": k,
        "completed": len(durations),
        "failed": len(failures),
        "failure_kinds": sorted(set(failures)),
        "wall_s": wall,
        "cpu_s": cpu,
        "p50_s": pct(0.50),
        "p99_s": pct(0.99),
    }


def run_local_worker(server: ChatServer, k: int, deadline_s: float) -> dict[str, Any]:
    before = server.stats()
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        str(k),
        server.base_url,
        str(deadline_s),
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=deadline_s + 120)
    except subprocess.TimeoutExpired:
        return {"sessions": k, "error": "the worker did not exit"}
    if done.returncode != 0:
        return {"sessions": k, "error": done.stderr[-2000:]}
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    after = server.stats()
    row["requests"] = after["requests"] - before["requests"] - TURNS  # minus the warm-up run
    row["connections"] = after["connections"] - before["connections"]
    if row["completed"] == k and row["requests"] != TURNS * k:
        row["error"] = f"{row['requests']} requests, expected {TURNS * k}"
    return row


def main_local(
    sizes: tuple[int, ...] | None, quick: bool, deadline_s: float, latency_ms: float = LATENCY_MS
) -> list[dict[str, Any]]:
    chosen = sizes or (LOCAL_QUICK_SIZES if quick else LOCAL_SIZES)
    print(f"  server latency {latency_ms:g} ms per answer", flush=True)
    server = SlowChatServer(latency_ms)
    rows = []
    try:
        for k in chosen:
            row = run_local_worker(server, k, deadline_s)
            rows.append(row)
            print(f"  local {k} sessions: {format_row(row)}", flush=True)
    finally:
        server.close()
    return rows


def format_row(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"ERROR {row['error']}"
    p50, p99 = row["p50_s"], row["p99_s"]
    return (
        f"{row['completed']}/{row['sessions']} done in {row['wall_s']:.2f} s wall, "
        f"{row['cpu_s']:.2f} s CPU, session p50 {p50 if p50 is None else f'{p50:.2f}'} s "
        f"p99 {p99 if p99 is None else f'{p99:.2f}'} s, {row['requests']} requests over "
        f"{row['connections']} connections, {row['failed']} failed {row['failure_kinds']}"
    )


if __name__ == "__main__":
    import trio

    size, url, deadline = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    print(json.dumps(trio.run(local_worker, size, url, deadline)))
