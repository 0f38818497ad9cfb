"""``resume`` of a run that already ended, and what ``resume`` opens: the typed output comes
back as the run returned it (given ``output_type`` again), and a journal ``resume`` opened from
a path is closed when it returns — one the caller passed stays open."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pydantic
from returns.result import Failure

from rma_shell import MemoryJournal, SQLiteJournal, resume, run
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator

KEY = "sk-test-ended"


class Forecast(pydantic.BaseModel):
    """A forecast for one city."""

    city: str
    temp_c: float


class NoTools:
    def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        raise AssertionError(f"the handler must never see {name}")


def _script() -> list[Any]:
    answer = {"id": "call_1", "name": "final_result", "arguments": {"city": "Oslo", "temp_c": 3.5}}
    return [{"tool_calls": [answer]}, {"content": "done"}]


async def test_an_ended_run_with_output_type_resumes_to_the_same_parsed_output() -> None:
    journal = MemoryJournal()
    with OpenAIEmulator(_script(), api_key=KEY) as emu:
        provider = Local(base_url=emu.base_url, model="m", api_key=KEY)
        ran = await run(
            provider,
            handler=NoTools(),
            prompt="forecast?",
            output_type=Forecast,
            journal=journal,
            journal_key="forecast",
        )
        sent = len(emu.requests)
        again = await resume(journal, "forecast", provider=provider, handler=NoTools(), output_type=Forecast)
        assert len(emu.requests) == sent  # ended: nothing sent
        await provider.close()
    assert ran.unwrap().output == Forecast(city="Oslo", temp_c=3.5)
    assert again.unwrap().output == ran.unwrap().output
    assert isinstance(again.unwrap().output, Forecast)
    assert again.unwrap() == ran.unwrap()


async def _ended(path: Path) -> None:
    with OpenAIEmulator([{"content": "hi"}], api_key=KEY) as emu:
        provider = Local(base_url=emu.base_url, model="m", api_key=KEY)
        try:
            outcome = await run(provider, handler=NoTools(), prompt="hi", journal=str(path), journal_key="k")
        finally:
            await provider.close()
        assert outcome.unwrap().text == "hi"


def _open_files(path: Path) -> int:
    """This process's file descriptors on the journal's file (its WAL and shared memory too)."""
    # No gc.collect(): a store left to the garbage collector is the leak this looks for.
    names = {str(path), f"{path}-wal", f"{path}-shm"}
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # an fd closed as we list them
            count += os.readlink(f"/proc/self/fd/{fd}") in names
    return count


async def test_resume_closes_the_journal_it_opened_from_a_path(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    await _ended(path)
    assert _open_files(path) == 0  # run closed the journal it opened from a path
    held: list[Any] = []
    with OpenAIEmulator([], api_key=KEY) as emu:
        provider = Local(base_url=emu.base_url, model="m", api_key=KEY)
        try:
            for _ in range(3):
                again = await resume(str(path), "k", provider=provider, handler=NoTools())
                held.append(again)  # the outcome holds nothing of the store
                assert again.unwrap().text == "hi"
                assert _open_files(path) == 0
            unknown = await resume(path, "nothing-here", provider=provider, handler=NoTools())
            assert unknown.failure().kind == "journal_mismatch"
            assert _open_files(path) == 0
        finally:
            await provider.close()


async def test_resume_leaves_open_a_journal_the_caller_passed(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    await _ended(path)
    journal = SQLiteJournal(path)
    with OpenAIEmulator([], api_key=KEY) as emu:
        provider = Local(base_url=emu.base_url, model="m", api_key=KEY)
        try:
            again = await resume(journal, "k", provider=provider, handler=NoTools())
        finally:
            await provider.close()
    assert again.unwrap().text == "hi"
    assert journal.keys() == ["k"]  # still open: the caller's to close
    journal.close()


async def test_a_run_with_output_type_stopped_mid_way_resumes_to_its_parsed_output() -> None:
    # The journaled request held output_type's tool spec, which could not be read back: every
    # resume of such a run failed before sending anything.
    from tests.journal.test_resume_regressions import StopsAt

    def reply(body: dict[str, Any]) -> dict[str, Any]:  # asked again, the model answers the same
        return _script()[0] if len(body["messages"]) == 1 else _script()[1]

    journal = StopsAt(containing='"$type":"TurnPolled"')
    with OpenAIEmulator([reply] * 8, api_key=KEY) as emu:
        provider = Local(base_url=emu.base_url, model="m", api_key=KEY)
        try:
            stopped = await run(
                provider,
                handler=NoTools(),
                prompt="forecast?",
                output_type=Forecast,
                journal=journal,
                journal_key="forecast",
            )
            assert stopped.failure().kind == "journal_unavailable"
            journal.stopping = False
            done = await resume(
                journal, "forecast", provider=provider, handler=NoTools(), output_type=Forecast
            )
        finally:
            await provider.close()
    assert not isinstance(done, Failure), done.failure()
    assert done.unwrap().output == Forecast(city="Oslo", temp_c=3.5)
