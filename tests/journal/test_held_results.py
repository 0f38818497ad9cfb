"""A batch's last result is held back, unencoded, for the batch's end (issue #28): the
``ToolsFinished`` that carries it is its only record; anything else that is flushed first
writes it as a record of its own, stamped when it came, in the order it was written."""

from __future__ import annotations

import json
from typing import Any

from rma.session.events import ToolsFinished
from rma.vocabulary import ToolResult
from rma_shell import MemoryJournal
from rma_shell.journal.writer import SessionJournal


def _kinds(store: MemoryJournal, key: str) -> list[dict[str, Any]]:
    return [json.loads(text) for _, text, _ in store.rows(key)]


def test_the_batch_end_carrying_the_held_result_is_its_only_record() -> None:
    store = MemoryJournal()
    journal = SessionJournal(store, "k")
    result = ToolResult("call_1", "done", False)
    journal.tool_result(result, now=False)
    journal.event(ToolsFinished(1, (result,)))
    journal.flush()
    rows = _kinds(store, "k")
    assert [r["kind"] for r in rows] == ["event"]
    assert rows[0]["event"]["results"][0]["tool_use_id"] == "call_1"


def test_a_held_result_flushed_before_its_batch_end_is_a_record_of_its_own_in_order() -> None:
    store = MemoryJournal()
    journal = SessionJournal(store, "k")
    journal.tool_result(ToolResult("call_1", "first", False), now=False)
    journal.waiting(())  # written and flushed now: the held result goes first, as written
    rows = _kinds(store, "k")
    assert [r["kind"] for r in rows] == ["tool_result", "waiting"]
    assert rows[0]["id"] == "call_1" and rows[0]["text"] == "first"
    assert rows[0]["at"] <= rows[1]["at"]


def test_a_batch_end_carrying_a_different_result_does_not_drop_the_held_one() -> None:
    store = MemoryJournal()
    journal = SessionJournal(store, "k")
    journal.tool_result(ToolResult("call_1", "what the tool said", False), now=False)
    journal.event(ToolsFinished(1, (ToolResult("call_1", "something else", False),)))
    journal.flush()
    rows = _kinds(store, "k")
    assert [r["kind"] for r in rows] == ["tool_result", "event"]
    assert rows[0]["text"] == "what the tool said"


async def test_a_commit_writes_a_held_result_with_what_is_pending() -> None:
    store = MemoryJournal()
    journal = SessionJournal(store, "k")
    journal.tool_result(ToolResult("call_1", "one", False))  # at once: its own record
    journal.tool_result(ToolResult("call_2", "two", False), now=False)
    await journal.commit()
    assert [(r["kind"], r["id"]) for r in _kinds(store, "k")] == [
        ("tool_result", "call_1"),
        ("tool_result", "call_2"),
    ]
