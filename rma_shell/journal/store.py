"""Journal stores: where a session's records are kept — SQLite by default, memory for tests.

The contract (``JournalStore``) is small so another backend is easy to write: ``append`` seals
records onto a key's chain and writes them atomically (all or none), ``rows`` returns a key's
records in order, ``keys`` lists the keys, ``close`` releases the store. Sealing lives here, in
``ChainedStore``, so a backend only provides a transaction with ``tail`` and ``insert``.

``SQLiteJournal`` is one SQLite file, safe for several processes (the session writing, another
process approving): WAL, ``busy_timeout``, every append in ``BEGIN IMMEDIATE`` (the tail is read
and the records written under one write lock, so two writers never fork a chain).
``synchronous`` is ``NORMAL`` by default: a committed record survives the process dying at any
point (it is in the OS's page cache, written back by the kernel); ``"FULL"`` makes it survive a
power cut too, at an fsync per record. Not a network database: keep the file on a local disk.
Within one process every ``SQLiteJournal`` on one file (and every run given its path) shares
one connection, its lock and its ``GroupCommit`` (``rma_shell.journal.group``): the sessions
journaling there commit together, ``append_batch`` writing many keys' records in one
transaction.

What this is not: the format (``rma.journal``) or the session driver (``rma_shell.journal.writer``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from rma.journal import chain, genesis
from rma_shell.journal.errors import GroupCommitFailed, JournalStoreError
from rma_shell.journal.group import Entry, GroupCommit
from rma_shell.options import renamed_options

__all__ = [
    "ChainedStore",
    "GroupCommitFailed",
    "JournalStore",
    "JournalStoreError",
    "MemoryJournal",
    "SQLiteJournal",
    "open_store",
]


@runtime_checkable
class JournalStore(Protocol):
    """Where journals live. Every method is safe to call from the event loop (it is short)."""

    def append(self, key: str, records: Sequence[str]) -> None:
        """Seal ``records`` (JSON texts) onto ``key``'s chain and write them, all or none."""
        ...

    def rows(self, key: str) -> Sequence[tuple[int, str, str]]:
        """``(seq, text, chain)`` of ``key``'s records, in order (empty for an unknown key)."""
        ...

    def keys(self) -> Sequence[str]:
        """Every key with at least one record."""
        ...

    def close(self) -> None: ...


class ChainedStore:
    """The sealing every store shares: subclasses give ``_transaction`` → (tail, insert)."""

    def append(self, key: str, records: Sequence[str]) -> None:
        if not records:
            return
        with self._transaction() as (tail, insert):
            last = tail(key)
            seq, previous = last if last is not None else (0, genesis(key))
            rows = []
            for text in records:
                seq += 1
                previous = chain(previous, text)
                rows.append((key, seq, text, previous))
            insert(rows)

    def _transaction(self) -> contextlib.AbstractContextManager[tuple[_Tail, _Insert]]:
        raise NotImplementedError


class _Tail(Protocol):
    def __call__(self, key: str) -> tuple[int, str] | None: ...


class _Insert(Protocol):
    def __call__(self, rows: list[tuple[str, int, str, str]]) -> None: ...


class MemoryJournal(ChainedStore):
    """A journal in this process's memory: for tests, and for pausing within one process."""

    def __init__(self) -> None:
        self._rows: dict[str, list[tuple[int, str, str]]] = {}
        self._lock = threading.Lock()

    def append(self, key: str, records: Sequence[str]) -> None:
        # Not the general path's transaction (a context manager and two closures a commit): the
        # tail is this process's own list, read and extended under one lock.
        if not records:
            return
        with self._lock:
            rows = self._rows.get(key)
            seq, previous = (rows[-1][0], rows[-1][2]) if rows else (0, genesis(key))
            staged = []
            for text in records:
                seq += 1
                previous = chain(previous, text)
                staged.append((seq, text, previous))
            if rows is None:
                self._rows[key] = staged
            else:
                rows.extend(staged)

    def rows(self, key: str) -> Sequence[tuple[int, str, str]]:
        with self._lock:
            return list(self._rows.get(key, ()))

    def keys(self) -> Sequence[str]:
        with self._lock:
            return sorted(self._rows)

    def close(self) -> None:
        pass

    def tamper(self, key: str, seq: int, text: str | None) -> None:
        """Replace (or with None, drop) one record, keeping its chain value: for tests of damage."""
        with self._lock:
            rows = self._rows[key]
            i = next(n for n, row in enumerate(rows) if row[0] == seq)
            if text is None:
                del rows[i]
            else:
                rows[i] = (seq, text, rows[i][2])


