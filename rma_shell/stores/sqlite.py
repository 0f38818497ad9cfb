"""The SQLite store: the default embedded store for anything that outlives a process.

What this is: the store contract over one SQLite database file, safe with several threads and
processes writing at once:

- **WAL** journal (readers never block the writer, the writer never blocks readers),
  ``synchronous=FULL`` (a committed record survives a power cut — provisioning writes are
  rare and each one stands for a billed remote resource), ``busy_timeout`` so a writer waits
  for the lock instead of failing.
- Every read-modify-write runs in ``BEGIN IMMEDIATE``: the write lock is taken up front, so
  two processes never both read "absent" and both insert (the upgrade-deadlock of a deferred
  transaction cannot happen). ``put`` is ``INSERT … ON CONFLICT DO NOTHING`` then a read of
  the winner; ``claim`` checks the record, then the claim row and its lease, then writes the
  claim — one transaction.
- Tables ``rma_records``, ``rma_tags``, ``rma_claims``; ``PRAGMA user_version`` is the schema
  version (a database from a newer rma is refused with ``StoreError``).

One connection per store object, shared by threads under a lock; open one store per process
(``multiprocessing`` children open their own). Database errors become ``StoreError``.

What it is not: a network database. Keep the file on a local disk — SQLite's locking is not
reliable over NFS/SMB.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from rma_shell.options import renamed_options
from rma_shell.seams import Seams
from rma_shell.stores.base import (
    Acquired,
    BaseStore,
    Claim,
    ClaimOutcome,
    Entry,
    Existing,
    Held,
    Record,
    StoreError,
    StoreKey,
)

SCHEMA_VERSION: Final = 1

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS rma_records (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    provider   TEXT NOT NULL,
    kind       TEXT NOT NULL,
    base       TEXT NOT NULL,
    digest     TEXT NOT NULL,
    remote_id  TEXT NOT NULL,
    name       TEXT NOT NULL,
    version    INTEGER,
    data       TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    UNIQUE (provider, kind, base, digest)
);
CREATE INDEX IF NOT EXISTS rma_records_remote ON rma_records (provider, remote_id);
CREATE TABLE IF NOT EXISTS rma_tags (
    provider   TEXT NOT NULL,
    kind       TEXT NOT NULL,
    base       TEXT NOT NULL,
    tag        TEXT NOT NULL,
    digest     TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (provider, kind, base, tag)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rma_claims (
    provider    TEXT NOT NULL,
    kind        TEXT NOT NULL,
    base        TEXT NOT NULL,
    digest      TEXT NOT NULL,
    owner       TEXT NOT NULL,
    token       TEXT NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at  REAL NOT NULL,
    PRIMARY KEY (provider, kind, base, digest)
) WITHOUT ROWID;
"""

_COLUMNS: Final = "provider, kind, base, digest, remote_id, name, version, data, created_at, updated_at"
_KEY: Final = "provider = ? AND kind = ? AND base = ?"


def _k(key: StoreKey) -> tuple[str, str, str]:
    return (key.provider, key.kind, key.base)


def _record(row: tuple[Any, ...]) -> Record:
    provider, kind, base, digest, remote_id, name, version, data, created_at, updated_at = row
    return Record(
        key=StoreKey(provider=provider, kind=kind, base=base),
        digest=digest,
        remote_id=remote_id,
        name=name,
        version=version,
        data=json.loads(data),
        created_at=float(created_at),
        updated_at=float(updated_at),
    )


