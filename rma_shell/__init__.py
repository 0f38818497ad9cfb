"""rma_shell — run agent sessions on anyio (trio or asyncio): ``Agent`` (configure once, run on
any host), the functional ``run``, ``run_or_raise``, ``open_session``, providers, telemetry.

The loop's decisions live in the pure core (``rma``); this package performs the I/O.
"""

from returns.result import Failure, Result, Success

from rma.errors import SessionError
from rma.live import AttemptDiscarded, LiveUpdate, TextDelta, ToolCallFinished, ToolCallStarted, TurnFinished
from rma.session.options import CONTINUE, Halt
from rma.vocabulary import Budget, Outcome, SessionInfo, SessionResult, Terminal, ToolResult, ToolUse, Usage
from rma_shell.handler import Capabilities, Handler
from rma_shell.providers.base import OpenRequest, Provider
from rma_shell.raising import run_or_raise, unwrap
from rma_shell.session import LiveSession, SessionFailed, open_session, run  # isort: split

from rma.journal import AwaitingApproval, JournalBusy, JournalDamaged, JournalMismatch, PendingApproval
from rma_shell.journal.store import JournalStore, MemoryJournal, SQLiteJournal
from rma_shell.resuming import approve, pending_approvals, resume, resume_session
from rma_shell.telemetry import Telemetry, attach, detach
from rma_shell.updates import UpdateStream

from rma_shell.agent import Agent, RunFinished  # isort: skip

__all__ = [
    "CONTINUE",
    "Agent",
    "AttemptDiscarded",
    "AwaitingApproval",
    "Budget",
    "Capabilities",
    "Failure",
    "Halt",
    "Handler",
    "JournalBusy",
    "JournalDamaged",
    "JournalMismatch",
    "JournalStore",
    "LiveSession",
    "LiveUpdate",
    "MemoryJournal",
    "OpenRequest",
    "Outcome",
    "PendingApproval",
    "Provider",
    "Result",
    "RunFinished",
    "SQLiteJournal",
    "SessionError",
    "SessionFailed",
    "SessionInfo",
    "SessionResult",
    "Success",
    "Telemetry",
    "Terminal",
    "TextDelta",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolResult",
    "ToolUse",
    "TurnFinished",
    "UpdateStream",
    "Usage",
    "approve",
    "attach",
    "detach",
    "open_session",
    "pending_approvals",
    "resume",
    "resume_session",
    "run",
    "run_or_raise",
    "unwrap",
]
