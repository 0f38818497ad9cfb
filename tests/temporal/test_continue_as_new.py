"""Long sessions under Temporal: a workflow continues as new, and the session carries on.

A run continues as new once its history is long (``SessionSpec.max_history_events`` here, so
a test forces it often; Temporal's own suggestion otherwise), at a moment nothing is in flight.
What must survive each hop: the core's state (the result equals a plain ``run()``'s), a call
waiting for approval (approved after the hop, it runs once), every recorded tool result (each
tool-use id's effect once), a live session's follow-ups. Histories recorded before the change
replay unchanged.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from rma.codec_json import to_jsonable
from rma_shell import run
from rma_shell.providers.local import Local
from rma_shell.temporal import (
    DevServer,
    SessionSpec,
    SessionWorkflow,
    Timeouts,
    connect,
    session_worker,
    start_session,
)
from rma_shell.temporal.worker import PASSED_THROUGH
from rma_shell.testing import OpenAIEmulator
from tests.temporal import fleet

pytestmark = pytest.mark.timeout(300)

FAST = Timeouts(heartbeat=5.0, retry_initial=0.1)
HISTORIES = Path(__file__).parent / "histories"


def counting_model(turns: int, emu: list[OpenAIEmulator]) -> Any:
    """``charge`` once per turn (call ids ``c0``, ``c1`` …), then the answer at turn ``turns``;
    computed from the request, so a retried turn gets the same answer. The emulator's record
    of requests is dropped as it goes (a long conversation's bodies would fill memory)."""

    def reply(body: dict[str, Any]) -> dict[str, Any]:
        if emu:
            emu[0].requests.clear()
        answered = sum(1 for m in body["messages"] if m.get("role") == "tool")
        if answered >= turns - 1:
            return {"content": f"done after {answered} charges"}
        return {"tool_calls": [{"id": f"c{answered}", "name": "charge", "arguments": {"amount": answered}}]}

    return reply


class Ledger:
    """``charge``, its effects counted per idempotency key."""

    def __init__(self) -> None:
        self.effects: Counter[str] = Counter()

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object, info: Any) -> str:
        self.effects[info.idempotency_key] += 1
        return f"charged {input['amount']}"


class GatedLedger(Ledger):
    """A ``Ledger`` whose ``charge`` of an amount in ``approve`` waits for a person."""

    def __init__(self, approve: frozenset[int]) -> None:
        super().__init__()
        self.approve = approve

    def requires_approval(self, name: str, input: dict[str, Any], ctx: object) -> bool:
        return input.get("amount") in self.approve


def runner() -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    )


