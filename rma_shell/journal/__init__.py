"""Durable sessions: a journal of every event, ``resume`` after a crash, approvals that wait.

``run(..., journal=..., journal_key=...)`` writes the session as it goes; ``resume`` carries it
on in any process; ``approve`` decides a call that waits for a person. The format is
``rma.journal`` (pure); here are the stores and the shell's side. See docs/durable.md.
"""

from rma.errors import TurnLost
from rma.journal import (
    AwaitingApproval,
    JournalBusy,
    JournalDamaged,
    JournalMismatch,
    JournalUnavailable,
    PendingApproval,
)
from rma_shell.journal.store import (
    GroupCommitFailed,
    JournalStore,
    JournalStoreError,
    MemoryJournal,
    SQLiteJournal,
)

__all__ = [
    "AwaitingApproval",
    "GroupCommitFailed",
    "JournalBusy",
    "JournalDamaged",
    "JournalMismatch",
    "JournalStore",
    "JournalStoreError",
    "JournalUnavailable",
    "MemoryJournal",
    "PendingApproval",
    "SQLiteJournal",
    "TurnLost",
    "approve",
    "pending_approvals",
    "resume",
    "resume_session",
]


def __getattr__(name: str) -> object:
    # resume imports rma_shell.session, which imports this package: load it on first use.
    if name in ("resume", "resume_session", "approve", "pending_approvals"):
        import importlib

        module = importlib.import_module("rma_shell.resuming")

        return getattr(module, name)
    raise AttributeError(name)
