"""Agent skills, MCP servers and a multi-agent roster in the content-addressed spec (issue #25):
a spec that uses none of them keeps the digest it had before they existed (so its provisioned
agent is found again); each one that is set is part of the identity and goes to the host as
written; bad ones are typed errors naming the field; the SDK takes the agent body."""

from __future__ import annotations

from typing import Any

import pydantic
from anthropic.types.beta.agent_create_params import AgentCreateParams

from rma.provisioning import AgentSpec
from rma_shell.providers.claude.provisioning import agent_body

LOOKUP = {"name": "lookup", "description": "Find", "input_schema": {"type": "object"}}
SKILL = {"type": "anthropic", "skill_id": "xlsx"}
MCP = {"type": "url", "name": "docs", "url": "https://mcp.example.com/sse"}

DIGEST_BEFORE_ISSUE_25 = "52c1202b299cfe7c93b5f9032552cadc37cef0b37620fcb1b2bc04f4267ec6a3"
"""``base()``'s digest as computed by main before these fields existed."""


def base(**more: Any) -> AgentSpec:
    return AgentSpec.create(
        "bot", system_prompt="Be brief.", tools=[LOOKUP], model_config="claude-sonnet-4-6", **more
    ).unwrap()


def test_a_spec_without_the_new_fields_keeps_its_digest_and_its_json() -> None:
    spec = base()
    assert spec.digest == DIGEST_BEFORE_ISSUE_25
    assert set(spec.to_json()) == {"name", "system_prompt", "tools", "terminal_tool", "model_config"}
    assert base(skills=(), mcp_servers=[], multiagent=None).digest == DIGEST_BEFORE_ISSUE_25


def test_each_new_field_is_part_of_the_identity_and_round_trips() -> None:
    digests = {
        base().digest,
        base(skills=[SKILL]).digest,
        base(mcp_servers=[MCP]).digest,
        base(multiagent={"type": "coordinator", "agents": []}).digest,
        base(skills=[SKILL], mcp_servers=[MCP]).digest,
    }
    assert len(digests) == 5
    spec = base(skills=[SKILL], mcp_servers=[MCP])
    assert AgentSpec.coerce(spec.to_json()).unwrap() == spec


def test_bad_skills_and_servers_are_typed_errors_naming_the_field() -> None:
    cases = [
        ({"skills": SKILL}, "skills"),
        ({"skills": [{"type": "anthropic"}]}, "skills[0].skill_id"),
        ({"skills": [SKILL, SKILL]}, "skills[1].skill_id"),
        ({"mcp_servers": ["https://x"]}, "mcp_servers[0]"),
        ({"multiagent": ["a"]}, "multiagent"),
    ]
    for more, path in cases:
        error = AgentSpec.create("bot", model_config="m", **more).failure()
        assert error.path == path, (more, error)


def test_the_agent_body_carries_them_and_the_sdk_takes_it() -> None:
    body = agent_body(base(skills=[SKILL], mcp_servers=[MCP]), "bot_1234abcd")
    assert body["skills"] == [SKILL] and body["mcp_servers"] == [MCP]
    pydantic.TypeAdapter(AgentCreateParams).validate_python(body)
    assert "skills" not in agent_body(base(), "bot_1234abcd")
