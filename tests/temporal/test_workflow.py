"""The Temporal integration through its public API, on the real dev server (one in-process worker).

A session under Temporal means what ``run()`` means: the same result, the same typed errors;
plus what Temporal adds — approvals that wait durably, live follow-ups as updates, queries,
cancellation — and a workflow whose recorded history replays deterministically.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
from returns.result import Failure, Success
from temporalio.client import Client
from temporalio.worker import Replayer
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from rma.codec_json import to_jsonable
from rma.errors import Closed, Halted, InvalidOpts, Timeout
from rma.session.options import Halt
from rma_shell import run
from rma_shell.providers.agentcore import BedrockAgentCore, new_runtime_session_id
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.temporal import (
    DevServer,
    SessionSpec,
    SessionWorkflow,
    Timeouts,
    connect,
    run_session,
    session_worker,
    start_session,
)
from rma_shell.temporal.worker import PASSED_THROUGH
from rma_shell.testing import AgentCoreEmulator, CMAEmulator, OpenAIEmulator
from tests.helpers import cma_agent_and_environment
from tests.temporal import fleet

pytestmark = pytest.mark.timeout(120)

FAST = Timeouts(heartbeat=2.0, retry_initial=0.1)


class Tools:
    """Answers ``charge`` with what it was given and where (the call's idempotency key)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object, info: Any) -> str:
        self.calls.append((info.idempotency_key, info.attempt))
        return f"charged {input['amount']}"


@asynccontextmanager
async def worker(
    server: DevServer,
    providers: Mapping[str, Any],
    handlers: Mapping[str, object],
    guards: Mapping[str, Callable[..., Any]] | None = None,
) -> AsyncIterator[tuple[Client, str]]:
    client = await connect(server.address)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with session_worker(
        client, task_queue=queue, providers=providers, handlers=handlers, turn_guards=guards
    ):
        yield client, queue


def spec(provider: str = "local", **options: Any) -> SessionSpec:
    options.setdefault("prompt", "Charge 1, then 2.")
    return SessionSpec(provider=provider, handler="tools", timeouts=FAST, **options)


@pytest.mark.parametrize("local", [False, "turns"], ids=["activities", "local_turns"])
@pytest.mark.parametrize("host_name", ["local", "cma", "agentcore"])
def test_a_session_has_the_result_run_gives(
    temporal_server: DevServer, host_name: str, local: bool | str
) -> None:
    """On each host, with the turns as activities or (``local_activities="turns"``) as local
    activities — a streamed Claude turn past the first asks the host whether its input landed
    before posting it, and that changes nothing in an undisturbed run."""

    async def main() -> None:
        tools = Tools()
        if host_name == "local":
            emu: Any = OpenAIEmulator([fleet.openai_reply()] * 20)
        elif host_name == "cma":
            emu = CMAEmulator([fleet.cma_turn()] * 3, api_key="k")
        else:
            emu = AgentCoreEmulator([fleet.agentcore_turn()] * 3)
        with emu:
            opts: Callable[[], dict[str, Any]]
            if host_name == "local":
                provider: Any = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
                opts = dict
            elif host_name == "cma":
                provider = ClaudeManagedAgents(api_key="k", base_url=emu.base_url)
                ids = cma_agent_and_environment(emu, "k")
                opts = lambda: dict(ids)  # noqa: E731
            else:
                provider = BedrockAgentCore(
                    harness_arn=emu.harness_arn, tools=[fleet.CHARGE], env=emu.credentials_env()
                )
                opts = lambda: {"runtime_session_id": new_runtime_session_id()}  # noqa: E731
            plain = await run(provider, handler=tools, prompt="Charge 1, then 2.", timeout=30, **opts())
            async with worker(temporal_server, {host_name: provider}, {"tools": tools}) as (client, queue):
                durable = await run_session(
                    client,
                    spec(host_name, provider_opts=opts(), local_activities=local),
                    task_queue=queue,
                    id=f"s-{queue}",
                )
            await provider.close()
        assert durable.unwrap().text == fleet.FINAL_TEXT
        assert fleet.normalized(to_jsonable(durable)) == fleet.normalized(to_jsonable(plain))
        # The idempotency key's scope is the workflow id; a first run is attempt 1.
        keys = [key for key, _ in tools.calls[2:]]
        assert keys == [f"s-{queue}:{u.id}" for u in durable.unwrap().custom_tool_uses]
        assert [attempt for _, attempt in tools.calls] == [1, 1, 1, 1]

    asyncio.run(main())


def test_a_local_claude_turn_lists_the_history_from_the_last_boundary_not_from_the_start(
    temporal_server: DevServer,
) -> None:
    """Under ``local_activities="turns"`` each streamed Claude turn past the first asks the
    host whether its input landed: the listing starts at the last boundary's ``processed_at``
    (``created_at[gte]``), so a turn reads what happened since, not the whole session again."""
    from urllib.parse import parse_qs, urlsplit

    async def main() -> None:
        tools = Tools()
        emu = CMAEmulator([fleet.cma_turn()] * 3, api_key="k")
        with emu:
            provider = ClaudeManagedAgents(api_key="k", base_url=emu.base_url)
            ids = cma_agent_and_environment(emu, "k")
            async with worker(temporal_server, {"cma": provider}, {"tools": tools}) as (client, queue):
                durable = await run_session(
                    client, spec("cma", provider_opts=dict(ids), local_activities="turns"), task_queue=queue
                )
            await provider.close()
            listings = [
                parse_qs(urlsplit(r.path).query)
                for r in emu.requests
                if r.method == "GET" and urlsplit(r.path).path.endswith("/events")
            ]
        assert durable.unwrap().text == fleet.FINAL_TEXT
        assert len(listings) == 3  # one per turn: a local turn cannot tell a retry
        assert "created_at[gte]" not in listings[0]  # a new session: nothing before it to skip
        later = [q["created_at[gte]"][0] for q in listings[1:]]
        assert later == sorted(set(later))  # each from its own, later boundary

    asyncio.run(main())


def test_a_tool_that_requires_approval_waits_durably_for_it(temporal_server: DevServer) -> None:
    class Asking(Tools):
        def requires_approval(self, name: str, input: dict[str, Any], ctx: object) -> bool:
            return input["amount"] == 1  # the handler decides per call

    async def main() -> None:
        tools = Asking()
        with OpenAIEmulator([fleet.openai_reply()] * 20) as emu:
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            async with worker(temporal_server, {"local": provider}, {"tools": tools}) as (client, queue):
                handle = await start_session(client, spec(), task_queue=queue)
                waiting = await _until(handle, lambda s: s["awaiting_approval"])
                assert [w["tool_use_id"] for w in waiting["awaiting_approval"]] == ["call_c1"]
                assert waiting["awaiting_approval"][0]["input"] == {"amount": 1}
                assert tools.calls == []  # nothing ran before the approval
                with pytest.raises(InvalidOpts, match="no tool call 'nope'"):
                    await handle.approve("nope", "allow")
                await handle.approve("call_c1", "deny", "amount 1 is not allowed today")
                outcome = await handle.result()
            await provider.close()
            denied = [m for m in emu.requests[1].body["messages"] if m.get("role") == "tool"]
        assert outcome.unwrap().text == fleet.FINAL_TEXT
        assert "denied by the approver: amount 1 is not allowed today" in denied[0]["content"]
        assert [key.split(":")[1] for key, _ in tools.calls] == ["call_c2"]  # the denied call never ran

    asyncio.run(main())


def test_an_approved_call_runs(temporal_server: DevServer) -> None:
    from rma_shell.tools import Toolbox, tool

    calls: list[int] = []

    @tool(requires_approval=True)
    def charge(amount: int, hold: bool = False) -> str:
        """Charge an amount, once."""
        calls.append(amount)
        return f"charged {amount}"

    async def main() -> None:
        tools = Toolbox(charge)
        with OpenAIEmulator([fleet.openai_reply()] * 20) as emu:
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            async with worker(temporal_server, {"local": provider}, {"tools": tools}) as (client, queue):
                handle = await start_session(client, spec(), task_queue=queue)
                for call in ("call_c1", "call_c2"):
                    await _until(
                        handle, lambda s, c=call: [w for w in s["awaiting_approval"] if w["tool_use_id"] == c]
                    )
                    await handle.approve(call, "allow")
                outcome = await handle.result()
            await provider.close()
        assert outcome.unwrap().text == fleet.FINAL_TEXT
        assert calls == [1, 2]

    asyncio.run(main())


def test_a_live_session_takes_follow_ups_as_updates(temporal_server: DevServer) -> None:
    async def main() -> None:
        replies = [{"content": "hello"}, {"content": "we said hello"}]
        with OpenAIEmulator(replies) as emu:
            provider = Local(base_url=emu.base_url, model="m")
            async with worker(temporal_server, {"local": provider}, {"tools": Tools()}) as (client, queue):
                handle = await start_session(client, spec(live=True, prompt="hi"), task_queue=queue)
                second = await handle.message("what did we say?")
                assert second.unwrap().text == "we said hello"
                results = await handle.results()
                assert [r.unwrap().text for r in results] == ["hello", "we said hello"]
                assert (await handle.status())["phase"] == "idle"
                await handle.close()
                last = await handle.result()
            await provider.close()
        assert last.unwrap().text == "we said hello"
        assert last.unwrap().transcript is not None and len(last.unwrap().transcript) == 4

    asyncio.run(main())


def test_the_turn_guard_and_typed_errors_are_run_s(temporal_server: DevServer) -> None:
    async def main() -> None:
        with OpenAIEmulator([fleet.openai_reply()] * 20) as emu:
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            guards = {"stop": lambda payload: Halt({"turns": payload["turns"]})}
            async with worker(temporal_server, {"local": provider}, {"tools": Tools()}, guards) as (
                client,
                queue,
            ):
                halted = await run_session(client, spec(turn_guard="stop"), task_queue=queue)
                unknown = await run_session(client, spec(provider="nowhere"), task_queue=queue)
                bad = await run_session(client, spec(max_turns=0), task_queue=queue)
                typo = await run_session(client, spec(provider_opts={"histroy": []}), task_queue=queue)
            await provider.close()
        assert isinstance(halted, Failure) and isinstance(halted.failure(), Halted)
        assert halted.failure().reason == {"turns": 1}
        assert isinstance(unknown.failure(), InvalidOpts) and unknown.failure().option == "provider"
        assert isinstance(bad.failure(), InvalidOpts) and bad.failure().option == "max_turns"
        assert isinstance(typo.failure(), InvalidOpts) and "histroy" in typo.failure().message
        with pytest.raises(InvalidOpts, match=r"model_config\.api_key"):
            await start_session(Client.__new__(Client), spec(model_config={"api_key": "sk"}), task_queue="x")  # type: ignore[arg-type]
        with pytest.raises(InvalidOpts, match="prompt"):
            await start_session(Client.__new__(Client), spec(prompt=object()), task_queue="x")  # type: ignore[arg-type]

    asyncio.run(main())


@pytest.mark.parametrize("value", ["tools", "True", 1, 0, None, ["turns"]])
def test_local_activities_other_than_true_false_or_turns_is_a_typed_error_naming_it(value: Any) -> None:
    async def main() -> None:
        with pytest.raises(InvalidOpts) as refused:
            await start_session(Client.__new__(Client), spec(local_activities=value), task_queue="x")  # type: ignore[arg-type]
        assert refused.value.option == "local_activities"
        assert "'turns'" in refused.value.message

    asyncio.run(main())


def test_local_turns_is_recorded_in_the_spec_and_read_back() -> None:
    recorded = spec(local_activities="turns").to_json()
    assert recorded["local_activities"] == "turns"
    assert SessionSpec.from_json(recorded).local_activities == "turns"
    assert "local_activities" not in spec().to_json()  # what a worker from before reads


def test_a_registered_context_is_each_tool_call_s_ctx(temporal_server: DevServer) -> None:
    """``SessionSpec(context="name")``: ``run()``'s ``context=``, by the name a worker registered."""

    class Seeing:
        def __init__(self) -> None:
            self.seen: list[object] = []

        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            self.seen.append(ctx)
            return f"charged {input['amount']}"

    async def main() -> None:
        tools, ledger = Seeing(), {"tenant": "acme"}
        with OpenAIEmulator([fleet.openai_reply()] * 10) as emu:
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            client = await connect(temporal_server.address)
            queue = f"q-{uuid.uuid4().hex[:8]}"
            async with session_worker(
                client,
                task_queue=queue,
                providers={"local": provider},
                handlers={"tools": tools},
                contexts={"ledger": ledger},
            ):
                done = await run_session(client, spec(context="ledger"), task_queue=queue)
                unknown = await run_session(client, spec(context="nope"), task_queue=queue)
            await provider.close()
        assert done.unwrap().text == fleet.FINAL_TEXT
        assert tools.seen == [ledger, ledger]  # the worker's own object, as is
        assert isinstance(unknown.failure(), InvalidOpts) and unknown.failure().option == "context"

    asyncio.run(main())


@pytest.mark.parametrize("fused", [False, True], ids=["activities", "fused_turns"])
def test_timeout_and_cancellation_end_a_session_typed(
    temporal_server: DevServer, tmp_path: Any, fused: bool
) -> None:
    """Both while a tool call runs — with ``fused_turns``, inside the fused activity."""

    async def main() -> None:
        hold = tmp_path / "hold"
        hold.touch()
        fleet.init_ledger(tmp_path / "db")
        ledger = fleet.Ledger(str(tmp_path / "db"), str(hold))
        with OpenAIEmulator([fleet.openai_reply()] * 20) as emu:
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            async with worker(temporal_server, {"local": provider}, {"tools": ledger}) as (client, queue):
                timed = await run_session(client, spec(timeout=1.5, fused_turns=fused), task_queue=queue)
                handle = await start_session(client, spec(timeout=None, fused_turns=fused), task_queue=queue)
                await _until(handle, lambda s: s["phase"] == "tools" and s["turns"] == 2)
                await handle.cancel()
                cancelled = await handle.result()
                hold.unlink()
            await provider.close()
        assert isinstance(timed.failure(), Timeout) and timed.failure().timeout_s == 1.5
        assert timed.failure().remote_stop == "not_needed"  # Local's loop was the workflow's own
        assert isinstance(cancelled.failure(), Closed)

    asyncio.run(main())


def test_a_recorded_history_replays_deterministically(temporal_server: DevServer) -> None:
    async def main() -> None:
        with CMAEmulator([fleet.cma_turn()] * 3, api_key="k") as emu:
            provider = ClaudeManagedAgents(api_key="k", base_url=emu.base_url)
            ids = cma_agent_and_environment(emu, "k")
            async with worker(temporal_server, {"cma": provider}, {"tools": Tools()}) as (client, queue):
                handle = await start_session(client, spec("cma", provider_opts=ids), task_queue=queue)
                assert (await handle.result()).unwrap().text == fleet.FINAL_TEXT
                history = await handle.handle.fetch_history()
            await provider.close()
        runner = SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
        )
        replayed = await Replayer(workflows=[SessionWorkflow], workflow_runner=runner).replay_workflow(
            history
        )
        assert replayed.replay_failure is None

    asyncio.run(main())


