"""requires_action handling, empty-batch recovery, outcomes (S-51…S-59)."""

from __future__ import annotations

import pytest

from rma.errors import UnresolvedRequiresAction
from rma.vocabulary import Outcome, Terminal
from rma_shell import run
from rma_shell.testing.scripted import ScriptedProvider
from tests.helpers import Recorder, end, idle, text, tool


@pytest.mark.parametrize("streaming", [False, True])
async def test_S52_S54_T13_stale_requires_action_recovers_from_history_without_duplicate_ids(
    streaming: bool,
) -> None:
    provider = ScriptedProvider(
        [
            [tool("fetch", "t1"), idle("requires_action", ["t1"])],
            [idle("requires_action", ["t1"])],  # stale: the host has not seen the result yet
            end("done"),
        ],
        streaming=streaming,
    )
    handler = Recorder()
    r = (await run(provider, handler=handler, prompt="go")).unwrap()
    assert r.terminal is Terminal.END_TURN and r.turns == 3
    assert [u.id for u in r.custom_tool_uses] == ["t1"]  # S-54: never a duplicate id
    assert len(handler.calls) == 2  # T-13: at-least-once — the recovered call ran again
    resumes = provider.inputs[1:]
    assert all(resume for resume in resumes)  # S-53: never an empty resume


@pytest.mark.parametrize("streaming", [False, True])
async def test_S53_nothing_recoverable_is_unresolved_requires_action_and_no_empty_resume(
    streaming: bool,
) -> None:
    provider = ScriptedProvider([[text("hm"), idle("requires_action", [])]], streaming=streaming)
    outcome = await run(provider, handler=Recorder(), prompt="go")
    err = outcome.failure()
    assert isinstance(err, UnresolvedRequiresAction) and err.stop_reason == {"type": "requires_action"}
    assert err.result is not None and err.result.terminal is Terminal.TERMINATED
    assert err.result.reason == "unresolved_requires_action"
    assert len(provider.inputs) == 1  # only the kickoff: no empty resume went out


async def test_S55_decision_requires_action_never_reaches_a_result_terminal() -> None:
    provider = ScriptedProvider([[tool("a", "t1"), idle("requires_action")], end()])
    r = (await run(provider, handler=Recorder(), prompt="go")).unwrap()
    assert r.terminal in (Terminal.END_TURN, Terminal.TERMINATED)


async def test_S57_S58_outcome_kicks_off_with_define_outcome_and_prompt_is_ignored() -> None:
    satisfied = {"type": "idle", "stop_reason": {"type": "end_turn"}, "id": "o9"}
    provider = ScriptedProvider(
        [
            [
                {"type": "span.outcome_evaluation_end", "result": "needs_revision", "id": "o1"},
                text("v2"),
                satisfied,
            ]
        ],
        streaming=True,
    )
    outcome_spec = Outcome(description="a report", rubric="- totals", max_iterations=2)
    r = (await run(provider, handler=Recorder(), prompt="ignored", outcome=outcome_spec)).unwrap()
    assert provider.inputs[0] == [
        {"type": "define_outcome", "description": "a report", "rubric": "- totals", "max_iterations": 2}
    ]
    assert r.turns == 1 and r.terminal is Terminal.END_TURN and r.stop_reason == {"type": "end_turn"}


async def test_S11_outcome_as_mapping_is_coerced() -> None:
    provider = ScriptedProvider([end()], streaming=True)
    await run(provider, handler=Recorder(), outcome={"description": "d", "rubric": "r"})
    assert provider.inputs[0][0]["type"] == "define_outcome"
