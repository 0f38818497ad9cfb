"""rma says who it is (issue #23): every request on a connection rma opens itself carries
``User-Agent: rma-agents/<version>`` — the lean lanes and the httpx clients it builds, on all
three hosts, their streams, commands, control planes and provisioning included — while a
caller's own ``http_client`` keeps its own headers. Checked on what each loopback emulator
received."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from importlib.metadata import version
from typing import Any

import httpx
import pytest

from rma.provisioning import AgentSpec
from rma.wire.sigv4 import Credentials
from rma_shell import run
from rma_shell.aws_credentials import StaticCredentialSource
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.agentcore.client import AgentCoreClient
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.provisioning import provision
from rma_shell.seams import Seams
from rma_shell.stores import MemoryStore
from rma_shell.testing import CMAEmulator, OpenAIEmulator, cma
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.transport.http import user_agent
from tests.helpers import cma_agent_and_environment

KEY = "sk-ant-test-agent"
SID = "rma-session-0123456789abcdef0123456789"
TOOLS = [{"name": "look", "description": "Looks", "input_schema": {"type": "object"}}]
MINE = "my-app/7.0"
MODEL = "claude-sonnet-4-6"


def look(name: str, input: dict[str, Any], ctx: object) -> str:
    return "seen"


def agents(requests: Sequence[Any]) -> set[str | None]:
    return {r.headers.get("user-agent") for r in requests}


@pytest.fixture(params=["lean", "proxied"])
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The providers' own connections: lean lanes, or httpx while the environment configures
    a proxy (loopback bypasses it through NO_PROXY, so the calls still reach the emulator)."""
    if request.param == "proxied":
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    yield request.param


def test_the_user_agent_is_the_distribution_and_its_installed_version() -> None:
    assert user_agent() == f"rma-agents/{version('rma-agents')}"


async def test_local_sends_rmas_user_agent(transport: str) -> None:
    turns: list[Any] = [{"tool_calls": [{"id": "c", "name": "look", "arguments": {}}]}, {"content": "ok"}]
    for stream in (False, True):
        with OpenAIEmulator(turns, api_key=KEY) as emu:
            provider = Local(
                base_url=emu.base_url,
                model="m",
                api_key=KEY,
                tools=TOOLS,
                stream=stream,
                _seams=Seams(rand=lambda: 0.0),
            )
            try:
                assert (await run(provider, handler=look, prompt="go")).unwrap().text == "ok"
            finally:
                await provider.close()
            assert len(emu.requests) == 2 and agents(emu.requests) == {user_agent()}


async def test_claude_managed_agents_sends_rmas_user_agent_on_calls_streams_and_provisioning(
    transport: str,
) -> None:
    script = [cma.tool_turn(("look", {})), cma.text_turn("ok")]
    with CMAEmulator(script, api_key=KEY) as emu:
        ids = cma_agent_and_environment(emu, KEY)  # set up with httpx's own client: not counted
        since = len(emu.requests)
        provider = ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={}, **ids)
        try:
            assert (await run(provider, handler=look, prompt="go")).unwrap().text == "ok"
            spec = AgentSpec.create("support_bot", system_prompt="Be brief.", model_config=MODEL).unwrap()
            assert (await provision(provider, spec, store=MemoryStore())).unwrap()
            client = provider.client().unwrap()
            assert (await client.upload_file("notes.txt", b"hi")).unwrap()  # multipart: always httpx
        finally:
            await provider.close()
        sent = emu.requests[since:]
    paths = {r.path.split("?")[0] for r in sent}
    assert {"/v1/sessions", "/v1/agents", "/v1/files"} <= paths
    assert any(p.endswith("/events/stream") for p in paths) and any(p.endswith("/events") for p in paths)
    assert agents(sent) == {user_agent()}


async def test_bedrock_agentcore_sends_rmas_user_agent_on_invokes_commands_and_the_control_plane() -> None:
    with AgentCoreEmulator([ace.tool_turn(("look", {}, "tooluse_1")), ace.text_turn("ok")]) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
            tools=TOOLS,
        )
        try:
            outcome = await run(provider, handler=look, prompt="go", runtime_session_id=SID)
            assert outcome.unwrap().text == "ok"
            client = (await provider.control_client()).unwrap()
            ran = await client.run_command(
                runtime_arn=emu.harness_arn, runtime_session_id=SID, command="true"
            )
            assert ran.unwrap().exit_code == 0
            listed = await client.request_json("GET", "/harnesses", operation="ListHarnesses")
            assert listed.unwrap()[0] == 200
        finally:
            await provider.close()
        sent = list(emu.requests)
    paths = {r.path.split("?")[0] for r in sent}
    assert {"/harnesses/invoke", "/harnesses"} <= paths and len(paths) >= 3
    assert agents(sent) == {user_agent()}


async def test_a_callers_http_client_keeps_its_own_user_agent_on_every_host() -> None:
    turns: list[Any] = [{"content": "ok"}]
    async with httpx.AsyncClient(headers={"User-Agent": MINE}) as mine:
        with OpenAIEmulator(turns, api_key=KEY) as emu:
            local = Local(
                base_url=emu.base_url,
                model="m",
                api_key=KEY,
                http_client=mine,
                _seams=Seams(rand=lambda: 0.0),
            )
            assert (await run(local, handler=look, prompt="go")).unwrap().text == "ok"
            assert agents(emu.requests) == {MINE}
        with CMAEmulator([cma.text_turn("ok")], api_key=KEY) as emu:
            ids = cma_agent_and_environment(emu, KEY)
            since = len(emu.requests)
            claude = ClaudeManagedAgents(api_key=KEY, base_url=emu.base_url, env={}, http_client=mine, **ids)
            try:
                assert (await run(claude, handler=look, prompt="go")).unwrap().text == "ok"
            finally:
                await claude.close()
            assert agents(emu.requests[since:]) == {MINE}
        with AgentCoreEmulator([ace.text_turn("ok")]) as emu:
            creds = StaticCredentialSource(Credentials(emu.access_key_id, emu.secret_access_key), emu.region)
            client = AgentCoreClient(
                region=emu.region,
                credentials=creds,
                data_url=emu.base_url,
                control_url=emu.base_url,
                http_client=mine,
            )
            try:
                body = b'{"messages":[{"role":"user","content":[{"text":"hi"}]}]}'
                got = await client.invoke_harness(
                    harness_arn=emu.harness_arn, runtime_session_id=SID, body=body
                )
                assert got.unwrap().complete
            finally:
                await client.aclose()
            assert agents(emu.requests) == {MINE}
