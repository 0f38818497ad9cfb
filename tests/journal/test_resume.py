"""Journaled runs and ``resume`` on a scripted host: what is run again after a crash, and what never is.

A "crash" here is the run's cancel scope cancelled from inside a tool (the process's task
stops where it is: the journal keeps what was written by then); the SIGKILL properties against
each host's emulator are in ``test_crash_*``.
"""

from __future__ import annotations

import copy
from typing import Any

import anyio
import pytest
from returns.result import Failure, Success

from rma.errors import InvalidOpts
from rma.vocabulary import SessionInfo
from rma_shell import (
    JournalDamaged,
    JournalMismatch,
    MemoryJournal,
    SQLiteJournal,
    resume,
    run,
)
from rma_shell.journal import JournalUnavailable
from rma_shell.journal.writer import INTERRUPTED
from rma_shell.testing.scripted import ScriptedProvider
from tests.helpers import calls, end, tool

_SCRIPT = [calls(tool("a", "t1", x=1)), calls(tool("b", "t2", y=2)), end("fin")]
"""Built once, so every run of it sees the same event ids."""


def _loop() -> ScriptedProvider:
    return ScriptedProvider(copy.deepcopy(_SCRIPT))


class _Crashing:
    """Tools that record each run, and stop the whole run (its cancel scope) inside ``crash_in``."""

    def __init__(self, scope: anyio.CancelScope | None = None, crash_in: str | None = None) -> None:
        self.scope = scope
        self.crash_in = crash_in
        self.runs: list[tuple[str, str | None, int]] = []
        self.at_most_once: frozenset[str] = frozenset()

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: Any, info: SessionInfo) -> str:
        self.runs.append((name, info.idempotency_key, info.attempt))
        if name == self.crash_in and self.scope is not None:
            self.crash_in = None
            self.scope.cancel()
            await anyio.sleep(1)  # cancelled here: the call leaves no result
        return f"ok:{name}"


async def _crash(provider: ScriptedProvider, journal: object, handler: _Crashing, key: str = "k") -> None:
    with anyio.CancelScope() as scope:
        handler.scope = scope
        await run(provider, handler=handler, prompt="go", journal=journal, journal_key=key)
    assert scope.cancel_called


async def test_a_journaled_run_returns_what_an_unjournaled_one_does() -> None:
    plain = await run(_loop(), handler=_Crashing(), prompt="go")
    journaled = await run(_loop(), handler=_Crashing(), prompt="go", journal=MemoryJournal(), journal_key="k")
    assert journaled == plain and isinstance(plain, Success)


async def test_resuming_a_finished_session_returns_its_outcome_and_sends_nothing() -> None:
    journal, provider = MemoryJournal(), _loop()
    first = await run(provider, handler=_Crashing(), prompt="go", journal=journal, journal_key="k")
    opened = len(provider.opened)
    again = await resume(journal, "k", provider=provider, handler=_Crashing())
    assert again == first and len(provider.opened) == opened


async def test_a_tool_that_started_and_left_no_result_runs_again_with_the_same_key_as_attempt_2() -> None:
    journal, provider = MemoryJournal(), _loop()
    handler = _Crashing(crash_in="b")
    await _crash(provider, journal, handler)
    assert handler.runs == [("a", "k:t1", 1), ("b", "k:t2", 1)]
    resumed = await resume(journal, "k", provider=provider, handler=handler)
    assert isinstance(resumed, Success) and resumed.unwrap().text == "fin"
    # t1's result was journaled: never run again. t2 started, no result: run again, same key.
    assert handler.runs == [("a", "k:t1", 1), ("b", "k:t2", 1), ("b", "k:t2", 2)]
    assert resumed == await run(_loop(), handler=_Crashing(), prompt="go")


