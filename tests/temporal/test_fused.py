"""``SessionSpec(fused_turns=True)``: a tool batch and the turn after it as one activity.

Through the public API on the real dev server (one in-process worker): the same result as
``run()`` on every host, with the activity count the docs claim (counted in the fetched
history); the steps that must not be fused — a call waiting for approval, an at-most-once
tool, the terminal tool, a Claude permission ask, a ``max_turns`` that ends the session —
behave as without it; a session continuing as new at every moment it may carries on across
fused steps; a turn run ahead that is not the machine's next turn is asked again (Local) or
fails typed (a host that keeps its conversation). The worker-kill cases are in
``test_crash.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from rma.codec_json import to_jsonable
from rma.errors import InvalidOpts, MaxTurnsExceeded, ProviderError
from rma_shell import run
from rma_shell.providers.agentcore import BedrockAgentCore, new_runtime_session_id
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.temporal import DevServer, SessionSpec, SessionWorkflow, run_session, start_session
from rma_shell.testing import AgentCoreEmulator, CMAEmulator, OpenAIEmulator
from tests.helpers import cma_agent_and_environment
from tests.temporal import fleet
from tests.temporal.test_continue_as_new import histories, runner
from tests.temporal.test_workflow import FAST, Tools, _until, worker

pytestmark = pytest.mark.timeout(180)


def spec(provider: str = "local", **options: Any) -> SessionSpec:
    options.setdefault("prompt", "Charge 1, then 2.")
    options.setdefault("fused_turns", True)
    return SessionSpec(provider=provider, handler="tools", timeouts=FAST, **options)


def scheduled(history: WorkflowHistory) -> list[str]:
    """The regular activities a history scheduled, in order (local ones are markers)."""
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


def workflow_tasks(history: WorkflowHistory) -> int:
    return sum(1 for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)


async def _replays(history: WorkflowHistory) -> None:
    replayed = await Replayer(workflows=[SessionWorkflow], workflow_runner=runner()).replay_workflow(history)
    assert replayed.replay_failure is None


def _carried(history: WorkflowHistory) -> dict[str, Any]:
    """What the previous run carried into this one (its input's ``$carried``)."""
    from rma_shell.temporal.carry import CARRY_KEY, unpack

    started = history.events[0].workflow_execution_started_event_attributes
    spec_json = json.loads(started.input.payloads[0].data)
    return unpack(spec_json[CARRY_KEY])


def _host(host_name: str) -> tuple[Any, Callable[[Any], Any], Callable[[Any], dict[str, Any]]]:
    """The emulator, a provider on it, and the per-run options, for ``host_name``."""
    if host_name == "local":
        return (
            OpenAIEmulator([fleet.openai_reply()] * 20),
            lambda emu: Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE]),
            lambda emu: {},
        )
    if host_name == "cma":
        return (
            CMAEmulator([fleet.cma_turn()] * 3, api_key="k"),
            lambda emu: ClaudeManagedAgents(api_key="k", base_url=emu.base_url),
            lambda emu: dict(cma_agent_and_environment(emu, "k")),
        )
    return (
        AgentCoreEmulator([fleet.agentcore_turn()] * 3),
        lambda emu: BedrockAgentCore(
            harness_arn=emu.harness_arn, tools=[fleet.CHARGE], env=emu.credentials_env()
        ),
        lambda emu: {"runtime_session_id": new_runtime_session_id()},
    )


