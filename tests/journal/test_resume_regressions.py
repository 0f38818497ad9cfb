"""Resume bugs the crash tests found, pinned in-process (no subprocess, no kill).

A journal store that refuses every append from a chosen record on stops the session there
(``JournalUnavailable``), leaving the journal a crash at that point would have left.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from returns.result import Success

from rma.vocabulary import SessionResult
from rma_shell import MemoryJournal, resume, run
from rma_shell.journal import JournalStoreError
from tests.journal import _scenario as sc


class StopsAt(MemoryJournal):
    """Refuses appends from the first one holding a record of kind ``kind`` (or whose text holds
    ``containing``) on — after ``skip`` such appends — until ``stopping`` is cleared."""

    def __init__(self, kind: str = "", containing: str = "") -> None:
        super().__init__()
        self.kind, self.containing = kind, containing
        self.stopping = True
        self.stopped = False
        self.skip = 0

    def append(self, key: str, records: Sequence[str]) -> None:
        if self.stopping and not self.stopped:
            hit = any(
                json.loads(r)["kind"] == self.kind or (self.containing and self.containing in r)
                for r in records
            )
            if hit and self.skip:
                self.skip -= 1
                hit = False
            self.stopped = hit
        if self.stopping and self.stopped:  # this append and every later one
            raise JournalStoreError("stopped here by the test")
        super().append(key, records)


async def _run(spec: dict[str, Any], handler: object, journal: Any) -> Any:
    provider = sc.provider(spec)
    try:
        return await run(
            provider,
            handler=handler,
            prompt=sc.PROMPT,
            journal=journal,
            journal_key=sc.KEY,
            timeout=30,
            **sc.run_options(spec),
        )
    finally:
        await provider.close()


async def _resume(spec: dict[str, Any], handler: object, journal: Any) -> Any:
    provider = sc.provider(spec)
    try:
        return await resume(journal, sc.KEY, provider=provider, handler=handler, timeout=30)
    finally:
        await provider.close()


async def test_an_ended_journal_resumes_to_the_same_result_transcript_included(tmp_path: Any) -> None:
    # The end record's transcript came back a list; the result's is a tuple: never equal.
    effects = str(tmp_path / "effects.db")
    sc.create_effects(effects)
    journal = MemoryJournal()
    with sc.emulator("local") as (emu, spec):
        ran = (await _run(spec, sc.Payments(effects), journal)).unwrap()
        sent = len(emu.requests)
        again = (await _resume(spec, sc.Payments(effects), journal)).unwrap()
        assert len(emu.requests) == sent  # an ended session: nothing sent
    assert ran.transcript is not None and isinstance(again.transcript, tuple)
    assert again == ran


async def _journaled(tmp_path: Any, host: str) -> tuple[SessionResult, list[tuple[int, str, str]]]:
    """The payments scenario run on ``host`` with a journal: its result and the journal's rows."""
    effects = str(tmp_path / "effects.db")
    sc.create_effects(effects)
    journal = MemoryJournal()
    with sc.emulator(host) as (_emu, spec):
        ran = (await _run(spec, sc.Payments(effects), journal)).unwrap()
    return ran, list(journal.rows(sc.KEY))


async def test_an_end_record_refers_to_the_journaled_history_instead_of_writing_the_transcript_again(
    tmp_path: Any,
) -> None:
    # Issue #28: a Local transcript is the history the last conn already holds; the end record
    # says so ("transcript": "history") and reading it back gives the same transcript.
    from rma.journal import load
    from rma.provider import codec_for

    ran, rows = await _journaled(tmp_path, "local")
    end = json.loads(rows[-1][1])
    assert end["kind"] == "end" and end["transcript"] == "history"
    assert end["outcome"] == "fold"  # neither the transcript nor the result written twice
    loaded = load(sc.KEY, rows, codec_for).unwrap()
    assert loaded.outcome is not None and loaded.outcome.unwrap() == ran
    assert ran.transcript == tuple(loaded.snapshot["history"])


