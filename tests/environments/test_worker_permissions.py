"""Permission asks on a self-hosted environment: a call the host marks ``evaluated_permission:
ask`` waits for the worker's approval policy (``confirm=``), or — with a journal and no policy —
becomes a durable pending approval that ``approve`` answers from another process; it is then
confirmed with ``user.tool_confirmation`` and only then run. A denied call never runs."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from rma.journal import AwaitingApproval
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

ASKING: list[Any] = [
    [
        agent_tool_use("write", {"file_path": "asked.txt", "content": "yes"}, evaluated_permission="ask"),
        idle_requires_action(),
    ],
    [agent_message("done"), idle_end_turn()],
]


def make_worker(emu: CMAEmulator, env_id: str, root: Path, events: list[WorkerEvent], **kw: Any) -> Worker:
    return Worker(
        environment_id=env_id,
        workspaces=root,
        api_key=KEY,
        base_url=emu.base_url,
        block_ms=None,
        heartbeat_interval=0.05,
        approval_poll=0.05,
        **{"on_event": events.append, **kw},
    )


def _exists(path: Path) -> bool:
    return path.exists()


def kinds(history: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in history if e["type"].startswith("user.") and e["type"] != "user.message"]


@pytest.mark.parametrize("verdict", [True, False])
async def test_the_approval_policy_decides_and_a_denied_call_never_runs(
    anyio_backend: Any, tmp_path: Path, verdict: bool
) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    def policy(name: str, input: dict[str, Any]) -> bool:
        asked.append((name, dict(input)))
        return verdict

    with CMAEmulator(script=ASKING) as emu:
        agent_id, env_id = self_hosted(emu)
        sid = start_session(emu, agent_id, env_id)
        events: list[WorkerEvent] = []
        async with make_worker(emu, env_id, tmp_path, events, confirm=policy) as w:
            assert await w.serve(drain=True) == 1
        history = emu.history(sid)
        counts = check_against_sdk(emu)
    assert asked == [("write", {"file_path": "asked.txt", "content": "yes"})]
    confirmation = next(e for e in history if e["type"] == "user.tool_confirmation")
    assert confirmation["result"] == ("allow" if verdict else "deny")
    if verdict:
        assert kinds(history) == ["user.tool_confirmation", "user.tool_result"]
        assert (tmp_path / sid / "asked.txt").read_text() == "yes"
    else:
        assert kinds(history) == ["user.tool_confirmation"]
        assert not (tmp_path / sid / "asked.txt").exists()
    assert counts["confirmations"] == 1
    assert [e.ending for e in events if e.kind == "ended"] == [Ending.DONE]


REPO = str(Path(__file__).resolve().parents[2])
_APPROVE = "import sys\nfrom rma_shell.resuming import approve\nprint(approve(*sys.argv[1:5]))"


async def test_without_a_policy_the_call_waits_durably_until_approved_from_another_process(
    anyio_backend: Any, tmp_path: Path
) -> None:
    journal = str(tmp_path / "journal.sqlite")
    root = tmp_path / "ws"
    root.mkdir()
    with CMAEmulator(script=ASKING) as emu:
        agent_id, env_id = self_hosted(emu)
        sid = start_session(emu, agent_id, env_id)
        events: list[WorkerEvent] = []
        paused = anyio.Event()

        def note(event: WorkerEvent) -> None:
            events.append(event)
            if event.kind == "awaiting_approval":
                paused.set()

        w = make_worker(emu, env_id, root, [], journal=journal, on_event=note)
        async with w, anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(w.serve, drain=True))
            with anyio.fail_after(30):
                await paused.wait()
            waiting = next(e.outcome for e in events if e.kind == "awaiting_approval")
            assert isinstance(waiting, AwaitingApproval) and waiting.waiting[0].host_confirmation
            assert not _exists(root / sid / "asked.txt")  # nothing ran while it waited
            env = {**os.environ, "PYTHONPATH": REPO}
            args = [journal, waiting.key, waiting.waiting[0].tool_use_id, "allow"]
            done = await anyio.run_process([sys.executable, "-c", _APPROVE, *args], env=env)
            assert b"Success" in done.stdout
        history = emu.history(sid)
        check_against_sdk(emu)
    assert kinds(history) == ["user.tool_confirmation", "user.tool_result"], [e.line() for e in events]
    assert (root / sid / "asked.txt").read_text() == "yes"
    assert [e.ending for e in events if e.kind == "ended"] == [Ending.DONE]
