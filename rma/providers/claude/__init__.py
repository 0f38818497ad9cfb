"""Claude Managed Agents, the pure half: ``codec`` (wire vocabulary, normalization, consolidation),
``previews`` (token deltas and thread activity as live updates), ``outcomes`` (why a session
stopped, typed), ``self_hosted`` (the codec on a self-hosted environment, whose built-in tools
the client runs).

The transport, client and provisioning are in ``rma_shell.providers.claude``; the loopback
emulator is ``rma_shell.testing.claude``.
"""

from rma.providers.claude.codec import CODEC, ClaudeManagedAgentsCodec
from rma.providers.claude.outcomes import HostStop, Refusal, StopKind, host_stop, session_error
from rma.providers.claude.self_hosted import SELF_HOSTED_CODEC, ClaudeSelfHostedCodec

__all__ = [
    "CODEC",
    "SELF_HOSTED_CODEC",
    "ClaudeManagedAgentsCodec",
    "ClaudeSelfHostedCodec",
    "HostStop",
    "Refusal",
    "StopKind",
    "host_stop",
    "session_error",
]
