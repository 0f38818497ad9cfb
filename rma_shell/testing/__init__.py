"""Test helpers for users of rma: loopback emulators of the remote APIs it talks to.

They run real servers on 127.0.0.1, so code under test uses its normal HTTP stack. They are
for tests only: no TLS, no persistence, no attempt at performance beyond "fast enough".
"""

from rma_shell.testing.openai_emulator import (
    Fault,
    OpenAIEmulator,
    RecordedRequest,
    Turn,
    delay,
    drop_mid_stream,
    malformed_chunk,
    status,
)
from rma_shell.testing.scripted import CLOSE, DROP, ScriptedProvider

__all__ = [
    "CLOSE",
    "DROP",
    "Fault",
    "OpenAIEmulator",
    "RecordedRequest",
    "ScriptedProvider",
    "Turn",
    "delay",
    "drop_mid_stream",
    "malformed_chunk",
    "status",
]
