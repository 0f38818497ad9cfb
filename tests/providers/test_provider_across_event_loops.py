"""A provider outlives the event loop its connections were opened in.

Pins: one ``Local``, ``ClaudeManagedAgents`` or ``BedrockAgentCore`` object runs again under a
second ``asyncio.run`` and under trio after asyncio — a script calling ``asyncio.run`` twice,
a notebook's next cell — instead of failing with "Event loop is closed" or "must be called
from async context": the connections of a loop that is gone are dropped and new ones built.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import trio
from returns.result import Success

from rma_shell import run
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.testing import AgentCoreEmulator, CMAEmulator, OpenAIEmulator
from rma_shell.testing import agentcore as ace
from rma_shell.testing import claude as cma
from tests.providers.test_cma_session import KEY, emu_agent_and_environment


def _tool(name: str, input: dict[str, Any], ctx: object) -> str:
    return "done"


def _three_loops(provider: Any, runner: Callable[[], Any] | None = None) -> list[str]:
    """The same provider under asyncio, asyncio again, then trio: each run's text."""
    texts: list[str] = []

    async def once() -> None:
        outcome = await run(provider, handler=_tool, prompt="hi", timeout=20)
        assert isinstance(outcome, Success), outcome
        texts.append(outcome.unwrap().text)

    asyncio.run(once())
    asyncio.run(once())
    trio.run(once)

    async def close() -> None:
        await provider.close()

    trio.run(close)
    return texts


def test_local_runs_under_a_second_asyncio_loop_and_then_trio() -> None:
    with OpenAIEmulator([{"content": "one"}, {"content": "two"}, {"content": "three"}]) as emu:
        assert _three_loops(Local(base_url=emu.base_url, model="m")) == ["one", "two", "three"]


def test_claude_runs_under_a_second_asyncio_loop_and_then_trio() -> None:
    with CMAEmulator([cma.text_turn("hello")], api_key=KEY) as emu:  # each session its own script
        provider = ClaudeManagedAgents(
            api_key=KEY, base_url=emu.base_url, env={}, **emu_agent_and_environment(emu)
        )
        assert _three_loops(provider) == ["hello"] * 3


def test_agentcore_runs_under_a_second_asyncio_loop_and_then_trio() -> None:
    with AgentCoreEmulator([ace.text_turn("hello")]) as emu:  # each runtime session its own script
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
        )
        texts: list[str] = []

        async def once() -> None:
            outcome = await run(provider, handler=_tool, prompt="hi", timeout=20, runtime_session_id=_sid())
            assert isinstance(outcome, Success), outcome
            texts.append(outcome.unwrap().text)

        asyncio.run(once())
        asyncio.run(once())
        trio.run(once)
        assert texts == ["hello"] * 3


def _sid() -> str:
    from rma_shell.providers.agentcore import new_runtime_session_id

    return new_runtime_session_id()