async def _until(
    handle: Any, predicate: Callable[[dict[str, Any]], Any], timeout_s: float = 30
) -> dict[str, Any]:
    async def poll() -> dict[str, Any]:
        while True:
            status: dict[str, Any] = await handle.status()
            if predicate(status):
                return status
            await asyncio.sleep(0.05)

    return await asyncio.wait_for(poll(), timeout_s)


def test_a_local_snapshot_rebuilds_the_very_conversation() -> None:
    async def main() -> None:
        from rma_shell.providers.base import OpenRequest
        from rma_shell.temporal.conns import restore, snapshot

        with OpenAIEmulator([fleet.openai_reply()] * 5) as emu:
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            request = OpenRequest(prompt="go")
            conn = (await provider.open(request)).unwrap()
            polled = await provider.poll_turn(conn, provider.codec.kickoff_input("go", None), None)
            conn = polled.conn
            snap = snapshot(provider, conn)
            rebuilt = (await restore(provider, request, snap)).unwrap()
            await provider.close()
        assert rebuilt.conversation == attrs.evolve(conn.conversation, poll_events=())
        assert rebuilt.session_id == conn.session_id
        assert isinstance(polled.result, Success)

    asyncio.run(main())


def test_a_dropped_claude_stream_reconnects_as_run_does(temporal_server: DevServer) -> None:
    """The machine's own reconnect (a real drop mid-turn): backoff as a durable timer, then a
    consolidation activity that lists the history and reads the turn on to its boundary."""
    from rma_shell.testing import drop_stream_after

    async def main() -> None:
        outcomes = []
        for durable in (False, True):
            with CMAEmulator([fleet.cma_turn()] * 3, api_key="k", faults=[drop_stream_after(3)]) as emu:
                provider = ClaudeManagedAgents(api_key="k", base_url=emu.base_url)
                ids = cma_agent_and_environment(emu, "k")
                tools = Tools()
                if durable:
                    async with worker(temporal_server, {"cma": provider}, {"tools": tools}) as (
                        client,
                        queue,
                    ):
                        handle = await start_session(client, spec("cma", provider_opts=ids), task_queue=queue)
                        outcomes.append(await handle.result())
                        history = await handle.handle.fetch_history()
                else:
                    outcomes.append(
                        await run(provider, handler=tools, prompt="Charge 1, then 2.", timeout=30, **ids)
                    )
                await provider.close()
                posted = [
                    e for e in emu.history(outcomes[-1].unwrap().session_id) if e["type"].startswith("user.")
                ]
            assert len(posted) == 3  # the prompt and two results, each posted once
        plain, temporal = outcomes
        assert temporal.unwrap().text == fleet.FINAL_TEXT
        assert fleet.normalized(to_jsonable(temporal)) == fleet.normalized(to_jsonable(plain))
        kinds = [e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events]
        assert "rma.resync" in kinds  # the drop went through the machine's reconnect

    asyncio.run(main())


