"""Claude Managed Agents, the pure half: ``codec`` (wire vocabulary, normalization, consolidation),
``previews`` (token deltas and thread activity as live updates), ``outcomes`` (why a session
stopped, typed).

The transport, client and provisioning are in ``rma_shell.providers.claude``; the loopback
emulator is ``rma_shell.testing.claude``.
"""

from rma.providers.claude.codec import CODEC, ClaudeManagedAgentsCodec
from rma.providers.claude.outcomes import HostStop, Refusal, StopKind, host_stop, session_error

__all__ = [
    "CODEC",
    "ClaudeManagedAgentsCodec",
    "HostStop",
    "Refusal",
    "StopKind",
    "host_stop",
    "session_error",
]
