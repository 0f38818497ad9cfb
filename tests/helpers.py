"""Small builders shared by the session tests."""

from __future__ import annotations

from typing import Any

from rma.vocabulary import JSON

_counter = iter(range(1, 1_000_000))


def eid() -> str:
    return f"e{next(_counter)}"


def text(t: str, *, id: str | None = None) -> dict[str, JSON]:
    return {"type": "text", "text": t, "id": id or eid()}


def tool(name: str, id: str, **input: Any) -> dict[str, JSON]:
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def usage(i: int, o: int) -> dict[str, JSON]:
    return {"type": "usage", "input_tokens": i, "output_tokens": o, "id": eid()}


def idle(stop: str = "end_turn", event_ids: list[str] | None = None) -> dict[str, JSON]:
    ev: dict[str, JSON] = {"type": "idle", "stop_reason": {"type": stop}, "id": eid()}
    if event_ids is not None:
        ev["event_ids"] = event_ids
    return ev


def end(t: str = "done", i: int = 1, o: int = 1) -> list[dict[str, JSON]]:
    return [text(t), usage(i, o), idle("end_turn")]


def calls(*uses: dict[str, JSON], i: int = 1, o: int = 1) -> list[dict[str, JSON]]:
    return [*uses, usage(i, o), idle("requires_action", [str(u["id"]) for u in uses])]


class Recorder:
    """A handler that records every call and answers from a table."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any], Any]] = []
        self.events: list[JSON] = []
        self.infos: list[Any] = []
        self.answers = answers or {}

    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any) -> Any:
        self.calls.append((name, input, ctx))
        answer = self.answers.get(name, f"ok:{name}")
        if isinstance(answer, BaseException):
            raise answer
        return answer(input) if callable(answer) else answer

    def handle_event(self, event: JSON, ctx: Any, info: Any) -> None:
        self.events.append(event)
        self.infos.append(info)


def cma_agent_and_environment(emu: Any, key: str) -> dict[str, str]:
    """An agent and an environment created on a ``CMAEmulator`` with ``key``: the ids a
    ``ClaudeManagedAgents`` provider (or a run) takes as ``agent_id=`` / ``environment_id=``."""
    import httpx

    headers = {
        "x-api-key": key,
        "anthropic-version": "2026-10-21",
        "anthropic-beta": "managed-agents-2026-04-01",
    }
    agent = httpx.post(
        f"{emu.base_url}/v1/agents", json={"name": "a", "model": "claude-sonnet-4-6"}, headers=headers
    )
    env = httpx.post(
        f"{emu.base_url}/v1/environments",
        json={"name": "e", "config": {"type": "cloud", "networking": {"type": "unrestricted"}}},
        headers=headers,
    )
    return {"agent_id": agent.json()["id"], "environment_id": env.json()["id"]}
