"""A worker SIGKILLed mid-tool or mid-turn is replaced by another, and nothing is lost or redone.

For each host against its emulator, on the real Temporal dev server: a session runs on worker
process A; at the chosen moment A is killed (SIGKILL, no shutdown) and worker B started. The
session must end with the very result an undisturbed run of the same script gets, the ledger
tool's effect applied once per tool-use id, no call whose completion Temporal recorded run
again, and the interrupted call retried with the same idempotency key and the next attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import pytest

from rma.codec_json import to_jsonable
from rma_shell.providers.agentcore.provider import new_runtime_session_id
from rma_shell.temporal import DevServer, SessionSpec, Timeouts, connect, run_session, start_session
from rma_shell.testing import AgentCoreEmulator, CMAEmulator, OpenAIEmulator
from tests.helpers import cma_agent_and_environment
from tests.temporal import fleet

pytestmark = pytest.mark.timeout(180)

FAST = Timeouts(heartbeat=1.0, retry_initial=0.1, retry_max=1.0)
"""A killed worker's activity is noticed within a second and retried at once."""


@contextlib.contextmanager
def host(name: str, gate: fleet.Gate) -> Iterator[tuple[dict[str, Any], Any, Any]]:
    """The emulator of ``name``: the worker config that points at it, per-run options, itself."""
    if name == "local":
        with OpenAIEmulator([fleet.openai_reply(gate)] * 500) as emu:
            yield {"local": emu.base_url}, dict, emu
    elif name == "cma":
        with CMAEmulator([fleet.cma_turn(gate)] * 4, api_key="sk-ant-test") as emu:
            ids = cma_agent_and_environment(emu, "sk-ant-test")
            yield {"cma": {"url": emu.base_url, "key": "sk-ant-test"}}, lambda: dict(ids), emu
    else:
        with AgentCoreEmulator([fleet.agentcore_turn(gate)] * 4) as emu:
            config = {"agentcore": {"arn": emu.harness_arn, "env": dict(emu.credentials_env())}}
            yield config, lambda: {"runtime_session_id": new_runtime_session_id()}, emu


def worker(
    tmp: Path, server: DevServer, queue: str, config: dict[str, Any], name: str
) -> fleet.WorkerProcess:
    body = {
        "address": server.address,
        "task_queue": queue,
        "db": str(tmp / "ledger.db"),
        "hold": str(tmp / "hold"),
        **config,
    }
    return fleet.WorkerProcess(body, tmp / f"worker-{name}.json")


