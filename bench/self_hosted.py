#!/usr/bin/env python3
"""Self-hosted Claude environments: the workspace toolset's cost per call beside the SDK's
reference toolset on the same calls, and how many sessions one worker serves.

- ``tools``: each call of ``CALLS`` made on ``rma_shell.workspace.Workspace`` and on
  ``anthropic.lib.tools.agent_toolset.beta_agent_toolset_20260401`` (same inputs, fresh
  directories), interleaved call by call; median wall time per call of each, and the ratio.
  Ours walks descriptors with ``O_NOFOLLOW`` and runs bash inside bubblewrap; the SDK resolves
  paths and runs bash unconfined. ``bash (first)`` is a fresh shell's first command (the
  sandbox's start-up), measured on new workspaces.
- ``sessions``: S sessions on the Claude emulator (in this process), each three tool turns
  (write, bash, read) and a final message, queued at once on one self-hosted environment and
  served by one ``Worker`` (``max_sessions=S``): wall time to serve them all, sessions per
  second, and the peak number served at once.

    python bench/self_hosted.py            # full: 200 calls per tool, S = 1, 8, 32
    python bench/self_hosted.py --quick    # CI smoke: 5 calls per tool, S = 2, no figures
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import httpx  # noqa: E402
from anthropic.lib.tools import ToolError  # noqa: E402
from anthropic.lib.tools._beta_functions import aclose_runnable_tool  # noqa: E402
from anthropic.lib.tools.agent_toolset import (  # noqa: E402
    AgentToolContext,
    beta_agent_toolset_20260401,
    beta_bash_tool,
)

from rma_shell.environments import Worker, WorkerEvent  # noqa: E402
from rma_shell.testing.claude import (  # noqa: E402
    DEFAULT_API_KEY,
    CMAEmulator,
    agent_message,
    agent_tool_use,
    idle_end_turn,
    idle_requires_action,
)
from rma_shell.workspace import Workspace  # noqa: E402

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("write", {"file_path": "src/pkg/mod.py", "content": "x = 1\n" * 200}),
    ("read", {"file_path": "src/pkg/mod.py"}),
    (
        "edit",
        {
            "file_path": "src/pkg/mod.py",
            "old_string": "x = 1\n",
            "new_string": "x = 2\n",
            "replace_all": True,
        },
    ),
    ("glob", {"pattern": "**/*.py"}),
    ("grep", {"pattern": "x = 2", "path": "src"}),
    ("bash", {"command": "echo hello"}),
]


def seed(d: Path) -> None:
    for i in range(50):
        (d / "src" / f"m{i}").mkdir(parents=True, exist_ok=True)
        (d / "src" / f"m{i}" / "a.py").write_text("y = 0\n" * 20)


async def bench_tools(n: int) -> dict[str, tuple[float, float]]:
    ours_dir, theirs_dir = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
    seed(ours_dir)
    seed(theirs_dir)
    ref = {t.name: t for t in beta_agent_toolset_20260401(AgentToolContext(workdir=str(theirs_dir)))}
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name, _ in CALLS}
    async with Workspace(ours_dir) as ws:
        try:
            for _ in range(n):
                for name, args in CALLS:
                    t0 = time.perf_counter()
                    await ws.call(name, args)
                    t1 = time.perf_counter()
                    with contextlib.suppress(ToolError):
                        await ref[name].call(args)
                    t2 = time.perf_counter()
                    times[name][0].append(t1 - t0)
                    times[name][1].append(t2 - t1)
        finally:
            await aclose_runnable_tool(ref["bash"])
    firsts: tuple[list[float], list[float]] = ([], [])
    for _ in range(max(3, n // 20)):
        d = Path(tempfile.mkdtemp())
        async with Workspace(d) as ws:
            t0 = time.perf_counter()
            await ws.call("bash", {"command": "echo hello"})
            firsts[0].append(time.perf_counter() - t0)
        fresh = beta_bash_tool(AgentToolContext(workdir=str(d)))
        try:
            t0 = time.perf_counter()
            await fresh.call({"command": "echo hello"})
            firsts[1].append(time.perf_counter() - t0)
        finally:
            await aclose_runnable_tool(fresh)
        shutil.rmtree(d)
    times["bash (first)"] = firsts
    shutil.rmtree(ours_dir)
    shutil.rmtree(theirs_dir)
    return {k: (statistics.median(a), statistics.median(b)) for k, (a, b) in times.items()}


SESSION_TURNS: list[Any] = [
    [agent_tool_use("write", {"file_path": "a.txt", "content": "hi\n"}), idle_requires_action()],
    [agent_tool_use("bash", {"command": "cat a.txt"}), idle_requires_action()],
    [agent_tool_use("read", {"file_path": "a.txt"}), idle_requires_action()],
    [agent_message("done"), idle_end_turn()],
]


def queue_sessions(base_url: str, count: int) -> tuple[str, list[str]]:
    """A self-hosted environment with ``count`` sessions, each sent its first message."""
    h = {
        "x-api-key": DEFAULT_API_KEY,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "managed-agents-2026-04-01",
    }
    env = httpx.post(
        f"{base_url}/v1/environments", json={"name": "b", "config": {"type": "self_hosted"}}, headers=h
    )
    agent = httpx.post(f"{base_url}/v1/agents", json={"name": "a", "model": "claude-sonnet-4-6"}, headers=h)
    env_id, agent_id = env.json()["id"], agent.json()["id"]
    sids = []
    for _ in range(count):
        body = {"agent": agent_id, "environment_id": env_id}
        sid = httpx.post(f"{base_url}/v1/sessions", json=body, headers=h).json()["id"]
        message = {"type": "user.message", "content": [{"type": "text", "text": "go"}]}
        httpx.post(f"{base_url}/v1/sessions/{sid}/events", json={"events": [message]}, headers=h)
        sids.append(sid)
    return env_id, sids


async def bench_sessions(count: int) -> tuple[float, int]:
    with CMAEmulator(script=SESSION_TURNS) as emu, tempfile.TemporaryDirectory() as root:
        env_id, sids = queue_sessions(emu.base_url, count)
        peak = 0
        served: list[WorkerEvent] = []

        def note(event: WorkerEvent) -> None:
            nonlocal peak
            served.append(event)
            peak = max(peak, len(worker.active))

        worker = Worker(
            environment_id=env_id,
            workspaces=root,
            api_key=DEFAULT_API_KEY,
            base_url=emu.base_url,
            block_ms=None,
            max_sessions=count,
            on_event=note,
        )
        t0 = time.perf_counter()
        async with worker:
            got = await worker.serve(max_items=count)
        elapsed = time.perf_counter() - t0
        assert got == count
        done = [e for e in served if e.kind == "ended" and e.ending is not None and e.ending.value == "done"]
        assert len(done) == count, [e.line() for e in served]
        for sid in sids:
            assert emu.history(sid)[-1]["stop_reason"] == {"type": "end_turn"}
    return elapsed, peak


async def main(quick: bool) -> None:
    tools = await bench_tools(5 if quick else 200)
    sizes = (2,) if quick else (1, 8, 32)
    sessions = {s: await bench_sessions(s) for s in sizes}
    if quick:
        print("self_hosted: ok (quick run, no figures)")
        return
    print("per call, median wall time (ms)      rma workspace   SDK reference   ratio")
    for name, (ours, theirs) in tools.items():
        print(
            f"  {name:<18}                 {ours * 1e3:10.3f}   {theirs * 1e3:13.3f}   {ours / theirs:5.2f}x"
        )
    print("sessions per worker (3 tool turns each, one sandboxed bash per session)")
    for s, (elapsed, peak) in sessions.items():
        print(f"  {s:3d} sessions: {elapsed:6.2f} s, {s / elapsed:6.1f} sessions/s, peak {peak} at once")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    anyio.run(main, parser.parse_args().quick, backend="trio")
