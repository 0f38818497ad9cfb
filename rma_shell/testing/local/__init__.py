"""The Local host's loopback server: an OpenAI-compatible chat-completions emulator
(``emulator``), scripted turn by turn, with fault injection.

The provider it serves is ``rma_shell.providers.local``; its pure codec is ``rma.providers.local``.
"""

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

__all__ = [
    "Fault",
    "OpenAIEmulator",
    "RecordedRequest",
    "Turn",
    "cut_off",
    "delay",
    "drop_mid_stream",
    "hold",
    "malformed_chunk",
    "pace",
    "status",
]
