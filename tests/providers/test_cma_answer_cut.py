"""A Claude event post the host had begun to answer is never sent again (issue #23).

The host processes ``POST /v1/sessions/{id}/events`` — a tool result, or the kickoff message —
writes the first bytes of its answer (``HTTP/1.1 200 ``) and loses the connection
(``cut_response_head``). On a reused connection that looked like the keep-alive race, and the
client posted again: the host took the tool result twice. Now a post is re-sent only when it
got no answer at all. On the lean lanes that is known to the byte; on httpx (a caller's
``http_client``) it is not — httpcore raises the same error with or without part of a head —
so there the provider asks the host's event list. Either way the host has each post once,
and the run goes on (a tool result whose echo is listed) or ends with a ``TransportError``
(a message, whose echo cannot be told from an earlier one's) — never a duplicate.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from rma.errors import TransportError
from rma_shell import run
from rma_shell.providers.claude import ClaudeManagedAgents
from rma_shell.seams import Seams
from rma_shell.testing import CMAEmulator, close_idle_connection, text_turn, tool_turn
from rma_shell.testing.claude import CMAFault, cut_response_head
from tests.providers.test_cma_session import KEY, setup

EVENTS = r"/events$"


@pytest.fixture(params=["lean", "httpx"])
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, Any]]:
    """The provider's own lean lanes, or httpx through a caller's ``http_client``."""
    if request.param == "lean":
        yield {}
        return
    async with httpx.AsyncClient() as client:
        yield {"http_client": client}


class ArmsAFault:
    """A tool that, when called, arms ``fault`` for the post that will carry its result."""

    def __init__(self, emu: CMAEmulator, fault: CMAFault) -> None:
        self.emu, self.fault = emu, fault
        self.calls = 0

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        self.calls += 1
        self.emu.inject(self.fault)
        return "fetched"


async def warm(client: httpx.AsyncClient, base_url: str) -> None:
    """Two kept-alive connections in the caller's pool, opened by two requests at once: the
    session create and the event stream then leave one idle for the kickoff to go out on, as
    the lean lanes' kickoff does (httpx would otherwise open a fresh one for it)."""
    async with anyio.create_task_group() as group:
        for _ in range(2):
            group.start_soon(client.get, f"{base_url}/v1/warm-up")


async def a_run(emu: CMAEmulator, handler: Any, made: list[ClaudeManagedAgents], **kw: Any) -> Any:
    if "http_client" in kw:
        await warm(kw["http_client"], emu.base_url)
    provider = setup(emu, _seams=Seams(rand=lambda: 0.0), **kw)
    made.append(provider)
    with anyio.fail_after(30):
        return await run(provider, handler=handler, prompt="go", timeout=25)


@pytest.fixture
async def made() -> AsyncIterator[list[ClaudeManagedAgents]]:
    providers: list[ClaudeManagedAgents] = []
    yield providers
    for provider in providers:
        await provider.close()


def posted(emu: CMAEmulator, session_id: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in emu.history(session_id) if e["type"] == kind]


def event_posts(emu: CMAEmulator) -> list[Any]:
    return [r for r in emu.requests if r.method == "POST" and r.path.endswith("/events")]


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "closed"])
async def test_a_tool_result_the_host_began_answering_is_taken_once_and_the_run_goes_on(
    transport: dict[str, Any], made: list[ClaudeManagedAgents], reset: bool
) -> None:
    with CMAEmulator([tool_turn(("fetch", {"n": 1})), text_turn("done")], api_key=KEY) as emu:
        tools = ArmsAFault(emu, cut_response_head(method="POST", path=EVENTS, reset=reset))
        outcome = await a_run(emu, tools, made, **transport)
        result = outcome.unwrap()  # the host has the result: its echo says so
        [session_id] = emu.session_ids
        results = posted(emu, session_id, "user.custom_tool_result")
        posts = event_posts(emu)
        cut = emu.cut_heads
    assert result.text == "done" and tools.calls == 1 and cut == 1
    assert len(results) == 1 and len(posts) == 2  # the kickoff, then the result — once


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "closed"])
async def test_a_kickoff_the_host_began_answering_is_not_posted_again(
    transport: dict[str, Any], made: list[ClaudeManagedAgents], reset: bool
) -> None:
    fault = cut_response_head(method="POST", path=EVENTS, reset=reset)
    with CMAEmulator([text_turn("done")], faults=[fault], api_key=KEY) as emu:
        outcome = await a_run(emu, lambda *a: "unused", made, **transport)
        [session_id] = emu.session_ids
        messages = posted(emu, session_id, "user.message")
        posts = event_posts(emu)
    error = outcome.failure()
    assert isinstance(error, TransportError)  # a message's echo cannot be told from another's
    assert len(messages) == 1 and len(posts) == 1


async def test_on_httpx_a_tool_result_lost_to_the_keep_alive_race_is_posted_again(
    made: list[ClaudeManagedAgents],
) -> None:
    # The other side of httpx's doubt: the host closed the connection and never read the post.
    # Its event list lacks the result, so the provider posts it again — once.
    with CMAEmulator([tool_turn(("fetch", {"n": 1})), text_turn("done")], api_key=KEY) as emu:
        tools = ArmsAFault(emu, close_idle_connection(method="POST", path=EVENTS))
        async with httpx.AsyncClient() as client:
            outcome = await a_run(emu, tools, made, http_client=client)
        [session_id] = emu.session_ids
        results = posted(emu, session_id, "user.custom_tool_result")
        closed = emu.closed_idle
    assert outcome.unwrap().text == "done" and closed == 1 and len(results) == 1


async def test_on_httpx_a_kickoff_lost_to_the_keep_alive_race_is_posted_again(
    made: list[ClaudeManagedAgents],
) -> None:
    # A new session has no message yet: none listed proves the kickoff never landed.
    fault = close_idle_connection(method="POST", path=EVENTS)
    with CMAEmulator([text_turn("done")], faults=[fault], api_key=KEY) as emu:
        async with httpx.AsyncClient() as client:
            outcome = await a_run(emu, lambda *a: "unused", made, http_client=client)
        [session_id] = emu.session_ids
        messages = posted(emu, session_id, "user.message")
        closed = emu.closed_idle
    assert outcome.unwrap().text == "done" and closed == 1 and len(messages) == 1
