"""Start-time validation: order, typed errors naming the option, nothing opened (S-8…S-15)."""

from __future__ import annotations

from typing import Any

import pytest
from returns.result import Failure

from rma.errors import (
    BudgetUnsupported,
    InvalidOpts,
    InvalidTurnGuard,
    OutcomeUnsupported,
)
from rma.vocabulary import Budget, Outcome
from rma_shell import open_session, run
from rma_shell.testing.scripted import ScriptedProvider
from tests.helpers import Recorder, end

OUTCOME = Outcome(description="a report", rubric="- has totals")


async def _run(provider: ScriptedProvider, **kw: Any) -> Any:
    kw.setdefault("handler", Recorder())
    return await run(provider, prompt="x", **kw)


async def test_S9_X1_turn_guard_must_be_a_one_argument_callable() -> None:
    provider = ScriptedProvider([end()])
    outcome = await _run(provider, turn_guard=lambda a, b: None)
    assert isinstance(outcome.failure(), InvalidTurnGuard)
    outcome = await _run(provider, turn_guard="nope")
    assert isinstance(outcome.failure(), InvalidTurnGuard)
    assert provider.opened == []  # S-8: nothing remote is created


async def test_S10_X2_require_terminal_tool_needs_a_name() -> None:
    provider = ScriptedProvider([end()])
    outcome = await _run(provider, require_terminal_tool=True)
    assert outcome == Failure(InvalidOpts("terminal_tool", outcome.failure().detail))
    assert provider.opened == []


async def test_S11_X3_malformed_outcome_is_invalid_opts_even_on_a_supporting_host() -> None:
    provider = ScriptedProvider([end()], streaming=True)
    for bad in ("a string", {"description": "d"}, {"description": "d", "rubric": 3}, {"nope": 1}):
        outcome = await _run(provider, outcome=bad)
        err = outcome.failure()
        assert isinstance(err, InvalidOpts) and err.option == "outcome", bad
    assert provider.opened == []


async def test_S12_X4_outcome_on_a_host_without_outcomes() -> None:
    provider = ScriptedProvider([end()])
    outcome = await _run(provider, outcome=OUTCOME)
    assert isinstance(outcome.failure(), OutcomeUnsupported)
    assert provider.opened == []


async def test_S8_order_guard_before_terminal_tool_before_outcome() -> None:
    provider = ScriptedProvider([end()])
    outcome = await _run(provider, turn_guard=3, require_terminal_tool=True, outcome="bad")
    assert isinstance(outcome.failure(), InvalidTurnGuard)
    outcome = await _run(provider, require_terminal_tool=True, outcome="bad")
    assert outcome.failure().option == "terminal_tool"
    outcome = await _run(provider, outcome="bad")
    assert outcome.failure().option == "outcome"


async def test_S74_X5_budget_on_a_host_without_budgets() -> None:
    provider = ScriptedProvider([end()])
    outcome = await _run(provider, budget=Budget("10"))
    assert isinstance(outcome.failure(), BudgetUnsupported)
    assert provider.opened == []


async def test_S75_budget_with_resume_is_invalid_opts_budget() -> None:
    provider = ScriptedProvider([end()], streaming=True)
    outcome = await _run(provider, budget={"max_list_cost": "5"}, session_id="sess_old")
    err = outcome.failure()
    assert isinstance(err, InvalidOpts) and err.option == "budget"
    outcome = await _run(provider, budget={"max_list_cost": "-1"})
    assert outcome.failure().option == "budget.max_list_cost"  # the field is named (issue #12)
    assert provider.opened == []


async def test_S15_Better_handler_is_validated_before_anything_remote_exists() -> None:
    provider = ScriptedProvider([end()])
    for bad in (None, 42, object(), lambda a: a, type):
        outcome = await run(provider, handler=bad, prompt="x")
        err = outcome.failure()
        assert isinstance(err, InvalidOpts) and err.option == "handler", bad
    assert provider.opened == []


@pytest.mark.parametrize(
    ("option", "value"),
    [("max_turns", 0), ("max_turns", "5"), ("max_reprompts", -1), ("timeout", 0), ("max_concurrency", 0)],
)
async def test_numeric_options_are_validated_and_named(option: str, value: object) -> None:
    provider = ScriptedProvider([end()])
    outcome = await _run(provider, **{option: value})
    err = outcome.failure()
    assert isinstance(err, InvalidOpts) and err.option == option
    assert option in err.message


async def test_open_session_raises_the_typed_error_itself() -> None:
    provider = ScriptedProvider([end()])
    with pytest.raises(InvalidOpts) as info:
        async with open_session(provider, handler=Recorder(), max_turns=0):
            pass
    assert info.value.option == "max_turns"
    assert provider.opened == []
