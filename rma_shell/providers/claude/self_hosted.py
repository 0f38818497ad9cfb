"""``ClaudeSelfHosted``: Claude Managed Agents sessions on a ``self_hosted`` environment, whose
built-in tools (``agent_toolset_20260401``) this process runs and answers with
``user.tool_result``.

What this is: ``ClaudeManagedAgents`` with the self-hosted codec
(``rma.providers.claude.self_hosted``): a run's handler gets the agent's ``bash``, ``read``,
``write``, ``edit``, ``glob`` and ``grep`` calls beside its custom tools (give it a
``rma_shell.workspace.Workspace``), and a reattach recovers the built-in calls a session
waits on. Two differences from the cloud provider, both because the session belongs to
whoever created it, not to the process serving its tools: stopping a run does not interrupt
the session (``stop_remote`` leaves the host's loop alone — another worker may carry it on),
and reconnects consolidate the built-in calls too.

What this is not: the work queue (``rma_shell.providers.claude.work``) or the worker that
claims sessions from it (``rma_shell.environments``).
"""

from __future__ import annotations

from returns.result import Result, Success

from rma.errors import SessionError
from rma.providers.claude.self_hosted import SELF_HOSTED_CODEC, ClaudeSelfHostedCodec, consolidate_self_hosted
from rma_shell.providers.base import StopReport
from rma_shell.providers.claude.provider import ClaudeManagedAgents, CMAConn


class ClaudeSelfHosted(ClaudeManagedAgents):
    """Claude Managed Agents where this process runs the agent's built-in tools. Takes the same
    settings as ``ClaudeManagedAgents``; the environment must be ``{"type": "self_hosted"}``."""

    codec: ClaudeSelfHostedCodec = SELF_HOSTED_CODEC
    _consolidate = staticmethod(consolidate_self_hosted)  # reconnect replays waiting built-in calls

    @classmethod
    def like(cls, host: ClaudeManagedAgents) -> ClaudeSelfHosted:
        """The same settings and client as ``host`` (an ``Agent``'s Claude host), self-hosted.
        They share the client: close ``host``, not this."""
        if isinstance(host, ClaudeSelfHosted):
            return host
        twin = object.__new__(cls)
        twin.__dict__.update(host.__dict__)
        return twin

    async def stop_remote(self, conn: CMAConn) -> Result[StopReport, SessionError]:
        """The session is its creator's: a worker that stops serving it (a lost lease, a stop
        asked for, a shutdown) leaves its loop running for the next claimant."""
        return Success(StopReport("not_needed", "a self-hosted session's loop is left to its next worker"))
