"""AgentCore retries as the wire says (issue #12): InvokeHarness honours ``Retry-After``.

Before, a throttled invoke was retried on the provider's own backoff alone: with a 10 ms base
two retries took 0.03 s against a 0.3 s ``Retry-After``.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rma.errors import HttpError
from rma_shell import run
from rma_shell.providers.agentcore import BedrockAgentCore
from rma_shell.seams import Seams
from rma_shell.testing import agentcore as ace
from rma_shell.testing.agentcore import AgentCoreEmulator
from tests.providers.test_bedrock_agentcore_session import SID, Tools, invokes, provider


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


@pytest.fixture
async def made() -> AsyncIterator[list[BedrockAgentCore]]:
    providers: list[BedrockAgentCore] = []
    yield providers
    for p in providers:
        await p.close()


@pytest.mark.parametrize(
    "fault",
    [
        ace.throttle_once(times=2, retry_after=0.3),
        ace.server_error_once(503, times=2, retry_after="0.3"),
    ],
    ids=["429", "503"],
)
async def test_B11_Better_invoke_retries_wait_what_retry_after_asks(
    fault: Any, made: list[BedrockAgentCore]
) -> None:
    sleeps = Sleeps()
    with AgentCoreEmulator([ace.text_turn("ok")], faults=[fault]) as emu:
        got = await run(
            provider(
                emu,
                made,
                _seams=Seams(sleep=sleeps),
            ),
            handler=Tools(),
            prompt="x",
            runtime_session_id=SID,
        )
        assert got.unwrap().text == "ok" and len(invokes(emu)) == 3
    assert sleeps.delays == [0.3, 0.3]


async def test_B11_without_retry_after_the_backoff_is_the_providers(made: list[BedrockAgentCore]) -> None:
    sleeps = Sleeps()
    with AgentCoreEmulator([ace.text_turn("ok")], faults=[ace.throttle_once(times=2)]) as emu:
        p = provider(
            emu,
            made,
            _seams=Seams(sleep=sleeps, rand=lambda: 1.0),
        )
        got = await run(p, handler=Tools(), prompt="x", runtime_session_id=SID)
        assert got.unwrap().text == "ok"
    assert sleeps.delays == [0.01, 0.02]  # backoff_base=0.01, cap 0.02, full jitter drawn


async def test_B11_an_http_date_retry_after_is_read_against_the_clock(made: list[BedrockAgentCore]) -> None:
    sleeps = Sleeps()
    before = time.time()
    due = math.ceil(before) + 5  # a whole second: the HTTP-date loses nothing to rounding
    when = email.utils.formatdate(due, usegmt=True)
    with AgentCoreEmulator([ace.text_turn("ok")], faults=[ace.throttle_once(retry_after=when)]) as emu:
        got = await run(
            provider(
                emu,
                made,
                _seams=Seams(sleep=sleeps),
            ),
            handler=Tools(),
            prompt="x",
            runtime_session_id=SID,
        )
        assert got.unwrap().text == "ok"
    after = time.time()
    [delay] = sleeps.delays
    # The client read its clock somewhere between before and after, however long that took
    # on a busy machine (3 < delay allowed it one second at most).
    assert due - after - 0.01 <= delay <= due - before + 0.01, (delay, due - after, due - before)


async def test_B12_retry_after_never_makes_a_4xx_retried(made: list[BedrockAgentCore]) -> None:
    sleeps = Sleeps()
    fault = ace.error_once(400, "ValidationException", "bad", retry_after=1)
    with AgentCoreEmulator([ace.text_turn("ok")], faults=[fault]) as emu:
        got = await run(
            provider(
                emu,
                made,
                _seams=Seams(sleep=sleeps),
            ),
            handler=Tools(),
            prompt="x",
            runtime_session_id=SID,
        )
        assert isinstance(got.failure(), HttpError) and len(invokes(emu)) == 1
    assert sleeps.delays == []
