"""The worker when things go wrong: a lost lease (the item is left to the queue and the next
worker carries the session on), a stop asked for (the session's work ends and the item is
stopped), heartbeats that fail for a while (it carries on) or for good (it gives the item
back), and a worker SIGKILLed mid-tool (its sandbox dies with it; the item is claimed again
once the lease runs out, and the session carries on)."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from rma_shell.environments import Ending, Worker, WorkerEvent
from rma_shell.testing.claude import (
    CMAEmulator,
    agent_message,
    agent_tool_use,
    idle_end_turn,
    idle_requires_action,
    status_once,
)
from tests.environments._setup import KEY, check_against_sdk, self_hosted, start_session
from tests.workspace._procs import gone, needs_bwrap, present

pytestmark = [pytest.mark.anyio, needs_bwrap]


def blocking_turns(marker: str) -> list[Any]:
    """A bash call that waits until the test creates ``go`` in the workspace, then a message."""
    wait = f"(exec -a {marker} bash -c 'while [ ! -f go ]; do sleep 0.02; done'); echo went"
    return [
        [agent_tool_use("bash", {"command": wait}), idle_requires_action()],
        [agent_message("done"), idle_end_turn()],
    ]


def make_worker(emu: CMAEmulator, env_id: str, root: Path, events: list[WorkerEvent], **kw: Any) -> Worker:
    return Worker(
        environment_id=env_id,
        workspaces=root,
        api_key=KEY,
        base_url=emu.base_url,
        block_ms=kw.pop("block_ms", None),
        heartbeat_interval=0.05,
        on_event=events.append,
        **kw,
    )


def _poll(check: Any) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, "the condition never came true"
        time.sleep(0.02)


async def until(check: Any) -> None:
    """Wait (in a thread, bounded) until ``check()`` is true: it reads /proc or the worker's events."""
    await anyio.to_thread.run_sync(_poll, check)


def ended(events: list[WorkerEvent]) -> list[Ending | None]:
    return [e.ending for e in events if e.kind == "ended"]


async def test_a_lost_lease_leaves_the_item_to_the_next_worker_which_carries_on(
    anyio_backend: Any, tmp_path: Path
) -> None:
    marker = f"rmamark{uuid.uuid4().hex[:10]}"
    with CMAEmulator(script=blocking_turns(marker)) as emu:
        agent_id, env_id = self_hosted(emu)
        sid = start_session(emu, agent_id, env_id)
        first: list[WorkerEvent] = []
        async with make_worker(emu, env_id, tmp_path, first) as w, anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(w.serve, drain=True))
            await until(lambda: present(marker, within=0))
            work = emu.work_for(sid)
            assert work is not None
            emu.expire_lease(work["id"])
        assert ended(first) == [Ending.LEASE_LOST]
        assert gone(marker)  # the tool in flight was killed with the session's work
        assert emu.work_for(sid)["state"] == "queued"  # type: ignore[index]  # not stopped by the loser
        (tmp_path / sid / "go").write_text("")
        second: list[WorkerEvent] = []
        async with make_worker(emu, env_id, tmp_path, second) as w:
            assert await w.serve(drain=True) == 1
        assert ended(second) == [Ending.DONE]
        results = [e for e in emu.history(sid) if e["type"] == "user.tool_result"]
        assert len(results) == 1 and results[0]["content"] == [{"type": "text", "text": "went\n"}]
        assert emu.work_for(sid)["state"] == "stopped"  # type: ignore[index]
        check_against_sdk(emu)


async def test_a_stop_asked_for_ends_the_sessions_work_and_stops_the_item(
    anyio_backend: Any, tmp_path: Path
) -> None:
    marker = f"rmamark{uuid.uuid4().hex[:10]}"
    with CMAEmulator(script=blocking_turns(marker)) as emu:
        agent_id, env_id = self_hosted(emu)
        sid = start_session(emu, agent_id, env_id)
        events: list[WorkerEvent] = []
        async with make_worker(emu, env_id, tmp_path, events) as w, anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(w.serve, drain=True))
            await until(lambda: present(marker, within=0))
            emu.request_stop(emu.work_for(sid)["id"])  # type: ignore[index]
        assert ended(events) == [Ending.STOPPED]
        assert gone(marker)
        assert emu.work_for(sid)["state"] == "stopped"  # type: ignore[index]
        assert not [e for e in emu.history(sid) if e["type"] in ("user.tool_result", "user.interrupt")]
        check_against_sdk(emu)


