"""The group commit: sessions on one SQLite file share commits, and each still waits for its own."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from returns.result import Success

from rma.journal import chain, genesis
from rma_shell import SQLiteJournal
from rma_shell.journal.errors import GroupCommitFailed, JournalStoreError
from rma_shell.journal.writer import SessionJournal


class Counting(SQLiteJournal):
    """Counts commits alone (``append``) and shared (``append_batch``); fails a shared one on ask."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.alone = 0
        self.shared: list[int] = []
        self.fail_next = False

    def append(self, key: str, records: Sequence[str]) -> None:
        self.alone += 1
        super().append(key, records)

    def append_batch(self, entries: Sequence[tuple[str, Sequence[str]]]) -> None:
        self.shared.append(len(entries))
        if self.fail_next:
            self.fail_next = False
            raise JournalStoreError("disk full")
        super().append_batch(entries)


def _chained(store: SQLiteJournal, key: str) -> list[str]:
    previous = genesis(key)
    texts = []
    for n, (seq, text, sealed) in enumerate(store.rows(key), 1):
        assert seq == n and chain(previous, text) == sealed, (key, seq)
        previous = sealed
        texts.append(text)
    return texts


def _sessions(store: SQLiteJournal, n: int) -> list[SessionJournal]:
    journals = [SessionJournal(store, f"k{i}") for i in range(n)]
    for j in journals:
        j.begin("test", "{}", {})
        j.flush()  # the header, alone, at once (a driver commits it before its open instead)
    return journals


async def test_the_headers_of_sessions_opening_at_once_share_one_commit(tmp_path: Path) -> None:
    # A header is pending until the driver's commit before the open: many sessions opening
    # together make one transaction of their headers, and each is durable before it returns.
    store = Counting(tmp_path / "j.db")
    journals = [SessionJournal(store, f"k{i}") for i in range(10)]
    durable: list[int] = []

    async def open_one(j: SessionJournal) -> None:
        j.begin("test", "{}", {})
        assert store.rows(j.key) == []  # pending
        await j.commit()
        durable.append(len(store.rows(j.key)))

    async with anyio.create_task_group() as tg:
        for j in journals:
            tg.start_soon(open_one, j)
    assert store.shared == [10] and store.alone == 0 and durable == [1] * 10
    for j in journals:
        assert json.loads(_chained(store, j.key)[0])["kind"] == "header"
        j.close()


async def test_sessions_flushing_at_once_share_one_commit_and_each_returns_after_it(tmp_path: Path) -> None:
    store = Counting(tmp_path / "j.db")
    journals = _sessions(store, 20)
    durable: list[int] = []

    async def flush(i: int, j: SessionJournal) -> None:
        j._pending.extend([f'{{"n":{i},"a":1}}', f'{{"n":{i},"a":2}}'])
        await j.commit()
        durable.append(len(store.rows(j.key)))  # released only once its records are there

    async with anyio.create_task_group() as tg:
        for i, j in enumerate(journals):
            tg.start_soon(flush, i, j)
    assert store.shared == [20] and durable == [3] * 20
    for i, j in enumerate(journals):
        assert _chained(store, j.key)[1:] == [f'{{"n":{i},"a":1}}', f'{{"n":{i},"a":2}}']
        j.close()
    assert store.group.commits == 1 and store.group.flushes == 20