def test_cancelling_a_session_mid_turn_stops_the_host_s_loop(temporal_server: DevServer) -> None:
    from rma_shell.testing import cma

    async def main() -> None:
        turn = [cma.status_running(), cma.pause(), *cma.text_turn("never")]  # still working
        with CMAEmulator([turn], api_key="k") as emu:
            provider = ClaudeManagedAgents(api_key="k", base_url=emu.base_url)
            ids = cma_agent_and_environment(emu, "k")
            async with worker(temporal_server, {"cma": provider}, {"tools": Tools()}) as (client, queue):
                # A generous grace: this is about the stop reaching the host, not its bound.
                opts = spec("cma", provider_opts=ids, stop_grace=10.0)
                handle = await start_session(client, opts, task_queue=queue)
                # A streamed turn is one activity: the machine reads "pushing" until it returns.
                status = await _until(handle, lambda s: s["phase"] == "pushing")
                sid = status["session_id"]

                def running() -> bool:  # the host is working on the turn
                    return any(e["type"] == "session.status_running" for e in emu.history(sid))

                await asyncio.to_thread(fleet.wait_for, running, 30, "the host working on the turn")
                await handle.cancel()
                cancelled = await handle.result()
            await provider.close()
            interrupts = emu.interrupts(status["session_id"])
        assert isinstance(cancelled.failure(), Closed)
        assert len(interrupts) == 1  # Provider.stop_remote: the host's loop was stopped

    asyncio.run(main())


