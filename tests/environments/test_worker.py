"""The self-hosted worker against the emulator's work queue: it claims an item, answers the
session's built-in tool calls from a sandboxed workspace with ``user.tool_result``, heartbeats
while it holds the lease and stops the item when the session's turn ends — every request and
event checked against the SDK's types."""

from __future__ import annotations

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
)
from tests.environments._setup import KEY, check_against_sdk, self_hosted, start_session
from tests.workspace._procs import needs_bwrap

pytestmark = [pytest.mark.anyio, needs_bwrap]

CODING_TURNS: list[Any] = [
    [
        agent_tool_use("write", {"file_path": "hello.py", "content": "print('hi')\n"}),
        agent_tool_use("bash", {"command": "python3 hello.py || echo no-python; echo ok > out.txt"}),
        idle_requires_action(),
    ],
    [agent_tool_use("read", {"file_path": "out.txt"}), idle_requires_action()],
    [agent_message("done"), idle_end_turn()],
]


def worker(emu: CMAEmulator, env_id: str, root: Path, events: list[WorkerEvent], **kw: Any) -> Worker:
    return Worker(
        environment_id=env_id,
        workspaces=root,
        api_key=KEY,
        base_url=emu.base_url,
        block_ms=None,
        heartbeat_interval=0.05,
        on_event=events.append,
        **kw,
    )


async def test_the_worker_serves_a_session_and_stops_its_item(anyio_backend: Any, tmp_path: Path) -> None:
    with CMAEmulator(script=CODING_TURNS) as emu:
        agent_id, env_id = self_hosted(emu)
        sid = start_session(emu, agent_id, env_id)
        events: list[WorkerEvent] = []
        async with worker(emu, env_id, tmp_path, events) as w:
            assert await w.serve(drain=True) == 1
        history = emu.history(sid)
        results = [e for e in history if e["type"] == "user.tool_result"]
        assert [r["is_error"] for r in results] == [False, False, False]
        assert results[2]["content"] == [{"type": "text", "text": "ok\n"}]
        assert (
            history[-1]["type"] == "session.status_idle" and history[-1]["stop_reason"]["type"] == "end_turn"
        )
        assert emu.work_for(sid)["state"] == "stopped"  # type: ignore[index]
        counts = check_against_sdk(emu)
    assert counts["tool_results"] == 3 and counts["work"] == 1
    assert (tmp_path / sid / "hello.py").read_text() == "print('hi')\n"
    ended = [e for e in events if e.kind == "ended"]
    assert [e.ending for e in ended] == [Ending.DONE]
    assert "end_turn, 3 tool call(s)" in ended[0].line()


async def test_an_agent_serves_a_self_hosted_environment_through_its_worker(
    anyio_backend: Any, tmp_path: Path
) -> None:
    from rma_shell import Agent
    from rma_shell.providers.claude import ClaudeManagedAgents

    with CMAEmulator(script=CODING_TURNS) as emu:
        agent_id, env_id = self_hosted(emu)
        sid = start_session(emu, agent_id, env_id)
        host = ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={})
        events: list[WorkerEvent] = []
        try:
            agent = Agent(host=host, max_turns=10)
            async with agent.worker(
                environment_id=env_id, workspaces=tmp_path, block_ms=None, on_event=events.append
            ) as w:
                assert await w.serve(drain=True) == 1
        finally:
            await host.close()
        assert emu.work_for(sid)["state"] == "stopped"  # type: ignore[index]
    assert [e.ending for e in events if e.kind == "ended"] == [Ending.DONE]
    assert (tmp_path / sid / "out.txt").read_text() == "ok\n"


async def test_a_run_on_claude_self_hosted_answers_builtin_calls_from_its_workspace(
    anyio_backend: Any, tmp_path: Path
) -> None:
    """Without a worker: one run creates the session and serves its built-in calls itself."""
    from rma_shell import run
    from rma_shell.providers.claude.self_hosted import ClaudeSelfHosted
    from rma_shell.tools import Toolbox
    from rma_shell.workspace import Workspace

    with CMAEmulator(script=CODING_TURNS) as emu:
        agent_id, env_id = self_hosted(emu)
        host = ClaudeSelfHosted(api_key=KEY, base_url=emu.base_url, env={})
        try:
            async with Toolbox(Workspace(tmp_path)) as box:
                outcome = await run(host, handler=box, prompt="go", agent_id=agent_id, environment_id=env_id)
        finally:
            await host.close()
    result = outcome.unwrap()
    assert result.text == "done" and [u.name for u in result.custom_tool_uses] == ["write", "bash", "read"]
    assert (tmp_path / "out.txt").read_text() == "ok\n"


async def test_a_new_message_after_the_item_stopped_queues_new_work_that_the_worker_serves(
    anyio_backend: Any, tmp_path: Path
) -> None:
    import httpx

    from tests.environments._setup import HEADERS

    turns: list[Any] = [
        [agent_tool_use("write", {"file_path": "a.txt", "content": "1"}), idle_requires_action()],
        [agent_message("first done"), idle_end_turn()],
        [
            agent_tool_use("edit", {"file_path": "a.txt", "old_string": "1", "new_string": "2"}),
            idle_requires_action(),
        ],
        [agent_message("second done"), idle_end_turn()],
    ]
    with CMAEmulator(script=turns) as emu:
        agent_id, env_id = self_hosted(emu)
        sid = start_session(emu, agent_id, env_id)
        events: list[WorkerEvent] = []
        async with worker(emu, env_id, tmp_path, events) as w:
            assert await w.serve(drain=True) == 1
            assert await w.serve(drain=True) == 0  # nothing new: no work
            message = {"type": "user.message", "content": [{"type": "text", "text": "again"}]}
            await anyio.to_thread.run_sync(
                lambda: httpx.post(
                    f"{emu.base_url}/v1/sessions/{sid}/events", json={"events": [message]}, headers=HEADERS
                )
            )
            assert await w.serve(drain=True) == 1
        items = emu.work_items(env_id)
        check_against_sdk(emu)
    assert [i["state"] for i in items] == ["stopped", "stopped"]
    assert (tmp_path / sid / "a.txt").read_text() == "2"
    assert [e.ending for e in events if e.kind == "ended"] == [Ending.DONE, Ending.DONE]


async def test_an_item_whose_serving_crashes_is_stopped_and_the_worker_goes_on(
    anyio_backend: Any, tmp_path: Path
) -> None:
    with CMAEmulator(script=CODING_TURNS) as emu:
        agent_id, env_id = self_hosted(emu)
        sid = start_session(emu, agent_id, env_id)
        (tmp_path / sid).write_text("a file where the session's workspace directory should be")
        events: list[WorkerEvent] = []
        async with worker(emu, env_id, tmp_path, events) as w:
            assert await w.serve(drain=True) == 1
        assert emu.work_for(sid)["state"] == "stopped"  # type: ignore[index]
    (ended,) = [e for e in events if e.kind == "ended"]
    assert ended.ending is Ending.CRASHED and "FileExistsError" in ended.line()
