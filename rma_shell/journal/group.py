"""Group commit: the records of many sessions sharing one journal, in one transaction.

Every session of a process that journals into one database flushes through that database's
``GroupCommit``. A flush that finds nothing else gathering, and no other session open on the
database, commits at once in its own task (``store.append``: exactly the cost without group
commit). Otherwise the first flush to arrive **leads** a batch: it yields to the scheduler once
(no timer: the tasks already runnable run, and those that flush join the batch), then commits
every joined flush in one transaction (``store.append_batch``) and releases them all. No
background task: the commit runs in the leader's own task, so every task has its parent
(structured concurrency, trio and asyncio alike), and a batch needs nobody to outlive it.

What a waiter sees, in each case:

- **Durable before released.** A flush returns only after the transaction holding its records
  committed; the driver acts (a request, a tool, a result handed back) only after that, so the
  ordering of docs/durable.md is unchanged: a session's records are durable before its tool
  runs and before its result leaves the process.
- **A failed commit fails the whole batch**: every waiter gets ``GroupCommitFailed`` (a
  ``JournalStoreError``), nothing of the batch is written (one transaction), and nothing an
  earlier batch committed is touched.
- **Cancellation.** A waiter cancelled while its batch gathers leaves its records in it: they
  are committed all the same, its flush waits for that commit (shielded: one scheduler pass and
  one commit) and then raises the cancellation. A cancelled leader commits its batch on its way
  out. So a cancelled session never acts on a record that is not durable, and what it does next
  is consistent with the journal — as when a flush was one synchronous commit that could not be
  interrupted at all. (No cancel scope in the common path: a shield per flush doubled the
  group's own cost on trio, 16–18 µs a flush against 6–8.)
- **Order within a session.** Batches commit one after another in the order they formed; a
  synchronous flush (``drain``: a header, a result, the end) first commits the batch gathering
  on its thread, so a session's records keep the order it wrote them in.
- **Threads.** A batch gathers per thread (one event loop each); the commit itself holds the
  database's lock, so sessions on several loops of one process share one connection safely.
  The SQLite calls stay on the event loop's thread: a commit in WAL mode with
  ``synchronous=NORMAL`` writes to the page cache (tens of µs), and a hop to a worker thread
  and back would cost more CPU than the commit it moves (docs/decisions.md).

What this is not: the store (``rma_shell.journal.store``) or a session's writer
(``rma_shell.journal.writer``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

import anyio
import anyio.lowlevel

from rma_shell.journal.errors import GroupCommitFailed

Entry = tuple[str, Sequence[str]]
"""A key and the records a session flushes onto it."""


class BatchStore(Protocol):
    def append(self, key: str, records: Sequence[str]) -> None: ...

    def append_batch(self, entries: Sequence[Entry]) -> None: ...


class _Batch:
    __slots__ = ("closed", "commit", "done", "entries", "error")

    def __init__(self, store: BatchStore, entry: Entry) -> None:
        self.commit = store.append_batch
        self.entries = [entry]
        self.done = anyio.Event()
        self.error: BaseException | None = None
        self.closed = False

    def write(self) -> None:
        """Commit every joined entry in one transaction, once; then release the waiters."""
        if self.closed:
            return
        self.closed = True
        try:
            self.commit(self.entries)
        except Exception as exc:  # every waiter learns it, typed (see ``failed``)
            self.error = exc
        finally:
            self.done.set()

    def failed(self) -> GroupCommitFailed | None:
        if self.error is None:
            return None
        n = len(self.entries)
        return GroupCommitFailed(f"the commit of {n} sessions' records failed: {self.error}", n)


class GroupCommit:
    """Commits the flushes of the sessions sharing one database together (the module docstring)."""

    def __init__(self) -> None:
        self._gathering: dict[int, _Batch] = {}
        """Per thread (one event loop each), the batch its leader gathers: at most one."""
        self._open = 0
        self._count = threading.Lock()
        self.commits = 0
        """Batches committed (a commit alone is not one): ``flushes / commits`` is the sharing."""
        self.flushes = 0
        """Flushes that went into a batch."""

    def enter(self) -> None:
        """A session opened on the database (its flushes may now share commits)."""
        with self._count:
            self._open += 1

    def leave(self) -> None:
        with self._count:
            self._open -= 1

    async def append(self, store: BatchStore, key: str, records: Sequence[str]) -> None:
        """``records`` durable on ``key`` — alone at once, or in the batch gathering here."""
        if not records:
            return
        thread = threading.get_ident()
        batch = self._gathering.get(thread)
        if batch is None and self._open <= 1:
            store.append(key, records)  # alone: nothing to share, nothing added
            return
        self.flushes += 1
        if batch is not None:
            batch.entries.append((key, records))
            try:
                await batch.done.wait()
            except BaseException:  # cancelled: its records are in the batch, committed all the same
                with anyio.CancelScope(shield=True):
                    await batch.done.wait()
                raise
        else:
            batch = self._gathering[thread] = _Batch(store, (key, records))
            try:
                await anyio.lowlevel.checkpoint()  # the runnable tasks run; their flushes join
            finally:  # cancelled too: the batch commits, then the cancellation goes on
                self._close(thread, batch)
        failed = batch.failed()
        if failed is not None:
            raise failed from batch.error

    def drain(self) -> None:
        """Commit the batch gathering on this thread now (before a synchronous append, which
        must not overtake records flushed earlier); a failure reaches the batch's waiters."""
        batch = self._gathering.get(threading.get_ident())
        if batch is not None:
            self._close(threading.get_ident(), batch)

    def _close(self, thread: int, batch: _Batch) -> None:
        if self._gathering.get(thread) is batch:
            del self._gathering[thread]
        if not batch.closed:
            self.commits += 1
            batch.write()
