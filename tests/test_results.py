"""Inside the shell's entry layer errors are raised; a public entry point returns them once.

Pins: ``ok`` gives a ``Success``'s value and raises a ``Failure``'s ``SessionError`` as itself
(no traceback carried over from an earlier raise); a run whose preparation fails returns that
very error in a ``Failure`` (``run``, ``resume``, ``Agent.run``) and a live entry raises it
(``open_session``, ``Agent.session``); the entry modules no longer pass ``Failure``s up by hand.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from returns.result import Failure, Success

from rma.errors import InvalidOpts, SessionError
from rma_shell import Agent, open_session, resume, run
from rma_shell.results import ok
from rma_shell.testing import ScriptedProvider


def test_ok_returns_the_value_of_a_success() -> None:
    assert ok(Success(3)) == 3


def test_ok_raises_the_error_of_a_failure_as_itself_without_an_old_traceback() -> None:
    error = InvalidOpts("max_turns", "must be positive")
    with pytest.raises(InvalidOpts) as first:
        ok(Failure(error))
    assert first.value is error
    with pytest.raises(InvalidOpts) as second:
        ok(Failure(error))  # raised again: its traceback starts afresh
    assert second.value.__traceback__ is not None
    assert len(list(_frames(second.value.__traceback__))) <= 2


def _frames(tb: object) -> list[object]:
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next  # type: ignore[attr-defined]
    return out


def _tool(name: str, args: object, ctx: object) -> str:
    return "ok"


async def test_run_returns_a_preparation_error_as_a_failure_naming_the_option() -> None:
    outcome = await run(ScriptedProvider([]), handler=_tool, prompt="hi", stop_grace=0)
    assert isinstance(outcome, Failure)
    assert isinstance(outcome.failure(), InvalidOpts) and outcome.failure().option == "stop_grace"


async def test_agent_run_returns_a_preparation_error_as_a_failure() -> None:
    outcome = await Agent(host=ScriptedProvider([]), handler=_tool).run("hi", tool_timeout=-1)
    assert isinstance(outcome, Failure) and outcome.failure().option == "tool_timeout"


async def test_resume_returns_a_preparation_error_as_a_failure(tmp_path: Path) -> None:
    outcome = await resume(tmp_path / "j.sqlite", "", provider=ScriptedProvider([]), handler=_tool)
    assert isinstance(outcome, Failure) and isinstance(outcome.failure(), SessionError)


async def test_open_session_and_agent_session_raise_the_same_error() -> None:
    with pytest.raises(InvalidOpts, match="stop_grace"):
        async with open_session(ScriptedProvider([]), handler=_tool, stop_grace=0):
            pass
    with pytest.raises(InvalidOpts, match="stop_grace"):
        async with Agent(host=ScriptedProvider([]), handler=_tool).session(stop_grace=0):
            pass


# A session that fails to open or reattach ends with that outcome: a value the driver journals
# and records, not a preparation error.
_OUTCOMES = {"drive_to_end", "_opened"}


@pytest.mark.parametrize("module", ["session.py", "resuming.py", "agent.py"])
def test_the_entry_layer_does_not_pass_a_preparation_failure_up_by_hand(module: str) -> None:
    tree = ast.parse((Path(__file__).parents[1] / "rma_shell" / module).read_text())
    rewrapping = sorted(
        f.name
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
        and f.name not in _OUTCOMES
        and re.search(r"return Failure\((\w+)\.failure\(\)\)", ast.unparse(f))
    )
    assert rewrapping == [], f"{module}: {rewrapping} re-wrap a Failure: raise inside, return a Result once"
