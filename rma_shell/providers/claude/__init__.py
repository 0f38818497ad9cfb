"""Claude Managed Agents, the shell half: the provider (``provider``: a session's stream,
inputs posted as events, the remote stop), its HTTP client (``client``), the bearer-token file
(``token_file``) and provisioning of agents and environments (``provisioning``).

The pure codec is ``rma.providers.claude``; the loopback emulator is ``rma_shell.testing.claude``.
"""

from rma_shell.providers.claude import provisioning as _provisioning  # noqa: F401 - see below
from rma_shell.providers.claude.provider import ClaudeManagedAgents

# ``provisioning`` registers its handles with the recording codec: a journaled run's request
# holds them, and a resume in a process that never provisioned must decode them.

__all__ = ["ClaudeManagedAgents"]
