"""AgentCore harness provisioning against the emulator's control plane, in trio's virtual time.

The flow reads ``anyio.current_time`` (a ``MockClock``) and sleeps by jumping it, and the emulator's
lifecycles read the same clock, so a 365-second budget costs milliseconds (B-47…B-84, M-3, M-9).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
import trio
import trio.testing
from returns.result import Failure, Success

from rma.errors import InvalidOpts
from rma.provisioning.harness import HarnessError, HarnessHandle, Phase
from rma.provisioning.identity import harness_name
from rma.provisioning.spec import AgentSpec, EnvironmentSpec
from rma.vocabulary import Terminal
from rma.wire.sigv4 import Credentials
from rma_shell import run
from rma_shell.aws_credentials import StaticCredentialSource
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.agentcore.client import AgentCoreClient
from rma_shell.providers.agentcore.provisioning import (
    ensure_harness,
    harness_key,
    list_harnesses,
    provision_harness,
    prune_harnesses,
    release_harness,
    resolve_harness,
    tag_harness,
    teardown_harness,
)
from rma_shell.seams import Seams
from rma_shell.stores import MemoryStore
from rma_shell.telemetry import Telemetry
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator

ROLE = "arn:aws:iam::123456789012:role/harness-role"
SID = "rma-session-0123456789abcdef0123456789"
AGENT = AgentSpec.create(
    "support",
    system_prompt="Answer support questions.",
    tools=[{"name": "lookup", "description": "Find a customer", "input_schema": {"type": "object"}}],
).unwrap()
STORAGE = EnvironmentSpec.create(
    config={
        "agentCoreRuntimeEnvironment": {
            "filesystemConfigurations": [{"sessionStorage": {"mountPath": "/mnt/data"}}]
        }
    }
).unwrap()
NAME = harness_name(AGENT, STORAGE)
ROLLBACK_GRACE_S = 1.0
"""A rollback answered at once costs no more than this on top of the budget (B-74)."""


class World:
    """The emulator, a client, and a virtual clock both read."""

    def __init__(
        self, emu: AgentCoreEmulator, client: AgentCoreClient, clock: trio.testing.MockClock
    ) -> None:
        self.emu, self.client, self.clock = emu, client, clock
        self.telemetry = Telemetry()
        self.events: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self.telemetry.attach(
            "w", "rma.agent_core.provision.*", lambda n, m, md: self.events.append((n, dict(m), dict(md)))
        )

    async def sleep(self, seconds: float) -> None:
        self.clock.jump(seconds)
        await anyio.lowlevel.checkpoint()

    async def provision(self, **kw: Any) -> Any:
        kw.setdefault("execution_role_arn", ROLE)
        kw.setdefault("environment", STORAGE)
        environment = kw.pop("environment")
        return await provision_harness(
            self.client, AGENT, environment, _seams=Seams(sleep=self.sleep), telemetry=self.telemetry, **kw
        )

    def calls(self, operation: str, **kw: Any) -> int:
        return int(self.emu.control.count(operation, **kw))


@pytest.fixture
async def world(mock_clock: trio.testing.MockClock) -> AsyncIterator[World]:
    mock_clock.jump(1000.0)
    with AgentCoreEmulator(lifecycle_clock=mock_clock.current_time, page_size=2) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
        )
        client = (await provider.client_for(emu.region)).unwrap()
        yield World(emu, client, mock_clock)
        await provider.close()


def error_of(got: Any) -> HarnessError:
    assert isinstance(got, Failure), got
    error = got.failure()
    assert isinstance(error, HarnessError), error
    return error


async def test_B51_B64_B75_B76_B79_B82_create_then_wait_for_ready_and_the_endpoint(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    started = anyio.current_time()
    handle = (await world.provision()).unwrap()
    assert isinstance(handle, HarnessHandle) and handle.created and handle.name == NAME
    assert world.emu.control.harness(handle.harness_id).status == "READY"
    assert world.emu.control.harness(handle.harness_id).endpoints["DEFAULT"] == "READY"
    # Default lifecycles: READY after 10 s, the DEFAULT endpoint 20 s after that, at a 5 s cadence.
    assert 30 <= anyio.current_time() - started <= 40
    assert world.calls("CreateHarness") == 1 and world.calls("DeleteHarness") == 0
    body = world.emu.control.create_bodies[0]
    assert body["harnessName"] == NAME and len(body["clientToken"]) >= 33
    assert body["environment"] == STORAGE.config and body["tools"][0]["type"] == "inline_function"
    polls = [md for n, _, md in world.events if n.endswith(".poll")]
    assert {p["phase"] for p in polls} == {"ready", "endpoint"}
    stops = [md for n, _, md in world.events if n.endswith(".stop")]
    assert [s["result"] for s in stops] == ["ok", "ok"]


async def test_B4_a_provisioned_harness_runs_a_session(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    handle = (await world.provision()).unwrap()
    world.emu.script_session(SID, [ace.text_turn("hello from a new harness")])
    provider = BedrockAgentCore(harness=handle, data_url=world.emu.base_url, env=world.emu.credentials_env())
    try:
        got = await run(
            provider, handler=lambda name, input, ctx: "unused", prompt="hi", runtime_session_id=SID
        )
    finally:
        await provider.close()
    assert isinstance(got, Success), got
    assert got.unwrap().terminal is Terminal.END_TURN


async def test_B64_B65_B72_a_harness_that_never_gets_ready_times_out_and_is_rolled_back(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    world.emu.control.script_harness(NAME, create="CREATING")
    error = error_of(await world.provision(timeout=60))
    assert error.tag == "harness_ready_timeout"
    assert error.context is not None and error.context.phase is Phase.READY
    assert error.context.last_status == "CREATING" and error.context.polls and error.context.polls > 2
    assert world.calls("GetHarnessEndpoint") == 0  # B-79: no endpoint calls before READY
    assert world.calls("DeleteHarness") == 1  # B-72


@pytest.mark.parametrize(
    ("script", "tag"),
    [
        ({"create": "CREATE_FAILED"}, "harness_failed"),
        ({"create": "MIGRATING"}, "harness_unknown_status"),
        ({"endpoint": "CREATE_FAILED"}, "endpoint_failed"),
        ({"endpoint_appear_after_s": math.inf}, "endpoint_ready_timeout"),
        ({"endpoint": "CREATING"}, "endpoint_ready_timeout"),
    ],
)
async def test_B64_B78_B81_B83_named_failures_roll_back_what_this_call_created(
    mock_clock: trio.testing.MockClock, world: World, script: dict[str, Any], tag: str
) -> None:
    world.emu.control.script_harness(NAME, **script)
    error = error_of(await world.provision(timeout=120))
    assert error.tag == tag
    assert error.context is not None and error.context.harness_id
    if tag.startswith("endpoint"):
        assert error.context.phase is Phase.ENDPOINT and error.context.endpoint_name == "DEFAULT"
    if "appear" in str(script):
        assert error.context.last_status is None  # every endpoint poll was a 404
    assert world.calls("DeleteHarness") == 1
    stops = [md for n, _, md in world.events if n.endswith(".stop")]
    assert stops[-1]["result"] == f"error:{tag}"
    assert all("context" not in md and "last_status" not in md for md in stops)  # B-78: the tag only


async def test_B52_a_live_same_name_harness_is_adopted_and_never_rolled_back(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    for filler in range(5):  # push the harness to a later listing page (page size 2)
        world.emu.control.add_harness(f"filler_{filler}")
    world.emu.control.script_harness(NAME, endpoint="CREATE_FAILED")
    existing = world.emu.control.add_harness(NAME)
    got = await world.provision(timeout=120)
    # Adopted (its endpoint failed, so the wait reports it) but not deleted: someone else owns it.
    assert error_of(got).tag == "endpoint_failed" and error_of(got).context.harness_id == existing.id
    assert world.calls("DeleteHarness") == 0 and world.calls("ListHarnesses") >= 3


async def test_B52_adopting_a_ready_harness_returns_it(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    existing = world.emu.control.add_harness(NAME)
    world.clock.jump(100)
    handle = (await world.provision()).unwrap()
    assert handle.harness_id == existing.id and not handle.created
    assert world.calls("CreateHarness") == 1  # the 409


async def test_B53_B70_a_deleting_same_name_harness_is_waited_out_then_recreated_on_one_budget(
    world: World,
) -> None:
    world.emu.control.script_harness(NAME, delete_after_s=40)
    old = world.emu.control.add_harness(NAME)
    assert isinstance(await teardown_harness(world.client, old.id), Success)
    started = anyio.current_time()
    handle = (await world.provision(timeout=200)).unwrap()
    assert handle.harness_id != old.id and handle.created
    assert world.calls("CreateHarness") == 2  # the 409, then the re-create
    assert anyio.current_time() - started <= 200


async def test_B68_a_deletion_that_outlasts_the_budget_is_harness_still_deleting(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    world.emu.control.script_harness(NAME, delete="DELETING")
    old = world.emu.control.add_harness(NAME)
    await teardown_harness(world.client, old.id)
    error = error_of(await world.provision(timeout=30))
    assert error.tag == "harness_still_deleting"
    assert error.context is not None and error.context.phase is Phase.DELETED
    assert error.context.harness_id == NAME and error.context.last_status == "DELETING"
    assert world.calls("CreateHarness") == 1


async def test_B54_a_failed_same_name_harness_is_a_name_conflict(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    world.emu.control.script_harness(NAME, create="CREATE_FAILED")
    world.emu.control.add_harness(NAME)
    world.clock.jump(100)
    error = error_of(await world.provision())
    assert error.tag == "harness_name_conflict" and world.calls("DeleteHarness") == 0


async def test_B80_B47_options_are_checked_before_any_harness_exists(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    got = await world.provision(endpoint_name="bad-name")
    assert isinstance(got, Failure) and got.failure() == InvalidOpts("endpoint_name", got.failure().detail)
    got = await world.provision(execution_role_arn="  ")
    assert isinstance(got, Failure) and got.failure().option == "execution_role_arn"
    got = await world.provision(timeout=-5)
    assert isinstance(got, Failure) and got.failure().option == "timeout"
    assert world.calls("CreateHarness") == 0


async def test_B79_a_named_endpoint_is_waited_for(mock_clock: trio.testing.MockClock, world: World) -> None:
    handle = (await world.provision()).unwrap()
    # A second provision of the same spec adopts it and waits for a named endpoint that never exists.
    error = error_of(await world.provision(endpoint_name="canary", timeout=30))
    assert error.tag == "endpoint_ready_timeout" and error.context.endpoint_name == "canary"
    assert error.context.harness_id == handle.harness_id


async def test_B72_B77_cancellation_mid_wait_still_rolls_back(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    world.emu.control.script_harness(NAME, create="CREATING")
    with anyio.move_on_after(50):  # virtual seconds: the wait is cancelled mid-poll
        await world.provision(timeout=300)
    assert world.calls("DeleteHarness") == 1
    [exception] = [md for n, _, md in world.events if n.endswith(".exception")]
    assert exception["phase"] == "ready" and exception["kind"] == "Cancelled"
    harness = world.emu.control.harness(NAME)
    assert harness is None or harness.status == "DELETING"


async def test_B73_a_failed_rollback_never_masks_the_error(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.emu.control.script_harness(NAME, create="CREATE_FAILED")
    world.emu.inject(ace.error_once(403, "AccessDeniedException", "no delete", operation="DeleteHarness"))
    with caplog.at_level(logging.ERROR, logger="rma.provisioning.agentcore"):
        error = error_of(await world.provision())
    assert error.tag == "harness_failed"
    assert any("could not roll back" in r.getMessage() for r in caplog.records)


async def test_B66_a_poll_error_with_budget_left_is_returned_unchanged(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    world.emu.inject(ace.error_once(403, "AccessDeniedException", "nope", operation="GetHarness"))
    got = await world.provision()
    assert isinstance(got, Failure) and got.failure().kind == "http_error"
    assert world.calls("DeleteHarness") == 1


async def test_M9_every_wait_logs_a_diagnosable_line(
    mock_clock: trio.testing.MockClock, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.emu.control.script_harness(NAME, create="CREATE_FAILED")
    with caplog.at_level(logging.DEBUG, logger="rma.provisioning.agentcore"):
        await world.provision()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "harness poll" in text and "phase=ready" in text and "status=CREATE_FAILED" in text
    assert "harness wait error:harness_failed" in text


async def test_B58_teardown_deletes_and_a_gone_harness_is_fine(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    handle = (await world.provision()).unwrap()
    assert await teardown_harness(world.client, handle, delete_managed_memory=False) == Success(None)
    assert world.emu.control.harness(handle.harness_id).status == "DELETING"
    world.clock.jump(60)
    assert await teardown_harness(world.client, handle) == Success(None)  # 404 now: already gone
    names = [h["harnessName"] for h in (await list_harnesses(world.client)).unwrap()]
    assert NAME not in names


# --- through a store ------------------------------------------------------------------------------


async def test_V10_ensure_harness_creates_once_then_reuses(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    store = MemoryStore()
    first = (
        await ensure_harness(
            world.client,
            AGENT,
            STORAGE,
            store=store,
            execution_role_arn=ROLE,
            _seams=Seams(sleep=world.sleep),
        )
    ).unwrap()
    again = (
        await ensure_harness(
            world.client,
            AGENT,
            STORAGE,
            store=store,
            execution_role_arn=ROLE,
            _seams=Seams(sleep=world.sleep),
        )
    ).unwrap()
    assert first.created and not again.created and again.harness_id == first.harness_id
    assert again.harness_arn == first.harness_arn and world.calls("CreateHarness") == 1
    other = AgentSpec.create("support", system_prompt="Different prompt.").unwrap()
    changed = (
        await ensure_harness(
            world.client,
            other,
            STORAGE,
            store=store,
            execution_role_arn=ROLE,
            _seams=Seams(sleep=world.sleep),
        )
    ).unwrap()
    assert changed.harness_id != first.harness_id and world.calls("CreateHarness") == 2


async def test_V11_a_failed_provision_is_not_cached(mock_clock: trio.testing.MockClock, world: World) -> None:
    store = MemoryStore()
    world.emu.control.script_harness(NAME, create="CREATE_FAILED")
    got = await ensure_harness(
        world.client,
        AGENT,
        STORAGE,
        store=store,
        execution_role_arn=ROLE,
        _seams=Seams(sleep=world.sleep),
    )
    assert error_of(got).tag == "harness_failed"
    assert store.records(harness_key(AGENT)) == []


async def test_V15_release_deletes_and_evicts(mock_clock: trio.testing.MockClock, world: World) -> None:
    store = MemoryStore()
    handle = (
        await ensure_harness(
            world.client,
            AGENT,
            STORAGE,
            store=store,
            execution_role_arn=ROLE,
            _seams=Seams(sleep=world.sleep),
        )
    ).unwrap()
    assert await release_harness(world.client, handle, store=store) == Success(None)
    assert store.records(harness_key(AGENT)) == [] and world.calls("DeleteHarness") == 1


async def test_V32_V34_tags_resolve_to_the_tagged_harness_and_never_fall_back(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    store = MemoryStore()
    handle = (
        await ensure_harness(
            world.client,
            AGENT,
            STORAGE,
            store=store,
            execution_role_arn=ROLE,
            _seams=Seams(sleep=world.sleep),
        )
    ).unwrap()
    assert tag_harness(store, AGENT, "stable", handle.digest) == Success(None)
    assert resolve_harness(store, "support:stable").unwrap().harness_id == handle.harness_id
    assert resolve_harness(store, "support:canary").failure().kind == "unknown_tag"


async def test_V35_V38_prune_keeps_the_newest_and_the_tagged(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    store = MemoryStore()
    made = []
    for n in range(4):
        spec = AgentSpec.create("support", system_prompt=f"version {n}").unwrap()
        made.append(
            (
                await ensure_harness(
                    world.client,
                    spec,
                    None,
                    store=store,
                    execution_role_arn=ROLE,
                    _seams=Seams(sleep=world.sleep),
                )
            ).unwrap()
        )
        world.clock.jump(60)
    world.emu.control.add_harness("support_data_1a2b3c4d")  # another base: never a candidate
    assert tag_harness(store, "support", "stable", made[0].digest) == Success(None)
    assert (await prune_harnesses(world.client, store, "support", keep=0)).failure().tag == "keep_required"
    pruned = (await prune_harnesses(world.client, store, "support", keep=2)).unwrap()
    assert pruned.deleted == (made[1].name,)
    assert set(pruned.kept) == {made[3].name, made[2].name, made[0].name}
    assert [r.remote_id for r in store.records(harness_key(AGENT))] == [
        m.harness_id for m in (made[3], made[2], made[0])
    ]


class FlakyListing(AgentCoreClient):
    """A client whose n-th ListHarnesses fails, and which records DeleteHarness timeouts."""

    fail_listing_n = 0
    listings = 0
    delete_timeouts: list[float | None]

    async def request_json(self, method: str, path: str, **kw: Any) -> Any:
        if kw.get("operation") == "ListHarnesses":
            self.listings += 1
            if self.listings == self.fail_listing_n:
                from rma.errors import TransportError

                return Failure(TransportError(detail="listing broke", error_type="closed"))
        if kw.get("operation") == "DeleteHarness":
            self.delete_timeouts.append(kw.get("read_timeout"))
        return await super().request_json(method, path, **kw)


def flaky(world: World, fail_listing_n: int) -> FlakyListing:
    client = FlakyListing(
        region=world.emu.region,
        credentials=world.client.credentials,
        data_url=world.emu.base_url,
        control_url=world.emu.base_url,
    )
    client.fail_listing_n = fail_listing_n
    client.delete_timeouts = []
    return client


async def test_B55_a_failed_recovery_listing_is_returned(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    world.emu.control.add_harness(NAME)
    client = flaky(world, 1)
    try:
        got = await provision_harness(
            client,
            AGENT,
            STORAGE,
            execution_role_arn=ROLE,
            _seams=Seams(sleep=world.sleep),
        )
    finally:
        await client.aclose()
    assert isinstance(got, Failure) and got.failure().kind == "transport_error"


async def test_B69_a_failed_listing_during_the_delete_wait_proceeds_unconfirmed(
    mock_clock: trio.testing.MockClock, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.emu.control.script_harness(NAME, delete_after_s=1)
    old = world.emu.control.add_harness(NAME)
    await teardown_harness(world.client, old.id)
    client = flaky(world, 2)  # the recovery listing works, the delete-wait's fails
    try:
        with caplog.at_level(logging.WARNING, logger="rma.provisioning.agentcore"):
            got = await provision_harness(
                client,
                AGENT,
                STORAGE,
                execution_role_arn=ROLE,
                _seams=Seams(sleep=world.sleep),
            )
    finally:
        await client.aclose()
    assert any("proceeding unconfirmed" in r.getMessage() for r in caplog.records)
    # Unconfirmed, so the next create arbitrates: the harness is still DELETING, a second 409.
    assert isinstance(got, Failure) and got.failure().status == 409
    assert world.calls("CreateHarness") == 2


async def test_B74_rollback_has_its_own_small_budget(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    world.emu.control.script_harness(NAME, create="CREATE_FAILED")
    client = flaky(world, 0)
    try:
        got = await provision_harness(
            client, AGENT, STORAGE, execution_role_arn=ROLE, _seams=Seams(sleep=world.sleep), timeout=1
        )
    finally:
        await client.aclose()
    assert error_of(got).tag == "harness_ready_timeout"  # the whole budget was 1 s
    assert client.delete_timeouts and all(t is not None and t <= 10.0 for t in client.delete_timeouts)


async def test_B57_other_create_errors_pass_through_unchanged(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    world.emu.inject(
        ace.error_once(402, "ServiceQuotaExceededException", "too many", operation="CreateHarness")
    )
    got = await world.provision()
    assert isinstance(got, Failure) and got.failure().kind == "http_error" and got.failure().status == 402
    assert world.calls("DeleteHarness") == 0


async def test_B56_no_budget_left_after_the_delete_wait_is_a_ready_timeout(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    world.emu.control.script_harness(NAME, delete_after_s=27.5)
    old = world.emu.control.add_harness(NAME)
    await teardown_harness(world.client, old.id)
    error = error_of(await world.provision(timeout=30, poll_interval=2.5))
    assert error.tag == "harness_ready_timeout"
    assert error.context is not None and error.context.phase is Phase.DELETED and error.context.polls is None
    assert world.calls("CreateHarness") == 1


async def test_V30_a_harness_in_an_environment_with_runtimes_carries_the_bootstrap(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    env = EnvironmentSpec.create(
        config=STORAGE.config, runtimes=[{"lang": "python", "version": "3.12.4"}]
    ).unwrap()
    store = MemoryStore()
    made = await ensure_harness(
        world.client,
        AGENT,
        env,
        store=store,
        execution_role_arn=ROLE,
        _seams=Seams(sleep=world.sleep),
    )
    again = await ensure_harness(
        world.client,
        AGENT,
        env,
        store=store,
        execution_role_arn=ROLE,
        _seams=Seams(sleep=world.sleep),
    )
    for handle in (made.unwrap(), again.unwrap()):
        assert handle.bootstrap is not None and "mise use --global python@3.12.4" in handle.bootstrap.script
    assert "runtimes" not in json.dumps(world.emu.control.create_bodies[-1])  # runtimes never go on the wire


# --- the one deadline holds when calls hang and the client retries them ---------------------


class Control(httpx.AsyncBaseTransport):
    """An in-memory control plane (so ``autojump_clock`` may jump while a call waits):
    the operations in ``hang`` never answer within the attempt's read timeout, CreateHarness
    otherwise answers a CREATING harness, GetHarness ``status``, DeleteHarness 202."""

    def __init__(self, hang: set[str], status: str = "CREATING") -> None:
        self.hang, self.status = hang, status
        self.attempts: list[tuple[str, float, float]] = []  # (operation, start, read timeout)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        method, path = request.method, request.url.path
        operation = {
            ("POST", "/harnesses"): "CreateHarness",
            ("GET", "/harnesses"): "ListHarnesses",
        }.get((method, path)) or {"GET": "GetHarness", "DELETE": "DeleteHarness"}.get(method, method)
        read = float(request.extensions["timeout"]["read"])
        self.attempts.append((operation, anyio.current_time(), read))
        if operation in self.hang:
            await anyio.sleep(read)
            raise httpx.ReadTimeout("no answer", request=request)
        if operation == "CreateHarness":
            harness = {"arn": "arn:aws:bedrock-agentcore:us-east-1:1:harness/h-1", "harnessId": "h-1"}
            return httpx.Response(201, json={"harness": harness})
        if operation == "GetHarness":
            return httpx.Response(200, json={"harness": {"harnessId": "h-1", "status": self.status}})
        return httpx.Response(202, json={})

    def count(self, operation: str) -> int:
        return sum(1 for op, _, _ in self.attempts if op == operation)


def control_client(transport: Control) -> AgentCoreClient:
    return AgentCoreClient(
        region="us-east-1",
        credentials=StaticCredentialSource(Credentials("AKIDEXAMPLE", "secret")),
        data_url="http://agentcore.test",
        control_url="http://agentcore.test",
        http_client=httpx.AsyncClient(transport=transport),
    )


@pytest.mark.parametrize("budget", [1.0, 30.0])
async def test_B71_a_hanging_create_returns_its_error_inside_the_budget_though_the_client_retries(
    autojump_clock: trio.testing.MockClock, budget: float
) -> None:
    transport = Control(hang={"CreateHarness"})
    client = control_client(transport)
    started = anyio.current_time()
    try:
        got = await provision_harness(client, AGENT, STORAGE, execution_role_arn=ROLE, timeout=budget)
    finally:
        await client.aclose()
    elapsed = anyio.current_time() - started
    assert elapsed <= budget + 1e-6, elapsed  # was 3 attempts x the whole budget, plus backoff
    assert isinstance(got, Failure) and got.failure().kind == "transport_error"
    creates = [(t - started, read) for op, t, read in transport.attempts if op == "CreateHarness"]
    assert len(creates) >= 2  # the client did retry, inside the budget
    assert all(read < budget / 1.9 for _, read in creates)
    assert transport.count("DeleteHarness") == 0  # nothing known to roll back


async def test_B71_three_attempts_with_their_backoff_fill_a_roomy_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    transport = Control(hang={"CreateHarness"})
    client = control_client(transport)
    started = anyio.current_time()
    try:
        await provision_harness(client, AGENT, STORAGE, execution_role_arn=ROLE, timeout=60)
    finally:
        await client.aclose()
    creates = [read for op, _, read in transport.attempts if op == "CreateHarness"]
    assert len(creates) == 3 and creates[0] == pytest.approx((60 - 1.5) / 3)  # 0.5 s + 1 s of backoff
    assert anyio.current_time() - started <= 60


async def test_B71_hanging_polls_end_in_the_named_timeout_inside_the_budget(
    autojump_clock: trio.testing.MockClock,
) -> None:
    transport = Control(hang={"GetHarness"})
    client = control_client(transport)
    started = anyio.current_time()
    try:
        got = await provision_harness(client, AGENT, STORAGE, execution_role_arn=ROLE, timeout=10)
        waited = anyio.current_time() - started
    finally:
        await client.aclose()
    error = error_of(got)
    assert error.tag == "harness_ready_timeout" and error.context is not None
    assert error.context.phase is Phase.READY and error.context.polls == 0
    assert error.context.elapsed_s <= 10 and waited <= 10 + ROLLBACK_GRACE_S
    assert transport.count("DeleteHarness") == 1  # the created harness was rolled back


async def test_B65_a_waits_elapsed_counts_that_wait_not_the_whole_provision(
    mock_clock: trio.testing.MockClock, world: World
) -> None:
    world.emu.control.script_harness(NAME, endpoint_appear_after_s=math.inf)  # READY after 10 s
    started = anyio.current_time()
    error = error_of(await world.provision(timeout=60))
    total = anyio.current_time() - started
    assert error.tag == "endpoint_ready_timeout" and error.context is not None
    ready_phase = [m for n, m, md in world.events if n.endswith(".stop") and md["phase"] == "ready"]
    assert len(ready_phase) == 1 and ready_phase[0]["duration"] >= 10
    # The endpoint wait began after the READY wait: its elapsed leaves that part out.
    assert error.context.elapsed_s == pytest.approx(total - ready_phase[0]["duration"], abs=1.0)
    assert error.context.elapsed_s <= total - 10
