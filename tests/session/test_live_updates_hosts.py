"""One live-update vocabulary on every host (issue #14): the same script — some text and a tool
call, the tool's answer, a final text — gives the same sequence of ``rma.live`` updates on
Local (``stream=True`` and not), Bedrock AgentCore and Claude Managed Agents, through
``handle_update`` in ``run`` and through ``LiveSession.updates()`` in ``open_session``."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest

from rma.live import LiveUpdate, TextDelta, ToolCallFinished, ToolCallStarted, TurnFinished
from rma.provider import codec_for
from rma.replay import replay_lines
from rma.session.commands import DeliverUpdate
from rma.vocabulary import Terminal
from rma_shell import open_session, run
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.providers.local import Local
from rma_shell.testing import AgentCoreEmulator, CMAEmulator, OpenAIEmulator
from rma_shell.testing import agentcore as ace
from rma_shell.testing import text_turn as cma_text_turn
from rma_shell.testing import tool_turn as cma_tool_turn
from tests.helpers import cma_agent_and_environment

KEY = "sk-ant-test-live"
SID = "rma-session-0123456789abcdef0123456789"
LOOKUP = {"name": "lookup", "description": "Find a customer", "input_schema": {"type": "object"}}
FIRST, FINAL = "checking the records", "Ada is gold."

# What every host must show, ids left out (each host names its calls its own way).
EXPECTED = [
    ("text", FIRST),
    ("started", "lookup"),
    ("turn", 1, Terminal.REQUIRES_ACTION),
    ("finished", "lookup", False),
    ("text", FINAL),
    ("turn", 2, Terminal.END_TURN),
]


def shape(updates: list[LiveUpdate]) -> list[tuple[Any, ...]]:
    """Adjacent text deltas joined (granularity is the host's, E-10), ids checked to pair up."""
    out: list[tuple[Any, ...]] = []
    started: dict[str, str | None] = {}
    for u in updates:
        if isinstance(u, TextDelta):
            if out and out[-1][0] == "text":
                out[-1] = ("text", out[-1][1] + u.text)
            else:
                out.append(("text", u.text))
        elif isinstance(u, ToolCallStarted):
            assert u.id, f"a start without an id: {u}"
            started[u.name] = u.id
            out.append(("started", u.name))
        elif isinstance(u, ToolCallFinished):
            assert started.get(u.name) == u.id, "a finish names the call its start named"
            out.append(("finished", u.name, u.is_error))
        elif isinstance(u, TurnFinished):
            assert u.usage is not None
            out.append(("turn", u.turn, u.terminal))
        else:
            out.append((type(u).__name__,))
    return out


class Tools:
    def __init__(self) -> None:
        self.updates: list[LiveUpdate] = []
        self.calls: list[dict[str, Any]] = []

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        self.calls.append(input)
        return "gold tier"

    async def handle_update(self, update: LiveUpdate, ctx: object, info: object) -> None:
        self.updates.append(update)


class PlainTools:
    """No handle_update: only an updates() iterator consumes them."""

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        return "gold tier"


Host = Callable[[], Any]


@contextmanager
def local_host(stream: bool) -> Iterator[tuple[Any, dict[str, Any]]]:
    script = [
        {"content": FIRST, "tool_calls": [{"name": "lookup", "arguments": {"id": "c9"}}]},
        {"content": FINAL},
        {"content": FINAL},  # a follow-up's answer
    ]
    with OpenAIEmulator(script) as emu:
        yield Local(base_url=emu.base_url, model="m", tools=[LOOKUP], stream=stream), {}


@contextmanager
def agentcore_host() -> Iterator[tuple[Any, dict[str, Any]]]:
    script = [ace.tool_turn(("lookup", {"id": "c9"}), text=FIRST), ace.text_turn(FINAL), ace.text_turn(FINAL)]
    with AgentCoreEmulator(script) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
            tools=[LOOKUP],
        )
        yield provider, {"runtime_session_id": SID}


