"""The emulator's work queue as the SDK's own client sees it (the SDK is the oracle): poll,
ack, heartbeat and stop parse as ``BetaSelfHostedWork`` / ``BetaSelfHostedWorkHeartbeatResponse``,
an empty poll is None, a stale ``expected_last_heartbeat`` is a 412 whose body carries the lease
as the server holds it — and rma's requests to the same endpoints match the SDK's."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from anthropic.types.beta.environments import BetaSelfHostedWork, BetaSelfHostedWorkHeartbeatResponse
from returns.result import Success

from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.claude.work import NO_HEARTBEAT, WorkQueue, lease_lost, server_lease
from rma_shell.testing.claude import CMAEmulator, text_turn
from tests.environments._setup import KEY, self_hosted, start_session

pytestmark = pytest.mark.anyio


def _calls(emu: CMAEmulator, since: int) -> list[tuple[str, str, Any]]:
    out = []
    for r in emu.requests[since:]:
        path, _, query = r.path.partition("?")
        keys = sorted(k for k, _, _ in (p.partition("=") for p in query.split("&") if p))
        out.append((r.method, path.rsplit("/", 1)[-1] if "/work/" in path else path, (keys, r.body)))
    return out


async def test_the_sdk_drives_the_emulators_work_queue_and_rma_sends_what_it_sends(
    anyio_backend: Any,
) -> None:
    with CMAEmulator(script=[text_turn("hi"), text_turn("again")]) as emu:
        agent_id, env_id = self_hosted(emu)
        start_session(emu, agent_id, env_id)
        sdk = anthropic.AsyncAnthropic(api_key=KEY, base_url=emu.base_url, max_retries=0)
        work = sdk.beta.environments.work
        mark = len(emu.requests)
        item = await work.poll(env_id)
        assert isinstance(item, BetaSelfHostedWork) and item.state == "queued" and item.data.type == "session"
        acked = await work.ack(item.id, environment_id=env_id)
        assert acked.state == "starting"
        beat = await work.heartbeat(item.id, environment_id=env_id, expected_last_heartbeat=NO_HEARTBEAT)
        assert (
            isinstance(beat, BetaSelfHostedWorkHeartbeatResponse)
            and beat.lease_extended
            and beat.state == "active"
        )
        with pytest.raises(anthropic.APIStatusError) as refused:
            await work.heartbeat(item.id, environment_id=env_id, expected_last_heartbeat="stale")
        assert refused.value.status_code == 412
        lease = refused.value.body["error"]["details"]["current_state"]  # type: ignore[index]
        assert lease["last_heartbeat"] == beat.last_heartbeat and lease["lease_extended"] is False
        await work.stop(item.id, environment_id=env_id, force=True)
        with pytest.raises(anthropic.APIStatusError) as again:
            await work.stop(item.id, environment_id=env_id, force=True)
        assert again.value.status_code == 409
        assert await work.poll(env_id) is None
        sdk_calls = _calls(emu, mark)
        await sdk.close()

        # The same sequence through rma's wire.
        start_session(emu, agent_id, env_id)
        host = ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={}, max_retries=0)
        queue = WorkQueue(host.client().unwrap(), env_id)
        mark = len(emu.requests)
        got = (await queue.poll()).unwrap()
        assert got is not None
        await queue.ack(got["id"])
        first = (await queue.heartbeat(got["id"], NO_HEARTBEAT)).unwrap()
        stale = await queue.heartbeat(got["id"], "stale")
        assert lease_lost(stale.failure())
        assert server_lease(stale.failure())["last_heartbeat"] == first.last_heartbeat  # type: ignore[index]
        assert isinstance(await queue.stop(got["id"]), Success)
        assert (await queue.stop(got["id"])).failure().status == 409  # type: ignore[attr-defined]
        assert (await queue.poll()).unwrap() is None
        ours = _calls(emu, mark)
        await host.close()
    # Same methods, endpoints, query names and bodies (the SDK's poll sends block_ms only when given).
    strip = [(m, p, ([k for k in q if k != "block_ms"], b)) for m, p, (q, b) in ours]
    assert [(m, p) for m, p, _ in strip] == [(m, p) for m, p, _ in sdk_calls]
    assert [x[2] for x in strip] == [x[2] for x in sdk_calls]
