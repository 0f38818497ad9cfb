"""The JSON file store: the whole store in one human-readable JSON document.

What this is: a ``DocumentStore`` whose state lives in one file. Every operation takes an
advisory lock on ``<path>.lock`` (``flock``: shared to read, exclusive to write), reads the
file, and — when the operation changed something — writes it back atomically: a temporary
file in the same directory, ``fsync``, ``os.replace`` over the path, ``fsync`` of the
directory (V-44 Better: no torn or lost writes, and several processes on one host may write
at once). The parent directory is created on the first write.

A writer killed between creating its temporary file and the rename leaves the file behind
(``.<name>.XXXXXXXX.tmp``, or ``.<name>.corrupt.XXXXXXXX.tmp`` for the backup). Writers create
and finish those files only while they hold the exclusive lock, so whoever holds the lock —
shared or exclusive — knows that no live writer owns one: the store removes them under the
lock on an instance's first operation and on every write, and logs how many on ``rma.stores``
(info). Only names of exactly that shape, regular files, are touched. On Windows, where the
lock does not reach other processes, only temporary files older than ``ORPHAN_GRACE_S`` (an
hour) are removed.

A file that is not a store document (bad UTF-8 or JSON, the wrong shape, malformed
entries) is *corrupt*: logged at warning level on ``rma.stores`` ("corrupt"), reported on
``store.corruption`` as a ``StoreCorrupt``, read as empty (or without the malformed entries),
and rewritten on the next write — the unreadable bytes are first saved to
``<path>.corrupt`` (V-43 Better: reported, kept, never a crash). A file this process cannot
read, or one written by a newer rma, is a ``StoreError`` instead: overwriting it would lose
data.

What it is not: a database. Every operation reads and rewrites the whole file, so it suits
tens to a few thousand records; the lock is advisory and POSIX-only (on Windows only threads
of one process are serialized). Prefer ``SqliteStore`` beyond that.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from rma_shell.seams import Seams
from rma_shell.stores.base import StoreCorrupt, StoreError
from rma_shell.stores.memory import DocumentStore, State

log = logging.getLogger("rma.stores")

if sys.platform == "win32":  # pragma: no cover - no advisory file locks: threads only

    def _flock(fd: int, exclusive: bool) -> None:
        return None

else:
    import fcntl

    def _flock(fd: int, exclusive: bool) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)


ORPHAN_GRACE_S: Final = 3600.0
"""Without a cross-process lock (Windows) a temporary file this old is taken for an orphan."""
_CROSS_PROCESS_LOCK: Final = sys.platform != "win32"


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms that cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - filesystems that refuse directory fsync
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a reader sees the old or the new content, never a
    mix, and the new content survives a crash once this returns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


class JsonFileStore(DocumentStore):
    """A store in one JSON file at ``path`` (``~`` expanded)."""

    def __init__(self, path: str | os.PathLike[str], *, _seams: Seams | None = None) -> None:
        super().__init__(_seams=_seams)
        self.path = Path(path).expanduser()
        self.corruption: StoreCorrupt | None = None
        """The last corruption found (None until one is)."""
        self._lock = threading.Lock()
        self._swept = False
        self._orphan = re.compile(rf"\.{re.escape(self.path.name)}\.(?:corrupt\.)?[a-z0-9_]{{8}}\.tmp")
        """``tempfile.mkstemp``'s names for this store's temporary files (8 random characters)."""

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    @property
    def backup_path(self) -> Path:
        return self.path.with_name(self.path.name + ".corrupt")

    @contextlib.contextmanager
    def _file_lock(self, exclusive: bool) -> Iterator[None]:
        if exclusive:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        elif not self.path.parent.is_dir():
            yield  # nothing to read and nothing to lock: the store is empty
            return
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _flock(fd, exclusive)
            yield
        finally:
            os.close(fd)  # closing the descriptor drops the lock

    def _sweep(self) -> None:
        """Remove temporary files left by killed writers; call with the file lock held."""
        self._swept = True
        removed = 0
        try:
            entries = list(os.scandir(self.path.parent))
        except OSError:
            return
        now = time.time()
        for item in entries:
            if not self._orphan.fullmatch(item.name):
                continue
            try:
                if not item.is_file(follow_symlinks=False):
                    continue
                if (
                    not _CROSS_PROCESS_LOCK
                    and now - item.stat(follow_symlinks=False).st_mtime < ORPHAN_GRACE_S
                ):
                    continue  # pragma: no cover - Windows: it may belong to a live writer elsewhere
                os.unlink(item.path)
                removed += 1
            except OSError:  # gone already (another sweeper), or not ours to remove
                continue
        if removed:
            log.info(
                "removed %d orphaned temporary file(s) of %s left by interrupted writers",
                removed,
                self.path,
                extra={"path": str(self.path)},
            )

    def _load(self) -> tuple[State, bytes | None, bytes]:
        """The state, the raw bytes when they were corrupt (to back up), and the raw bytes."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return State(), None, b""
        try:
            doc = json.loads(raw.decode("utf-8"))
            state, skipped = State.from_json(doc)
        except LookupError as exc:
            raise StoreError(f"{self.path}: {exc}; refusing to overwrite it") from exc
        except (UnicodeDecodeError, ValueError) as exc:
            self._report(f"unreadable as a store document ({exc})")
            return State(), raw, raw
        if skipped:
            self._report(f"unexpected shape in {', '.join(skipped)}; those entries are ignored")
            return state, raw, raw
        return state, None, raw

    def _report(self, detail: str) -> None:
        self.corruption = StoreCorrupt(path=str(self.path), detail=detail)
        log.warning(
            "store file %s is corrupt: %s; it will be rewritten on the next write (old bytes kept at %s)",
            self.path,
            detail,
            self.backup_path,
            extra={"path": str(self.path)},
        )

    def _save(self, state: State, corrupt: bytes | None, before: bytes) -> None:
        data = (json.dumps(state.to_json(), ensure_ascii=False, indent=1) + "\n").encode("utf-8")
        if data == before:
            return
        if corrupt is not None:
            atomic_write(self.backup_path, corrupt)
            self.corruption = StoreCorrupt(
                path=str(self.path),
                detail=self.corruption.detail if self.corruption else "corrupt",
                backup=str(self.backup_path),
            )
        atomic_write(self.path, data)

    @contextlib.contextmanager
    def _open(self, write: bool) -> Iterator[State]:
        try:
            with self._lock, self._file_lock(exclusive=write):
                if (write or not self._swept) and self.path.parent.is_dir():
                    self._sweep()
                state, corrupt, before = self._load()
                yield state
                if write:
                    self._save(state, corrupt, before)
        except OSError as exc:
            raise StoreError(f"{self.path}: {exc}") from exc