@pytest.mark.parametrize("host", ["local", "cma", "agentcore"])
async def test_an_end_record_refers_to_the_outcome_its_events_lead_to_on_every_host(
    tmp_path: Any, host: str
) -> None:
    # Issue #28: the core's own outcome is not encoded again at the end (its usage, events and
    # calls are all in the journaled events): the record says "fold", and load replays the
    # events to the outcome the run returned, transcript included.
    from rma.journal import load
    from rma.provider import codec_for

    ran, rows = await _journaled(tmp_path, host)
    end = json.loads(rows[-1][1])
    assert end["kind"] == "end" and end["outcome"] == "fold"
    loaded = load(sc.KEY, rows, codec_for).unwrap()
    assert loaded.outcome is not None and loaded.outcome.unwrap() == ran
    assert ran.turns > 1 and ran.custom_tool_uses  # a result with something in it to lose


@pytest.mark.parametrize("host", ["local", "cma", "agentcore"])
async def test_a_result_that_ends_a_batch_is_journaled_once_in_the_batch_end(
    tmp_path: Any, host: str
) -> None:
    # Issue #28: the batch's last result and its ToolsFinished go in one transaction, so the
    # event's record is the result's only copy; load still knows every result by id.
    from rma.journal import load
    from rma.provider import codec_for

    _ran, sealed = await _journaled(tmp_path, host)
    rows = [json.loads(text) for _seq, text, _chain in sealed]
    own = [r["id"] for r in rows if r["kind"] == "tool_result" and not r.get("confirm")]
    ends = [r["event"] for r in rows if r["kind"] == "event" and r["event"]["$type"] == "ToolsFinished"]
    assert ends
    carried = {res["tool_use_id"]: res for end in ends for res in end["results"]}
    for end in ends:  # the call that finished last is in the event only; the others, at once
        assert sum(res["tool_use_id"] not in own for res in end["results"]) == 1
    loaded = load(sc.KEY, sealed, codec_for).unwrap()
    assert set(loaded.results) == set(carried)
    assert all(loaded.results[i].text == r["text"] for i, r in carried.items())


def test_an_end_record_that_refers_to_an_outcome_the_events_never_reach_is_damaged() -> None:
    # An end record saying "fold" after events that end nothing is not what rma writes: the
    # journal is refused (naming the end's record), never read as a session without outcome.
    from rma.journal import JournalDamaged, load
    from rma.provider import codec_for
    from rma.recording import encode
    from rma.session.events import Opened
    from rma.session.options import SessionConfig
    from rma_shell.journal.writer import SessionJournal

    store = MemoryJournal()
    writer = SessionJournal(store, "k")
    writer.begin("local", encode(SessionConfig(codec_for("local"), provider_name="local")), {"prompt": "hi"})
    writer.event(Opened("s1", False), {"session_id": "s1", "history": []})
    writer.end(Success(SessionResult(terminal="end_turn")), folds=True)
    rows = store.rows("k")
    assert json.loads(rows[-1][1])["outcome"] == "fold"
    error = load("k", rows, codec_for).failure()
    assert isinstance(error, JournalDamaged) and error.seq == len(rows)
    assert "reach" in error.detail


def test_an_end_record_writes_a_transcript_that_is_not_the_journaled_history_whole() -> None:
    # Only a transcript equal to the history the last conn holds is referred to; any other is
    # written whole and read back as it was.
    from returns.result import Success

    from rma.journal import load
    from rma.provider import codec_for
    from rma.recording import encode
    from rma.session.events import Opened
    from rma.session.options import SessionConfig
    from rma.vocabulary import SessionResult
    from rma_shell.journal.writer import SessionJournal

    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    for transcript, referred in (
        (tuple(history), True),
        ((*history, {"role": "user", "content": "never journaled"}), False),
        (tuple(history[:1]), False),
    ):
        store = MemoryJournal()
        writer = SessionJournal(store, "k")
        config = encode(SessionConfig(codec_for("local"), provider_name="local"))
        writer.begin("local", config, {"prompt": "hi"})
        writer.event(Opened("s1", False), {"session_id": "s1", "history": list(history)})
        writer.flush()
        writer.end(Success(SessionResult(terminal="end_turn", transcript=transcript)))
        end = json.loads(store.rows("k")[-1][1])
        assert (end.get("transcript") == "history") is referred
        loaded = load("k", store.rows("k"), codec_for).unwrap()
        assert loaded.outcome is not None and loaded.outcome.unwrap().transcript == transcript


