"""The lease on a journal key: one run at a time carries a key on, in every process.

A run with a journal (``run``, ``open_session``), ``resume`` and ``resume_session`` hold their
key's lease from before they read the journal until they return; a second one asking for it
meanwhile gets ``JournalBusy`` at once (never a wait, never a second driver of the host).
``approve`` and ``pending_approvals`` take no lease: a paused session is held by nobody, and
an approval is one append, serialized by the store like any other.

How it holds (docs/decisions.md):

- an ``SQLiteJournal`` on a file: an exclusive POSIX record lock (``fcntl`` ``F_SETLK``, taken
  non-blocking) on one byte of one file beside it, ``<journal>.lease``, at an offset given by
  the key (62 bits of its SHA-256: a file of 2**62 possible bytes, never written, so it stays
  empty). The kernel drops a process's record locks when it ends however it ends, SIGKILL
  included, so a dead holder never blocks a resume and there is no expiry to tune. A refused
  run names the holder by the pid the kernel reports for the lock (``F_GETLK``). Taking and
  letting go are one system call each on a file opened once per process: per session that is
  a few microseconds, where a file per key (created, locked, removed) cost ~300 µs — the
  difference that mattered with a thousand journaled sessions in one process (issue #28).
  Record locks belong to the process, so the file is opened once and never closed while this
  process lives (closing any descriptor of it would drop every lock the process holds on it),
  and a child forked without exec holds none of its parent's leases.
- a journal carried before this layout also has ``<journal>.leases/``, a directory of per-key
  files held with ``flock`` by older versions. While that directory exists, a run also takes
  the key's file there (as those versions did) so that an older process and this one still
  exclude each other; delete the directory once no older process uses the journal.
- any other store (``MemoryJournal``, an ``SQLiteJournal(":memory:")``, a store of your
  own): a lease within this process, per store and key — such stores are one process's.

Within one process, every lease is also noted in a table here, so a second holder in the same
process is refused without asking the kernel (record locks never conflict within a process).

What this is not: the store (``store``) or the records (``rma.journal``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import socket
import struct
import sys
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
_FILES: dict[str, int] = {}
"""Lease file path → the one descriptor this process holds it by (never closed: see above)."""

_BUSY = (errno.EAGAIN, errno.EACCES)
"""What ``F_SETLK`` says when another process holds the range (POSIX allows either)."""


def _forked() -> None:
    """In a forked child: it holds no record lock of its parent's, and a lock another thread
    held at the fork would never be let go there."""
    global _LOCK
    _LOCK = threading.Lock()
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


@attrs.define(eq=False)
class Lease:
    """A held key. ``release`` lets the next run have it (idempotent)."""

    _entry: tuple[Hashable, str]
    _fd: int | None = None
    """The lease file's descriptor (shared by the process's leases on it), None: in-process."""
    _offset: int = 0
    _store: JournalStore | None = None
    """Kept alive while held: a process-local lease is keyed by the store's identity."""
    _legacy: _Legacy | None = None

    def release(self) -> None:
        with _LOCK:
            if _HELD.pop(self._entry, None) is None:
                return
            fd, self._fd, self._store = self._fd, None, None
            legacy, self._legacy = self._legacy, None
        try:
            if legacy is not None:
                legacy.release()
        finally:
            if fd is not None:
                assert fcntl is not None
                with contextlib.suppress(OSError):  # the process ending drops it anyway
                    fcntl.lockf(fd, fcntl.LOCK_UN, 1, self._offset)


def _me() -> str:
    return f"pid {os.getpid()} on {socket.gethostname()}"


def _path(store: JournalStore) -> str | None:
    """The journal file a lease file goes beside, or None: a process-local lease."""
    if fcntl is None or not isinstance(store, SQLiteJournal):
        return None
    name = str(store.path)
    if name in ("", ":memory:") or name.startswith("file:"):
        return None
    return os.path.realpath(name)


def _offset(key: str) -> int:
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") >> 2  # below 2**62: start + length fits an off_t


