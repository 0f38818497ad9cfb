"""Turn accounting, max_turns, the turn guard and terminal-tool enforcement (S-29…S-50, S-62, S-64)."""

from __future__ import annotations

from typing import Any

import pytest
from returns.result import Success

from rma.errors import GuardFailed, Halted, MaxTurnsExceeded
from rma.session.machine import REPROMPT_TEMPLATE
from rma.session.options import CONTINUE, Halt
from rma.vocabulary import Terminal, Usage
from rma_shell import run
from rma_shell.testing.scripted import ScriptedProvider
from tests.helpers import Recorder, calls, end, idle, text, tool

STREAMING = [False, True]


def forever_calls(n: int) -> list[Any]:
    return [calls(tool("step", f"t{i}"), i=1, o=1) for i in range(n)]


@pytest.mark.parametrize("streaming", STREAMING)
async def test_S35_Better_max_turns_never_drives_an_extra_turn(streaming: bool) -> None:
    provider = ScriptedProvider(forever_calls(10), streaming=streaming)
    handler = Recorder()
    outcome = await run(provider, handler=handler, prompt="go", max_turns=3)
    err = outcome.failure()
    assert isinstance(err, MaxTurnsExceeded) and err.max_turns == 3
    assert len(provider.inputs) == 3  # kickoff + 2 resumes; the reference would bill a 4th
    assert len(handler.calls) == 2  # the third turn's tools would answer nothing: not run
    assert err.result is not None
    assert err.result.terminal is Terminal.TERMINATED and err.result.turns == 3
    assert err.result.reason == "max_turns_exceeded"  # S-79 Better


async def test_S34_end_turn_on_the_last_allowed_turn_finishes_normally() -> None:
    provider = ScriptedProvider([calls(tool("a", "t1")), end("fine")])
    outcome = await run(provider, handler=Recorder(), prompt="go", max_turns=2)
    assert outcome.unwrap().turns == 2 and outcome.unwrap().text == "fine"


@pytest.mark.parametrize("streaming", STREAMING)
async def test_S38_S42_guard_sees_accumulated_usage_turns_and_session_id(streaming: bool) -> None:
    seen: list[dict[str, Any]] = []

    def guard(payload: dict[str, Any]) -> object:
        seen.append(payload)
        return CONTINUE

    provider = ScriptedProvider([calls(tool("a", "t1"), i=2, o=3), end(i=4, o=5)], streaming=streaming)
    outcome = await run(provider, handler=Recorder(), prompt="go", turn_guard=guard)
    assert isinstance(outcome, Success)
    assert [p["turns"] for p in seen] == [1, 2]
    assert isinstance(seen[1]["usage"], Usage)
    assert (seen[1]["usage"].input_tokens, seen[1]["usage"].output_tokens) == (6, 8)
    assert seen[0]["session_id"] == "sess_scripted"


@pytest.mark.parametrize("streaming", STREAMING)
async def test_S39_halt_returns_halted_with_the_terminated_result(streaming: bool) -> None:
    provider = ScriptedProvider(forever_calls(5), streaming=streaming)
    handler = Recorder()

    def guard(p: dict[str, Any]) -> object:
        return Halt("budget") if p["usage"].input_tokens >= 2 else CONTINUE

    outcome = await run(provider, handler=handler, prompt="go", turn_guard=guard)
    err = outcome.failure()
    assert isinstance(err, Halted) and err.reason == "budget"
    assert err.result is not None and err.result.turns == 2 and err.result.terminal is Terminal.TERMINATED
    assert err.result.reason == "halted"
    assert len(handler.calls) == 1  # the halted turn's tools never ran


async def test_S40_guard_runs_before_max_turns_and_wins() -> None:
    provider = ScriptedProvider(forever_calls(3))
    outcome = await run(
        provider, handler=Recorder(), prompt="go", max_turns=1, turn_guard=lambda p: Halt("stop")
    )
    assert isinstance(outcome.failure(), Halted)


async def test_S43_Better_raising_guard_is_guard_failed_not_a_crash() -> None:
    def guard(p: dict[str, Any]) -> object:
        raise RuntimeError("ledger offline")

    provider = ScriptedProvider([calls(tool("a", "t1")), end()])
    outcome = await run(provider, handler=Recorder(), prompt="go", turn_guard=guard)
    err = outcome.failure()
    assert (
        isinstance(err, GuardFailed) and err.error_type == "RuntimeError" and "ledger offline" in err.detail
    )
    assert err.result is not None and err.result.reason == "guard_failed"


async def test_S43_Better_guard_returning_none_is_guard_failed() -> None:
    outcome = await run(ScriptedProvider([end()]), handler=Recorder(), prompt="go", turn_guard=lambda p: None)
    assert isinstance(outcome.failure(), GuardFailed)


async def test_async_guard_and_reference_shapes_are_accepted() -> None:
    async def guard(p: dict[str, Any]) -> object:
        return "cont" if p["turns"] < 2 else ("halt", "enough")

    outcome = await run(ScriptedProvider(forever_calls(4)), handler=Recorder(), prompt="go", turn_guard=guard)
    assert outcome.failure() == Halted(reason="enough", result=outcome.failure().result)


