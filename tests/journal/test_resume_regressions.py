"""Resume bugs the crash tests found, pinned in-process (no subprocess, no kill).

A journal store that refuses every append from a chosen record on stops the session there
(``JournalUnavailable``), leaving the journal a crash at that point would have left.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rma_shell import MemoryJournal, resume, run
from rma_shell.journal import JournalStoreError
from tests.journal import _scenario as sc


class StopsAt(MemoryJournal):
    """Refuses appends from the first record of kind ``kind`` on, until ``stopping`` is cleared."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.stopping = True

    def append(self, key: str, records: Sequence[str]) -> None:
        if self.stopping and any(json.loads(r)["kind"] == self.kind for r in records):
            self.kind = ""  # every later append fails too
            raise JournalStoreError("stopped here by the test")
        if self.stopping and not self.kind:
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
