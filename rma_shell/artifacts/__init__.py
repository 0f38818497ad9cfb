"""Artifacts: files a session's agent wrote, reachable from this process (list, fetch, put, delete).

One verb set over two stores (A-1): ``ClaudeFiles`` (a Claude Managed Agents session's files)
and ``SessionStorage`` (an AgentCore runtime session's storage mount). Both are an
``ArtifactStore`` and list ``Artifact`` values; ``artifacts_for(provider, info)`` gives the
store of a running session, so a tool handler that takes the ``SessionInfo`` argument can
read what its own session wrote. See docs/artifacts.md.

What it is not: a sync or mirror tool — every verb is one round of requests, nothing cached.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from returns.result import Failure, Result, Success

from rma.errors import InvalidOpts, SessionError, Unsupported
from rma.vocabulary import SessionInfo
from rma_shell.artifacts.base import Artifact, ArtifactStore, check_name, newest, parse_timestamp
from rma_shell.artifacts.claude_files import DEFAULT_MOUNT_DIR, ClaudeFiles, FilesClient
from rma_shell.artifacts.session_storage import SessionStorage

if TYPE_CHECKING:
    from rma.providers.agentcore.commands import CommandResult
    from rma_shell.providers.agentcore import BedrockAgentCore


def artifacts_for(
    provider: object,
    info: SessionInfo,
    *,
    mount_dir: str | None = None,
    base_path: str | None = None,
    harness_arn: str | None = None,
) -> Result[ArtifactStore, SessionError]:
    """The artifact store of the session ``info`` describes, on ``provider`` (the object it ran on).

    Claude Managed Agents → ``ClaudeFiles(client, info.session_id, mount_dir=…)``; Bedrock
    AgentCore → the session storage of runtime session ``info.session_id`` (``base_path``:
    the harness's ``sessionStorage`` mount, default ``/mnt/data``). An AgentCore run whose
    harness ARN was given per run rather than on the provider needs ``harness_arn=`` here:
    ``SessionInfo`` does not carry it. Any other provider is ``Unsupported``; a session
    without an id yet, or an ``info`` from another provider, is ``InvalidOpts``.
    """
    # Imported here: the providers import this package (BedrockAgentCore.storage).
    from rma_shell.providers.agentcore import BedrockAgentCore
    from rma_shell.providers.claude import ClaudeManagedAgents

    session_id = info.session_id
    if not isinstance(session_id, str) or not session_id:
        return Failure(InvalidOpts(option="info", detail="the session has no id yet (not opened)"))
    name = getattr(getattr(provider, "codec", None), "name", None)
    if info.provider and name and info.provider != name:
        detail = f"a {info.provider} session's info given with a {name} provider"
        return Failure(InvalidOpts(option="info", detail=detail))
    try:
        if isinstance(provider, ClaudeManagedAgents):
            client = provider.client()
            if isinstance(client, Failure):
                return Failure(client.failure())
            return Success(ClaudeFiles(client.unwrap(), session_id, mount_dir=mount_dir or DEFAULT_MOUNT_DIR))
        if isinstance(provider, BedrockAgentCore):
            return Success(_agentcore_storage(provider, session_id, base_path, harness_arn))
    except ValueError as exc:  # a bad mount_dir / base_path
        return Failure(InvalidOpts(option="mount_dir" if mount_dir else "base_path", detail=str(exc)))
    return Failure(Unsupported(operation=f"artifacts on {name or type(provider).__name__}"))


def _agentcore_storage(
    provider: BedrockAgentCore, session_id: str, base_path: str | None, harness_arn: str | None
) -> SessionStorage:
    from rma.providers.agentcore.commands import DEFAULT_MOUNT_PATH

    base = base_path or DEFAULT_MOUNT_PATH
    handle = provider.defaults.get("harness")
    arn = harness_arn
    if arn is None and provider.defaults.get("harness_arn") is None and isinstance(handle, Mapping):
        # A provider built from a provision handle: ``storage`` only reads ``harness_arn``.
        arn = handle.get("harness_arn")
    if arn is None:
        return provider.storage(session_id, base_path=base)

    async def run(command: str) -> Result[CommandResult, SessionError]:
        return await provider.run_command(
            command, runtime_session_id=session_id, timeout=120, harness_arn=arn
        )

    return SessionStorage(run, base_path=base)


__all__ = [
    "DEFAULT_MOUNT_DIR",
    "Artifact",
    "ArtifactStore",
    "ClaudeFiles",
    "FilesClient",
    "SessionStorage",
    "artifacts_for",
    "check_name",
    "newest",
    "parse_timestamp",
]