_SCHEMA = """
CREATE TABLE IF NOT EXISTS rma_journal (
    key   TEXT NOT NULL,
    seq   INTEGER NOT NULL,
    body  TEXT NOT NULL,
    chain TEXT NOT NULL,
    UNIQUE (key, seq)
);
"""
"""Rows in the order they were written, found by the ``(key, seq)`` index: a commit of many
sessions' records appends to the table's last pages and touches one small index entry per key.
Keyed by ``(key, seq)`` itself (``WITHOUT ROWID``, the layout of files made before group
commit, which keep it: every statement here reads both), the ~1 KB records of a thousand
interleaved keys land on a thousand different pages, and a shared commit wrote each page whole
to the WAL: 50–58 µs a record against 11–14 (docs/benchmarks.md)."""


_INSERT = "INSERT INTO rma_journal (key, seq, body, chain) VALUES (?, ?, ?, ?)"
_ONE_STATEMENT = 64
"""Up to this many records are written by one INSERT (SQLite allows 32,766 parameters)."""


@functools.cache
def _inserts(n: int) -> str:
    return _INSERT + ", (?, ?, ?, ?)" * (n - 1)


class _Database:
    """One connection to an SQLite file, with what every store on it in this process shares:
    the lock around the connection, the tails written last, the group commit."""

    def __init__(self, path: Path, synchronous: str, busy_timeout: float) -> None:
        self.conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute(f"PRAGMA synchronous={synchronous}")
            self.conn.executescript(_SCHEMA)
        except BaseException:
            self.conn.close()
            raise
        self.lock = threading.Lock()
        self.tails: dict[str, tuple[int, str]] = {}
        """The last (seq, chain) this process wrote per key: the next record's seal, unread."""
        self.group = GroupCommit()
        self.stores = 0
        """Open stores on it: the last to close closes the connection."""


_OPENED_LOCK = threading.Lock()
_OPENED: weakref.WeakValueDictionary[tuple[int, str, str, float], _Database] = weakref.WeakValueDictionary()
"""The databases this process has open, by (pid, real path, synchronous, busy timeout): the
pid, so a forked child opens its own connection rather than using its parent's. Weak: a
database whose stores were all dropped unclosed goes with them (its connection closes as a
dropped store's did before), not at the process's exit."""


def _private(path: Path) -> bool:
    """An in-memory or temporary database: each connection is a database of its own."""
    return str(path) in ("", ":memory:") or str(path).startswith("file:")