async def test_a_session_alone_commits_at_once_without_yielding(tmp_path: Path) -> None:
    # Nothing to share: the flush is the plain append, with no scheduler pass before it.
    store = Counting(tmp_path / "j.db")
    (j,) = _sessions(store, 1)
    ran = []

    async def other() -> None:
        ran.append(True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        j._pending.append('{"x":1}')
        await j.commit()
        assert not ran  # the other task never got a turn: the commit did not yield
    assert store.alone == 2 and store.shared == [] and len(store.rows("k0")) == 2


async def test_a_failed_shared_commit_fails_every_waiter_typed_and_keeps_what_was_committed(
    tmp_path: Path,
) -> None:
    store = Counting(tmp_path / "j.db")
    journals = _sessions(store, 5)
    store.fail_next = True
    failures: list[GroupCommitFailed] = []

    async def flush(j: SessionJournal) -> None:
        j._pending.append('{"lost":true}')
        try:
            await j.commit()
        except GroupCommitFailed as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tg:
        for j in journals:
            tg.start_soon(flush, j)
    assert len(failures) == 5 and {f.sessions for f in failures} == {5}
    assert all("disk full" in str(f) for f in failures)
    assert [len(store.rows(j.key)) for j in journals] == [1] * 5  # the headers stand, nothing else

    async def again(j: SessionJournal) -> None:
        j._pending.append('{"next":true}')
        await j.commit()

    async with anyio.create_task_group() as tg:  # the next batch seals onto the tails that stand
        for j in journals:
            tg.start_soon(again, j)
    for j in journals:
        assert _chained(store, j.key)[1:] == ['{"next":true}']


async def test_a_waiter_cancelled_while_its_batch_gathers_is_committed_and_then_cancelled(
    tmp_path: Path,
) -> None:
    store = Counting(tmp_path / "j.db")
    other, cancelled = _sessions(store, 2)
    other._pending.append('{"other":1}')
    cancelled._pending.append('{"cancelled":1}')
    returned = []

    async def flush(scope: anyio.CancelScope) -> None:
        with scope:
            await cancelled.commit()  # run again after the cancel: commits, then raises it
            returned.append(True)  # or run again first (trio may): its commit returned
            await anyio.lowlevel.checkpoint()  # and the cancellation lands here
            returned.append(False)

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(other.commit)
        tg.start_soon(flush, scope)
        await anyio.lowlevel.checkpoint()
        scope.cancel()  # both flushes are gathering now
    assert False not in returned and scope.cancelled_caught
    assert store.shared == [2] and _chained(store, cancelled.key)[1:] == ['{"cancelled":1}']


async def test_a_synchronous_flush_does_not_overtake_a_gathering_batch(tmp_path: Path) -> None:
    # The end record (a synchronous flush) of a session whose earlier flush still gathers: the
    # gathering batch commits first, so the records keep the order they were written in.
    store = Counting(tmp_path / "j.db")
    a, b = _sessions(store, 2)
    a._pending.append('{"first":1}')
    b._pending.append('{"b":1}')

    async def end() -> None:
        a._pending.append('{"second":1}')
        a.flush()

    async with anyio.create_task_group() as tg:
        tg.start_soon(a.commit)
        tg.start_soon(b.commit)
        tg.start_soon(end)
    assert _chained(store, "k0")[1:] == ['{"first":1}', '{"second":1}']
    assert _chained(store, "k1")[1:] == ['{"b":1}']


async def test_a_commit_joins_its_batch_when_called_so_a_later_flush_cannot_overtake_it(
    tmp_path: Path,
) -> None:
    # ``commit`` hands back the group's wait without being a coroutine itself: its records are
    # in the gathering batch from the call on, so a synchronous flush made before the wait is
    # awaited still commits them first.
    store = Counting(tmp_path / "j.db")
    a, _b = _sessions(store, 2)
    a._pending.append('{"first":1}')
    waiting = a.commit()
    a._pending.append('{"second":1}')
    a.flush()
    await waiting
    assert _chained(store, "k0")[1:] == ['{"first":1}', '{"second":1}']


async def test_every_flush_of_a_batch_returns_once_the_one_commit_is_made(tmp_path: Path) -> None:
    # No leader and no event: each flush yields once, the first to run again commits them all.
    store = Counting(tmp_path / "j.db")
    journals = _sessions(store, 50)
    for i, j in enumerate(journals):
        j._pending.append(json.dumps({"n": i}))
    done: list[int] = []

    async def flush(i: int, j: SessionJournal) -> None:
        await j.commit()
        done.append(i)
        assert _chained(store, j.key)[1:] == [json.dumps({"n": i})]  # durable when it returns

    async with anyio.create_task_group() as tg:
        for i, j in enumerate(journals):
            tg.start_soon(flush, i, j)
    assert sorted(done) == list(range(50))
    assert store.shared == [50]  # one transaction for the fifty


def test_stores_on_one_file_share_a_connection_until_the_last_closes(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    first, second = SQLiteJournal(path), SQLiteJournal(str(path))
    assert first.group is second.group and first._db is second._db
    assert SQLiteJournal(path, synchronous="FULL").group is not first.group  # another setting
    assert SQLiteJournal(":memory:").group is not SQLiteJournal(":memory:").group  # private
    first.append("k", ['{"a":1}'])
    first.close()
    first.close()  # idempotent: the other store keeps the connection
    second.append("k", ['{"b":2}'])
    second.close()
    third = SQLiteJournal(path)
    assert third.group is not first.group
    assert [text for _, text, _ in third.rows("k")] == ['{"a":1}', '{"b":2}']
    third.close()


def test_a_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    parent = SQLiteJournal(path)
    pid = os.fork()
    if pid == 0:  # the child: the parent's connection is not its to use
        child = SQLiteJournal(path)
        os._exit(0 if child._db is not parent._db else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    parent.close()


@pytest.mark.parametrize("cached", [True, False])
def test_a_batch_seals_onto_an_append_another_process_made(tmp_path: Path, cached: bool) -> None:
    # Another process (here: a connection of its own) appended to a key this process's tail
    # cache holds: the shared INSERT fails on the key and the batch reads the tails again.
    path = tmp_path / "j.db"
    store = SQLiteJournal(path)
    store.append("a", ['{"a":1}'])
    store.append("b", ['{"b":1}'])

    class Elsewhere(SQLiteJournal):
        def _open(self, synchronous: str, busy_timeout: float) -> object:  # type: ignore[override]
            from rma_shell.journal.store import _Database

            database = _Database(self.path, synchronous, busy_timeout)
            database.stores = 1
            return database

    if cached:
        other = Elsewhere(path)
        other.append("a", ['{"approval":1}'])
        other.close()
    else:
        store._tails.clear()
    store.append_batch([("a", ['{"a":2}']), ("b", ['{"b":2}']), ("a", ['{"a":3}'])])
    a = _chained(store, "a")
    assert a[-1] == '{"a":3}' and a[-2] == '{"a":2}' and len(a) == (4 if cached else 3)
    assert _chained(store, "b") == ['{"b":1}', '{"b":2}']
    store.close()


async def test_concurrent_runs_on_one_file_share_commits_and_each_returns_what_it_would_alone(
    tmp_path: Path,
) -> None:
    from rma_shell import resume, run
    from tests.journal.test_resume import _Crashing, _loop

    alone = await run(_loop(), handler=_Crashing(), prompt="go")
    store = Counting(tmp_path / "j.db")
    outcomes: dict[str, object] = {}

    async def one(key: str) -> None:
        outcomes[key] = await run(
            _loop(), handler=_Crashing(), prompt="go", journal=str(store.path), journal_key=key
        )

    async with anyio.create_task_group() as tg:
        for n in range(10):
            tg.start_soon(one, f"k{n}")
    assert all(o == alone for o in outcomes.values())
    group = store.group  # the runs opened the file by path: the same connection, the same group
    assert group.flushes > group.commits > 0, (group.flushes, group.commits)
    for key in outcomes:  # each journal reads back whole, and resumes to the same outcome
        again = await resume(store, key, provider=_loop(), handler=_Crashing())
        assert again == alone
    store.close()


async def test_a_run_whose_shared_commit_fails_ends_journal_unavailable(tmp_path: Path) -> None:
    from returns.result import Failure

    from rma_shell import run
    from rma_shell.journal import JournalUnavailable
    from tests.journal.test_resume import _Crashing, _loop

    store = Counting(tmp_path / "j.db")
    store.fail_next = True
    outcomes: list[object] = []

    async def one(key: str) -> None:
        outcomes.append(await run(_loop(), handler=_Crashing(), prompt="go", journal=store, journal_key=key))

    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(one, f"k{n}")
    failed = [o for o in outcomes if isinstance(o, Failure)]
    assert failed and all(isinstance(o.failure(), JournalUnavailable) for o in failed)
    assert all("disk full" in o.failure().detail for o in failed)
    store.close()


def test_a_store_dropped_unclosed_takes_its_connection_with_it(tmp_path: Path) -> None:
    import gc
    import weakref

    store = SQLiteJournal(tmp_path / "j.db")
    store.append("k", ['{"a":1}'])
    database = weakref.ref(store._database)
    del store
    gc.collect()
    assert database() is None  # not held by the process-wide table until exit
    again = SQLiteJournal(tmp_path / "j.db")
    assert [text for _, text, _ in again.rows("k")] == ['{"a":1}']
    again.close()


class FailingFrom(Counting):
    """Every shared commit after the first ``good`` fails."""

    def __init__(self, path: Path, good: int) -> None:
        super().__init__(path)
        self.good = good

    def append_batch(self, entries: Sequence[tuple[str, Sequence[str]]]) -> None:
        self.fail_next = len(self.shared) >= self.good
        super().append_batch(entries)


@pytest.mark.parametrize("good", [0, 1, 2, 3])
async def test_nothing_acts_on_records_whose_shared_commit_failed(tmp_path: Path, good: int) -> None:
    # The driver joins a turn's records to the gathering batch and lets the tasks it spawns
    # make them durable before they act: a tool runs only once its start is durable, a result
    # is sent only once the batch's end is, whichever commit fails.
    from rma_shell import run
    from rma_shell.journal import JournalUnavailable
    from tests.journal.test_resume import _Crashing, _loop

    store = FailingFrom(tmp_path / "j.db", good)
    runs: dict[str, tuple[Any, _Crashing, Any]] = {}

    async def one(key: str) -> None:
        provider, handler = _loop(), _Crashing()
        outcome = await run(provider, handler=handler, prompt="go", journal=store, journal_key=key)
        runs[key] = (outcome, handler, provider)

    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(one, f"k{n}")
    assert len(store.shared) > good  # a shared commit failed
    for key, (outcome, handler, provider) in runs.items():
        records = [json.loads(text) for _, text, _ in store.rows(key)]
        started = {r["id"] for r in records if r["kind"] == "tool_start"}
        assert {ran[1].split(":")[-1] for ran in handler.runs} <= started, key
        finished = [r for r in records if r["kind"] == "event" and r["event"]["$type"] == "ToolsFinished"]
        # The prompt, then each batch's results, sent only after the batch's end was durable.
        assert len(provider.inputs) <= 1 + len(finished), key
        if not isinstance(outcome, Success):
            assert isinstance(outcome.failure(), JournalUnavailable)
    store.close()


def test_a_session_closed_before_its_joined_batch_was_committed_commits_it_on_its_way_out(
    tmp_path: Path,
) -> None:
    # The driver joins a turn's records and leaves their commit to the task it spawns; a
    # session cancelled before that task started still has them committed when it closes.
    store = Counting(tmp_path / "j.db")
    gone, other = _sessions(store, 2)
    gone._pending.append('{"joined":1}')
    batch = gone.commit_soon()
    assert batch is not None and not batch.closed  # gathering: another session is open
    gone.close()
    assert batch.closed and _chained(store, gone.key)[1:] == ['{"joined":1}']
    other.close()
    store.close()


def test_a_batch_that_fails_as_its_session_closes_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Counting(tmp_path / "j.db")
    gone, other = _sessions(store, 2)
    gone._pending.append('{"joined":1}')
    assert gone.commit_soon() is not None
    store.fail_next = True
    gone.close()
    assert "disk full" in caplog.text and _chained(store, gone.key)[1:] == []
    other.close()
    store.close()