def test_a_session_past_its_deadline_waits_for_the_host_s_stop_no_longer_than_its_grace(
    temporal_server: DevServer,
) -> None:
    from temporalio.api.enums.v1 import EventType

    from rma_shell.testing import cma

    async def main() -> None:
        turn = [cma.status_running(), cma.pause(), *cma.text_turn("never")]  # still working
        # The interrupt is taken, but the session reads running on: no confirmation ever comes.
        with CMAEmulator([turn], api_key="k", faults=[cma.slow_interrupt()]) as emu:
            provider = ClaudeManagedAgents(api_key="k", base_url=emu.base_url)
            ids = cma_agent_and_environment(emu, "k")
            async with worker(temporal_server, {"cma": provider}, {"tools": Tools()}) as (client, queue):
                handle = await start_session(
                    client, spec("cma", timeout=1.0, provider_opts=ids), task_queue=queue
                )
                timed = await handle.result()
                history = await handle.handle.fetch_history()
            await provider.close()
            [session_id] = emu.session_ids
            status = emu.session(session_id)["status"]
        error = timed.failure()
        assert isinstance(error, Timeout) and error.remote_stop == "unconfirmed"
        assert status == "running"
        # From the stop's scheduling to the workflow's end, in the server's own clock: the
        # default grace is 1 s (before it, the stop alone took 5 s); generous for load.
        [asked] = [
            e.event_time.ToDatetime()
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name == "rma.stop"
        ]
        [ended] = [
            e.event_time.ToDatetime()
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
        ]
        assert (ended - asked).total_seconds() < 3.0

    asyncio.run(main())