class SQLiteJournal(ChainedStore):
    """Journals in one SQLite file (created if absent), shared safely by several processes."""

    @renamed_options("SQLiteJournal")
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        busy_timeout: float = 10.0,
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
        self.path = Path(path)
        self._entry: tuple[int, str, str, float] | None = None
        self._closed = False
        try:
            self._database = self._open(synchronous, busy_timeout)
        except sqlite3.Error as exc:
            raise JournalStoreError(f"cannot open journal {self.path}: {exc}") from exc
        self._db = self._database.conn
        self._lock = self._database.lock
        self._tails = self._database.tails
        self.group = self._database.group
        """The group commit of every session on this file in this process."""

    def _open(self, synchronous: str, busy_timeout: float) -> _Database:
        if _private(self.path):
            database = _Database(self.path, synchronous, busy_timeout)
            database.stores = 1
            return database
        entry = (os.getpid(), os.path.realpath(self.path), synchronous, float(busy_timeout))
        with _OPENED_LOCK:
            shared = _OPENED.get(entry)
            if shared is None:
                shared = _OPENED[entry] = _Database(self.path, synchronous, busy_timeout)
            shared.stores += 1
        self._entry = entry
        return shared

    def append(self, key: str, records: Sequence[str]) -> None:
        # A session appends to its key one batch after another: sealed onto the tail this
        # process wrote last, a batch is written without reading that tail (one record: one
        # INSERT, its own transaction). Another process's append in between (an approval) took
        # the next seq: the INSERT fails on the key, and the general path reads the tail again
        # under the write lock.
        last = self._tails.get(key) if records else None
        if last is not None:
            seq, sealed = last
            rows = []
            for text in records:
                seq, sealed = seq + 1, chain(sealed, text)
                rows.append((key, seq, text, sealed))
            with self._lock:
                try:
                    self._insert(rows)
                except sqlite3.IntegrityError:
                    self._tails.pop(key, None)
                except sqlite3.Error as exc:
                    raise JournalStoreError(f"journal {self.path}: {exc}") from exc
                else:
                    self._tails[key] = (seq, sealed)
                    return
        super().append(key, records)

    def append_batch(self, entries: Sequence[Entry]) -> None:
        """Seal and write several keys' records in one transaction, all or none (the group
        commit's: a key may come more than once, its records in the order given)."""
        entries = [(key, records) for key, records in entries if records]
        if len(entries) <= 1:
            if entries:
                self.append(*entries[0])
            return
        with self._lock:
            try:
                if not self._batch_on_tails(entries):
                    self._batch_reading_tails(entries)
            except sqlite3.Error as exc:
                raise JournalStoreError(f"journal {self.path}: {exc}") from exc

    def _batch_on_tails(self, entries: Sequence[Entry]) -> bool:
        """The common batch: every key's tail known, sealed without a read; False when a tail is
        unknown, or another process appended to a key meanwhile (nothing written then)."""
        tails: dict[str, tuple[int, str]] = {}
        rows = []
        for key, records in entries:
            last = tails.get(key) or self._tails.get(key)
            if last is None:
                return False
            seq, sealed = last
            for text in records:
                seq, sealed = seq + 1, chain(sealed, text)
                rows.append((key, seq, text, sealed))
            tails[key] = (seq, sealed)
        try:
            self._insert(rows)
        except sqlite3.IntegrityError:
            for key in tails:
                self._tails.pop(key, None)
            return False
        self._tails.update(tails)
        return True

    def _batch_reading_tails(self, entries: Sequence[Entry]) -> None:
        db = self._db
        tails: dict[str, tuple[int, str]] = {}
        rows = []
        db.execute("BEGIN IMMEDIATE")
        try:
            for key, records in entries:
                last = tails.get(key) or _read_tail(db, key)
                seq, sealed = last if last is not None else (0, genesis(key))
                for text in records:
                    seq, sealed = seq + 1, chain(sealed, text)
                    rows.append((key, seq, text, sealed))
                tails[key] = (seq, sealed)
            db.executemany(_INSERT, rows)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        self._tails.update(tails)

    def _insert(self, rows: list[tuple[str, int, str, str]]) -> None:
        db = self._db
        if len(rows) <= _ONE_STATEMENT:  # one statement: its own transaction, one commit
            db.execute(_inserts(len(rows)), [v for row in rows for v in row])
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany(_INSERT, rows)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[tuple[_Tail, _Insert]]:
        db = self._db
        written: dict[str, tuple[int, str]] = {}

        def tail(key: str) -> tuple[int, str] | None:
            return _read_tail(db, key)

        def insert(rows: list[tuple[str, int, str, str]]) -> None:
            db.executemany(_INSERT, rows)
            for key, seq, _text, sealed in rows:
                written[key] = (seq, sealed)

        with self._lock:
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield tail, insert
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise JournalStoreError(f"journal {self.path}: {exc}") from exc
            self._tails.update(written)

    def rows(self, key: str) -> Sequence[tuple[int, str, str]]:
        try:
            with self._lock:
                cursor = self._db.execute(
                    "SELECT seq, body, chain FROM rma_journal WHERE key = ? ORDER BY seq", (key,)
                )
                return [(int(seq), str(body), str(sealed)) for seq, body, sealed in cursor]
        except sqlite3.Error as exc:
            raise JournalStoreError(f"journal {self.path}: {exc}") from exc

    def keys(self) -> Sequence[str]:
        try:
            with self._lock:
                return [
                    str(k) for (k,) in self._db.execute("SELECT DISTINCT key FROM rma_journal ORDER BY key")
                ]
        except sqlite3.Error as exc:
            raise JournalStoreError(f"journal {self.path}: {exc}") from exc

    def close(self) -> None:
        """Idempotent; the connection closes with the last store on it in this process."""
        database, entry = self._database, self._entry
        with _OPENED_LOCK:
            if self._closed:
                return
            self._closed = True
            database.stores -= 1
            if database.stores > 0:
                return
            if entry is not None and _OPENED.get(entry) is database:
                del _OPENED[entry]
        with self._lock:
            database.conn.close()


def _read_tail(db: sqlite3.Connection, key: str) -> tuple[int, str] | None:
    row = db.execute(
        "SELECT seq, chain FROM rma_journal WHERE key = ? ORDER BY seq DESC LIMIT 1", (key,)
    ).fetchone()
    return None if row is None else (int(row[0]), str(row[1]))


def open_store(journal: object) -> JournalStore:
    """``journal=`` as given: a store, or a path to an SQLite file."""
    if isinstance(journal, str | os.PathLike):
        return SQLiteJournal(journal)
    if isinstance(journal, JournalStore):
        return journal
    raise TypeError(f"expected a JournalStore or a path to an SQLite file, got {type(journal).__name__}")
