"""Approvals that wait across processes: a call that needs one pauses the run durably; ``approve``
then ``resume`` — in any process, at any later time — runs or refuses it and carries on."""

from __future__ import annotations

import copy
from typing import Any

from returns.result import Success

from rma.errors import InvalidOpts
from rma.vocabulary import SessionInfo
from rma_shell import AwaitingApproval, MemoryJournal, SQLiteJournal, approve, pending_approvals, resume, run
from rma_shell.testing.scripted import ScriptedProvider
from rma_shell.tools import Toolbox, tool
from tests.helpers import calls, end
from tests.helpers import tool as use

_SCRIPT = [calls(use("lookup", "t1", q="x"), use("refund", "t2", amount=120)), end("refunded")]
paid: list[int] = []


@tool
def lookup(q: str) -> str:
    """Look up an order."""
    return f"order for {q}"


@tool(requires_approval=lambda args: args["amount"] > 100)
def refund(amount: int) -> str:
    """Refund an amount."""
    paid.append(amount)
    return f"refunded {amount}"


def _host() -> ScriptedProvider:
    return ScriptedProvider(copy.deepcopy(_SCRIPT))


async def test_a_call_that_needs_approval_pauses_the_run_and_says_which_calls_wait() -> None:
    journal, provider = MemoryJournal(), _host()
    paid.clear()
    outcome = await run(
        provider, handler=Toolbox(lookup, refund), prompt="go", journal=journal, journal_key="r1"
    )
    error = outcome.failure()
    assert isinstance(error, AwaitingApproval) and error.key == "r1"
    assert [(p.tool_use_id, p.name, dict(p.input)) for p in error.waiting] == [
        ("t2", "refund", {"amount": 120})
    ]
    assert error.result is not None and error.result.turns == 1  # the progress so far comes along
    assert paid == [] and "refund (t2)" in str(error)
    waiting = pending_approvals(journal, "r1")
    assert isinstance(waiting, Success) and [p.tool_use_id for p in waiting.unwrap()] == ["t2"]


async def test_approve_then_resume_runs_the_call_once_and_finishes(tmp_path: Any) -> None:
    path, provider = tmp_path / "j.db", _host()
    paid.clear()
    await run(
        provider, handler=Toolbox(lookup, refund), prompt="go", journal=SQLiteJournal(path), journal_key="r1"
    )
    # Later, from another process: its own store on the same file.
    assert approve(SQLiteJournal(path), "r1", "t2", "allow", "ok by finance") == Success(None)
    assert pending_approvals(str(path), "r1") == Success(())
    resumed = await resume(str(path), "r1", provider=provider, handler=Toolbox(lookup, refund))
    assert isinstance(resumed, Success) and resumed.unwrap().text == "refunded"
    assert paid == [120]
    answers = {r["tool_use_id"]: r["text"] for r in provider.inputs[-1]}
    assert answers == {"t1": "order for x", "t2": "refunded 120"}  # lookup ran before the pause, once


async def test_a_denied_call_is_answered_with_the_reason_and_never_runs() -> None:
    journal, provider = MemoryJournal(), _host()
    paid.clear()
    await run(provider, handler=Toolbox(lookup, refund), prompt="go", journal=journal, journal_key="r1")
    assert approve(journal, "r1", "t2", "deny", "over the limit") == Success(None)
    resumed = await resume(journal, "r1", provider=provider, handler=Toolbox(lookup, refund))
    assert isinstance(resumed, Success) and paid == []
    answer = {r["tool_use_id"]: r for r in provider.inputs[-1]}["t2"]
    assert answer["is_error"] and "over the limit" in answer["text"]


async def test_resuming_before_a_decision_pauses_again_with_the_same_calls() -> None:
    journal, provider = MemoryJournal(), _host()
    await run(provider, handler=Toolbox(lookup, refund), prompt="go", journal=journal, journal_key="r1")
    again = await resume(journal, "r1", provider=provider, handler=Toolbox(lookup, refund))
    assert isinstance(again.failure(), AwaitingApproval)
    assert [p.tool_use_id for p in again.failure().waiting] == ["t2"]


async def test_a_raw_handler_decides_per_call() -> None:
    class Handler:
        def __init__(self) -> None:
            self.ran: list[str] = []

        def requires_approval(self, name: str, input: dict[str, Any], ctx: Any, info: SessionInfo) -> bool:
            return name == "refund"

        def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any) -> str:
            self.ran.append(name)
            return "done"

    journal, provider, handler = MemoryJournal(), _host(), Handler()
    outcome = await run(provider, handler=handler, prompt="go", journal=journal, journal_key="r1")
    assert isinstance(outcome.failure(), AwaitingApproval) and handler.ran == ["lookup"]
    approve(journal, "r1", "t2", "allow")
    assert isinstance(await resume(journal, "r1", provider=provider, handler=handler), Success)
    assert handler.ran == ["lookup", "refund"]


async def test_approving_what_does_not_wait_or_with_a_bad_decision_is_refused() -> None:
    journal = MemoryJournal()
    await run(_host(), handler=Toolbox(lookup, refund), prompt="go", journal=journal, journal_key="r1")
    unknown = approve(journal, "r1", "t1", "allow")
    assert isinstance(unknown.failure(), InvalidOpts) and "t2" in unknown.failure().detail
    bad = approve(journal, "r1", "t2", "yes")  # type: ignore[arg-type]
    assert isinstance(bad.failure(), InvalidOpts) and bad.failure().option == "decision"


async def test_tools_that_may_need_approval_without_a_journal_are_refused_up_front() -> None:
    provider = _host()
    outcome = await run(provider, handler=Toolbox(lookup, refund), prompt="go")
    error = outcome.failure()
    assert isinstance(error, InvalidOpts) and error.option == "journal" and provider.opened == []