def test_a_result_larger_than_a_payload_leaves_the_workflow_compressed(temporal_server: DevServer) -> None:
    """A long Local request's transcript grows with its turns, and a workflow's result is one
    payload (2 MB by default), as is the transcript activity's: one over ``RESULT_INLINE_BYTES``
    leaves compressed and comes back as ``run()``'s result — here ~2.5 MB of transcript (24
    tool results of 100,000 characters), which as it is would fail the workflow."""
    from rma_shell.temporal.carry import RESULT_INLINE_BYTES

    calls = 24

    def reply(body: dict[str, Any]) -> dict[str, Any]:
        answered = sum(1 for m in body["messages"] if m.get("role") == "tool")
        if answered < calls:
            return {
                "tool_calls": [
                    {"id": f"call_{answered}", "name": "charge", "arguments": {"amount": answered}}
                ]
            }
        return {"content": fleet.FINAL_TEXT}

    class Receipts:
        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            return "".join(f"receipt {input['amount']} line {n}: charged and settled\n" for n in range(5000))

    async def main() -> None:
        with OpenAIEmulator([reply] * (2 * calls + 4)) as emu:
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            plain = await run(provider, handler=Receipts(), prompt="Charge 24 times.", timeout=60)
            async with worker(temporal_server, {"local": provider}, {"tools": Receipts()}) as (client, queue):
                handle = await start_session(
                    client,
                    spec(prompt="Charge 24 times.", timeout=120),
                    task_queue=queue,
                    id=f"s-{queue}",
                )
                durable = await handle.result()
                raw = await handle.handle.result()
            await provider.close()
        assert set(raw["result"]) == {"$zlib"}, str(raw["result"])[:1500]
        transcript = plain.unwrap().transcript
        assert transcript is not None and len(str(transcript)) > 2 * 1024 * 1024 > RESULT_INLINE_BYTES
        assert durable.unwrap().text == fleet.FINAL_TEXT
        assert fleet.normalized(to_jsonable(durable)) == fleet.normalized(to_jsonable(plain))

    asyncio.run(main())