async def test_an_at_most_once_tool_that_was_interrupted_is_answered_as_such_and_not_run_again() -> None:
    journal, provider = MemoryJournal(), _loop()
    handler = _Crashing(crash_in="b")
    handler.at_most_once = frozenset({"b"})
    await _crash(provider, journal, handler)
    resumed = await resume(journal, "k", provider=provider, handler=handler)
    assert isinstance(resumed, Success)
    assert [r[0] for r in handler.runs] == ["a", "b"]
    answer = provider.inputs[-1][0]  # the resume that answered t2
    assert answer["tool_use_id"] == "t2" and answer["is_error"]
    assert answer["text"] == INTERRUPTED.format(name="b")


async def test_a_model_turn_in_flight_is_asked_again_with_the_same_input() -> None:
    journal, provider = MemoryJournal(), _loop()
    handler = _Crashing()
    second = provider.turns[1]
    provider.turns[1] = _cancel_then(second, handler)  # the second poll stops the run
    await _crash(provider, journal, handler)
    provider.turns.insert(0, second)  # a host that answers the repeated question the same way
    resumed = await resume(journal, "k", provider=provider, handler=handler)
    assert isinstance(resumed, Success) and [r[0] for r in handler.runs] == ["a", "b"]
    assert provider.inputs[1] == provider.inputs[2]  # the same turn input, t1's result, again
    assert resumed == await run(_loop(), handler=_Crashing(), prompt="go")


def _cancel_then(turn: Any, handler: _Crashing) -> Any:
    def polled(_input: Any) -> Any:
        assert handler.scope is not None
        handler.scope.cancel()
        return turn

    return polled


async def test_resume_with_an_sqlite_journal_opened_afresh_like_another_process(tmp_path: Any) -> None:
    path = tmp_path / "runs.db"
    provider, handler = _loop(), _Crashing(crash_in="b")
    await _crash(provider, SQLiteJournal(path), handler)
    resumed = await resume(str(path), "k", provider=provider, handler=handler)
    assert isinstance(resumed, Success) and handler.runs[-1] == ("b", "k:t2", 2)


# ── what the journal refuses, before anything is sent ─────────────────────────────────


async def test_journal_key_without_a_journal_and_a_journal_without_a_key_are_refused() -> None:
    provider = _loop()
    for kwargs, option in (
        ({"journal_key": "k"}, "journal_key"),
        ({"journal": MemoryJournal()}, "journal_key"),
    ):
        outcome = await run(provider, handler=_Crashing(), prompt="go", **kwargs)
        assert isinstance(outcome.failure(), InvalidOpts) and outcome.failure().option == option
    assert provider.opened == []


async def test_a_key_that_already_holds_a_session_is_refused_with_how_to_resume_it() -> None:
    journal = MemoryJournal()
    await run(_loop(), handler=_Crashing(), prompt="go", journal=journal, journal_key="k")
    provider = _loop()
    outcome = await run(provider, handler=_Crashing(), prompt="go", journal=journal, journal_key="k")
    error = outcome.failure()
    assert isinstance(error, InvalidOpts) and error.option == "journal_key" and "resume(" in error.detail
    assert provider.opened == []


async def test_a_journal_that_is_not_a_store_is_refused() -> None:
    outcome = await run(_loop(), handler=_Crashing(), prompt="go", journal=42, journal_key="k")
    assert isinstance(outcome.failure(), InvalidOpts) and outcome.failure().option == "journal"


async def test_an_edited_record_is_journal_damaged_and_nothing_is_sent() -> None:
    journal, provider = MemoryJournal(), _loop()
    await _crash(provider, journal, _Crashing(crash_in="b"))
    journal.tamper("k", 4, '{"kind":"event","event":{"$type":"TurnPolled","events":[]}}')
    opened = len(provider.opened)
    outcome = await resume(journal, "k", provider=provider, handler=_Crashing())
    error = outcome.failure()
    assert isinstance(error, JournalDamaged) and error.seq == 4 and len(provider.opened) == opened


async def test_a_dropped_middle_record_is_journal_damaged() -> None:
    journal, provider = MemoryJournal(), _loop()
    await _crash(provider, journal, _Crashing(crash_in="b"))
    journal.tamper("k", 3, None)
    outcome = await resume(journal, "k", provider=provider, handler=_Crashing())
    assert isinstance(outcome.failure(), JournalDamaged) and outcome.failure().seq == 3


