"""Test helpers for users of rma: loopback emulators of the remote APIs it talks to.

They run real servers on 127.0.0.1, so code under test uses its normal HTTP stack. They are
for tests only: no TLS, no persistence, no attempt at performance beyond "fast enough".
"""

from rma_shell.testing import agentcore, claude, local
from rma_shell.testing import claude as cma  # the emulator's older name
from rma_shell.testing.agentcore import AgentCoreEmulator, AgentCoreFault, ControlPlane, HarnessView
from rma_shell.testing.claude import (
    CMAEmulator,
    CMAFault,
    SessionView,
    close_idle_connection,
    drop_stream_after,
    error_frame,
    requires_action_from_earlier_batch,
    status_once,
    terminal_while_disconnected,
    text_turn,
    tool_turn,
)
from rma_shell.testing.local.emulator import (
    Fault,
    OpenAIEmulator,
    RecordedRequest,
    Turn,
    cut_off,
    delay,
    drop_mid_stream,
    hold,
    malformed_chunk,
    pace,
    status,
)
from rma_shell.testing.scripted import CLOSE, DROP, ScriptedProvider

__all__ = [
    "CLOSE",
    "DROP",
    "AgentCoreEmulator",
    "AgentCoreFault",
    "CMAEmulator",
    "CMAFault",
    "ControlPlane",
    "Fault",
    "HarnessView",
    "OpenAIEmulator",
    "RecordedRequest",
    "ScriptedProvider",
    "SessionView",
    "Turn",
    "agentcore",
    "claude",
    "close_idle_connection",
    "cma",
    "cut_off",
    "delay",
    "drop_mid_stream",
    "drop_stream_after",
    "error_frame",
    "hold",
    "local",
    "malformed_chunk",
    "pace",
    "requires_action_from_earlier_batch",
    "status",
    "status_once",
    "terminal_while_disconnected",
    "text_turn",
    "tool_turn",
]