def _calls_reply(calls: int, per_turn: int = 1) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        answered = sum(1 for m in body["messages"] if m.get("role") == "tool")
        if answered < calls:
            return {
                "tool_calls": [
                    {"id": f"call_{answered + n}", "name": "charge", "arguments": {"amount": answered + n}}
                    for n in range(per_turn)
                ]
            }
        return {"content": fleet.FINAL_TEXT}

    return reply


def test_a_tool_result_over_a_payload_travels_compressed_or_fails_the_call_typed_once(
    temporal_server: DevServer,
) -> None:
    """One payload is 2 MB by default. A tool result longer than that (``max_tool_result_chars``
    raised) leaves its activity compressed and reaches the model whole; one that is still too
    long compressed is the call's error result, naming the limit — the tool run once, not once
    per retry, and the session not stuck retrying a workflow task it cannot complete."""
    import os

    class Big:
        def __init__(self, text: Callable[[], str]) -> None:
            self.text, self.runs = text, 0

        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            self.runs += 1
            return self.text()

    async def session(tools: Big) -> Any:
        with OpenAIEmulator([_calls_reply(1)] * 4) as emu:
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            async with worker(temporal_server, {"local": provider}, {"tools": tools}) as (client, queue):
                got = await run_session(
                    client, spec(prompt="go", max_tool_result_chars=10_000_000), task_queue=queue
                )
            await provider.close()
            return got, emu.requests[-1].body["messages"]

    async def main() -> None:
        long = Big(lambda: "receipt line: charged and settled\n" * 100_000)  # 3.4 MB, compresses
        ran, messages = await session(long)
        assert ran.unwrap().text == fleet.FINAL_TEXT and long.runs == 1
        assert messages[-1]["content"] == long.text()  # the model got it whole

        noise = Big(lambda: os.urandom(2_500_000).hex())  # 5 MB that does not compress enough
        ran, messages = await session(noise)
        assert ran.unwrap().text == fleet.FINAL_TEXT and noise.runs == 1
        told = messages[-1]["content"]  # Local's error shape: {"error": "tool error: …", "isError": true}
        assert "tool error:" in told and "payload limit" in told and "max_tool_result_chars" in told

    asyncio.run(main())


def test_a_turn_whose_input_is_over_a_payload_even_compressed_fails_typed(temporal_server: DevServer) -> None:
    """Results that each fit, answered together in one turn whose input does not: the turn is
    refused before it is scheduled and the request fails typed, with the tools run once."""
    import os

    runs: list[int] = []

    class Noise:
        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
            runs.append(input["amount"])
            return os.urandom(750_000).hex()  # 1.5 MB each: ~1 MB compressed

    async def main() -> None:
        with OpenAIEmulator([_calls_reply(3, per_turn=3)] * 3) as emu:
            provider = Local(base_url=emu.base_url, model="m", tools=[fleet.CHARGE])
            async with worker(temporal_server, {"local": provider}, {"tools": Noise()}) as (client, queue):
                ran = await run_session(
                    client, spec(prompt="go", max_tool_result_chars=10_000_000), task_queue=queue
                )
            await provider.close()
            sent = len(emu.requests)
        error = ran.failure()
        assert "PayloadTooLarge" in str(error) and "payload limit" in str(error), error
        assert sorted(runs) == [0, 1, 2] and sent == 1

    asyncio.run(main())
