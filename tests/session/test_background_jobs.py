"""A session's background jobs (polls, pushes, tool batches) each run as a task of their own."""

from __future__ import annotations

import contextvars
from typing import Any

import anyio
import pytest
from returns.result import Success

from rma_shell import run
from rma_shell.testing.scripted import ScriptedProvider
from tests.helpers import calls, end, tool

seen_by_tool: contextvars.ContextVar[str] = contextvars.ContextVar("seen_by_tool", default="unset")


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_tool_call_never_sees_a_contextvar_an_earlier_call_set(streaming: bool) -> None:
    # Why this is pinned: running jobs on reusable worker tasks (issue #13) would let a value
    # one tool call set leak into the session's later calls (docs/decisions.md).
    seen: list[str] = []

    async def step(name: str, input: dict[str, Any], ctx: object) -> str:
        seen.append(seen_by_tool.get())
        seen_by_tool.set(f"set by call {input['n']}")  # never reset: a leak would show
        await anyio.lowlevel.checkpoint()
        return "ok"

    turns = [calls(tool("step", f"t{i}", n=i)) for i in range(4)] + [end("done")]
    seen_by_tool.set("the caller's")
    outcome = await run(ScriptedProvider(turns, streaming=streaming), handler=step, prompt="go")
    assert isinstance(outcome, Success)
    assert seen == ["the caller's"] * 4  # each call starts from the context the loop had
    assert seen_by_tool.get() == "the caller's"
