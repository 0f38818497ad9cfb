"""rma_shell — run agent sessions on anyio (trio or asyncio): ``Agent`` (configure once, run on
any host), the functional ``run``, ``run_or_raise``, ``open_session``, providers, telemetry.

The loop's decisions live in the pure core (``rma``); this package performs the I/O.
"""

from returns.result import Failure, Result, Success

from rma.errors import SessionError
from rma.live import (
    AttemptDiscarded,
    ContextCompacted,
    LiveUpdate,
    TextDelta,
    ThreadActivity,
    ToolCallFinished,
    ToolCallStarted,
    TurnFinished,
)
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
from rma._moved import install as _install_moved  # isort: skip

__all__ = [
    "CONTINUE",
    "Agent",
    "AttemptDiscarded",
    "AwaitingApproval",
    "Budget",
    "Capabilities",
    "ContextCompacted",
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
    "ThreadActivity",
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


_install_moved(
    {
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
        # One folder per host per layer, under one name (claude, agentcore, local):
        "rma_shell.providers.claude_managed_agents": "rma_shell.providers.claude.provider",
        "rma_shell.providers.cma_client": "rma_shell.providers.claude.client",
        "rma_shell.providers.token_file": "rma_shell.providers.claude.token_file",
        "rma_shell.provisioning.claude_managed_agents": "rma_shell.providers.claude.provisioning",
        "rma_shell.providers.bedrock_agentcore": "rma_shell.providers.agentcore.provider",
        "rma_shell.providers.agentcore_client": "rma_shell.providers.agentcore.client",
        "rma_shell.provisioning.agentcore": "rma_shell.providers.agentcore.provisioning",
        "rma_shell.providers.local_pool": "rma_shell.providers.local.pool",
        "rma_shell.provisioning.local": "rma_shell.providers.local.provisioning",
        "rma_shell.testing.cma_emulator": "rma_shell.testing.claude",
        "rma_shell.testing.agentcore_emulator": "rma_shell.testing.agentcore",
        "rma_shell.testing.openai_emulator": "rma_shell.testing.local.emulator",
    }
)
