"""One artifact contract over both stores (A-1…A-3, A-10), and ``artifacts_for``.

Each store runs against its emulator: ``ClaudeFiles`` against the CMA emulator (the agent's
writes are session-scoped output files), ``SessionStorage`` against the AgentCore emulator
(its runtime commands really run; the agent's writes are files in the session's mount).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import pytest
from returns.result import Success

from rma.errors import InvalidOpts, NotFound, Unsupported
from rma.vocabulary import SessionInfo
from rma_shell.artifacts import (
    Artifact,
    ArtifactStore,
    ClaudeFiles,
    SessionStorage,
    artifacts_for,
    newest,
)
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.testing import AgentCoreEmulator, CMAEmulator

KEY = "sk-ant-test-facade"
AC_SESSION = "rma-session-facade-0123456789abcdef0123"


@attrs.frozen
class Rig:
    """One store under test, with how its agent writes a file and reads what ``put`` sent."""

    kind: str
    store: ArtifactStore
    agent_writes: Callable[[str, bytes], None]
    agent_reads: Callable[[Artifact], Awaitable[bytes]]
    request_count: Callable[[], int]


async def _cma_session(provider: ClaudeManagedAgents) -> str:
    client = provider.client().unwrap()
    agent = (await client.create_agent({"name": "a", "model": "claude-sonnet-4-6"})).unwrap()
    env = (await client.create_environment({"name": "e", "config": {"type": "cloud"}})).unwrap()
    session = await client.create_session({"agent": agent["id"], "environment_id": env["id"]})
    return str(session.unwrap()["id"])


def _agentcore(emu: AgentCoreEmulator, **kw: Any) -> BedrockAgentCore:
    kw.setdefault("harness_arn", emu.harness_arn)
    return BedrockAgentCore(
        data_url=emu.base_url, env=emu.credentials_env(), backoff_base=0.01, backoff_cap=0.02, **kw
    )


@pytest.fixture(params=["claude_files", "session_storage"])
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    if request.param == "claude_files":
        # uploads_downloadable: lets the test read back what the agent would see at the mount.
        with CMAEmulator(api_key=KEY, uploads_downloadable=True) as cma:
            provider = ClaudeManagedAgents(api_key=KEY, base_url=cma.base_url, env={})
            try:
                sid = await _cma_session(provider)
                store = artifacts_for(provider, SessionInfo(sid, "claude_managed_agents")).unwrap()
                client = provider.client().unwrap()

                def cma_writes(name: str, data: bytes) -> None:
                    cma.add_output_file(sid, name, data)

                async def cma_reads(artifact: Artifact) -> bytes:
                    mounts = {r["file_id"]: r["mount_path"] for r in cma.session(sid)["resources"]}
                    assert mounts[artifact.ref] == f"/mnt/session/uploads/{artifact.name}"
                    return (await client.download_file(str(artifact.ref))).unwrap()

                yield Rig("claude_files", store, cma_writes, cma_reads, lambda: len(cma.requests))
            finally:
                await provider.close()
    else:
        with AgentCoreEmulator() as ace:
            ac_provider = _agentcore(ace)
            try:
                store = artifacts_for(ac_provider, SessionInfo(AC_SESSION, "bedrock_agentcore")).unwrap()
                mount = ace.storage_dir(AC_SESSION)

                def ac_writes(name: str, data: bytes) -> None:
                    (mount / name).write_bytes(data)

                async def ac_reads(artifact: Artifact) -> bytes:
                    assert artifact.ref == f"/mnt/data/{artifact.name}"
                    return (mount / artifact.name).read_bytes()

                yield Rig("session_storage", store, ac_writes, ac_reads, lambda: len(ace.requests))
            finally:
                await ac_provider.close()


# ── the contract ──


async def test_A1_each_store_is_an_artifact_store(rig: Rig) -> None:
    assert isinstance(rig.store, ArtifactStore)
    assert isinstance(rig.store, ClaudeFiles if rig.kind == "claude_files" else SessionStorage)


async def test_A3_list_gives_json_encodable_artifacts(rig: Rig) -> None:
    rig.agent_writes("a.txt", b"abc")
    rig.agent_writes("b.bin", bytes(range(256)))
    listed = (await rig.store.list()).unwrap()
    by_name = {a.name: a for a in listed}
    assert sorted(by_name) == ["a.txt", "b.bin"]
    assert (by_name["a.txt"].size, by_name["b.bin"].size) == (3, 256)
    for artifact in listed:
        assert isinstance(artifact.ref, str) and artifact.ref
        assert artifact.created_at is not None and artifact.created_at.tzinfo is not None
        assert artifact.raw is not None
        assert Artifact.from_json(json.loads(json.dumps(artifact.to_json()))) == artifact


async def test_A2_fetch_gives_the_newest_write_of_a_name(rig: Rig) -> None:
    rig.agent_writes("report.md", b"first run")
    rig.agent_writes("report.md", b"second run")
    assert (await rig.store.fetch("report.md")).unwrap() == b"second run"


async def test_A2_delete_removes_it_and_missing_names_are_not_found(rig: Rig) -> None:
    rig.agent_writes("x.txt", b"x")
    assert await rig.store.delete("x.txt") == Success(None)
    missing = NotFound(resource="artifact", name="x.txt")
    assert (await rig.store.fetch("x.txt")).failure() == missing
    assert (await rig.store.delete("x.txt")).failure() == missing
    assert [a.name for a in (await rig.store.list()).unwrap()] == []


async def test_put_hands_the_bytes_to_the_agent(rig: Rig) -> None:
    data = b"id,plan\nc9,gold\n"
    put = (await rig.store.put("in.csv", data)).unwrap()
    assert (put.name, put.size) == ("in.csv", len(data)) and put.ref
    assert await rig.agent_reads(put) == data


@pytest.mark.parametrize("name", ["../x", "a/b", "", ".", "..", "a b", "it's", "é.txt", "a" * 256])
async def test_A10_names_are_refused_alike_before_any_request(name: str, rig: Rig) -> None:
    before = rig.request_count()
    for got in (await rig.store.fetch(name), await rig.store.put(name, b"x"), await rig.store.delete(name)):
        error = got.failure()
        assert isinstance(error, InvalidOpts) and error.option == "name"
    assert rig.request_count() == before


# ── artifacts_for ──


async def test_artifacts_for_picks_the_store_of_the_session() -> None:
    cma = ClaudeManagedAgents(api_key=KEY, base_url="http://127.0.0.1:9", env={})
    store = artifacts_for(cma, SessionInfo("sesn_1", "claude_managed_agents"), mount_dir="/in").unwrap()
    assert isinstance(store, ClaudeFiles) and (store.session_id, store.mount_dir) == ("sesn_1", "/in")
    ac = BedrockAgentCore(harness_arn="arn:aws:bedrock-agentcore:us-east-1:123456789012:harness/h-1", env={})
    got = artifacts_for(ac, SessionInfo(AC_SESSION, "bedrock_agentcore"), base_path="/mnt/s/").unwrap()
    assert isinstance(got, SessionStorage) and got.base_path == "/mnt/s"
    await cma.close()


async def test_artifacts_for_refuses_what_it_cannot_serve() -> None:
    cma = ClaudeManagedAgents(api_key=KEY, base_url="http://127.0.0.1:9", env={})
    not_open = artifacts_for(cma, SessionInfo(None, "claude_managed_agents")).failure()
    assert isinstance(not_open, InvalidOpts) and not_open.option == "info"
    crossed = artifacts_for(cma, SessionInfo("rma-x", "bedrock_agentcore")).failure()
    assert isinstance(crossed, InvalidOpts) and "bedrock_agentcore" in crossed.detail
    bad_dir = artifacts_for(cma, SessionInfo("sesn_1"), mount_dir="rel").failure()
    assert isinstance(bad_dir, InvalidOpts) and bad_dir.option == "mount_dir"
    assert isinstance(artifacts_for(object(), SessionInfo("s")).failure(), Unsupported)
    no_auth = artifacts_for(ClaudeManagedAgents(env={}), SessionInfo("sesn_1")).failure()
    assert isinstance(no_auth, InvalidOpts) and no_auth.option == "auth"
    await cma.close()


async def test_artifacts_for_an_agentcore_provider_built_from_a_handle_or_given_an_arn() -> None:
    with AgentCoreEmulator() as emu:
        (emu.storage_dir(AC_SESSION) / "r.txt").write_bytes(b"ok")
        info = SessionInfo(AC_SESSION, "bedrock_agentcore")
        handle = {"harness_arn": emu.harness_arn, "harness_id": emu.harness_id}
        from_handle = _agentcore(emu, harness_arn=None, harness=handle)
        bare = _agentcore(emu, harness_arn=None)
        try:
            assert (await artifacts_for(from_handle, info).unwrap().fetch("r.txt")).unwrap() == b"ok"
            given = artifacts_for(bare, info, harness_arn=emu.harness_arn).unwrap()
            assert (await given.fetch("r.txt")).unwrap() == b"ok"
            without = await artifacts_for(bare, info).unwrap().fetch("r.txt")
            assert isinstance(without.failure(), InvalidOpts)  # no harness ARN anywhere
        finally:
            await from_handle.close()
            await bare.close()


# ── the value ──


def test_A3_artifact_defaults_timestamps_and_json() -> None:
    bare = Artifact("x")
    assert (bare.size, bare.ref, bare.created_at, bare.raw) == (None, None, None, None)
    assert bare.to_json() == {"name": "x", "size": None, "ref": None, "created_at": None, "raw": None}
    naive = Artifact("x", created_at=datetime(2026, 7, 3, 12, 0))
    assert naive.created_at == datetime(2026, 7, 3, 12, 0, tzinfo=UTC)
    text = Artifact("x", created_at="2026-07-03T14:00:00+02:00")
    assert text.created_at == naive.created_at
    with pytest.raises(ValueError, match="created_at"):
        Artifact("x", created_at="yesterday")
    hash(Artifact("x", raw={"a": [1]}))  # a dict in raw does not make the value unhashable


def test_A2_newest_breaks_ties_by_listing_order_and_ranks_missing_times_oldest() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    offset = timezone(timedelta(hours=5))
    items = [
        Artifact("r", ref="none"),
        Artifact("r", ref="tie-1", created_at=t),
        Artifact("r", ref="tie-2", created_at=t.astimezone(offset)),
        Artifact("other", ref="later", created_at=t + timedelta(days=1)),
    ]
    found = newest(items, "r")
    assert found is not None and found.ref == "tie-1"
    assert newest(items, "missing") is None
    only_untimed = newest(items[:1], "r")
    assert only_untimed is not None and only_untimed.ref == "none"