def _file(journal: str) -> int:
    """The descriptor of ``journal``'s lease file, opened once for the process."""
    with _LOCK:
        fd = _FILES.get(journal)
        if fd is None:
            fd = _FILES[journal] = os.open(journal + ".lease", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        return fd


def acquire(store: JournalStore, key: str) -> Result[Lease, SessionError]:
    """The lease on ``key`` in ``store``; ``JournalBusy`` naming who holds it, or
    ``InvalidOpts(option="journal")`` when the lease file cannot be made."""
    journal = _path(store)
    identity: Hashable = ("file", journal) if journal is not None else ("store", id(store))
    entry = (identity, key)
    with _LOCK:
        holder = _HELD.get(entry)
        if holder is not None:
            return Failure(JournalBusy(key=key, holder=holder, detail="held in this process"))
        _HELD[entry] = _me()
    if journal is None:
        return Success(Lease(entry, None, 0, store))
    assert fcntl is not None
    offset = _offset(key)
    try:
        fd = _file(journal)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
    except OSError as exc:
        _drop(entry)
        if exc.errno in _BUSY:
            return Failure(JournalBusy(key=key, holder=_holder(fd, offset)))
        # not a holder: a directory that cannot be written, say
        return Failure(InvalidOpts("journal", f"cannot take the lease on {key!r} at {journal}.lease: {exc}"))
    legacy: Result[_Legacy | None, SessionError] = Success(None)
    if os.path.isdir(journal + ".leases"):  # an older version may carry this journal too
        legacy = _Legacy.take(Path(journal + ".leases"), key)
    if isinstance(legacy, Failure):
        _drop(entry)
        with contextlib.suppress(OSError):
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset)
        return Failure(legacy.failure())
    return Success(Lease(entry, fd, offset, None, legacy.unwrap()))


def _holder(fd: int, offset: int) -> str | None:
    """Who holds the byte at ``offset`` (``F_GETLK``), as ``pid … on <host>``; None when the
    platform's lock record is not one this knows (or the holder let go meanwhile)."""
    if fcntl is None or not sys.platform.startswith("linux"):
        return None
    # struct flock on Linux: short l_type, l_whence; off_t l_start, l_len; pid_t l_pid (padded).
    query = struct.pack("@hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return None
    kind, _, _, _, pid = struct.unpack("@hhqqi4x", answer)
    if kind == fcntl.F_UNLCK or pid <= 0:
        return None
    return f"pid {pid} on {socket.gethostname()}"  # record locks are this host's


def _drop(entry: tuple[Hashable, str]) -> None:
    with _LOCK:
        _HELD.pop(entry, None)


@attrs.define(eq=False)
class _Legacy:
    """The per-key file an older version locks (``<journal>.leases/<sha256(key)[:40]>``), taken
    as it takes it: ``flock`` on the file, checked to still be the one at the path, its holder
    written in it; removed while still locked on release."""

    fd: int
    path: Path

    @classmethod
    def take(cls, folder: Path, key: str) -> Result[_Legacy | None, SessionError]:
        assert fcntl is not None
        path = folder / hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]
        fd: int | None = None
        try:
            for _ in range(_TAKES):
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _still_at(path, fd):
                    break
                # Its holder removed it between our open and our lock: take the path's new file.
                os.close(fd)
                fd = None
            else:
                return Failure(JournalBusy(key=key, holder=None, detail="its lease file kept changing hands"))
        except BlockingIOError:
            holder = _read(fd)
            if fd is not None:
                os.close(fd)
            return Failure(JournalBusy(key=key, holder=holder))
        except OSError as exc:
            if fd is not None:
                os.close(fd)
            return Failure(InvalidOpts("journal", f"cannot take the lease on {key!r} at {path}: {exc}"))
        os.ftruncate(fd, 0)
        os.pwrite(fd, _me().encode("utf-8"), 0)
        return Success(cls(fd, path))

    def release(self) -> None:
        try:
            with contextlib.suppress(FileNotFoundError):  # while locked: a taker that opened it sees it gone
                os.unlink(self.path)
        finally:
            os.close(self.fd)  # the lock goes with the file


_TAKES = 8
"""Tries at a legacy lease file another process keeps removing before ``JournalBusy`` (each
removal is a holder finishing, so a few tries find it free or held)."""


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
