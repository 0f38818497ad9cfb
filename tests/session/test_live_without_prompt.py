"""S-20 / A.6 decision: a live session opened without a prompt (or outcome) sends nothing
until ``message()``. The reference kicks such a session off with its default prompt
(``Begin.``); rma does not (docs/decisions.md). A one-shot ``run()`` without a prompt still
sends the default kickoff: it has nothing else to wait for.
"""

from __future__ import annotations

import anyio
import pytest

from rma.provider import DEFAULT_PROMPT
from rma_shell import open_session, run
from rma_shell.testing import CMAEmulator, text_turn
from rma_shell.testing.scripted import ScriptedProvider
from tests.helpers import Recorder, end
from tests.providers.test_cma_session import KEY, Tools, setup


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "request_response"])
async def test_S20_decision_a_live_session_without_prompt_waits_for_a_message(streaming: bool) -> None:
    provider = ScriptedProvider([end("hello")], streaming=streaming)
    async with open_session(provider, handler=Recorder()) as session:
        await anyio.sleep(0.05)
        assert provider.inputs == [] and session.idle
        await session.message("hi")
        r = (await session.next_result()).unwrap()
    assert r.text == "hello"
    assert provider.inputs == [[{"type": "user.message", "text": "hi"}]]


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "request_response"])
async def test_S20_A6_a_run_without_prompt_sends_the_default_kickoff(streaming: bool) -> None:
    provider = ScriptedProvider([end("begun")], streaming=streaming)
    r = (await run(provider, handler=Recorder())).unwrap()
    assert r.text == "begun"
    assert provider.inputs == [[{"type": "user.message", "text": DEFAULT_PROMPT}]]


async def test_S20_decision_a_live_cma_session_without_prompt_posts_no_event() -> None:
    with CMAEmulator([text_turn("answer")], api_key=KEY) as emu:
        provider = setup(emu)
        try:
            async with open_session(provider, handler=Tools()) as session:
                await anyio.sleep(0.3)  # the stream is up; nothing goes out
                posted = [q for q in emu.requests if q.method == "POST" and q.path.endswith("/events")]
                assert posted == [] and session.idle
                await session.message("now")
                with anyio.fail_after(10):
                    r = (await session.next_result()).unwrap()
        finally:
            await provider.close()
    assert r.text == "answer"
    [post] = [q for q in emu.requests if q.method == "POST" and q.path.endswith("/events")]
    assert post.body["events"][0]["type"] == "user.message"