async def histories(client: Any, workflow_id: str) -> list[WorkflowHistory]:
    """Every run's history of one workflow id, oldest first."""
    runs = [w async for w in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    runs.sort(key=lambda w: w.start_time)
    return [await client.get_workflow_handle(workflow_id, run_id=w.run_id).fetch_history() for w in runs]


def test_a_history_recorded_before_continue_as_new_replays_unchanged() -> None:
    """Recorded by the workflow of before issue #28 (a timer per wait, whole snapshots)."""
    history = WorkflowHistory.from_json("pre28-local", (HISTORIES / "pre28_local.json").read_text())

    async def main() -> None:
        replayed = await Replayer(workflows=[SessionWorkflow], workflow_runner=runner()).replay_workflow(
            history
        )
        assert replayed.replay_failure is None

    asyncio.run(main())


@pytest.mark.parametrize(
    ("local", "every", "turns"),
    [(False, 60, 40), (False, 1, 8), (True, 1, 12), ("turns", 1, 10)],
    ids=[
        "every_60_events",
        "at_every_moment",
        "local_activities_at_every_moment",
        "local_turns_at_every_moment",
    ],
)
def test_the_result_after_many_hops_is_the_result_run_gives(
    temporal_server: DevServer, local: bool | str, every: int, turns: int
) -> None:
    """``every=1``: it continues at every moment it may — after each event fed — so each
    phase of a turn is carried across a hop at least once. (Local activities complete inside
    one workflow task, whose history grows only when the task completes: ``every=60`` would
    not hop in 40 turns.)"""

    async def main() -> None:
        emu_ref: list[OpenAIEmulator] = []
        with OpenAIEmulator([counting_model(turns, emu_ref)] * (2 * turns + 5)) as emu:
            emu_ref.append(emu)
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            plain = await run(provider, handler=Ledger(), prompt="go", max_turns=turns + 1)
            client = await connect(temporal_server.address)
            queue = f"q-{uuid.uuid4().hex[:8]}"
            ledger = Ledger()
            async with session_worker(
                client, task_queue=queue, providers={"local": provider}, handlers={"tools": ledger}
            ):
                spec = SessionSpec(
                    provider="local",
                    handler="tools",
                    prompt="go",
                    max_turns=turns + 1,
                    timeouts=FAST,
                    max_history_events=every,
                    local_activities=local,
                )
                handle = await start_session(client, spec, task_queue=queue)
                durable = await handle.result()
                runs = await histories(client, handle.id)
            await provider.close()
        assert durable.unwrap().turns == turns
        assert fleet.normalized(to_jsonable(durable)) == fleet.normalized(to_jsonable(plain))
        assert len(runs) >= (turns if every == 1 else 3)  # it did continue, many times
        assert sorted(ledger.effects.values()) == [1] * (turns - 1)
        for history in runs:  # each run replays
            replayed = await Replayer(workflows=[SessionWorkflow], workflow_runner=runner()).replay_workflow(
                history
            )
            assert replayed.replay_failure is None

    asyncio.run(main())


LONG_TURNS = 2000


def test_a_2000_turn_session_keeps_its_approvals_and_its_exactly_once_results(
    temporal_server: DevServer,
) -> None:
    """Two thousand turns (1,999 tool calls) on local activities, continuing as new every
    thousand history events; the call at turn 1,000 waits for a person on the way."""
    gated = 1000

    async def main() -> None:
        emu_ref: list[OpenAIEmulator] = []
        with OpenAIEmulator([counting_model(LONG_TURNS, emu_ref)] * (LONG_TURNS + 5)) as emu:
            emu_ref.append(emu)
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            client = await connect(temporal_server.address)
            queue = f"q-{uuid.uuid4().hex[:8]}"
            ledger = GatedLedger(frozenset({gated}))
            t0 = time.perf_counter()
            async with session_worker(
                client, task_queue=queue, providers={"local": provider}, handlers={"tools": ledger}
            ):
                spec = SessionSpec(
                    provider="local",
                    handler="tools",
                    prompt="go",
                    max_turns=LONG_TURNS + 1,
                    timeouts=FAST,
                    timeout=None,
                    max_history_events=1000,
                    local_activities=True,
                )
                handle = await start_session(client, spec, task_queue=queue)
                waiting = await until(handle, lambda s: s["awaiting_approval"], 600)
                assert [a["tool_use_id"] for a in waiting["awaiting_approval"]] == [f"c{gated}"]
                await handle.approve(f"c{gated}", "allow")
                outcome = await handle.result()
                runs = await histories(client, handle.id)
            elapsed = time.perf_counter() - t0
            await provider.close()
        result = outcome.unwrap()
        assert result.turns == LONG_TURNS
        assert result.text == f"done after {LONG_TURNS - 1} charges"
        assert [u.id for u in result.custom_tool_uses] == [f"c{i}" for i in range(LONG_TURNS - 1)]
        assert sorted(ledger.effects.values()) == [1] * (LONG_TURNS - 1)  # each call's effect once
        print(f"\n{LONG_TURNS} turns in {elapsed:.1f}s over {len(runs)} runs")
        assert len(runs) > 2

    asyncio.run(main())


async def until(handle: Any, predicate: Any, timeout_s: float) -> dict[str, Any]:
    async def poll() -> dict[str, Any]:
        while True:
            status: dict[str, Any] = await handle.status()
            if predicate(status):
                return status
            await asyncio.sleep(0.05)

    return await asyncio.wait_for(poll(), timeout_s)


@pytest.mark.parametrize(
    "local",
    [False, "turns", True, "fused"],
    ids=["activities", "local_turns", "local_activities", "fused_turns"],
)
def test_a_call_waiting_for_approval_waits_on_in_the_next_run(
    temporal_server: DevServer, local: bool | str
) -> None:
    """Hopping at every moment it may, the session hops right after the call asked for
    approval: the approval reaches a run that never asked, and the call runs once (with
    ``fused_turns``, the fused activity that asked it answers the call unanswered)."""
    turns, gated = 5, 2

    async def main() -> None:
        emu_ref: list[OpenAIEmulator] = []
        with OpenAIEmulator([counting_model(turns, emu_ref)] * (2 * turns + 5)) as emu:
            emu_ref.append(emu)
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            client = await connect(temporal_server.address)
            queue = f"q-{uuid.uuid4().hex[:8]}"
            ledger = GatedLedger(frozenset({gated}))
            async with session_worker(
                client, task_queue=queue, providers={"local": provider}, handlers={"tools": ledger}
            ):
                spec = SessionSpec(
                    provider="local",
                    handler="tools",
                    prompt="go",
                    max_turns=turns + 1,
                    timeouts=FAST,
                    timeout=None,
                    max_history_events=1,
                    local_activities=False if local == "fused" else local,
                    fused_turns=local == "fused",
                )
                handle = await start_session(client, spec, task_queue=queue)
                await until(handle, lambda s: s["awaiting_approval"], 60)
                await handle.approve(f"c{gated}", "allow")
                outcome = await handle.result()
                runs = await histories(client, handle.id)
            await provider.close()
        assert outcome.unwrap().turns == turns
        assert sorted(ledger.effects.values()) == [1] * (turns - 1)
        took = [
            h
            for h in runs
            if any(e.HasField("workflow_execution_update_accepted_event_attributes") for e in h.events)
        ]
        assert len(took) == 1  # the run that took the approval
        asked = [h for h in runs if any(b"needs_approval" in e.SerializeToString() for e in h.events)]
        assert len(asked) == 1 and asked[0] is not took[0]  # had not asked for it: it was carried

    asyncio.run(main())
