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

What this is not: the format (``rma.journal``) or the session driver (``rma_shell.journal.writer``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from rma.journal import chain, genesis
from rma_shell.options import renamed_options


class JournalStoreError(Exception):
    """A store that cannot be read or written (its message says why, with the path)."""


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
    PRIMARY KEY (key, seq)
) WITHOUT ROWID;
"""


_INSERT = "INSERT INTO rma_journal (key, seq, body, chain) VALUES (?, ?, ?, ?)"
_ONE_STATEMENT = 64
"""Up to this many records are written by one INSERT (SQLite allows 32,766 parameters)."""


@functools.cache
def _inserts(n: int) -> str:
    return _INSERT + ", (?, ?, ?, ?)" * (n - 1)


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
        try:
            self._db = sqlite3.connect(
                self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise JournalStoreError(f"cannot open journal {self.path}: {exc}") from exc
        self._lock = threading.Lock()
        self._tails: dict[str, tuple[int, str]] = {}
        """The last (seq, chain) this store wrote per key: the next record's seal, unread."""

    def append(self, key: str, records: Sequence[str]) -> None:
        # A session appends to its key one batch after another: sealed onto the tail this
        # store wrote last, a batch is written without reading that tail (one record: one
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
            row = db.execute(
                "SELECT seq, chain FROM rma_journal WHERE key = ? ORDER BY seq DESC LIMIT 1", (key,)
            ).fetchone()
            return None if row is None else (int(row[0]), str(row[1]))

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
        with self._lock:
            self._db.close()


def open_store(journal: object) -> JournalStore:
    """``journal=`` as given: a store, or a path to an SQLite file."""
    if isinstance(journal, str | os.PathLike):
        return SQLiteJournal(journal)
    if isinstance(journal, JournalStore):
        return journal
    raise TypeError(f"expected a JournalStore or a path to an SQLite file, got {type(journal).__name__}")
