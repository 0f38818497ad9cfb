"""Helpers for the worker tests: a self-hosted environment, an agent and sessions on a
``CMAEmulator``, and the SDK's pydantic types as the oracle of what crossed the wire."""

from __future__ import annotations

from typing import Any

import httpx
import pydantic
from anthropic._models import validate_type
from anthropic.types.beta.environments import BetaSelfHostedWork, BetaSelfHostedWorkHeartbeatResponse
from anthropic.types.beta.sessions.beta_managed_agents_session_event import BetaManagedAgentsSessionEvent
from anthropic.types.beta.sessions.beta_managed_agents_user_tool_confirmation_event_params import (
    BetaManagedAgentsUserToolConfirmationEventParams,
)
from anthropic.types.beta.sessions.beta_managed_agents_user_tool_result_event_params import (
    BetaManagedAgentsUserToolResultEventParams,
)

from rma_shell.testing.claude import DEFAULT_API_KEY, CMAEmulator

KEY = DEFAULT_API_KEY
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "managed-agents-2026-04-01"}


def self_hosted(emu: CMAEmulator) -> tuple[str, str]:
    """(agent id, self-hosted environment id)."""
    agent = httpx.post(
        f"{emu.base_url}/v1/agents",
        json={"name": "coder", "model": "claude-sonnet-4-6", "tools": [{"type": "agent_toolset_20260401"}]},
        headers=HEADERS,
    )
    env = httpx.post(
        f"{emu.base_url}/v1/environments",
        json={"name": "mine", "config": {"type": "self_hosted"}},
        headers=HEADERS,
    )
    assert agent.status_code == env.status_code == 200, (agent.text, env.text)
    return agent.json()["id"], env.json()["id"]


def start_session(emu: CMAEmulator, agent_id: str, environment_id: str, text: str = "go") -> str:
    """A session created and sent its first message, as a user elsewhere would."""
    made = httpx.post(
        f"{emu.base_url}/v1/sessions",
        json={"agent": agent_id, "environment_id": environment_id},
        headers=HEADERS,
    )
    assert made.status_code == 200, made.text
    sid: str = made.json()["id"]
    sent = httpx.post(
        f"{emu.base_url}/v1/sessions/{sid}/events",
        json={"events": [{"type": "user.message", "content": [{"type": "text", "text": text}]}]},
        headers=HEADERS,
    )
    assert sent.status_code == 200, sent.text
    return sid


_RESULT = pydantic.TypeAdapter(BetaManagedAgentsUserToolResultEventParams)
_CONFIRM = pydantic.TypeAdapter(BetaManagedAgentsUserToolConfirmationEventParams)


def check_against_sdk(emu: CMAEmulator) -> dict[str, int]:
    """Every work-queue answer and session event the emulator holds parses as the SDK's type, and
    every tool result / confirmation rma posted validates as the SDK's params. Counts by kind."""
    counts: dict[str, int] = {}
    for item in emu.work_items():
        BetaSelfHostedWork.model_validate(item)
        counts["work"] = counts.get("work", 0) + 1
    for sid in emu.session_ids:
        for event in emu.history(sid):
            validate_type(type_=BetaManagedAgentsSessionEvent, value=event)
            counts["events"] = counts.get("events", 0) + 1
    for req in emu.requests:
        if req.path.endswith("/heartbeat"):
            counts["heartbeats"] = counts.get("heartbeats", 0) + 1
        body: Any = req.body
        if not (isinstance(body, dict) and isinstance(body.get("events"), list)):
            continue
        for event in body["events"]:
            if event.get("type") == "user.tool_result":
                _RESULT.validate_python(event)
                counts["tool_results"] = counts.get("tool_results", 0) + 1
            elif event.get("type") == "user.tool_confirmation":
                _CONFIRM.validate_python(event)
                counts["confirmations"] = counts.get("confirmations", 0) + 1
    return counts


def validate_heartbeat(body: Any) -> None:
    BetaSelfHostedWorkHeartbeatResponse.model_validate(body)