async def test_heartbeats_failing_for_a_while_do_not_end_the_work(anyio_backend: Any, tmp_path: Path) -> None:
    marker = f"rmamark{uuid.uuid4().hex[:10]}"
    with CMAEmulator(
        script=blocking_turns(marker), faults=[status_once(503, path="/heartbeat$", times=4)]
    ) as emu:
        agent_id, env_id = self_hosted(emu)
        sid = start_session(emu, agent_id, env_id)
        events: list[WorkerEvent] = []
        async with make_worker(emu, env_id, tmp_path, events) as w, anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(w.serve, drain=True))
            await until(lambda: present(marker, within=0))
            await until(lambda: any(e.kind == "heartbeat_failed" for e in events))
            (tmp_path / sid / "go").write_text("")
        assert ended(events) == [Ending.DONE]
        assert emu.work_for(sid)["state"] == "stopped"  # type: ignore[index]


async def test_a_heartbeat_refused_for_good_gives_the_item_back(anyio_backend: Any, tmp_path: Path) -> None:
    marker = f"rmamark{uuid.uuid4().hex[:10]}"
    with CMAEmulator(script=blocking_turns(marker), faults=[status_once(400, path="/heartbeat$")]) as emu:
        agent_id, env_id = self_hosted(emu)
        sid = start_session(emu, agent_id, env_id)
        events: list[WorkerEvent] = []
        async with make_worker(emu, env_id, tmp_path, events) as w:
            await w.serve(drain=True)
        assert ended(events) == [Ending.REJECTED]
        assert gone(marker)
        assert emu.work_for(sid)["state"] == "stopped"  # type: ignore[index]


_WORKER_PROCESS = textwrap.dedent(
    """
    import sys, anyio
    from rma_shell.environments import Worker

    async def main():
        async with Worker(environment_id=sys.argv[1], workspaces=sys.argv[2], api_key=sys.argv[3],
                          base_url=sys.argv[4], block_ms=None, heartbeat_interval=0.1,
                          journal=sys.argv[5] or None) as w:
            await w.serve(drain=True)

    anyio.run(main)
    """
)


@pytest.mark.parametrize("journaled", [False, True], ids=["plain", "journaled"])
def test_a_worker_sigkilled_mid_tool_loses_its_item_to_the_next_which_carries_the_session_on(
    tmp_path: Path, journaled: bool
) -> None:
    """With a shared journal the next worker resumes the dead one's journal key (its lease died
    with it); without, it reattaches to the session. Either way the session carries on."""
    journal = str(tmp_path / "journal.sqlite") if journaled else ""
    root = tmp_path / "ws"
    root.mkdir()
    marker = f"rmamark{uuid.uuid4().hex[:10]}"
    with CMAEmulator(script=blocking_turns(marker)) as emu:
        emu.work_lease_ttl = 1  # the dead worker's lease runs out after a second without heartbeats
        agent_id, env_id = self_hosted(emu)
        sid = start_session(emu, agent_id, env_id)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        child = subprocess.Popen(
            [sys.executable, "-c", _WORKER_PROCESS, env_id, str(root), KEY, emu.base_url, journal], env=env
        )
        try:
            assert present(marker)  # mid-tool
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        assert gone(marker)  # the sandbox died with the worker
        (root / sid / "go").write_text("")
        events: list[WorkerEvent] = []

        async def next_worker() -> int:
            async with make_worker(emu, env_id, root, events, block_ms=999, journal=journal or None) as w:
                return await w.serve(max_items=1)

        assert anyio.run(next_worker) == 1
        work = emu.work_for(sid)
        assert work is not None and work["state"] == "stopped"
        assert ended(events) == [Ending.DONE]
        results = [e for e in emu.history(sid) if e["type"] == "user.tool_result"]
        assert len(results) == 1 and results[0]["content"] == [{"type": "text", "text": "went\n"}]
        assert emu.history(sid)[-1]["stop_reason"] == {"type": "end_turn"}
        check_against_sdk(emu)