@pytest.mark.parametrize("host_name", ["local", "cma", "agentcore"])
def test_a_fused_session_has_run_s_result_in_fewer_activities(
    temporal_server: DevServer, host_name: str
) -> None:
    """Three turns, two tool calls: the kickoff turn, then each call with the turn after it —
    three regular activities where the default schedules five (each call, each turn)."""

    async def main() -> None:
        tools = Tools()
        emu, make, opts = _host(host_name)
        with emu:
            provider = make(emu)
            ids = opts(emu)
            plain = await run(provider, handler=tools, prompt="Charge 1, then 2.", timeout=30, **ids)
            if host_name == "agentcore":
                ids = opts(emu)
            async with worker(temporal_server, {host_name: provider}, {"tools": tools}) as (client, queue):
                handle = await start_session(client, spec(host_name, provider_opts=ids), task_queue=queue)
                durable = await handle.result()
                history = await handle.handle.fetch_history()
            await provider.close()
        assert durable.unwrap().text == fleet.FINAL_TEXT
        assert fleet.normalized(to_jsonable(durable)) == fleet.normalized(to_jsonable(plain))
        first = "rma.exchange" if host_name == "cma" else "rma.poll"
        assert scheduled(history) == [first, "rma.fused", "rma.fused"]
        # Each call ran once, keyed by the workflow id, at attempt 1.
        keys = [key for key, _ in tools.calls[2:]]
        assert keys == [f"{handle.id}:{u.id}" for u in durable.unwrap().custom_tool_uses]
        assert [attempt for _, attempt in tools.calls] == [1, 1, 1, 1]
        await _replays(history)

    asyncio.run(main())


def test_the_counts_of_a_six_turn_session(temporal_server: DevServer) -> None:
    """The bench's shape — six turns, a call in each of the first five: six regular activities
    and seven workflow tasks with fused turns, against eleven and twelve without."""

    def reply(body: dict[str, Any]) -> dict[str, Any]:
        answered = sum(1 for m in body["messages"] if m.get("role") == "tool")
        if answered < 5:
            return {
                "tool_calls": [{"id": f"c{answered}", "name": "charge", "arguments": {"amount": answered}}]
            }
        return {"content": "done"}

    async def main() -> None:
        counts = {}
        with OpenAIEmulator([reply] * 20) as emu:
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            async with worker(temporal_server, {"local": provider}, {"tools": Tools()}) as (client, queue):
                for fused in (False, True):
                    handle = await start_session(
                        client, spec(fused_turns=fused, timeout=None), task_queue=queue
                    )
                    assert (await handle.result()).unwrap().turns == 6
                    history = await handle.handle.fetch_history()
                    counts[fused] = (len(scheduled(history)), workflow_tasks(history))
            await provider.close()
        assert counts == {False: (11, 12), True: (6, 7)}

    asyncio.run(main())


def test_a_call_that_needs_approval_waits_as_without_fusing(temporal_server: DevServer) -> None:
    """The batch's other calls run in the fused activity; the asked one waits for a person, and
    the turn after the batch is an activity of its own once it is decided."""

    class Asking(Tools):
        def requires_approval(self, name: str, input: dict[str, Any], ctx: object) -> bool:
            return input["amount"] == 1

    async def main() -> None:
        tools = Asking()
        with OpenAIEmulator([fleet.openai_reply()] * 20) as emu:
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            async with worker(temporal_server, {"local": provider}, {"tools": tools}) as (client, queue):
                handle = await start_session(client, spec(), task_queue=queue)
                waiting = await _until(handle, lambda s: s["awaiting_approval"])
                assert [w["tool_use_id"] for w in waiting["awaiting_approval"]] == ["call_c1"]
                assert waiting["awaiting_approval"][0]["input"] == {"amount": 1}
                assert tools.calls == []
                await handle.approve("call_c1", "deny", "not today")
                outcome = await handle.result()
                history = await handle.handle.fetch_history()
            await provider.close()
            denied = [m for m in emu.requests[1].body["messages"] if m.get("role") == "tool"]
        assert outcome.unwrap().text == fleet.FINAL_TEXT
        assert "denied by the approver: not today" in denied[0]["content"]
        assert [key.split(":")[1] for key, _ in tools.calls] == ["call_c2"]
        # The asked batch: its fused activity ran nothing, the turn after it was a poll; the
        # next batch (c2) was fused with the last turn.
        assert scheduled(history) == ["rma.poll", "rma.fused", "rma.poll", "rma.fused"]
        await _replays(history)

    asyncio.run(main())