async def test_a_header_that_cannot_be_written_stops_the_run_before_the_host_hears_of_it(
    tmp_path: Any,
) -> None:
    # The header is committed before the open (issue #28: with other sessions' flushes): a
    # store that refuses it ends the run with JournalUnavailable, and nothing was sent.
    effects = str(tmp_path / "effects.db")
    sc.create_effects(effects)
    with sc.emulator("cma") as (emu, spec):  # Claude's open creates the session: it must not
        before = len(emu.requests)
        stopped = await _run(spec, sc.Payments(effects), StopsAt("header"))
        assert len(emu.requests) == before
    error = stopped.failure()
    assert error.kind == "journal_unavailable" and "stopped here by the test" in error.detail, error


async def test_a_journal_that_fails_inside_a_batch_of_calls_stops_the_run_with_journal_unavailable(
    tmp_path: Any,
) -> None:
    # A call's start record is written from the batch's task: with two calls in the batch the
    # store's error came out of the task group as an ExceptionGroup, and the run "crashed".
    effects = str(tmp_path / "effects.db")
    sc.create_effects(effects)
    with sc.emulator("local") as (_emu, spec):
        stopped = await _run(spec, sc.Payments(effects), StopsAt("tool_start"))
    error = stopped.failure()
    assert error.kind == "journal_unavailable", error
    assert sc.read_effects(effects).executions == []  # no call ran without its start record


async def test_a_claude_session_resumed_mid_batch_counts_the_turn_the_host_played_meanwhile(
    tmp_path: Any,
) -> None:
    # The process stopped as its first batch was to start. On resume the tools run, their
    # results go out, the host plays turn 2 before the new stream subscribes, and the listing
    # must replay that turn (its usage, events, the call it asks for) — not treat the whole
    # history as settled as a fresh reattach (``run(session_id=…)``) does.
    effects = str(tmp_path / "effects.db")
    sc.create_effects(effects)
    with sc.emulator("cma") as (_emu, spec):
        undisturbed = (await _run(spec, sc.Payments(effects), MemoryJournal())).unwrap()
    sc.create_effects(effects := str(tmp_path / "effects2.db"))
    with sc.emulator("cma") as (emu, spec):
        journal = StopsAt("tool_start")
        stopped = await _run(spec, sc.Payments(effects), journal)
        assert stopped.failure().kind == "journal_unavailable"
        journal.stopping = False
        resumed = (await _resume(spec, sc.Payments(effects), journal)).unwrap()
        posts = [r for r in emu.requests if r.method == "POST" and r.path.endswith("/events")]
    assert sc.comparable(resumed, "cma") == sc.comparable(undisturbed, "cma")
    assert resumed.turns == 3
    # user.message, the first batch's results, the third call's result: each posted once.
    assert len(posts) == 3
    assert sorted(sc.read_effects(effects).effects.values()) == sorted(
        u.id for u in undisturbed.custom_tool_uses
    )


async def test_a_journaled_claude_reattach_stopped_before_its_first_listing_resumes_as_a_reattach(
    tmp_path: Any,
) -> None:
    # run(session_id=…) reattaches: its first listing settles the history before it (earlier
    # requests). A journal that stopped before that listing must resume the same way, not
    # consolidate from "nothing seen" and take the earlier requests' turns as this one's.
    from rma_shell.testing import text_turn

    async def two_requests(journal: Any) -> tuple[Any, Any, list[Any]]:
        effects = str(tmp_path / f"effects-{id(journal)}.db")
        sc.create_effects(effects)
        script = [*sc.cma_script(), text_turn("Nothing more to pay.")]
        with sc.emulator("cma", script=script) as (emu, spec):
            first = (await _run(spec, sc.Payments(effects), MemoryJournal())).unwrap()
            provider = sc.provider(spec)
            try:
                again = await run(
                    provider,
                    handler=sc.Payments(effects),
                    prompt="Anything else?",
                    session_id=first.session_id,
                    journal=journal,
                    journal_key="again",
                    timeout=30,
                )
                if isinstance(journal, StopsAt):
                    assert again.failure().kind == "journal_unavailable"
                    journal.stopping = False
                    again = await resume(journal, "again", provider=provider, handler=sc.Payments(effects))
            finally:
                await provider.close()
            return first, again, emu.history(first.session_id)

    _, undisturbed, history = await two_requests(MemoryJournal())
    _, resumed, resumed_history = await two_requests(StopsAt(containing='"$type":"ReconnectFinished"'))
    assert resumed.unwrap().turns == undisturbed.unwrap().turns == 1
    assert sc.comparable(resumed.unwrap(), "cma") == sc.comparable(undisturbed.unwrap(), "cma")
    strip = [{k: v for k, v in e.items() if k != "processed_at"} for e in history]
    assert [{k: v for k, v in e.items() if k != "processed_at"} for e in resumed_history] == strip


