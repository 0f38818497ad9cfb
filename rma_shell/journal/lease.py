"""The lease on a journal key: one run at a time carries a key on, in every process.

A run with a journal (``run``, ``open_session``), ``resume`` and ``resume_session`` hold their
key's lease from before they read the journal until they return; a second one asking for it
meanwhile gets ``JournalBusy`` at once (never a wait, never a second driver of the host).
``approve`` and ``pending_approvals`` take no lease: a paused session is held by nobody, and
an approval is one append, serialized by the store like any other.

How it holds (docs/decisions.md):

- an ``SQLiteJournal`` on a file: an exclusive ``flock`` on a small per-key file beside it
  (``<journal>.leases/<sha256 of the key>``), taken non-blocking. The kernel drops the lock
  when its holder's file is closed — by ``release``, or by the process ending however it ends,
  SIGKILL included — so a dead holder never blocks a resume, and there is no expiry to tune.
  The file holds its holder's ``pid … on <host>``, so a refused run can name it. ``release``
  removes it while still holding the lock, so a journal of many keys does not leave a file per
  key behind; a taker checks, once it holds the lock, that the file it locked is still the one
  at the path (the same inode) and starts again if not — otherwise two processes could each
  lock a file of their own for one key. A holder that dies leaves its file, unlocked: the next
  run of that key takes it and removes it.
- any other store (``MemoryJournal``, an ``SQLiteJournal(":memory:")``, a store of your
  own): a lease within this process, per store and key — such stores are one process's.

Within one process, every lease is also noted in a table here, so a second holder in the same
process is refused without touching the file (``flock`` would refuse it too).

What this is not: the store (``store``) or the records (``rma.journal``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import threading
from collections.abc import Hashable
from pathlib import Path

import attrs
from returns.result import Failure, Result, Success

from rma.errors import InvalidOpts, SessionError
from rma.journal import JournalBusy
from rma_shell.journal.store import JournalStore, SQLiteJournal

try:
    import fcntl
except ImportError:  # not POSIX: leases stay within one process
    fcntl = None  # type: ignore[assignment]

_LOCK = threading.Lock()
_HELD: dict[tuple[Hashable, str], str] = {}
"""(store identity, key) → who holds it, for every lease this process holds."""


@attrs.define(eq=False)
class Lease:
    """A held key. ``release`` lets the next run have it (idempotent)."""

    _entry: tuple[Hashable, str]
    _fd: int | None = None
    _store: JournalStore | None = None
    """Kept alive while held: a process-local lease is keyed by the store's identity."""
    _path: Path | None = None

    def release(self) -> None:
        with _LOCK:
            if _HELD.pop(self._entry, None) is None:
                return
            fd, self._fd, self._store = self._fd, None, None
        if fd is not None:
            try:
                if self._path is not None:  # while locked: a taker that opened it sees it gone
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self._path)
            finally:
                os.close(fd)  # the lock goes with the file


def _me() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()}"


def _lease_file(store: SQLiteJournal, key: str) -> Path | None:
    if fcntl is None or str(store.path) in ("", ":memory:") or str(store.path).startswith("file:"):
        return None
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]
    return Path(os.path.realpath(store.path) + ".leases") / digest


def acquire(store: JournalStore, key: str) -> Result[Lease, SessionError]:
    """The lease on ``key`` in ``store``; ``JournalBusy`` naming who holds it, or
    ``InvalidOpts(option="journal")`` when the lease file cannot be made."""
    path = _lease_file(store, key) if isinstance(store, SQLiteJournal) else None
    identity: Hashable = ("file", str(path.parent)) if path is not None else ("store", id(store))
    entry = (identity, key)
    with _LOCK:
        holder = _HELD.get(entry)
        if holder is not None:
            return Failure(JournalBusy(key=key, holder=holder, detail="held in this process"))
        _HELD[entry] = _me()
    if path is None:
        return Success(Lease(entry, None, store))
    fd: int | None = None
    try:
        path.parent.mkdir(exist_ok=True)
        for _ in range(_TAKES):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _still_at(path, fd):
                break
            # Its holder removed it between our open and our lock: take the path's new file.
            os.close(fd)
            fd = None
        else:
            _drop(entry, fd)
            return Failure(JournalBusy(key=key, holder=None, detail="its lease file kept changing hands"))
    except BlockingIOError:
        holder = _read(fd)
        _drop(entry, fd)
        return Failure(JournalBusy(key=key, holder=holder))
    except OSError as exc:  # not a holder: a directory that cannot be written, say
        _drop(entry, fd)
        return Failure(InvalidOpts("journal", f"cannot take the lease on {key!r} at {path}: {exc}"))
    assert fd is not None
    os.ftruncate(fd, 0)
    os.pwrite(fd, _me().encode("utf-8"), 0)
    return Success(Lease(entry, fd, None, path))


_TAKES = 8
"""Tries at a lease file another process keeps removing before ``JournalBusy`` (each removal
is a holder finishing, so a few tries find it free or held)."""


def _still_at(path: Path, fd: int) -> bool:
    """Whether the file ``fd`` locked is still the one at ``path`` (not removed by its last holder)."""
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (there.st_ino, there.st_dev) == (mine.st_ino, mine.st_dev)


def _read(fd: int | None) -> str | None:
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() if fd is not None else ""
    except OSError:
        return None
    return text or None


def _drop(entry: tuple[Hashable, str], fd: int | None) -> None:
    with _LOCK:
        _HELD.pop(entry, None)
    if fd is not None:
        os.close(fd)
