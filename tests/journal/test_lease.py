"""One run carries a journal key at a time: a second gets ``JournalBusy`` at once, in this
process or another; a holder SIGKILLed holds nothing; ``approve`` from another process works
while a session is paused. Real processes (``tests.journal._holder``), a Local emulator here."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure

from rma.journal import AwaitingApproval, JournalBusy
from rma_shell import MemoryJournal, SQLiteJournal, resume, run
from rma_shell.providers.local import Local
from rma_shell.testing import OpenAIEmulator
from rma_shell.tools import Toolbox, tool
from tests.journal._holder import PAY, Pays

ROOT = Path(__file__).resolve().parents[2]


def reply(body: Mapping[str, Any]) -> dict[str, Any]:
    """The model, by the conversation: a re-asked turn gets the same answer."""
    if len(body["messages"]) == 1:
        return {"tool_calls": [{"id": "call_1", "name": "pay", "arguments": {"n": 1}}]}
    return {"content": "Paid 1."}


def _child(job: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.journal._holder", json.dumps(job)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )


def _answer(job: dict[str, Any]) -> dict[str, Any]:
    child = _child(job)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0, out
    return dict(json.loads(out.strip().splitlines()[-1]))


def _wait_for(path: Path, child: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert child.poll() is None, "the holder died before its tool ran"
        assert time.monotonic() < deadline, "the holder's tool never ran"
        time.sleep(0.02)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Any, dict[str, Any], subprocess.Popen[str]]]:
    """A process running a journaled session, inside its tool: it holds the key."""
    with OpenAIEmulator([reply] * 16) as emu:
        job = {"base_url": emu.base_url, "journal": str(tmp_path / "j.db"), "key": "pay-1"}
        started = tmp_path / "started"
        child = _child({**job, "do": "run", "started": str(started)})
        try:
            _wait_for(started, child)
            yield emu, job, child
        finally:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=30)


@pytest.mark.trio_only
async def test_a_key_held_by_another_process_is_refused_at_once_naming_it(holder: Any) -> None:
    emu, job, child = holder
    sent = len(emu.requests)
    provider = Local(base_url=emu.base_url, model="m", tools=[PAY])
    try:
        outcome = await resume(job["journal"], job["key"], provider=provider, handler=Pays(), timeout=20)
        fresh = await run(
            provider, handler=Pays(), prompt="again", journal=job["journal"], journal_key=job["key"]
        )
    finally:
        await provider.close()
    assert isinstance(outcome, Failure) and isinstance(outcome.failure(), JournalBusy), outcome
    busy = outcome.failure()
    assert busy.key == job["key"]
    assert busy.holder == f"pid {child.pid} on {socket.gethostname()}"
    assert isinstance(fresh, Failure) and fresh.failure().kind == "journal_busy"
    # From a third process too; and nothing reached the host.
    assert _answer({**job, "do": "resume"}) == {"kind": "journal_busy", "holder": busy.holder}
    assert len(emu.requests) == sent
    assert child.poll() is None  # the holder carries on, undisturbed


@pytest.mark.trio_only
async def test_a_holder_killed_holds_nothing_and_the_key_resumes(holder: Any) -> None:
    emu, job, child = holder
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    provider = Local(base_url=emu.base_url, model="m", tools=[PAY])
    try:
        outcome = await resume(job["journal"], job["key"], provider=provider, handler=Pays(), timeout=20)
    finally:
        await provider.close()
    assert outcome.unwrap().text == "Paid 1."
    # Released on return: another process may carry it on now (it ended: its outcome comes back).
    assert _answer({**job, "do": "resume"}) == {"kind": "ok", "holder": None}
    # The dead holder's file was taken, then removed by the run that took it.
    assert _lease_files(job["journal"]) == []


def _lease_files(journal: str | Path) -> list[str]:
    leases = Path(os.path.realpath(journal) + ".leases")
    return sorted(p.name for p in leases.iterdir()) if leases.exists() else []


async def test_a_journal_of_many_keys_leaves_no_lease_file_behind(tmp_path: Path) -> None:
    path = tmp_path / "many.db"
    with OpenAIEmulator([{"content": "done"}] * 5) as emu:
        provider = Local(base_url=emu.base_url, model="m")
        try:
            for n in range(5):
                got = await run(provider, handler=Pays(), prompt="hi", journal=str(path), journal_key=f"k{n}")
                assert got.unwrap().text == "done"
        finally:
            await provider.close()
    assert (path.parent / "many.db.leases").is_dir()
    assert _lease_files(path) == []


def test_a_lease_file_removed_by_its_holder_is_not_taken_but_the_path_is(tmp_path: Path) -> None:
    # A taker that opened the file just before its holder removed it locks a file no one else
    # will look at: it must see that and take the path's new file, or two would hold one key.
    import fcntl

    from rma_shell.journal import lease

    store = SQLiteJournal(tmp_path / "j.db")
    try:
        first = lease.acquire(store, "k").unwrap()
        (name,) = _lease_files(store.path)
        late = os.open(Path(os.path.realpath(store.path) + ".leases") / name, os.O_RDWR)
        first.release()
        try:
            fcntl.flock(late, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the old file: free now, and gone
            assert not lease._still_at(Path(os.path.realpath(store.path) + ".leases") / name, late)
            second = lease.acquire(store, "k").unwrap()  # the path's new file, not the old one
            busy = lease.acquire(store, "k")
            assert isinstance(busy, Failure) and isinstance(busy.failure(), JournalBusy)
            second.release()
        finally:
            os.close(late)
    finally:
        store.close()
    assert _lease_files(tmp_path / "j.db") == []


@tool(requires_approval=True)
def pay(n: int) -> str:
    """Pay an invoice."""
    return f"paid invoice {n}"


@pytest.mark.trio_only
async def test_approve_from_another_process_while_the_session_is_paused(tmp_path: Path) -> None:
    path = str(tmp_path / "j.db")
    tools = Toolbox(pay)
    with OpenAIEmulator([reply] * 8) as emu:
        provider = Local(base_url=emu.base_url, model="m", tools=tools.tools())
        try:
            paused = await run(provider, handler=tools, prompt="Pay 1", journal=path, journal_key="pay-2")
            waiting = paused.failure()
            assert isinstance(waiting, AwaitingApproval)
            job = {"base_url": emu.base_url, "journal": path, "key": "pay-2"}
            assert _answer({**job, "do": "approve", "tool_use_id": waiting.waiting[0].tool_use_id}) == {
                "kind": "ok"
            }
            done = await resume(path, "pay-2", provider=provider, handler=tools, timeout=20)
        finally:
            await provider.close()
    assert done.unwrap().text == "Paid 1."


class ResumesItself:
    """A tool that, while its session runs, tries to carry the same key on."""

    def __init__(self, journal: Any, provider: Any) -> None:
        self.journal, self.provider = journal, provider

    async def handle_tool_call(self, name: str, input: dict[str, Any], ctx: object) -> str:
        inner = await resume(self.journal, "pay-3", provider=self.provider, handler=Pays(), timeout=5)
        return inner.failure().kind if isinstance(inner, Failure) else "resumed twice"


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_second_holder_in_the_same_process_is_refused(store: str, tmp_path: Path) -> None:
    journal: Any = MemoryJournal() if store == "memory" else SQLiteJournal(tmp_path / "j.db")
    with OpenAIEmulator([reply] * 8) as emu:
        provider = Local(base_url=emu.base_url, model="m", tools=[PAY])
        try:
            outcome = await run(
                provider,
                handler=ResumesItself(journal, provider),
                prompt="Pay 1",
                journal=journal,
                journal_key="pay-3",
            )
            assert outcome.unwrap().custom_tool_uses
            answered = [m for m in emu.requests[-1].body["messages"] if m["role"] == "tool"]
            assert [m["content"] for m in answered] == ["journal_busy"]
            # Released when the run returned: the same process may carry it on again.
            again = await resume(journal, "pay-3", provider=provider, handler=Pays())
        finally:
            await provider.close()
    assert again.unwrap() == outcome.unwrap()
    if store == "sqlite":
        journal.close()
