"""Claude Managed Agents, the pure half: ``codec`` (wire vocabulary, normalization, consolidation).

The transport, client and provisioning are in ``rma_shell.providers.claude``; the loopback
emulator is ``rma_shell.testing.claude``.
"""

from rma.providers.claude.codec import CODEC, ClaudeManagedAgentsCodec

__all__ = ["CODEC", "ClaudeManagedAgentsCodec"]
