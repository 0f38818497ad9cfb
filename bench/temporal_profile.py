#!/usr/bin/env python3
"""Where an rma Temporal worker's CPU goes per turn: a sampling profile of its whole process.

The worker of ``bench/temporal_peers.py`` (``_temporal_peers_worker.py rma``: the same loop,
provider and tool) runs in its own process against a dev server and the loopback OpenAI
emulator; after one warm-up session, ``--sessions`` sessions run one at a time under
``py-spy record --gil`` (the thread holding the GIL at each sample: the event loop running the
activities, or a workflow task thread; the Rust core's own threads are not seen, so the
sampled time per turn is at or below the process's CPU). Each sample is put in one category
by the frame nearest its leaf that names one: Temporal's Python SDK and its core bridge, the
workflow sandbox, the data converter, JSON, rma's core ``step``, rma's workflow and activity
code, the provider's HTTP turn, the tool, the event loop. Reported: each category's share and
ms per turn, the hottest leaf frames, and (from ``/proc``) the worker's CPU per turn. Not
reported: a CPU figure to compare with the peers (the sampler costs CPU itself: use
``bench/temporal_peers.py`` for that).

Needs ``py-spy`` on PATH (or ``--py-spy``), and the venv ``bench/temporal_peers.py`` uses::

    python bench/temporal_profile.py --mode false --sessions 20      # SessionSpec(local_activities=False)
    python bench/temporal_profile.py --mode turns --top 40           # and the 40 hottest leaf frames
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from temporal_peers import PROMPT, Worker, cpu_s, scripted  # noqa: E402

from rma_shell.temporal import DevServer, SessionSpec, Timeouts, connect, start_session  # noqa: E402
from rma_shell.testing import OpenAIEmulator  # noqa: E402

# (category, substrings of a py-spy frame, "function (path/file.py:line)"); the frame nearest the
# leaf that matches any category decides, the first category listed for that frame.
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("zlib", ("zlib",)),
    ("json (encode/decode)", ("json/encoder", "json/decoder", "json/__init__", " (rma/codec_json")),
    ("rma: snapshot delta and conn cache", ("temporal/carry.py", "temporal/conns.py")),
    ("rma: activity prepare (spec, run options)", ("_prepare", "prepare_driver", "run_options", "spec.py")),
    ("rma: core step (in the workflow)", (" (rma/session/", " (rma/providers/", " (rma/_persistent")),
    (
        "rma: provider turn (HTTP)",
        ("rma_shell/providers/", "rma_shell/transport/", "httpx", "h11"),
    ),
    ("rma: tool call", ("rma_shell/handler", "rma_shell/tools", "_temporal_peers_worker")),
    ("rma: workflow code", ("temporal/workflow.py",)),
    ("rma: activities code", ("temporal/activities.py", "temporal/streaming.py")),
    ("temporal: data converter", ("temporalio/converter", "google/protobuf", "_pb2")),
    ("temporal: workflow sandbox and activation", ("temporalio/worker/_workflow", "workflow_sandbox")),
    ("temporal: activity worker", ("temporalio/worker/_activity",)),
    ("temporal: other SDK", ("temporalio/",)),
    ("asyncio / anyio event loop", ("asyncio/", "anyio/", "selectors", "sniffio")),
]


def category(stack: list[str]) -> str:
    for frame in reversed(stack):
        for name, needles in CATEGORIES:
            if any(n in frame for n in needles):
                return name
    return "other (threads, interpreter)"


async def main(args: argparse.Namespace) -> dict[str, Any]:
    py_spy = args.py_spy or shutil.which("py-spy")
    if py_spy is None:
        raise SystemExit("py-spy not found: pip install py-spy, or give --py-spy")
    mode: bool | str = {"false": False, "turns": "turns", "true": True}[args.mode]
    emu_ref: list[OpenAIEmulator] = []
    out = Path(tempfile.mkdtemp()) / "profile.txt"
    with DevServer() as server, OpenAIEmulator([scripted(args.turns, emu_ref)] * 10_000) as emu:
        emu_ref.append(emu)
        queue = f"profile-{uuid.uuid4().hex[:6]}"
        worker = Worker("rma", server.address, queue, emu.base_url)
        try:
            client = await connect(server.address)

            async def one() -> None:
                spec = SessionSpec(
                    provider="local",
                    handler="tools",
                    prompt=PROMPT,
                    max_turns=args.turns + 1,
                    timeouts=Timeouts(heartbeat=10.0),
                    local_activities=mode,
                )
                handle = await start_session(client, spec, task_queue=queue)
                assert (await handle.result()).unwrap().turns == args.turns

            await one()  # warm: imports, sandbox, sticky cache
            spy = await asyncio.create_subprocess_exec(
                *(py_spy, "record", "-p", str(worker.proc.pid), "-f", "raw", "-o", str(out)),
                *("-r", str(args.rate), "--threads", "--gil", "--nonblocking"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            await asyncio.sleep(1.0)  # py-spy attaches
            w0, t0 = cpu_s(worker.proc.pid), time.perf_counter()
            for _ in range(args.sessions):
                await one()
            w1, t1 = cpu_s(worker.proc.pid), time.perf_counter()
            spy.send_signal(signal.SIGINT)
            await asyncio.wait_for(spy.wait(), 60)
        finally:
            worker.stop()
    busy: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    for line in out.read_text().splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        count = int(count_text)
        stack = stack_text.split(";")
        busy[category(stack)] += count
        leaves[stack[-1]] += count
    total = sum(busy.values())
    n = args.sessions * args.turns
    return {
        "mode": args.mode,
        "turns": n,
        "worker_cpu_ms_per_turn": round((w1 - w0) / n * 1000, 2),
        "wall_ms_per_turn": round((t1 - t0) / n * 1000, 2),
        "busy_samples": total,
        "busy_ms_per_turn_sampled": round(total / args.rate / n * 1000, 2),
        "share_of_busy": {k: round(v / total, 3) for k, v in busy.most_common()},
        "ms_per_turn": {k: round(v / args.rate / n * 1000, 2) for k, v in busy.most_common()},
        "hottest_leaves": {k: round(v / total, 3) for k, v in leaves.most_common(args.top)},
        "load_average": os.getloadavg(),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=("false", "turns", "true"), default="false")
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--rate", type=int, default=500, help="samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--py-spy", default=None)
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))
