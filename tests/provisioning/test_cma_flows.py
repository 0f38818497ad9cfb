"""Claude Managed Agents provisioning flows against the loopback emulator (V-10…V-39, C-22…C-25).

Every test goes through the public API (``ensure_agent``, ``ensure_environment``, ``tag``,
``resolve``, ``prune``, ``provision``, ``teardown``) and counts what reached the wire in
``emu.requests``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pytest
from returns.result import Failure, Success

from rma.config import AnthropicSettings, ApiKeyAuth, Secret
from rma.errors import HttpError, InvalidOpts
from rma.provisioning import AgentSpec, EnvironmentSpec, InvalidSpec, UnknownTag, UntrackedDigest
from rma.provisioning.flow_errors import (
    AgentArchived,
    AgentBaseTooLong,
    AgentNameConflict,
    EnvironmentArchived,
    EnvironmentBaseTooLong,
    KeepRequired,
    ProvisionFailed,
    PrunePartial,
    TeardownFailed,
    UnexpectedCreateResponse,
)
from rma.provisioning.runtimes import bootstrap, required_hosts
from rma_shell import run
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.claude.client import CMAClient
from rma_shell.providers.claude.provisioning import (
    AgentHandle,
    EnvironmentHandle,
    Provisioned,
    Pruned,
    ensure_agent,
    ensure_environment,
    provision,
    prune,
    resolve,
    tag,
    teardown,
)
from rma_shell.seams import Seams
from rma_shell.stores import MemoryStore, SqliteStore, StoreError, StoreKey
from rma_shell.testing.claude import CMAEmulator, status_once, text_turn

KEY = "sk-ant-flows-31d7"
LOOKUP = {
    "name": "lookup_customer",
    "description": "Fetch a customer row",
    "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}},
}
RUNTIMES = [{"lang": "erlang", "version": "27.1.2"}, {"lang": "elixir", "version": "1.17.3"}]
LIMITED = {"type": "cloud", "networking": {"type": "limited", "allowed_hosts": ["pypi.org"]}}


def agent_spec(prompt: str = "You triage tickets.", name: str = "support_bot") -> AgentSpec:
    return AgentSpec.create(
        name, system_prompt=prompt, tools=[LOOKUP], model_config="claude-sonnet-4-6"
    ).unwrap()


def env_spec(name: str | None = "sandbox", **kw: Any) -> EnvironmentSpec:
    return EnvironmentSpec.create(name, **kw).unwrap()


async def _no_sleep(_delay: float) -> None:
    return None


class Racer(httpx.AsyncBaseTransport):
    """Forwards to the emulator; before the first create of a matching path, a "competitor"
    creates the same resource, then ``fillers`` newer ones — the race a 409 recovers from."""

    def __init__(self, path: str = "", fillers: int = 0) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.path = path
        self.fillers = fillers
        self.competitor_id: str | None = None

    async def _post(self, request: httpx.Request, body: dict[str, Any]) -> dict[str, Any]:
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        extra = httpx.Request("POST", request.url, headers=headers, json=body)
        response = await self.inner.handle_async_request(extra)
        data: dict[str, Any] = json.loads(await response.aread())
        return data

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == self.path and self.competitor_id is None:
            body = json.loads(request.content)
            self.competitor_id = str((await self._post(request, body))["id"])
            for i in range(self.fillers):
                await self._post(request, {**body, "name": f"filler_{i}"})
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def emulated(
    script: Any = (), transport: httpx.AsyncBaseTransport | None = None, **kw: Any
) -> AsyncIterator[tuple[CMAEmulator, CMAClient]]:
    with CMAEmulator(script, api_key=KEY, **kw) as emu:
        http = httpx.AsyncClient(transport=transport) if transport else httpx.AsyncClient()
        settings = AnthropicSettings(auth=ApiKeyAuth(Secret(KEY)), base_url=emu.base_url)
        try:
            yield (
                emu,
                CMAClient(
                    settings,
                    http_client=http,
                    _seams=Seams(sleep=_no_sleep),
                ),
            )
        finally:
            await http.aclose()


def calls(emu: CMAEmulator, method: str, path: str, since: int = 0) -> list[Any]:
    return [r for r in emu.requests[since:] if r.method == method and urlsplit(r.path).path == path]


def archives(emu: CMAEmulator, since: int = 0) -> list[str]:
    """Ids archived, in order."""
    out = []
    for r in emu.requests[since:]:
        parts = urlsplit(r.path).path.strip("/").split("/")
        if r.method == "POST" and len(parts) == 4 and parts[3] == "archive":
            out.append(parts[2])
    return out


async def seed(client: CMAClient, kind: str, name: str, *, archived: bool = False) -> str:
    if kind == "agent":
        made = (await client.create_agent({"name": name, "model": "claude-sonnet-4-6"})).unwrap()
    else:
        made = (await client.create_environment({"name": name})).unwrap()
    assert isinstance(made, dict)
    if archived:
        archive = client.archive_agent if kind == "agent" else client.archive_environment
        (await archive(made["id"])).unwrap()
    return str(made["id"])


AGENT_KEY = StoreKey(provider="claude_managed_agents", kind="agent", base="support_bot")


# --- ensure_agent ----------------------------------------------------------------------------


async def test_V21_an_agent_is_created_once_then_reused_from_the_store_without_any_call() -> None:
    store = MemoryStore()
    spec = agent_spec()
    async with emulated() as (emu, client):
        first = (await ensure_agent(client, spec, store=store)).unwrap()
        mark = len(emu.requests)
        again = (await ensure_agent(client, spec, store=store)).unwrap()
        assert emu.requests[mark:] == []  # V-27: a hit neither lists nor creates
        [create] = calls(emu, "POST", "/v1/agents")
    assert again == first
    assert first.name == f"support_bot_{spec.digest[:8]}" and first.digest == spec.digest
    assert first.version == 1 and first.agent_id.startswith("agent_")
    assert create.body == {
        "name": first.name,
        "model": "claude-sonnet-4-6",
        "system": "You triage tickets.",
        "tools": [{"type": "custom", **LOOKUP}],
    }
    record = store.get(AGENT_KEY, spec.digest)
    assert record is not None and record.remote_id == first.agent_id


async def test_V31_a_changed_spec_makes_a_new_agent_beside_the_old_one() -> None:
    store = MemoryStore()
    async with emulated() as (emu, client):
        old = (await ensure_agent(client, agent_spec("v1"), store=store)).unwrap()
        new = (await ensure_agent(client, agent_spec("v2"), store=store)).unwrap()
        assert len(calls(emu, "POST", "/v1/agents")) == 2
    assert new.agent_id != old.agent_id and new.name != old.name
    assert set(store.digests(AGENT_KEY)) == {old.digest, new.digest}


async def test_V21_a_live_same_name_agent_is_adopted_when_the_store_is_empty_on_any_page() -> None:
    spec = agent_spec()
    name = f"support_bot_{spec.digest[:8]}"
    async with emulated() as (emu, client):
        existing = await seed(client, "agent", name)  # the oldest: on the last page
        for i in range(5):
            await seed(client, "agent", f"other_{i}")
        mark = len(emu.requests)
        handle = (await ensure_agent(client, spec, store=MemoryStore(), page_limit=2)).unwrap()
        assert calls(emu, "POST", "/v1/agents", mark) == []
        assert len(calls(emu, "GET", "/v1/agents", mark)) == 3
    assert handle.agent_id == existing and handle.name == name


async def test_V23_a_409_recovers_by_exact_name_over_every_page_and_adopts_the_live_agent() -> None:
    racer = Racer("/v1/agents", fillers=5)
    store = MemoryStore()
    async with emulated(transport=racer, unique_names=True) as (emu, client):
        handle = (await ensure_agent(client, agent_spec(), store=store, page_limit=2)).unwrap()
        posts = calls(emu, "POST", "/v1/agents")
        lists = calls(emu, "GET", "/v1/agents")
    assert handle.agent_id == racer.competitor_id
    assert len(posts) == 7  # competitor + 5 fillers + ours (409)
    pages = [parse_qs(urlsplit(r.path).query) for r in lists]
    assert all(p["limit"] == ["2"] and p["include_archived"] == ["true"] for p in pages)
    assert len(lists) == 1 + 3  # the empty pre-create page, then 6 agents in pages of 2, ours last
    assert store.get(AGENT_KEY, handle.digest) is not None


async def test_V23_a_409_with_only_archived_matches_is_agent_archived_and_nothing_is_stored() -> None:
    spec = agent_spec()
    name = f"support_bot_{spec.digest[:8]}"
    store = MemoryStore()
    async with emulated(unique_names=True) as (_emu, client):
        gone = await seed(client, "agent", name, archived=True)
        for i in range(3):
            await seed(client, "agent", f"other_{i}")
        result = await ensure_agent(client, spec, store=store, page_limit=2)
    assert result == Failure(AgentArchived(name=name, archived_ids=(gone,)))
    assert result.failure().kind == "agent_archived"
    assert store.digests(AGENT_KEY) == []


async def test_V28_an_environment_409_with_only_archived_matches_is_environment_archived() -> None:
    spec = env_spec(config=LIMITED)
    name = f"sandbox_{spec.digest[:8]}"
    async with emulated(unique_names=True) as (_emu, client):
        gone = await seed(client, "environment", name, archived=True)
        result = await ensure_environment(client, spec, store=MemoryStore())
    assert result == Failure(EnvironmentArchived(name=name, archived_ids=(gone,)))
    assert result.failure().kind == "environment_archived"


async def test_V23_a_409_with_no_match_at_all_is_a_name_conflict() -> None:
    async with emulated(faults=[status_once(409, method="POST", path="^/v1/agents$")]) as (_emu, client):
        result = await ensure_agent(client, agent_spec(), store=MemoryStore())
    assert isinstance(result, Failure) and isinstance(result.failure(), AgentNameConflict)
    assert result.failure().kind == "agent_name_conflict"


async def test_V24_other_create_errors_pass_through_unchanged() -> None:
    async with emulated(faults=[status_once(403, method="POST", path="^/v1/agents$")]) as (_emu, client):
        result = await ensure_agent(client, agent_spec(), store=MemoryStore())
    assert isinstance(result, Failure) and isinstance(result.failure(), HttpError)
    assert result.failure().status == 403


async def test_V22_a_2xx_create_without_an_id_is_a_typed_error() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"data": [], "next_page": None})
        return httpx.Response(200, json={"type": "agent", "name": "x"})

    http = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    settings = AnthropicSettings(auth=ApiKeyAuth(Secret(KEY)), base_url="http://127.0.0.1:9")
    client = CMAClient(
        settings,
        http_client=http,
        _seams=Seams(sleep=_no_sleep),
    )
    result = await ensure_agent(client, agent_spec(), store=MemoryStore())
    await http.aclose()
    assert isinstance(result, Failure) and isinstance(result.failure(), UnexpectedCreateResponse)
    assert result.failure().response == {"type": "agent", "name": "x"}


async def test_V20_a_base_that_fits_is_kept_whole_and_one_byte_more_is_refused_before_any_call() -> None:
    spec = agent_spec()
    async with emulated() as (emu, client):
        fits = (await ensure_agent(client, spec, store=MemoryStore(), base="b" * 247)).unwrap()
        mark = len(emu.requests)
        too_long = await ensure_agent(client, spec, store=MemoryStore(), base="b" * 248)
        env_too_long = await ensure_environment(client, env_spec(), store=MemoryStore(), base="é" * 124)
        assert emu.requests[mark:] == []
    assert len(fits.name.encode()) == 256 and fits.name.startswith("b" * 247 + "_")
    assert too_long == Failure(AgentBaseTooLong(base="b" * 248, max_bytes=256))
    assert isinstance(env_too_long, Failure) and isinstance(env_too_long.failure(), EnvironmentBaseTooLong)


async def test_V20_V25_a_spec_without_a_model_or_an_invalid_environment_fails_before_any_call() -> None:
    async with emulated() as (emu, client):
        no_model = await ensure_agent(client, {"name": "bot"}, store=MemoryStore())
        no_env = await ensure_environment(client, None, store=MemoryStore())
        bad_env = await ensure_environment(
            client, {"runtimes": [{"lang": "x", "version": "1;id"}]}, store=MemoryStore()
        )
        assert emu.requests == []
    assert isinstance(no_model, Failure) and no_model.failure().path == "model_config"
    assert isinstance(no_env, Failure) and isinstance(no_env.failure(), InvalidSpec)
    assert isinstance(bad_env, Failure) and bad_env.failure().path == "runtimes[0].version"


async def test_V13_a_failing_store_never_blocks_and_the_name_lookup_prevents_a_duplicate() -> None:
    class Broken(MemoryStore):
        def claim(self, *_a: Any, **_k: Any) -> Any:
            raise StoreError("disk full")

    store = Broken()
    async with emulated() as (emu, client):
        first = (await ensure_agent(client, agent_spec(), store=store)).unwrap()
        again = (await ensure_agent(client, agent_spec(), store=store)).unwrap()
        assert len(calls(emu, "POST", "/v1/agents")) == 1
    assert again == first


async def test_concurrent_ensures_of_one_spec_create_it_once() -> None:
    store = MemoryStore()
    got: list[AgentHandle] = []

    async def one(client: CMAClient) -> None:
        got.append((await ensure_agent(client, agent_spec(), store=store)).unwrap())

    async with emulated() as (emu, client):
        async with anyio.create_task_group() as nursery:
            for _ in range(4):
                nursery.start_soon(one, client)
        assert len(calls(emu, "POST", "/v1/agents")) == 1
    assert len(got) == 4 and len(set(got)) == 1


# --- ensure_environment: runtimes ------------------------------------------------------------


async def test_V29_V30_runtimes_merge_into_limited_networking_and_the_bootstrap_rides_the_handle() -> None:
    spec = env_spec(config=LIMITED, runtimes=RUNTIMES)
    store = MemoryStore()
    async with emulated() as (emu, client):
        handle = (await ensure_environment(client, spec, store=store)).unwrap()
        hit = (await ensure_environment(client, spec, store=store)).unwrap()
        [create] = calls(emu, "POST", "/v1/environments")
        stored = (await client.get_environment(handle.environment_id)).unwrap()
    hosts = ["pypi.org", *required_hosts(spec.runtimes)]
    assert create.body == {
        "name": f"sandbox_{spec.digest[:8]}",
        "config": {"type": "cloud", "networking": {"type": "limited", "allowed_hosts": hosts}},
    }
    assert "runtimes" not in json.dumps(create.body)
    assert stored["config"]["networking"]["allowed_hosts"] == hosts
    assert handle.bootstrap == bootstrap(RUNTIMES) and handle.bootstrap is not None
    assert "elixir@1.17.3-otp-27" in handle.bootstrap.script
    assert hit == handle  # V-30: on the store-hit path too
    assert "bootstrap" not in handle.to_json()


async def test_V26_V31_an_environment_base_defaults_to_its_name_then_env_and_no_runtimes_no_bootstrap() -> (
    None
):
    async with emulated() as (_emu, client):
        named = (await ensure_environment(client, env_spec(), store=MemoryStore())).unwrap()
        unnamed = (await ensure_environment(client, env_spec(None), store=MemoryStore())).unwrap()
        based = (await ensure_environment(client, env_spec(), store=MemoryStore(), base="lab")).unwrap()
    assert named.name.startswith("sandbox_") and unnamed.name.startswith("env_")
    assert based.name.startswith("lab_") and named.digest == based.digest
    assert named.bootstrap is None


# --- tags and resolve ------------------------------------------------------------------------


async def test_V32_V33_V34_tag_resolve_and_retag_never_fall_back(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "rma.sqlite3")
    async with emulated() as (_emu, client):
        v1 = (await ensure_agent(client, agent_spec("v1"), store=store)).unwrap()
        v2 = (await ensure_agent(client, agent_spec("v2"), store=store)).unwrap()
    assert tag(store, "agent", "support_bot", "prod", v1) == Success(None)
    assert resolve(store, "support_bot:prod", "agent") == Success(v1)
    assert tag(store, "agent", "support_bot", "prod", v2.digest[:8]) == Success(None)  # retag moves
    assert resolve(store, "support_bot:prod", "agent") == Success(v2)
    assert tag(store, "agent", "support_bot", "release:2024.1", v1) == Success(None)
    assert resolve(store, "support_bot:release:2024.1", "agent") == Success(v1)  # split on the first colon
    assert resolve(store, "support_bot:staging", "agent") == Failure(
        UnknownTag(base="support_bot", tag="staging")
    )
    untracked = tag(store, "agent", "support_bot", "x", "0" * 64)
    assert isinstance(untracked, Failure) and isinstance(untracked.failure(), UntrackedDigest)
    wrong_kind = tag(store, "environment", "support_bot", "x", v1)
    assert isinstance(wrong_kind, Failure) and isinstance(wrong_kind.failure(), InvalidOpts)
    store.delete(AGENT_KEY, [v2.digest])
    gone = resolve(store, "support_bot:prod", "agent")
    assert isinstance(gone, Failure) and isinstance(gone.failure(), UntrackedDigest)
    store.close()


async def test_V34_a_resolved_environment_gets_its_bootstrap_back() -> None:
    store = MemoryStore()
    async with emulated() as (_emu, client):
        handle = (await ensure_environment(client, env_spec(runtimes=RUNTIMES), store=store)).unwrap()
    assert tag(store, "environment", "sandbox", "prod", handle) == Success(None)
    resolved = resolve(store, "sandbox:prod", "environment").unwrap()
    assert isinstance(resolved, EnvironmentHandle)
    assert resolved == handle and resolved.bootstrap == bootstrap(RUNTIMES)


# --- prune -----------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [None, 0, -1, True, 1.5, "2"])
async def test_V35_prune_requires_keep_as_an_integer_above_zero(keep: Any) -> None:
    async with emulated() as (emu, client):
        result = await prune(client, MemoryStore(), "agent", "support_bot", keep=keep)
        assert emu.requests == []
    assert result == Failure(KeepRequired(keep=repr(keep)))


async def _four_versions(client: CMAClient, store: Any) -> list[AgentHandle]:
    return [(await ensure_agent(client, agent_spec(f"v{i}"), store=store)).unwrap() for i in range(4)]


async def test_V36_V38_prune_keeps_the_newest_and_the_tagged_and_archives_the_rest_oldest_first() -> None:
    store = MemoryStore()
    async with emulated() as (emu, client):
        v = await _four_versions(client, store)
        lookalike = await seed(client, "agent", "support_bot_extra_0123abcd")  # another base
        short = await seed(client, "agent", "support_bot_0123abc")  # 7 hex: not a version
        assert tag(store, "agent", "support_bot", "golden", v[0]) == Success(None)
        mark = len(emu.requests)
        result = await prune(client, store, "agent", "support_bot", keep=1, page_limit=2)
        archived = archives(emu, mark)
        listed = (await client.list_agents()).unwrap()
    assert result == Success(Pruned(archived=(v[1].name, v[2].name), kept=(v[3].name, v[0].name)))
    assert archived == [v[1].agent_id, v[2].agent_id]  # oldest first
    assert {a["id"] for a in listed} >= {v[0].agent_id, v[3].agent_id, lookalike, short}
    assert set(store.digests(AGENT_KEY)) == {v[0].digest, v[3].digest}  # V-37: evicted after archive


async def test_V38_an_archive_failure_stops_the_prune_and_reports_what_was_archived() -> None:
    store = MemoryStore()
    async with emulated() as (emu, client):
        v = await _four_versions(client, store)
        emu.inject(status_once(403, method="POST", path=f"/v1/agents/{v[1].agent_id}/archive"))
        result = await prune(client, store, "agent", "support_bot", keep=1)
    assert isinstance(result, Failure)
    error = result.failure()
    assert isinstance(error, PrunePartial)
    assert error.archived == (v[0].name,) and error.failed == v[1].name
    assert isinstance(error.reason, HttpError) and error.reason.status == 403
    assert set(store.digests(AGENT_KEY)) == {v[1].digest, v[2].digest, v[3].digest}


async def test_V36_prune_works_on_environments_by_their_base() -> None:
    store = MemoryStore()
    async with emulated() as (_emu, client):
        old = (await ensure_environment(client, env_spec(config={"type": "cloud"}), store=store)).unwrap()
        new = (await ensure_environment(client, env_spec(config=LIMITED), store=store)).unwrap()
        result = await prune(client, store, "environment", "sandbox", keep=1)
    assert result == Success(Pruned(archived=(old.name,), kept=(new.name,)))


# --- provision / teardown --------------------------------------------------------------------


async def test_V10_provision_creates_both_once_then_reuses_and_the_handles_drive_a_session(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "rma.sqlite3")
    spec, env = agent_spec(), env_spec(config=LIMITED, runtimes=RUNTIMES)
    async with emulated([text_turn("Ready.")]) as (emu, client):
        first = (await provision("claude_managed_agents", client, spec, env, store=store)).unwrap()
        mark = len(emu.requests)
        again = (await provision("claude_managed_agents", client, spec, env, store=store)).unwrap()
        assert emu.requests[mark:] == []
        provider = ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={}, client=client)
        outcome = await run(
            provider, handler=lambda *_: "", prompt="hi", agent=first.agent, environment=first.environment
        )
        [session] = calls(emu, "POST", "/v1/sessions")
    store.close()
    assert (
        again == first and first.created == (first.agent.name, first.environment.name) and again.created == ()
    )
    assert first.environment.bootstrap == bootstrap(RUNTIMES)
    assert outcome.unwrap().text == "Ready."
    assert session.body["agent"] == first.agent_id and session.body["environment_id"] == first.environment_id


async def test_C23_provision_without_an_environment_makes_the_default_named_after_the_agent() -> None:
    async with emulated() as (emu, client):
        made = (await provision("claude_managed_agents", client, agent_spec(), store=MemoryStore())).unwrap()
        [create] = calls(emu, "POST", "/v1/environments")
    assert made.environment.name.startswith("support_bot_env_")
    assert create.body["config"] == {"type": "cloud", "networking": {"type": "unrestricted"}}


async def test_C24_an_environment_failure_archives_the_agent_this_call_created_and_evicts_it() -> None:
    store = MemoryStore()
    spec = agent_spec()
    fault = status_once(400, method="POST", path="^/v1/environments$")
    async with emulated(faults=[fault]) as (_emu, client):
        result = await provision("claude_managed_agents", client, spec, env_spec(), store=store)
        agents = (await client.list_agents(include_archived=True)).unwrap()
    assert isinstance(result, Failure)
    error = result.failure()
    assert isinstance(error, ProvisionFailed) and error.step == "environment"
    assert isinstance(error.reason, HttpError) and error.reason.status == 400
    [agent] = agents
    assert error.rolled_back == (agent["name"],) and agent["archived_at"]
    assert store.get(AGENT_KEY, spec.digest) is None


async def test_C24_a_rollback_never_archives_an_agent_this_call_only_reused() -> None:
    store = MemoryStore()
    async with emulated() as (emu, client):
        kept = (await ensure_agent(client, agent_spec(), store=store)).unwrap()
        emu.inject(status_once(400, method="POST", path="^/v1/environments$"))
        result = await provision("claude_managed_agents", client, agent_spec(), env_spec(), store=store)
        live = (await client.get_agent(kept.agent_id)).unwrap()
    assert isinstance(result, Failure) and result.failure().rolled_back == ()
    assert live["archived_at"] is None
    assert store.get(AGENT_KEY, kept.digest) is not None


async def test_V12_provision_validates_everything_before_the_first_create() -> None:
    async with emulated() as (emu, client):
        bad_env = await provision(
            "claude_managed_agents", client, agent_spec(), {"config": "nope"}, store=MemoryStore()
        )
        long_env = await provision(
            "claude_managed_agents",
            client,
            agent_spec(),
            env_spec(),
            store=MemoryStore(),
            environment_base="e" * 300,
        )
        other = await provision("bedrock_agent_core", client, agent_spec(), store=MemoryStore())
        assert emu.requests == []
    assert isinstance(bad_env, Failure) and isinstance(bad_env.failure(), InvalidSpec)
    assert isinstance(long_env, Failure) and isinstance(long_env.failure(), EnvironmentBaseTooLong)
    assert isinstance(other, Failure) and isinstance(other.failure(), InvalidOpts)


async def test_C25_V15_teardown_archives_both_and_evicts_their_records() -> None:
    store = MemoryStore()
    async with emulated() as (emu, client):
        made = (
            await provision("claude_managed_agents", client, agent_spec(), env_spec(), store=store)
        ).unwrap()
        result = await teardown(client, store, made)
        archived = archives(emu)
        again = (
            await provision("claude_managed_agents", client, agent_spec(), env_spec(), store=store)
        ).unwrap()
    assert result == Success((made.agent.name, made.environment.name))
    assert archived == [made.agent_id, made.environment_id]
    assert again.agent_id != made.agent_id  # evicted: a fresh provision builds anew


async def test_C25_a_teardown_failure_is_reported_after_trying_everything_and_keeps_that_record() -> None:
    store = MemoryStore()
    async with emulated() as (emu, client):
        made = (
            await provision("claude_managed_agents", client, agent_spec(), env_spec(), store=store)
        ).unwrap()
        emu.inject(status_once(403, method="POST", path=f"/v1/environments/{made.environment_id}/archive"))
        result = await teardown(client, store, [made.agent, made.environment])
    assert isinstance(result, Failure)
    error = result.failure()
    assert isinstance(error, TeardownFailed) and error.archived == (made.agent.name,)
    [(name, reason)] = error.failures
    assert name == made.environment.name and isinstance(reason, HttpError)
    env_key = StoreKey(provider="claude_managed_agents", kind="environment", base="sandbox")
    assert store.get(env_key, made.environment.digest) is not None
    assert store.get(AGENT_KEY, made.agent.digest) is None


async def test_V11_a_failed_provision_is_not_cached_and_a_later_call_retries() -> None:
    store = MemoryStore()
    async with emulated(faults=[status_once(403, method="POST", path="^/v1/agents$")]) as (emu, client):
        failed = await provision("claude_managed_agents", client, agent_spec(), env_spec(), store=store)
        retried = await provision("claude_managed_agents", client, agent_spec(), env_spec(), store=store)
        assert len(calls(emu, "POST", "/v1/agents")) == 2
    assert isinstance(failed, Failure) and isinstance(failed.failure(), ProvisionFailed)
    assert failed.failure().step == "agent"
    assert isinstance(retried, Success)


async def test_V39_a_listing_failure_passes_through_from_ensure_and_prune() -> None:
    listing = status_once(403, method="GET", path="^/v1/agents$", times=2)
    async with emulated(faults=[listing]) as (emu, client):
        ensured = await ensure_agent(client, agent_spec(), store=MemoryStore())
        pruned = await prune(client, MemoryStore(), "agent", "support_bot", keep=1)
        assert calls(emu, "POST", "/v1/agents") == []
    for result in (ensured, pruned):
        assert isinstance(result, Failure) and isinstance(result.failure(), HttpError)
        assert result.failure().status == 403


def test_V6_handles_are_frozen_values_a_session_reads_by_id() -> None:
    from rma.session.options import lift_handles

    a = AgentHandle(agent_id="agent_1", name="n_0", digest="0" * 64, version=1)
    e = EnvironmentHandle(environment_id="env_1", name="e_0", digest="1" * 64)
    assert lift_handles({"agent": a, "environment": e}) == {
        "agent": a,
        "environment": e,
        "agent_id": "agent_1",
        "environment_id": "env_1",
    }
    both = Provisioned(agent=a, environment=e)
    assert lift_handles({"agent": both, "environment": both})["environment_id"] == "env_1"
    with pytest.raises(AttributeError):
        a.agent_id = "x"  # type: ignore[misc]