async def _crash(
    server: DevServer,
    tmp: Path,
    host_name: str,
    moment: str,
    local: bool | Literal["turns"] = False,
    fused: bool = False,
) -> None:
    db, hold = tmp / "ledger.db", tmp / "hold"
    fleet.init_ledger(db)
    gate = fleet.Gate()
    queue = f"crash-{uuid.uuid4().hex[:8]}"
    with host(host_name, gate) as (config, opts, emu):
        a = worker(tmp, server, queue, config, "a")
        b: fleet.WorkerProcess | None = None
        try:
            client = await connect(server.address)

            def spec() -> SessionSpec:
                return SessionSpec(
                    provider=host_name,
                    handler="ledger",
                    prompt="Charge 1, then 2.",
                    provider_opts=opts(),
                    timeouts=FAST,
                    local_activities=local,
                    fused_turns=fused,
                )

            reference = await run_session(client, spec(), task_queue=queue, id=f"ref-{queue}")
            assert reference.unwrap().text == fleet.FINAL_TEXT

            if moment == "mid_tool":
                hold.touch()
            else:
                gate.arm(turn=0 if moment == "first_turn" else 2)
            wf = f"crashed-{queue}"
            # A local activity lives in its workflow task: a killed worker's task times out
            # (this bound) before another worker replays it and runs what was not recorded.
            bound = {"task_timeout": timedelta(seconds=3)} if local else {}
            handle = await start_session(client, spec(), task_queue=queue, id=wf, **bound)
            if moment == "mid_tool":  # the second call is running (held) on A
                await asyncio.to_thread(
                    fleet.wait_for, lambda: len(fleet.rows(db, "starts", wf)) == 2, 60, "c2"
                )
            else:  # the turn's request is at the host, A waiting for it
                assert await asyncio.to_thread(gate.reached.wait, 60)
            if moment == "first_turn":  # and the open recorded: A's task heartbeated meanwhile
                await _until_recorded(handle, "rma.open", 30)
            a.kill()
            hold.unlink(missing_ok=True)
            gate.release.set()
            b = worker(tmp, server, queue, config, "b")
            crashed = await handle.result()
            wire = _final_inputs(host_name, emu, crashed.unwrap().session_id, moment)
        finally:
            a.kill()
            if b is not None:
                b.stop()

    # The same result as the undisturbed run (host-assigned ids and times aside).
    assert fleet.normalized(to_jsonable(crashed)) == fleet.normalized(to_jsonable(reference))
    # One effect per tool-use id, each keyed "{workflow id}:{tool_use_id}".
    uses = [u.id for u in crashed.unwrap().custom_tool_uses]
    assert len(uses) == 2
    effects = fleet.rows(db, "effects", wf)
    starts = [(key.split(":", 1)[1], attempt) for key, attempt, _ in fleet.rows(db, "starts", wf)]
    finishes = [(key.split(":", 1)[1], attempt) for key, attempt, _ in fleet.rows(db, "finishes", wf)]
    first, second = uses
    if local is True and host_name == "cma":
        # The whole session, its open included, ran in one workflow task, which the kill lost:
        # B opened a new host session, whose model named its calls anew — new tool-use ids,
        # new keys. So each call of the session that finished was applied once, and the lost
        # session's calls had been applied too, under their own keys: what docs/temporal.md
        # says local activities cost when a re-asked turn names its calls anew.
        keys = [key for key, _, _ in effects]
        assert {f"{wf}:{u}" for u in uses} <= set(keys) and len(keys) == len(set(keys))
        assert all(attempt == 1 for _, attempt in starts)
        return
    assert sorted(key for key, _, _ in effects) == sorted(f"{wf}:{u}" for u in uses)
    assert sorted(amount for _, amount, _ in effects) == [1, 2]
    if local is True:
        # Local activities are recorded when their workflow task completes, which the kill
        # prevented: B ran again what A had run in that task — every call from attempt 1, the
        # same keys (the emulated model names the calls of a re-asked turn as before) — and
        # each effect still happened once. (The exact re-runs depend on where A's task ended;
        # what is pinned is the effect and the result.)
        assert {u for u, _ in finishes} == {first, second}
        assert all(attempt == 1 for _, attempt in starts)
        return
    if fused and moment == "mid_turn":
        # The last turn ran in one activity with c2 (fused_turns): that activity, retried on B,
        # ran c2 again — attempt 2, the same key, so its effect stayed once — then the turn.
        assert starts == [(first, 1), (second, 1), (second, 2)]
        assert finishes == [(first, 1), (second, 1), (second, 2)]
        assert {pid for _, _, pid in effects} == {a.pid}
        assert wire == (1 if host_name == "cma" else 2)
        return
    if moment == "mid_tool":
        # c1 completed on A and was recorded: never run again. c2 was cut short: retried on B
        # with the next attempt (the same key), and completed once.
        assert starts == [(first, 1), (second, 1), (second, 2)]
        assert finishes == [(first, 1), (second, 2)]
        assert {pid for _, _, pid in effects} == {a.pid, b.pid}
    else:
        # Both calls completed before the kill: the turn was retried, no tool was (with
        # local_activities="turns" too: the tools' regular activities were recorded; the
        # turn's local one ran again on B, from attempt 1).
        assert starts == [(first, 1), (second, 1)]
        assert finishes == [(first, 1), (second, 1)]
        # The interrupted turn: a request/response host got its request again (a model call is
        # at-least-once); Claude Managed Agents got the tool result once — the retried turn
        # found it in the session's history and only read the turn it started (a local turn
        # cannot know it is a retry: past the first boundary it always asks the host first).
        assert wire == (1 if host_name == "cma" else 2)


async def _until_recorded(handle: Any, activity_type: str, timeout_s: float) -> None:
    """Until the history holds the local activity ``activity_type``'s marker (a workflow task
    running a long local activity is completed — heartbeated — at 80% of its timeout)."""

    async def poll() -> None:
        while True:
            history = await handle.handle.fetch_history()
            if any(
                e.HasField("marker_recorded_event_attributes")
                and activity_type.encode() in e.SerializeToString()
                for e in history.events
            ):
                return
            await asyncio.sleep(0.1)

    await asyncio.wait_for(poll(), timeout_s)


def _final_inputs(host_name: str, emu: Any, session_id: str, moment: str = "mid_turn") -> int:
    """How many times the host received the input answering the second call (the kickoff, for
    a kill in the first turn: Claude Managed Agents only)."""
    if moment == "first_turn":
        assert host_name == "cma"
        return sum(1 for e in emu.history(session_id) if e["type"] == "user.message")
    if host_name == "local":
        return (
            sum(
                1
                for r in emu.requests
                if r.path.endswith("/chat/completions")
                and sum(1 for m in r.body["messages"] if m.get("role") == "tool") == 2
            )
            - 1
        )  # one emulator served both runs: the reference run's own request
    if host_name == "cma":
        return sum(1 for e in emu.history(session_id) if e["type"] == "user.custom_tool_result") - 1
    return sum(
        1
        for r in emu.requests
        if r.path.startswith("/harnesses/invoke")
        and r.headers.get("x-amzn-bedrock-agentcore-runtime-session-id") == session_id
        and "tooluse_c2" in str(r.body)
    )


@pytest.mark.parametrize("moment", ["mid_tool", "mid_turn"])
@pytest.mark.parametrize("host_name", ["local", "cma", "agentcore"])
def test_a_killed_worker_is_replaced_with_nothing_lost(
    temporal_server: DevServer, tmp_path: Path, host_name: str, moment: str
) -> None:
    asyncio.run(_crash(temporal_server, tmp_path, host_name, moment))


