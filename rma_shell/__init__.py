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
from rma_shell.machinery.updates import UpdateStream
from rma_shell.resuming import approve, pending_approvals, resume, resume_session
from rma_shell.telemetry import Telemetry, attach, detach

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


def _moved_modules() -> None:
    """Old module paths of issue #22's layout still import (as the module at its new place),
    with a ``DeprecationWarning``: ``rma_shell.driver`` is ``rma_shell.machinery.driver``."""
    import importlib
    import importlib.abc
    import importlib.machinery
    import sys
    import types
    import warnings

    moved = {
        "rma_shell.driver": "rma_shell.machinery.driver",
        "rma_shell.remote_stop": "rma_shell.machinery.remote_stop",
        "rma_shell.updates": "rma_shell.machinery.updates",
        "rma_shell._mailbox": "rma_shell.machinery.mailbox",
        "rma_shell._tasks": "rma_shell.machinery.tasks",
        "rma_shell._interrupt": "rma_shell.machinery.interrupt",
        "rma_shell.lean_http": "rma_shell.transport.lean_http",
        "rma_shell.http": "rma_shell.transport.http",
        "rma_shell._deadline": "rma_shell.transport.deadline",
        "rma_shell.cli_progress": "rma_shell.cli.progress",
        "rma_shell.cli_provision": "rma_shell.cli.provision",
        "rma_shell.journal.resuming": "rma_shell.resuming",
    }

    class Alias(importlib.abc.Loader):
        def __init__(self, new: str) -> None:
            self.new = new

        def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
            warnings.warn(
                f"rma module {spec.name} moved: import {self.new}", DeprecationWarning, stacklevel=2
            )
            return importlib.import_module(self.new)

        def exec_module(self, module: types.ModuleType) -> None:
            return None

    class Moved(importlib.abc.MetaPathFinder):
        def find_spec(
            self, name: str, path: object = None, target: object = None
        ) -> importlib.machinery.ModuleSpec | None:
            new = moved.get(name)
            return None if new is None else importlib.machinery.ModuleSpec(name, Alias(new))

    sys.meta_path.insert(0, Moved())


_moved_modules()