def test_an_at_most_once_tool_is_never_fused(temporal_server: DevServer) -> None:
    class Once(Tools):
        at_most_once = frozenset({"charge"})

    async def main() -> None:
        with OpenAIEmulator([fleet.openai_reply()] * 20) as emu:
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            async with worker(temporal_server, {"local": provider}, {"tools": Once()}) as (client, queue):
                handle = await start_session(client, spec(), task_queue=queue)
                outcome = await handle.result()
                history = await handle.handle.fetch_history()
            await provider.close()
        assert outcome.unwrap().text == fleet.FINAL_TEXT
        assert scheduled(history) == ["rma.poll", "rma.tool", "rma.poll", "rma.tool", "rma.poll"]

    asyncio.run(main())


def test_a_batch_calling_the_terminal_tool_is_not_fused(temporal_server: DevServer) -> None:
    async def main() -> None:
        with OpenAIEmulator([fleet.openai_reply()] * 20) as emu:
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            async with worker(temporal_server, {"local": provider}, {"tools": Tools()}) as (client, queue):
                opts = spec(require_terminal_tool=True, terminal_tool="charge")
                plain = await run(
                    provider,
                    handler=Tools(),
                    prompt="Charge 1, then 2.",
                    require_terminal_tool=True,
                    terminal_tool="charge",
                )
                handle = await start_session(client, opts, task_queue=queue)
                outcome = await handle.result()
                history = await handle.handle.fetch_history()
            await provider.close()
        assert fleet.normalized(to_jsonable(outcome)) == fleet.normalized(to_jsonable(plain))
        assert scheduled(history) == ["rma.poll", "rma.tool", "rma.poll", "rma.tool", "rma.poll"]

    asyncio.run(main())


def test_max_turns_ends_the_session_as_without_fusing(temporal_server: DevServer) -> None:
    """At ``max_turns`` the machine runs no batch whose resume would exceed it: the session
    ends after the second turn's calls are asked for, without running them, as ``run()`` does."""

    async def main() -> None:
        tools = Tools()
        with OpenAIEmulator([fleet.openai_reply()] * 20) as emu:
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            plain = await run(provider, handler=Tools(), prompt="Charge 1, then 2.", max_turns=2)
            async with worker(temporal_server, {"local": provider}, {"tools": tools}) as (client, queue):
                handle = await start_session(client, spec(max_turns=2), task_queue=queue)
                outcome = await handle.result()
                history = await handle.handle.fetch_history()
            await provider.close()
        assert isinstance(outcome.failure(), MaxTurnsExceeded)
        assert fleet.normalized(to_jsonable(outcome)) == fleet.normalized(to_jsonable(plain))
        assert scheduled(history) == ["rma.poll", "rma.fused"]
        assert [key.split(":")[1] for key, _ in tools.calls] == ["call_c1"]

    asyncio.run(main())


def test_a_fused_session_continues_as_new_at_every_moment(temporal_server: DevServer) -> None:
    """Hopping at every moment it may — also between a fused activity's end and the feeding of
    its batch's results, when the turn run with them is carried to the next run and fed there:
    the result is ``run()``'s, each call's effect once, and every run replays."""
    from tests.temporal.test_continue_as_new import Ledger, counting_model

    turns = 8

    async def main() -> None:
        emu_ref: list[OpenAIEmulator] = []
        with OpenAIEmulator([counting_model(turns, emu_ref)] * (2 * turns + 5)) as emu:
            emu_ref.append(emu)
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            plain = await run(provider, handler=Ledger(), prompt="go", max_turns=turns + 1)
            ledger = Ledger()
            async with worker(temporal_server, {"local": provider}, {"tools": ledger}) as (client, queue):
                opts = spec(prompt="go", max_turns=turns + 1, max_history_events=1)
                handle = await start_session(client, opts, task_queue=queue)
                durable = await handle.result()
                runs = await histories(client, handle.id)
            await provider.close()
        assert fleet.normalized(to_jsonable(durable)) == fleet.normalized(to_jsonable(plain))
        assert len(runs) >= turns
        assert sorted(ledger.effects.values()) == [1] * (turns - 1)
        assert sum(scheduled(h).count("rma.fused") for h in runs) == turns - 1
        carried = [_carried(h) for h in runs[1:]]
        assert any(c.get("ahead") for c in carried)  # some hop did carry a fused turn not yet fed
        for history in runs:
            await _replays(history)

    asyncio.run(main())


