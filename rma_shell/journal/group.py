"""Group commit: the records of many sessions sharing one journal, in one transaction.

Every session of a process that journals into one database flushes through that database's
``GroupCommit``. A flush that finds nothing else gathering, and no other session open on the
database, commits at once in its own task (``store.append``: exactly the cost without group
commit). Otherwise the first flush to arrive opens a batch, and the flushes after it join it;
each yields to the scheduler once (no timer: the tasks already runnable run, and those that
flush join the batch), and **the first of them to run again commits** every joined flush in
one transaction (``store.append_batch``); the others find it committed when they run. No
background task: the commit runs in a flushing session's own task, so every task has its
parent (structured concurrency, trio and asyncio alike), and a batch needs nobody to outlive
it. Nobody waits on an event either: a waiter is one scheduler pass, the fewest objects alive
across it (with 1,000 sessions, each object alive across a wait makes the collector run more
often, and each run walks every session's state).

A flush need not wait at all: ``join`` puts its records in the batch and hands the batch
back, and ``Batch.durable()`` later commits it (when none of its flushes has) or raises its
failure. The driver does so for a turn's records on asyncio: it joins them and spawns the task
that acts on them, and that task's first act is ``durable()`` — a new task starts only after
the tasks already runnable, which is all the yield is for (``rma_shell.machinery.driver``; on
trio it waits, measured cheaper there).

What a waiter sees, in each case:

- **Durable before released.** A flush returns only after the transaction holding its records
  committed; the driver acts (a request, a tool, a result handed back) only after that, so the
  ordering of docs/durable.md is unchanged: a session's records are durable before its tool
  runs and before its result leaves the process.
- **A failed commit fails the whole batch**: every waiter gets ``GroupCommitFailed`` (a
  ``JournalStoreError``), nothing of the batch is written (one transaction), and nothing an
  earlier batch committed is touched.
- **Cancellation.** A flush cancelled while its batch gathers commits the batch on its way out
  (when nobody did yet), its records with it, and then raises the cancellation. So a cancelled
  session never acts on a record that is not durable, and what it does next is consistent with
  the journal — as when a flush was one synchronous commit that could not be interrupted at
  all. (No cancel scope: the commit is synchronous.)
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


class Batch:
    """The flushes gathering on one thread, committed together, once."""

    __slots__ = ("closed", "commit", "entries", "error", "group", "thread")

    def __init__(self, group: GroupCommit, thread: int, store: BatchStore, entry: Entry) -> None:
        self.group = group
        self.thread = thread
        self.commit = store.append_batch
        self.entries = [entry]
        self.error: BaseException | None = None
        self.closed = False

    def durable(self) -> None:
        """Committed when this returns — by this call, when none of the batch's flushes has
        committed it yet; ``GroupCommitFailed`` when that commit failed. Synchronous: for a
        flush that joined the batch and then let the scheduler run (a task it spawned, which
        starts only after the tasks already runnable), so others could join it meanwhile."""
        self.group._close(self.thread, self)
        failed = self.failed()
        if failed is not None:
            raise failed from self.error

    def write(self) -> None:
        """Commit every joined entry in one transaction, once (every waiter then sees ``closed``)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.commit(self.entries)
        except Exception as exc:  # every waiter learns it, typed (see ``failed``)
            self.error = exc

    def failed(self) -> GroupCommitFailed | None:
        if self.error is None:
            return None
        n = len(self.entries)
        return GroupCommitFailed(f"the commit of {n} sessions' records failed: {self.error}", n)


class GroupCommit:
    """Commits the flushes of the sessions sharing one database together (the module docstring)."""

    def __init__(self) -> None:
        self._gathering: dict[int, Batch] = {}
        """Per thread (one event loop each), the batch gathering there: at most one."""
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
        batch = self.join(store, key, records)
        if batch is not None:
            await self.settle(batch)

    def join(self, store: BatchStore, key: str, records: Sequence[str]) -> Batch | None:
        """``records`` into the batch gathering on this thread, now (a flush after this one
        commits that batch first: ``drain``), to be awaited with ``settle``; None: written
        already, alone (nothing to share)."""
        if not records:
            return None
        thread = threading.get_ident()
        batch = self._gathering.get(thread)
        if batch is None and self._open <= 1:
            store.append(key, records)  # alone: nothing to share, nothing added
            return None
        self.flushes += 1
        if batch is None:
            batch = self._gathering[thread] = Batch(self, thread, store, (key, records))
        else:
            batch.entries.append((key, records))
        return batch

    async def settle(self, batch: Batch) -> None:
        """Wait for ``batch`` (``join``'s) to be committed — by whichever of its flushes runs
        again first, this one perhaps; ``GroupCommitFailed`` when that commit failed."""
        try:
            await anyio.lowlevel.checkpoint()  # the runnable tasks run; their flushes join
        finally:  # the first of the batch to run again commits it (cancelled too, on its way out)
            self._close(batch.thread, batch)
        failed = batch.failed()
        if failed is not None:
            raise failed from batch.error

    def drain(self) -> None:
        """Commit the batch gathering on this thread now (before a synchronous append, which
        must not overtake records flushed earlier); a failure reaches the batch's waiters."""
        batch = self._gathering.get(threading.get_ident())
        if batch is not None:
            self._close(threading.get_ident(), batch)

    def _close(self, thread: int, batch: Batch) -> None:
        if self._gathering.get(thread) is batch:
            del self._gathering[thread]
        if not batch.closed:
            self.commits += 1
            batch.write()
