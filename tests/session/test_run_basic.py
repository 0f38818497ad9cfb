"""The loop end to end through run() with the scripted host, in both modes (S-28, S-29…S-31)."""

from __future__ import annotations

import pytest
from returns.result import Failure, Success

from rma.vocabulary import Terminal
from rma_shell import run
from rma_shell.testing.scripted import ScriptedProvider
from tests.helpers import Recorder, calls, end, tool


@pytest.mark.parametrize("streaming", [False, True])
async def test_S28_same_script_same_result_in_both_modes(streaming: bool) -> None:
    provider = ScriptedProvider(
        [calls(tool("lookup", "t1", q="x"), i=3, o=2), end("final answer", i=5, o=7)], streaming=streaming
    )
    handler = Recorder({"lookup": "found"})
    outcome = await run(provider, handler=handler, prompt="hi", context={"k": 1})
    assert isinstance(outcome, Success), outcome
    r = outcome.unwrap()
    assert r.terminal is Terminal.END_TURN
    assert r.stop_reason == {"type": "end_turn"}
    assert r.text == "final answer"
    assert r.turns == 2
    assert [u.id for u in r.custom_tool_uses] == ["t1"]
    assert (r.usage.input_tokens, r.usage.output_tokens) == (8, 9)
    assert len(r.usage.raw) == 2
    assert len(r.events) == 6
    assert handler.calls == [("lookup", {"q": "x"}, {"k": 1})]
    assert provider.inputs[0] == [{"type": "user.message", "text": "hi"}]
    assert provider.inputs[1] == [
        {"type": "tool_result", "tool_use_id": "t1", "text": "found", "is_error": False}
    ]


async def test_S14_open_error_is_returned_verbatim() -> None:
    from rma.errors import ProviderError

    err = ProviderError(detail="create_session_failed")
    outcome = await run(ScriptedProvider(open_error=err), handler=Recorder(), prompt="x")
    assert outcome == Failure(err)