@pytest.mark.parametrize("streaming", STREAMING)
async def test_S44_S45_reprompts_with_exact_text_then_no_terminal_tool(streaming: bool) -> None:
    provider = ScriptedProvider([end("a"), end("b"), end("c")], streaming=streaming)
    turns: list[int] = []
    outcome = await run(
        provider,
        handler=Recorder(),
        prompt="go",
        require_terminal_tool=True,
        terminal_tool="submit",
        turn_guard=lambda p: turns.append(p["turns"]) or CONTINUE,
    )
    r = outcome.unwrap()
    assert r.terminal is Terminal.END_TURN and r.stop_reason == "no_terminal_tool" and r.turns == 3
    assert r.reason == "no_terminal_tool" and r.text == "c"
    expected = REPROMPT_TEMPLATE.format(tool="submit")
    assert expected == (
        "You returned a response without calling submit. You MUST call submit now to finish — "
        "produce the result via submit."
    )
    assert provider.inputs[1] == [{"type": "user.message", "text": expected}]
    assert turns == [1, 2, 3]  # S-41: the guard fires on re-prompt turns


async def test_S46_zero_reprompts_finishes_on_the_first_end_turn() -> None:
    outcome = await run(
        ScriptedProvider([end()]),
        handler=Recorder(),
        prompt="go",
        require_terminal_tool=True,
        terminal_tool="submit",
        max_reprompts=0,
    )
    assert outcome.unwrap().turns == 1 and outcome.unwrap().stop_reason == "no_terminal_tool"


async def test_S47_terminal_tool_called_earlier_in_the_request_satisfies() -> None:
    provider = ScriptedProvider([end("no"), calls(tool("submit", "t1")), end("yes")])
    outcome = await run(
        provider, handler=Recorder(), prompt="go", require_terminal_tool=True, terminal_tool="submit"
    )
    r = outcome.unwrap()
    assert r.turns == 3 and r.stop_reason == {"type": "end_turn"} and r.reason is None


async def test_S36_reprompt_turns_count_against_max_turns() -> None:
    provider = ScriptedProvider([end(), end(), end()])
    outcome = await run(
        provider,
        handler=Recorder(),
        prompt="go",
        require_terminal_tool=True,
        terminal_tool="submit",
        max_turns=2,
    )
    assert isinstance(outcome.failure(), MaxTurnsExceeded)
    assert len(provider.inputs) == 2


async def test_S48_S64_terminated_turn_finishes_as_ok_even_with_terminal_tool_required() -> None:
    provider = ScriptedProvider([[text("oops"), idle("error")]])
    outcome = await run(
        provider, handler=Recorder(), prompt="go", require_terminal_tool=True, terminal_tool="s"
    )
    r = outcome.unwrap()
    assert r.terminal is Terminal.TERMINATED and r.stop_reason == {"type": "error"} and r.reason is None


async def test_S50_terminal_tool_is_ignored_without_require_terminal_tool() -> None:
    outcome = await run(ScriptedProvider([end()]), handler=Recorder(), prompt="go", terminal_tool="submit")
    assert outcome.unwrap().turns == 1 and outcome.unwrap().reason is None


async def test_S62_decision_text_is_the_final_turns_text() -> None:
    provider = ScriptedProvider(
        [[text("thinking "), tool("a", "t1"), idle("requires_action")], end("answer")]
    )
    r = (await run(provider, handler=Recorder(), prompt="go")).unwrap()
    assert r.text == "answer"
    assert any(e.get("text") == "thinking " for e in r.events)  # the earlier text stays in events


async def test_S30_nil_usage_leaves_the_accumulator_and_server_tools_accumulate() -> None:
    server = {"type": "server_tool_use", "id": "s1", "name": "web_search"}
    provider = ScriptedProvider([[server, tool("a", "t1"), idle("requires_action")], end(i=2, o=3)])
    r = (await run(provider, handler=Recorder(), prompt="go")).unwrap()
    assert r.server_tool_uses == (server,)
    assert (r.usage.input_tokens, r.usage.output_tokens, len(r.usage.raw)) == (2, 3, 1)


async def test_S20_A6_kickoff_defaults_to_begin() -> None:
    provider = ScriptedProvider([end()])
    await run(provider, handler=Recorder())
    assert provider.inputs[0] == [{"type": "user.message", "text": "Begin."}]


@pytest.mark.parametrize("streaming", STREAMING)
async def test_S38_the_guard_sees_the_raw_usage_entries_as_the_result_does(streaming: bool) -> None:
    seen: list[Usage] = []

    def guard(payload: dict[str, Any]) -> object:
        seen.append(payload["usage"])
        return CONTINUE

    provider = ScriptedProvider([calls(tool("a", "t1"), i=2, o=3), end(i=4, o=5)], streaming=streaming)
    result = (await run(provider, handler=Recorder(), prompt="go", turn_guard=guard)).unwrap()
    assert [len(u.raw) for u in seen] == [1, 2]
    assert [(e["input_tokens"], e["output_tokens"]) for e in seen[1].raw] == [(2, 3), (4, 5)]
    assert seen[1] == result.usage  # the counts and the raw entries alike