@pytest.mark.parametrize("host_name", ["local", "cma", "agentcore"])
def test_a_turn_run_ahead_that_is_not_the_next_is_asked_again_or_fails_typed(
    temporal_server: DevServer, host_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose answer differs from the machine's (here: the digest of the input it sent
    is not the machine's): Local asks the machine's turn again (its host kept nothing of the one
    run ahead); AgentCore and Claude Managed Agents, which already hold that turn, end the
    request typed."""
    from rma_shell.temporal import activities

    monkeypatch.setattr(activities, "input_digest", lambda value: "not the machine's")

    async def main() -> None:
        emu, make, opts = _host(host_name)
        with emu:
            provider = make(emu)
            async with worker(temporal_server, {host_name: provider}, {"tools": Tools()}) as (client, queue):
                outcome = await run_session(
                    client, spec(host_name, provider_opts=opts(emu)), task_queue=queue
                )
            await provider.close()
        if host_name == "local":
            assert outcome.unwrap().text == fleet.FINAL_TEXT
        else:
            error = outcome.failure()
            assert isinstance(error, ProviderError) and error.error_type == "FusedTurnMismatch"

    asyncio.run(main())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fused_turns": 1}, "True or False"),
        ({"fused_turns": True, "local_activities": "turns"}, "only with local_activities=False"),
        ({"fused_turns": True, "local_activities": True}, "only with local_activities=False"),
    ],
)
def test_a_wrong_fused_turns_is_a_typed_error_naming_it(options: dict[str, Any], message: str) -> None:
    from temporalio.client import Client

    async def main() -> None:
        with pytest.raises(InvalidOpts) as refused:
            await start_session(Client.__new__(Client), spec(**options), task_queue="x")  # type: ignore[arg-type]
        assert refused.value.option == "fused_turns"
        assert message in refused.value.message

    asyncio.run(main())


def test_fused_turns_is_recorded_in_the_spec_and_read_back() -> None:
    recorded = spec().to_json()
    assert recorded["fused_turns"] is True
    assert SessionSpec.from_json(recorded).fused_turns is True
    assert "fused_turns" not in spec(fused_turns=False).to_json()  # what a worker from before reads


def test_a_claude_permission_ask_is_not_fused(temporal_server: DevServer) -> None:
    """A host-run call waiting for ``confirm_tool_use``: the confirmation (a local step) and then
    the turn as an activity of its own, with the result ``run()`` gives."""
    from rma_shell.testing import cma

    class Confirming(Tools):
        def confirm_tool_use(self, name: str, input: dict[str, Any], ctx: object) -> bool:
            return True

    gated = [
        cma.status_running(),
        cma.agent_tool_use("bash", {"command": "ls"}, evaluated_permission="ask"),
        cma.idle_requires_action(),
    ]

    async def main() -> None:
        outcomes = []
        for durable in (False, True):
            with CMAEmulator([gated, cma.text_turn("fine")], api_key="k") as emu:
                provider = ClaudeManagedAgents(api_key="k", base_url=emu.base_url)
                ids = cma_agent_and_environment(emu, "k")
                if durable:
                    async with worker(temporal_server, {"cma": provider}, {"tools": Confirming()}) as (
                        client,
                        queue,
                    ):
                        handle = await start_session(client, spec("cma", provider_opts=ids), task_queue=queue)
                        outcomes.append(await handle.result())
                        history = await handle.handle.fetch_history()
                else:
                    outcomes.append(
                        await run(provider, handler=Confirming(), prompt="Charge 1, then 2.", **ids)
                    )
                await provider.close()
                posts = [
                    e for e in emu.history(outcomes[-1].unwrap().session_id) if e["type"].startswith("user.")
                ]
            assert [e["type"] for e in posts] == ["user.message", "user.tool_confirmation"]
        plain, temporal = outcomes
        assert temporal.unwrap().text == "fine"
        assert fleet.normalized(to_jsonable(temporal)) == fleet.normalized(to_jsonable(plain))
        assert scheduled(history) == ["rma.exchange", "rma.exchange"]

    asyncio.run(main())
