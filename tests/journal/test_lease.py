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
    # One lease file beside the journal, whatever the keys: nothing per key is left behind.
    assert _lease_files(job["journal"]) == ["j.db.lease"]


def _lease_files(journal: str | Path) -> list[str]:
    """What lease files sit beside ``journal``: its ``.lease`` file, a legacy ``.leases/``'s files."""
    real = Path(os.path.realpath(journal))
    found = [real.name + ".lease"] if Path(str(real) + ".lease").exists() else []
    legacy = Path(str(real) + ".leases")
    return found + (sorted(p.name for p in legacy.iterdir()) if legacy.exists() else [])


async def test_a_journal_of_many_keys_has_one_empty_lease_file(tmp_path: Path) -> None:
    path = tmp_path / "many.db"
    with OpenAIEmulator([{"content": "done"}] * 5) as emu:
        provider = Local(base_url=emu.base_url, model="m")
        try:
            for n in range(5):
                got = await run(provider, handler=Pays(), prompt="hi", journal=str(path), journal_key=f"k{n}")
                assert got.unwrap().text == "done"
        finally:
            await provider.close()
    assert _lease_files(path) == ["many.db.lease"]
    assert (tmp_path / "many.db.lease").stat().st_size == 0  # locks only: nothing is written
    assert not (tmp_path / "many.db.leases").exists()


def test_keys_are_held_apart_and_a_released_key_is_free_again(tmp_path: Path) -> None:
    from rma_shell.journal import lease

    store = SQLiteJournal(tmp_path / "j.db")
    try:
        held = [lease.acquire(store, f"key-{n}").unwrap() for n in range(200)]
        again = lease.acquire(store, "key-7")
        assert isinstance(again, Failure) and again.failure().detail == "held in this process"
        held[7].release()
        held[7].release()  # idempotent
        held[7] = lease.acquire(store, "key-7").unwrap()
        for one in held:
            one.release()
    finally:
        store.close()


def test_a_forked_child_holds_none_of_its_parents_leases(tmp_path: Path) -> None:
    # Record locks belong to the process: the child sees the parent's key as held, by the parent.
    from rma_shell.journal import lease

    store = SQLiteJournal(tmp_path / "j.db")
    mine = lease.acquire(store, "k").unwrap()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it got, and leave without running anything else
        try:
            got = lease.acquire(store, "k")
            busy = got.failure() if isinstance(got, Failure) else None
            os.write(write, json.dumps([type(busy).__name__, getattr(busy, "holder", None)]).encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        os.waitpid(pid, 0)
        answer = json.loads(os.read(read, 4096))
    finally:
        os.close(read)
        mine.release()
        store.close()
    assert answer == ["JournalBusy", f"pid {os.getpid()} on {socket.gethostname()}"]


def test_a_key_an_older_version_holds_in_its_leases_folder_is_refused(tmp_path: Path) -> None:
    # A journal carried before the one-file layout has <journal>.leases/: an older process
    # flocks a file per key there. While that folder exists, a run takes that file too.
    import fcntl
    import hashlib

    from rma_shell.journal import lease

    store = SQLiteJournal(tmp_path / "j.db")
    folder = tmp_path / "j.db.leases"
    folder.mkdir()
    old = os.open(folder / hashlib.sha256(b"k").hexdigest()[:40], os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(old, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(old, b"pid 4242 on elsewhere")
        busy = lease.acquire(store, "k")
        assert isinstance(busy, Failure) and isinstance(busy.failure(), JournalBusy)
        assert busy.failure().holder == "pid 4242 on elsewhere"
        other = lease.acquire(store, "k2").unwrap()  # the refusal let go of its own lock
        other.release()
    finally:
        os.close(old)  # the older holder ends: its file stays, unlocked
    taken = lease.acquire(store, "k").unwrap()
    assert lease.acquire(store, "k").failure().kind == "journal_busy"
    taken.release()
    store.close()
    assert _lease_files(tmp_path / "j.db") == ["j.db.lease"]  # the legacy file went with its key


def test_a_legacy_lease_file_removed_by_its_holder_is_not_taken_but_the_path_is(tmp_path: Path) -> None:
    # A taker that opened the file just before its holder removed it locks a file no one else
    # will look at: it must see that and take the path's new file, or two would hold one key.
    import fcntl

    from rma_shell.journal import lease

    store = SQLiteJournal(tmp_path / "j.db")
    folder = tmp_path / "j.db.leases"
    folder.mkdir()
    try:
        first = lease.acquire(store, "k").unwrap()
        (name,) = sorted(p.name for p in folder.iterdir())
        late = os.open(folder / name, os.O_RDWR)
        first.release()
        try:
            fcntl.flock(late, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the old file: free now, and gone
            assert not lease._still_at(folder / name, late)
            second = lease.acquire(store, "k").unwrap()  # the path's new file, not the old one
            busy = lease.acquire(store, "k")
            assert isinstance(busy, Failure) and isinstance(busy.failure(), JournalBusy)
            second.release()
        finally:
            os.close(late)
    finally:
        store.close()
    assert list(folder.iterdir()) == []


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
