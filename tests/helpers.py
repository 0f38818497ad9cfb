"""Small builders shared by the session tests."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import rma_shell.session
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


class RunDeadline:
    """Ends runs by their timeout when the test says so (``fire``), not after their seconds.

    Replaces ``rma_shell.session._run_deadline`` with a scope only ``fire`` cancels; the run
    then reports ``Timeout(timeout_s=<its timeout>)`` and stops its host as on a real timeout.
    For a timeout that must land at a given point of a real-time exchange with an emulator,
    which a busy machine reaches later than any fixed number of seconds. (Timeouts elapsing
    on their own are tested on trio's virtual clock.)"""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.scopes: list[anyio.CancelScope] = []
        monkeypatch.setattr(rma_shell.session, "_run_deadline", self._scope)

    def _scope(self, timeout: float | None) -> anyio.CancelScope:
        self.scopes.append(scope := anyio.CancelScope())
        return scope

    def fire(self) -> None:
        """The latest run's timeout elapses now."""
        assert self.scopes, "no run has started"
        self.scopes[-1].cancel()

    async def fire_after(self, ready: Callable[[], object]) -> None:
        """Wait in a worker thread for the blocking ``ready()`` (say, the emulator has played
        the first half of a turn), then ``fire``."""
        await in_thread(ready)
        self.fire()


async def in_thread(blocking: Callable[[], object]) -> None:
    """Run a blocking wait in a worker thread, abandoned if the caller is cancelled."""
    await anyio.to_thread.run_sync(blocking, abandon_on_cancel=True)


async def cancel_after(scope: anyio.CancelScope, ready: Callable[[], object]) -> None:
    """``scope.cancel()`` once the blocking ``ready()`` returns (waited for in a worker thread)."""
    await in_thread(ready)
    scope.cancel()


_INTERRUPTIBLE = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('rma_shell', run_name='__main__', alter_sys=True)"
)


def rma_interruptible(*args: str) -> list[str]:
    """``python -m rma_shell ARGS`` taking Ctrl-C as from a terminal, whatever the test run
    inherited: a shell starts a background job (``cmd &``, many CI steps) with SIGINT
    ignored, pytest and what it spawns inherit that, and an ``rma`` that ignores SIGINT cannot
    show what it does on Ctrl-C."""
    return [sys.executable, "-c", _INTERRUPTIBLE, *args]