async def test_another_sessions_records_and_another_hosts_journal_are_a_mismatch() -> None:
    journal, provider = MemoryJournal(), _loop()
    await _crash(provider, journal, _Crashing(crash_in="b"))
    copied = MemoryJournal()
    copied._rows["other"] = list(journal.rows("k"))  # the same records under another key
    outcome = await resume(copied, "other", provider=provider, handler=_Crashing())
    assert isinstance(outcome.failure(), JournalMismatch)
    streaming = ScriptedProvider([], streaming=True)
    streaming.codec.name = "not_scripted"  # type: ignore[misc]
    outcome = await resume(journal, "k", provider=streaming, handler=_Crashing())
    assert isinstance(outcome.failure(), JournalMismatch) and "scripted" in str(outcome.failure())


async def test_an_unknown_key_is_a_mismatch_saying_nothing_was_journaled() -> None:
    outcome = await resume(MemoryJournal(), "nope", provider=_loop(), handler=_Crashing())
    assert isinstance(outcome.failure(), JournalMismatch) and "no session" in str(outcome.failure())


class _FailingStore(MemoryJournal):
    def __init__(self, after: int) -> None:
        super().__init__()
        self.left = after

    def append(self, key: str, records: Any) -> None:
        if self.left <= 0:
            raise OSError("disk full")
        self.left -= 1
        super().append(key, records)


async def test_a_journal_that_cannot_be_written_stops_the_run_with_its_progress() -> None:
    store = _FailingStore(after=4)  # the second turn's commit fails (a run of this loop makes 8)
    handler = _Crashing()
    with anyio.fail_after(5):
        outcome = await run(_loop(), handler=handler, prompt="go", journal=store, journal_key="k")
    error = outcome.failure()
    assert isinstance(error, JournalUnavailable) and "disk full" in error.detail
    assert error.result is not None and error.result.turns >= 1


@pytest.mark.parametrize("bad", [None, "", "x" * 300])
async def test_a_bad_key_names_journal_key(bad: Any) -> None:
    outcome = await resume(MemoryJournal(), bad, provider=_loop(), handler=_Crashing())
    assert isinstance(outcome, Failure) and outcome.failure().option == "journal_key"


async def test_a_finished_local_session_resumes_to_an_equal_result_transcript_included() -> None:
    from rma_shell.providers.local import Local
    from rma_shell.testing import OpenAIEmulator

    with OpenAIEmulator([{"content": "hello"}]) as emu:
        provider = Local(base_url=emu.base_url, model="m")
        journal = MemoryJournal()
        try:
            first = await run(provider, handler=_Crashing(), prompt="hi", journal=journal, journal_key="k")
            again = await resume(journal, "k", provider=provider, handler=_Crashing())
        finally:
            await provider.close()
    assert isinstance(first, Success) and first.unwrap().transcript and again == first


# ── live sessions ───────────────────────────────────────────────────────────────────


async def test_a_live_session_resumes_where_it_was_and_delivers_the_open_requests_result() -> None:
    from rma_shell import open_session, resume_session

    journal, provider = MemoryJournal(), _loop()
    handler = _Crashing(crash_in="b")
    with anyio.CancelScope() as scope:
        handler.scope = scope
        async with open_session(provider, handler=handler, prompt="go", journal=journal, journal_key="live"):
            await anyio.sleep_forever()
    async with resume_session(journal, "live", provider=provider, handler=handler) as session:
        with anyio.fail_after(5):
            outcome = await session.next_result()
    assert isinstance(outcome, Success) and outcome.unwrap().text == "fin"
    assert handler.runs[-1] == ("b", "live:t2", 2)


async def test_resume_and_resume_session_each_refuse_the_others_journal() -> None:
    from rma_shell import resume_session

    journal = MemoryJournal()
    await run(_loop(), handler=_Crashing(), prompt="go", journal=journal, journal_key="k")
    with pytest.raises(InvalidOpts, match="resume it with resume"):
        async with resume_session(journal, "k", provider=_loop(), handler=_Crashing()):
            pass