def _dump(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


class SqliteStore(BaseStore):
    """A store in the SQLite database at ``path`` (parent directories created)."""

    @renamed_options("SqliteStore")
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        _seams: Seams | None = None,
    ) -> None:
        super().__init__(_seams=_seams)
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"{self.path}: {exc}") from exc
        try:
            self._setup(busy_timeout)
        except BaseException:
            self._conn.close()
            raise

    def _setup(self, busy_timeout_s: float) -> None:
        with self._errors():
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            # Switching to WAL needs a moment of exclusive access; first openers may collide.
            deadline = time.monotonic() + busy_timeout_s
            while True:
                try:
                    mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: could not enable WAL (journal_mode={mode})")
            self._conn.execute("PRAGMA synchronous = FULL")
            with self._write() as db:
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise StoreError(f"{self.path}: schema version {version} is newer than this rma's")
                if version < SCHEMA_VERSION:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            db.execute(statement)
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from exc

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._errors():
            yield self._conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on exit, rolled back on an exception."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._errors(), self._write() as conn:
            yield conn

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- primitives -------------------------------------------------------------------------

    @staticmethod
    def _select(db: sqlite3.Connection, key: StoreKey, digest: str) -> Record | None:
        row = db.execute(
            f"SELECT {_COLUMNS} FROM rma_records WHERE {_KEY} AND digest = ?", (*_k(key), digest)
        ).fetchone()
        return None if row is None else _record(row)

    def _get(self, key: StoreKey, digest: str) -> Record | None:
        with self._read() as db:
            return self._select(db, key, digest)

    def _put(self, key: StoreKey, digest: str, entry: Entry, claim: Claim | None, now: float) -> Record:
        with self._transaction() as db:
            db.execute(
                f"INSERT INTO rma_records ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (provider, kind, base, digest) DO NOTHING",
                (*_k(key), digest, entry.remote_id, entry.name, entry.version, _dump(entry.data), now, now),
            )
            if claim is not None:
                db.execute(
                    f"DELETE FROM rma_claims WHERE {_KEY} AND digest = ? AND token = ?",
                    (*_k(key), digest, claim.token),
                )
            record = self._select(db, key, digest)
        assert record is not None  # inserted or already there, inside one transaction
        return record

    def _replace(self, key: StoreKey, digest: str, entry: Entry, now: float) -> Record:
        with self._transaction() as db:
            db.execute(
                f"INSERT INTO rma_records ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (provider, kind, base, digest) DO UPDATE SET remote_id = excluded.remote_id, "
                "name = excluded.name, version = excluded.version, data = excluded.data, "
                "updated_at = excluded.updated_at",
                (*_k(key), digest, entry.remote_id, entry.name, entry.version, _dump(entry.data), now, now),
            )
            record = self._select(db, key, digest)
        assert record is not None
        return record

    def _records(self, key: StoreKey) -> list[Record]:
        with self._read() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM rma_records WHERE {_KEY} ORDER BY created_at DESC, seq DESC", _k(key)
            ).fetchall()
        return [_record(row) for row in rows]

    def _delete(self, key: StoreKey, digests: list[str]) -> int:
        with self._transaction() as db:
            return sum(
                db.execute(f"DELETE FROM rma_records WHERE {_KEY} AND digest = ?", (*_k(key), d)).rowcount
                for d in set(digests)
            )

    def _delete_remote(self, provider: str, remote_id: str) -> int:
        with self._transaction() as db:
            cursor = db.execute(
                "DELETE FROM rma_records WHERE provider = ? AND remote_id = ?", (provider, remote_id)
            )
            return cursor.rowcount

    def _set_tag(self, key: StoreKey, tag: str, digest: str, now: float) -> bool:
        with self._transaction() as db:
            if self._select(db, key, digest) is None:
                return False
            db.execute(
                "INSERT INTO rma_tags (provider, kind, base, tag, digest, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (provider, kind, base, tag) DO UPDATE SET digest = excluded.digest, "
                "updated_at = excluded.updated_at",
                (*_k(key), tag, digest, now),
            )
            return True

    def _get_tag(self, key: StoreKey, tag: str) -> str | None:
        with self._read() as db:
            row = db.execute(
                f"SELECT digest FROM rma_tags WHERE {_KEY} AND tag = ?", (*_k(key), tag)
            ).fetchone()
        return None if row is None else str(row[0])

    def _remove_tag(self, key: StoreKey, tag: str) -> bool:
        with self._transaction() as db:
            return db.execute(f"DELETE FROM rma_tags WHERE {_KEY} AND tag = ?", (*_k(key), tag)).rowcount > 0

    def _tags(self, key: StoreKey) -> dict[str, str]:
        with self._read() as db:
            rows = db.execute(f"SELECT tag, digest FROM rma_tags WHERE {_KEY}", _k(key)).fetchall()
        return {str(tag): str(digest) for tag, digest in rows}

    def _resolve(self, key: StoreKey, tag: str) -> tuple[str | None, Record | None]:
        columns = ", ".join(f"r.{c.strip()}" for c in _COLUMNS.split(","))
        with self._read() as db:
            row = db.execute(
                f"SELECT t.digest, r.seq, {columns} FROM rma_tags t LEFT JOIN rma_records r "
                "ON r.provider = t.provider AND r.kind = t.kind AND r.base = t.base AND r.digest = t.digest "
                "WHERE t.provider = ? AND t.kind = ? AND t.base = ? AND t.tag = ?",
                (*_k(key), tag),
            ).fetchone()
        if row is None:
            return None, None
        digest, seq = str(row[0]), row[1]
        return digest, None if seq is None else _record(row[2:])

    def _claim(
        self, key: StoreKey, digest: str, owner: str, lease_s: float, now: float, token: str
    ) -> ClaimOutcome:
        with self._transaction() as db:
            record = self._select(db, key, digest)
            if record is not None:
                return Existing(record)
            held = db.execute(
                f"SELECT owner, expires_at FROM rma_claims WHERE {_KEY} AND digest = ?", (*_k(key), digest)
            ).fetchone()
            if held is not None and held[1] > now:
                return Held(owner=str(held[0]), expires_at=float(held[1]))
            expires = now + lease_s
            db.execute(
                "INSERT INTO rma_claims "
                "(provider, kind, base, digest, owner, token, acquired_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (provider, kind, base, digest) DO UPDATE SET "
                "owner = excluded.owner, token = excluded.token, acquired_at = excluded.acquired_at, "
                "expires_at = excluded.expires_at",
                (*_k(key), digest, owner, token, now, expires),
            )
        return Acquired(Claim(key=key, digest=digest, owner=owner, token=token, expires_at=expires))

    def _renew(self, claim: Claim, lease_s: float, now: float) -> Claim | None:
        expires = now + lease_s
        with self._transaction() as db:
            changed = db.execute(
                f"UPDATE rma_claims SET expires_at = ? WHERE {_KEY} AND digest = ? AND token = ?",
                (expires, *_k(claim.key), claim.digest, claim.token),
            ).rowcount
        if not changed:
            return None
        return Claim(
            key=claim.key, digest=claim.digest, owner=claim.owner, token=claim.token, expires_at=expires
        )

    def _release(self, claim: Claim) -> bool:
        with self._transaction() as db:
            return (
                db.execute(
                    f"DELETE FROM rma_claims WHERE {_KEY} AND digest = ? AND token = ?",
                    (*_k(claim.key), claim.digest, claim.token),
                ).rowcount
                > 0
            )
