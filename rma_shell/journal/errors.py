"""What a journal store raises: ``JournalStoreError``, and ``GroupCommitFailed`` for a shared commit.

Not the session's errors (``JournalUnavailable`` and the rest live in ``rma.journal``): these are
the store's, which the driver turns into those.
"""

from __future__ import annotations


class JournalStoreError(Exception):
    """A store that cannot be read or written (its message says why, with the path)."""


class GroupCommitFailed(JournalStoreError):
    """The transaction holding this session's records failed, with the records of ``sessions``
    flushes in it (this one's included): none of them was written; what earlier commits wrote
    stands."""

    def __init__(self, message: str, sessions: int) -> None:
        super().__init__(message)
        self.sessions = sessions
