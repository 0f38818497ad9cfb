"""rma — the pure core: vocabulary, errors, the session machine and sans-IO codecs.

Nothing in this package performs I/O, reads the clock, the environment or randomness.
The runnable library (trio + httpx) is ``rma_shell``; most users import from there.
"""

from rma.errors import SessionError
from rma.provider import Mode, ProviderCodec
from rma.session.machine import State, initial_state, step
from rma.session.options import CONTINUE, Halt, SessionConfig
from rma.vocabulary import (
    Budget,
    Outcome,
    SessionInfo,
    SessionResult,
    Terminal,
    ToolResult,
    ToolUse,
    TurnResult,
    Usage,
)

__all__ = [
    "CONTINUE",
    "Budget",
    "Halt",
    "Mode",
    "Outcome",
    "ProviderCodec",
    "SessionConfig",
    "SessionError",
    "SessionInfo",
    "SessionResult",
    "State",
    "Terminal",
    "ToolResult",
    "ToolUse",
    "TurnResult",
    "Usage",
    "initial_state",
    "step",
]