async def test_an_agentcore_turn_the_harness_had_taken_ends_the_resume_with_turn_lost_once(
    tmp_path: Any,
) -> None:
    # The journal stopped as the second turn's result was to be journaled: the harness holds
    # that turn. Asked again, it refuses the repeat — TurnLost, with the host's text; the run
    # has ended (a second resume returns it, sending nothing); no call ran twice.
    from rma.errors import TurnLost

    effects = str(tmp_path / "effects.db")
    sc.create_effects(effects)
    with sc.emulator("agentcore") as (emu, spec):
        journal = StopsAt(containing='"$type":"TurnPolled"')
        journal.skip = 1  # the first turn's result is journaled; the second's is not
        stopped = await _run(spec, sc.Payments(effects), journal)
        assert stopped.failure().kind == "journal_unavailable"
        journal.stopping = False
        lost = (await _resume(spec, sc.Payments(effects), journal)).failure()
        sent = len(emu.requests)
        again = (await _resume(spec, sc.Payments(effects), journal)).failure()
        assert len(emu.requests) == sent
        held = emu.sessions[sc.SID].messages
    assert isinstance(lost, TurnLost), lost
    assert lost.runtime_session_id == sc.SID and lost.error_type == "runtimeClientError"
    assert "echo exactly the toolUse blocks" in lost.detail  # the host's own words
    assert lost.result is not None and len(lost.result.custom_tool_uses) == 2
    assert again == lost
    executions = sc.read_effects(effects).executions
    assert sorted(i for i, _k, _a in executions) == ["tooluse_crash00000000001", "tooluse_crash00000000002"]
    assert [m["role"] for m in held] == ["user", "assistant", "user"]  # the taken turn, once


async def test_an_agentcore_refusal_outside_a_resumed_turn_stays_what_it_is(tmp_path: Any) -> None:
    # Only a turn asked again is in doubt: the same refusal on a fresh run is the host's verdict.
    from rma_shell.testing import agentcore as ace

    effects = str(tmp_path / "effects.db")
    sc.create_effects(effects)
    with sc.emulator("agentcore") as (emu, spec):
        emu.script_session(sc.SID, [[ace.stream_exception("runtimeClientError", "no")]])
        outcome = await _run(spec, sc.Payments(effects), MemoryJournal())
    assert outcome.failure().kind == "stream_exception"


def test_a_format_1_journal_is_read_and_an_unknown_format_is_refused_by_its_header() -> None:
    # Format 2 (issue #28) lets an end refer to its events' outcome; a journal written before,
    # with its outcome and every result in records of their own, reads as it did, and a format
    # this rma does not know is refused at the header, never misread.
    from rma.journal import JournalDamaged, chain, genesis, load
    from rma.provider import codec_for
    from rma.recording import encode
    from rma.session.options import SessionConfig

    config = encode(SessionConfig(codec_for("local"), provider_name="local"))
    outcome = encode(Success(SessionResult(terminal="end_turn", text="old")))
    result = '{"kind":"tool_result","id":"call_1","text":"paid","is_error":false}'

    def rows(version: int) -> list[tuple[int, str, str]]:
        header = f'{{"kind":"header","format":{version},"key":"k","provider":"local","config":{config}}}'
        texts = [header, result, '{"kind":"end","outcome":' + outcome + "}"]
        sealed, previous = [], genesis("k")
        for seq, text in enumerate(texts, 1):
            previous = chain(previous, text)
            sealed.append((seq, text, previous))
        return sealed

    old = load("k", rows(1), codec_for).unwrap()
    assert old.outcome == Success(SessionResult(terminal="end_turn", text="old"))
    assert old.results["call_1"].text == "paid"
    error = load("k", rows(4), codec_for).failure()
    assert isinstance(error, JournalDamaged) and error.seq == 1 and "unknown journal format 4" in error.detail