@pytest.mark.parametrize("moment", ["mid_tool", "mid_turn"])
@pytest.mark.parametrize("host_name", ["local", "cma"])
def test_a_killed_worker_is_replaced_on_local_activities(
    temporal_server: DevServer, tmp_path: Path, host_name: str, moment: str
) -> None:
    """``SessionSpec(local_activities=True)``: the same result and one effect per tool-use id;
    what the kill costs is re-running the calls of the workflow task that was lost — on Claude
    Managed Agents the open too: a new host session, whose calls have new ids, so the lost
    session's effects stay beside the new one's (the reason to prefer ``"turns"`` there)."""
    asyncio.run(_crash(temporal_server, tmp_path, host_name, moment, local=True))


@pytest.mark.parametrize("moment", ["mid_tool", "mid_turn"])
@pytest.mark.parametrize("host_name", ["local", "cma", "agentcore"])
def test_a_killed_worker_is_replaced_on_local_turns(
    temporal_server: DevServer, tmp_path: Path, host_name: str, moment: str
) -> None:
    """``SessionSpec(local_activities="turns")``: a tool call's worker killed mid-call is
    retried as a regular activity (attempt 2, the same key); a turn's worker killed mid-turn
    loses the workflow task, and the next worker asks the turn again — Claude Managed Agents
    without posting its input twice. The same result, one effect per tool-use id."""
    asyncio.run(_crash(temporal_server, tmp_path, host_name, moment, local="turns"))


@pytest.mark.parametrize("moment", ["mid_tool", "mid_turn"])
@pytest.mark.parametrize("host_name", ["local", "cma", "agentcore"])
def test_a_killed_worker_is_replaced_with_fused_turns(
    temporal_server: DevServer, tmp_path: Path, host_name: str, moment: str
) -> None:
    """``SessionSpec(fused_turns=True)``: c2 and the last turn are one activity. Killed in c2's
    body (mid-tool) or in that turn (mid-turn), the activity is retried on B: c2 runs again at
    attempt 2 with the same key — one effect — then the turn, as the default retries it
    (Claude's tool result posted once: the retried turn finds it in the session's history)."""
    asyncio.run(_crash(temporal_server, tmp_path, host_name, moment, fused=True))


def test_a_worker_killed_in_a_claude_session_s_first_local_turn_is_replaced_without_a_second_kickoff(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    """Killed once the session's open is recorded (A's workflow task heartbeated during the
    long first turn): the next worker continues that session, and with no turn boundary of
    it yet, its local turn lists the new session's history, finds the kickoff there and reads
    the turn it started instead of posting it again."""
    asyncio.run(_crash(temporal_server, tmp_path, "cma", "first_turn", local="turns"))


def test_a_worker_killed_in_a_reattached_claude_session_s_first_local_turn_posts_its_input_once(
    temporal_server: DevServer, tmp_path: Path
) -> None:
    """A session reattached to a host session that ran before (``session_id``) has no turn
    boundary of its own when its first local turn posts: the consolidation at the reattach says
    where the host stood (``Reconnected.boundary``), so the next worker, its local turn started
    again at attempt 1, lists the history from there, finds the input the killed one posted and
    reads that turn instead of posting the input a second time."""

    async def main() -> None:
        gate = fleet.Gate()
        fleet.init_ledger(tmp_path / "ledger.db")
        queue = f"crash-{uuid.uuid4().hex[:8]}"
        with host("cma", gate) as (config, opts, emu):
            a = worker(tmp_path, temporal_server, queue, config, "a")
            b: fleet.WorkerProcess | None = None
            try:
                client = await connect(temporal_server.address)
                first = await run_session(
                    client,
                    SessionSpec(provider="cma", handler="ledger", prompt="Charge 1, then 2.",
                                provider_opts=opts(), timeouts=FAST),
                    task_queue=queue,
                )  # fmt: skip
                sid = first.unwrap().session_id
                assert sid is not None
                gate.arm(turn=2)  # the reattached request's first turn: its answer, held at the host
                spec = SessionSpec(
                    provider="cma",
                    handler="ledger",
                    prompt="And the total?",
                    session_id=sid,
                    provider_opts=opts(),
                    timeouts=FAST,
                    local_activities="turns",
                )
                handle = await start_session(
                    client, spec, task_queue=queue, id=f"again-{queue}", task_timeout=timedelta(seconds=3)
                )
                assert await asyncio.to_thread(gate.reached.wait, 60)  # posted; A waits for the turn
                await _until_recorded(handle, "rma.resync", 30)  # the reattach's consolidation recorded
                a.kill()
                gate.release.set()
                b = worker(tmp_path, temporal_server, queue, config, "b")
                again = await handle.result()
            finally:
                a.kill()
                if b is not None:
                    b.stop()
            asked = [e for e in emu.history(sid) if e["type"] == "user.message"]
        assert again.unwrap().text == fleet.FINAL_TEXT
        assert len(asked) == 2  # the first request's kickoff, and this one's input once

    asyncio.run(main())