@contextmanager
def cma_host() -> Iterator[tuple[Any, dict[str, Any]]]:
    script = [cma_tool_turn(("lookup", {"id": "c9"}), text=FIRST), cma_text_turn(FINAL), cma_text_turn(FINAL)]
    with CMAEmulator(script, api_key=KEY) as emu:
        ids = cma_agent_and_environment(emu, KEY)
        provider = ClaudeManagedAgents(
            api_key=KEY,
            base_url=emu.base_url,
            env={},
            **ids,
        )
        yield provider, {}


HOSTS = {
    "local-stream": lambda: local_host(True),
    "local-batch": lambda: local_host(False),
    "agentcore": agentcore_host,
    "cma": cma_host,
}


@pytest.fixture(params=sorted(HOSTS))
async def host(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, dict[str, Any]]]:
    with HOSTS[request.param]() as (provider, opts):
        try:
            yield provider, opts
        finally:
            await provider.close()


async def test_handle_update_sees_the_same_updates_on_every_host(host: tuple[Any, dict[str, Any]]) -> None:
    provider, opts = host
    tools = Tools()
    with anyio.fail_after(30):
        result = (await run(provider, handler=tools, prompt="Who is c9?", **opts)).unwrap()
    assert result.text == FINAL and tools.calls == [{"id": "c9"}]
    assert shape(tools.updates) == EXPECTED


async def test_live_session_updates_iterator_sees_the_same_updates_on_every_host(
    host: tuple[Any, dict[str, Any]],
) -> None:
    provider, opts = host
    got: list[LiveUpdate] = []
    with anyio.fail_after(30):
        async with open_session(provider, handler=PlainTools(), **opts) as session:
            async with session.updates() as updates:
                await session.message("Who is c9?")
                async for update in updates:
                    got.append(update)
                    if isinstance(update, TurnFinished) and update.terminal is Terminal.END_TURN:
                        break
            assert (await session.next_result()).unwrap().text == FINAL
    assert shape(got) == EXPECTED


async def test_updates_are_computed_only_while_an_iterator_is_open(host: tuple[Any, dict[str, Any]]) -> None:
    # The recorded log folds through the core again: its commands show what the machine built.
    provider, opts = host
    log = io.StringIO()
    with anyio.fail_after(30):
        async with open_session(provider, handler=PlainTools(), record=log, **opts) as session:
            await session.message("Who is c9?")
            assert (await session.next_result()).unwrap().text == FINAL
            async with session.updates() as updates:
                await session.message("And again?")
                got = [u async for u in _until_end(updates)]
            assert (await session.next_result()).unwrap().text == FINAL
    replayed = replay_lines(log.getvalue().splitlines(), codec_for).unwrap()
    delivered = [c.update for c in replayed.commands if isinstance(c, DeliverUpdate)]
    assert delivered == got and shape(got) == [("text", FINAL), ("turn", 1, Terminal.END_TURN)]


async def _until_end(updates: AsyncIterator[LiveUpdate]) -> AsyncIterator[LiveUpdate]:
    async for update in updates:
        yield update
        if isinstance(update, TurnFinished) and update.terminal is Terminal.END_TURN:
            return


async def test_an_agentcore_turn_cut_short_is_discarded_before_it_is_re_invoked() -> None:
    with AgentCoreEmulator([ace.text_turn(FINAL, chunks=4)], faults=[ace.drop_after(4)]) as emu:
        provider = BedrockAgentCore(
            harness_arn=emu.harness_arn,
            data_url=emu.base_url,
            control_url=emu.base_url,
            env=emu.credentials_env(),
            backoff_base=0.01,
            backoff_cap=0.02,
        )
        tools = Tools()
        try:
            result = (await run(provider, handler=tools, prompt="hi", runtime_session_id=SID)).unwrap()
        finally:
            await provider.close()
    assert result.text == FINAL and "rma.attempt_discarded" not in str(result.events)  # E-8
    kinds = [type(u).__name__ for u in tools.updates]
    cut = kinds.index("AttemptDiscarded")
    before = "".join(u.text for u in tools.updates[:cut] if isinstance(u, TextDelta))
    after = "".join(u.text for u in tools.updates[cut:] if isinstance(u, TextDelta))
    assert before and FINAL.startswith(before) and after == FINAL
    assert kinds.count("AttemptDiscarded") == 1 and kinds[-1] == "TurnFinished"
