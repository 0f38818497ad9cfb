"""``resume`` finishes the stop of a journaled run's host that its grace cut short (issue #23).

A journaled run that times out asks the host to stop its loop within ``stop_grace``; when the
host has not confirmed by then, the run returns ``Timeout(remote_stop="unconfirmed")`` and its
journal's end record says so. ``resume`` on that journal asks the host again (a second
``user.interrupt``, a second ``StopRuntimeSession``), journals what came of it, and returns the
``Timeout`` saying so; a stop confirmed once is never asked again. A journal written before the
end record carried the stop resumes as it did: its outcome, nothing sent.
"""

from __future__ import annotations

import json
from typing import Any

from rma.errors import Timeout
from rma_shell import MemoryJournal, resume, run
from rma_shell.testing import agentcore as ace
from rma_shell.testing import claude as cma
from rma_shell.testing.agentcore import AgentCoreEmulator
from rma_shell.testing.claude import CMAEmulator
from tests.session.test_remote_stop import (
    AC_WORKING,
    CMA_WORKING,
    KEY,
    SID,
    Quiet,
    Stops,
    agentcore,
    claude,
    made,
)

__all__ = ["made"]  # the fixture, shared with tests.session.test_remote_stop


def _timeout(outcome: Any) -> Timeout:
    error = outcome.failure()
    assert isinstance(error, Timeout) and error.operation == "run"
    return error


async def test_resume_finishes_a_claude_stop_the_run_could_not_confirm(made: list[Any]) -> None:
    stops = Stops()
    journal = MemoryJournal()
    with CMAEmulator([CMA_WORKING], api_key=KEY, faults=[cma.slow_interrupt()]) as emu:
        provider = claude(emu, made)
        ran = await run(provider, handler=Quiet(), prompt="go", timeout=1.0, journal=journal, journal_key="k")
        assert _timeout(ran).remote_stop == "unconfirmed"
        [session_id] = emu.session_ids
        assert emu.session(session_id)["status"] == "running"  # the host works on, and bills

        again = await resume(journal, "k", provider=provider, handler=Quiet(), telemetry=stops.telemetry)
        assert _timeout(again).remote_stop == "confirmed"
        assert _timeout(again).timeout_s == 1.0
        assert emu.session(session_id)["status"] == "idle"
        assert len(emu.interrupts(session_id)) == 2  # asked again

        third = await resume(journal, "k", provider=provider, handler=Quiet(), telemetry=stops.telemetry)
        assert _timeout(third).remote_stop == "confirmed"  # journaled: nothing asked this time
        assert len(emu.interrupts(session_id)) == 2
    [(_, meta)] = stops.events
    assert (meta["outcome"], meta["reason"], meta["session_id"]) == ("confirmed", "resume", session_id)


async def test_resume_finishes_an_agentcore_stop_that_hung(made: list[Any]) -> None:
    journal = MemoryJournal()
    with AgentCoreEmulator([AC_WORKING], faults=[ace.hang_stop()]) as emu:
        provider = agentcore(emu, made)
        ran = await run(
            provider,
            handler=Quiet(),
            prompt="go",
            runtime_session_id=SID,
            timeout=1.0,
            stop_grace=0.3,
            journal=journal,
            journal_key="k",
        )
        assert _timeout(ran).remote_stop == "unconfirmed"
        assert emu.stops == ()  # the hanging stop was given up on: the emulator stopped nothing

        again = await resume(journal, "k", provider=provider, handler=Quiet())
        assert _timeout(again).remote_stop == "confirmed"
        [stop] = emu.stops
        assert stop.runtime_session_id == SID


async def test_a_confirmed_stop_is_never_asked_again(made: list[Any]) -> None:
    journal = MemoryJournal()
    with CMAEmulator([CMA_WORKING], api_key=KEY) as emu:
        provider = claude(emu, made)
        ran = await run(
            provider,
            handler=Quiet(),
            prompt="go",
            timeout=1.0,
            stop_grace=10.0,
            journal=journal,
            journal_key="k",
        )
        assert _timeout(ran).remote_stop == "confirmed"
        again = await resume(journal, "k", provider=provider, handler=Quiet())
        assert again == ran  # the journal's outcome, the stop's word on it included
        [session_id] = emu.session_ids
        assert len(emu.interrupts(session_id)) == 1


async def test_a_journal_written_before_the_stop_was_journaled_resumes_as_it_did(made: list[Any]) -> None:
    journal = MemoryJournal()
    with CMAEmulator([CMA_WORKING], api_key=KEY, faults=[cma.slow_interrupt()]) as emu:
        provider = claude(emu, made)
        ran = await run(provider, handler=Quiet(), prompt="go", timeout=1.0, journal=journal, journal_key="k")
        assert _timeout(ran).remote_stop == "unconfirmed"
        # The same journal as an earlier rma wrote it: its end record's Timeout had no remote_stop.
        old = MemoryJournal()
        *records, (_, last, _) = journal.rows("k")
        end = json.loads(last)
        assert end["kind"] == "end" and end["outcome"]["$err"]["remote_stop"] == "unconfirmed"
        end["outcome"]["$err"]["remote_stop"] = None
        old.append("k", [text for _, text, _ in records] + [json.dumps(end)])

        again = await resume(old, "k", provider=provider, handler=Quiet())
        assert _timeout(again).remote_stop is None
        [session_id] = emu.session_ids
        assert len(emu.interrupts(session_id)) == 1  # nothing sent: what it was is unknown
