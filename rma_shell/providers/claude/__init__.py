"""Claude Managed Agents, the shell half: the provider (``provider``: a session's stream,
inputs posted as events, the remote stop), its HTTP client (``client``), the bearer-token file
(``token_file``) and provisioning of agents and environments (``provisioning``).

The pure codec is ``rma.providers.claude``; the loopback emulator is ``rma_shell.testing.claude``.
"""

from rma_shell.providers.claude.provider import ClaudeManagedAgents

__all__ = ["ClaudeManagedAgents"]
