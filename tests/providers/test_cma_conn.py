"""What a Claude Managed Agents conn keeps for a session's whole life: no more than it uses."""

from __future__ import annotations

from typing import Any

import httpx

from rma_shell.providers.base import OpenRequest
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.testing import CMAEmulator, text_turn

KEY = "sk-ant-test-conn"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "managed-agents-2026-04-01"}
TOOL: Any = {
    "type": "custom",
    "name": "lookup",
    "description": "Look a customer up. " * 50,
    "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}},
}


def agent_with_a_long_prompt(emu: CMAEmulator) -> tuple[str, str]:
    with httpx.Client(base_url=emu.base_url, headers=HEADERS) as http:
        body = {
            "name": "support",
            "model": "claude-sonnet-4-6",
            "system": "Be brief. " * 500,
            "tools": [TOOL],
        }
        agent = http.post("/v1/agents", json=body).json()
        env = http.post("/v1/environments", json={"name": "e"}).json()
    return agent["id"], env["id"]


async def test_the_conn_keeps_the_agents_name_id_and_model_not_the_session_resource() -> None:
    with CMAEmulator([text_turn("x")], api_key=KEY) as emu:
        agent_id, environment_id = agent_with_a_long_prompt(emu)
        provider = ClaudeManagedAgents(
            api_key=KEY, base_url=emu.base_url, env={}, agent_id=agent_id, environment_id=environment_id
        )
        try:
            created = (await provider.open(OpenRequest(prompt="hi"))).unwrap()
            resumed = (await provider.open(OpenRequest(session_id=created.session_id))).unwrap()
        finally:
            await provider.close()
    summary = {"agent": {"id": agent_id, "name": "support", "model": {"id": "claude-sonnet-4-6"}}}
    assert created.session == summary and resumed.session == summary
    described = provider.describe(created)
    assert described["agent_name"] == "support" and described["model"] == "claude-sonnet-4-6"
    assert described["agent_id"] == agent_id
