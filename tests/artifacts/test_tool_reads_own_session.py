"""A tool reads what its own session wrote: ``SessionInfo`` reaches the handler, and
``artifacts_for(provider, info)`` opens that session's store — end to end, on both managed
providers' emulators (issue #5, "Artifacts")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rma.vocabulary import SessionInfo, Terminal
from rma_shell import run
from rma_shell.artifacts import artifacts_for
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.testing import AgentCoreEmulator, CMAEmulator, SessionView, cma, text_turn, tool_turn
from rma_shell.testing import agentcore as ace

KEY = "sk-ant-test-own-session"
AC_SESSION = "rma-session-own-0123456789abcdef012345"
READ_REPORT = {"name": "read_report", "description": "Read an artifact", "input_schema": {"type": "object"}}


class ReportReader:
    """Lists its session's artifacts and fetches the one the agent names."""

    def __init__(self, provider: object) -> None:
        self.provider = provider
        self.infos: list[SessionInfo] = []

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object, info: SessionInfo) -> str:
        self.infos.append(info)
        store = artifacts_for(self.provider, info).unwrap()
        names = sorted(a.name for a in (await store.list()).unwrap())
        data = (await store.fetch(input["name"])).unwrap()
        return f"{names} {data.decode()}"


async def test_a_cma_tool_fetches_an_output_of_its_own_session() -> None:
    def writes_then_asks(view: SessionView, _inputs: list[dict[str, Any]]) -> Iterable[dict[str, Any]]:
        emu.add_output_file(view.id, "report.md", "Q3: up 4%")  # the agent wrote it under outputs/
        return tool_turn(("read_report", {"name": "report.md"}))

    with CMAEmulator([writes_then_asks, text_turn("Done.")], api_key=KEY) as emu:
        ids = _agent(emu)
        provider = ClaudeManagedAgents(
            api_key=KEY,
            base_url=emu.base_url,
            env={},
            agent_id=ids["agent_id"],
            environment_id=ids["environment_id"],
        )
        try:
            client = provider.client().unwrap()
            other = await client.create_session(
                {"agent": ids["agent_id"], "environment_id": ids["environment_id"]}
            )
            emu.add_output_file(other.unwrap()["id"], "theirs.md", "not ours")  # must stay invisible
            tools = ReportReader(provider)
            outcome = await run(provider, handler=tools, prompt="Summarize the report.", timeout=30)
            result = outcome.unwrap()
            history = emu.history(str(result.session_id))
        finally:
            await provider.close()
    assert result.terminal is Terminal.END_TURN
    [info] = tools.infos
    assert (info.session_id, info.provider) == (result.session_id, "claude_managed_agents")
    [answer] = [e for e in history if e["type"] == "user.custom_tool_result"]
    assert answer["content"] == [{"type": "text", "text": "['report.md'] Q3: up 4%"}]
    assert answer["is_error"] is False


async def test_an_agentcore_tool_fetches_a_file_its_own_session_wrote() -> None:
    def writes_then_asks(view: ace.SessionView, _body: dict[str, Any]) -> Any:
        (emu.storage_dir(view.id) / "report.md").write_text("Q3: up 4%")  # in the session's mount
        return ace.tool_turn(("read_report", {"name": "report.md"}))

    with AgentCoreEmulator(script=[writes_then_asks, ace.text_turn("Done.")]) as emu:
        (emu.storage_dir("rma-session-other-0123456789abcdef0123") / "theirs.md").write_text("no")
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn, data_url=emu.base_url, env=emu.credentials_env(), tools=[READ_REPORT]
        )
        try:
            tools = ReportReader(provider)
            outcome = await run(
                provider, handler=tools, prompt="Summarize.", runtime_session_id=AC_SESSION, timeout=60
            )
            result = outcome.unwrap()
            invokes = [r.body for r in emu.requests if r.path.split("?")[0] == "/harnesses/invoke"]
        finally:
            await provider.close()
    assert result.terminal is Terminal.END_TURN
    [info] = tools.infos
    assert (info.session_id, info.provider) == (AC_SESSION, "bedrock_agentcore")
    blocks = [b for m in invokes[-1]["messages"] for b in m["content"] if "toolResult" in b]
    assert blocks[0]["toolResult"]["content"] == [{"text": "['report.md'] Q3: up 4%"}]


def _agent(emu: CMAEmulator) -> dict[str, str]:
    import httpx

    headers = {"x-api-key": KEY, "anthropic-version": "2026-10-21", "anthropic-beta": cma.BETA}
    agent = httpx.post(
        f"{emu.base_url}/v1/agents", json={"name": "a", "model": "claude-sonnet-4-6"}, headers=headers
    )
    env = httpx.post(
        f"{emu.base_url}/v1/environments", json={"name": "e", "config": {"type": "cloud"}}, headers=headers
    )
    return {"agent_id": agent.json()["id"], "environment_id": env.json()["id"]}
