"""AgentCore session-storage artifacts: list, fetch, put and delete over runtime commands.

A harness declares a ``sessionStorage`` mount (``/mnt/data`` by default) that persists for
the runtime session. ``SessionStorage`` reaches it through ``InvokeAgentRuntimeCommand``:
each verb runs a small ``python3 -c`` script in the session's microVM (wire §7.1), bytes
travel as base64 through the command's stdout (fetch) or its arguments (put, in 48,000-
character pieces). Names are validated before anything is sent, so a name can never
become shell syntax. Puts of one name are serialized within this object (two objects over
one session still share the fixed part-file path); a failed or cancelled put removes its part
file, best effort (A-13 Better). It is an
``ArtifactStore``: ``list`` gives ``Artifact`` values (``ref`` = the file's path in the mount,
``created_at`` = its modification time, ``raw`` = the listing row); one directory holds one
file per name, so a name never has duplicates here and the newest is the only one.

What it is not: a general file system client — one flat directory, report-scale payloads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import anyio
from returns.result import Failure, Result, Success

from rma.errors import InvalidOpts, NotFound, SessionError
from rma.providers.agentcore.commands import (
    DEFAULT_MOUNT_PATH,
    PART_SUFFIX,
    CommandResult,
    StoredArtifact,
    check_base_path,
    delete_command,
    fetch_command,
    list_command,
    parse_delete,
    parse_fetch,
    parse_list,
    parse_put,
    put_commands,
    python_command,
)
from rma.vocabulary import JSON
from rma_shell.artifacts.base import Artifact, check_name

RunCommand = Callable[[str], Awaitable[Result[CommandResult, SessionError]]]
_CLEANUP_S = 30.0
"""How long a cancelled put may still spend removing its part file."""

_ABORT_PUT = """import os, sys
try:
    os.remove(sys.argv[1])
except FileNotFoundError:
    pass
"""


def _abort_put_command(path: str) -> str:
    return python_command(_ABORT_PUT, path + PART_SUFFIX)


def _modified(row: StoredArtifact) -> datetime | None:
    try:
        return datetime.fromtimestamp(row.modified, UTC) if row.modified is not None else None
    except (OverflowError, OSError, ValueError):
        return None


class SessionStorage:
    """The artifact verbs over one runtime session's storage mount."""

    def __init__(self, run: RunCommand, *, base_path: str = DEFAULT_MOUNT_PATH) -> None:
        checked = check_base_path(base_path)
        if isinstance(checked, Failure):
            raise ValueError(checked.failure().message)
        self.base_path = checked.unwrap()
        self._run = run
        self._put_lock = anyio.Lock()

    def path(self, name: str) -> str:
        """Where ``name`` lives in the session's microVM (an artifact's ``ref``)."""
        return f"{self.base_path.rstrip('/')}/{name}"

    async def list(self) -> Result[tuple[Artifact, ...], SessionError]:
        """The regular files in the mount (not recursive), sorted by name (A-11)."""
        ran = await self._run(list_command(self.base_path))
        return ran.bind(parse_list).map(lambda rows: tuple(self._artifact(row) for row in rows))

    def _artifact(self, row: StoredArtifact) -> Artifact:
        raw: dict[str, JSON] = {"name": row.name, "size": row.size, "modified": row.modified}
        return Artifact(
            name=row.name, size=row.size, ref=self.path(row.name), created_at=_modified(row), raw=raw
        )

    async def fetch(self, name: str) -> Result[bytes, SessionError]:
        checked = check_name(name)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        ran = await self._run(fetch_command(self.base_path, name))
        if isinstance(ran, Failure):
            return Failure(ran.failure())
        parsed = parse_fetch(name, ran.unwrap())
        if isinstance(parsed, Failure):
            return Failure(parsed.failure())
        value = parsed.unwrap()
        if isinstance(value, bytes):
            return Success(value)
        return Failure(NotFound(resource="artifact", name=name))

    async def put(self, name: str, data: bytes) -> Result[Artifact, SessionError]:
        """Write ``data`` under ``name`` (replacing it), chunked and finished atomically (A-13).
        The artifact returned has no ``created_at`` or ``raw``: those cost another command."""
        checked = check_name(name)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        if not isinstance(data, bytes | bytearray | memoryview):
            return Failure(InvalidOpts(option="data", detail=f"bytes expected, got {type(data).__name__}"))
        payload = bytes(data)
        async with self._put_lock:
            failed: SessionError | None = None
            try:
                for command in put_commands(self.base_path, name, payload):
                    ran = await self._run(command)
                    done = ran.bind(parse_put)
                    if isinstance(done, Failure):
                        failed = done.failure()
                        break
            except BaseException:  # cancelled mid-put: still try not to leave the part file behind
                with anyio.CancelScope(shield=True), anyio.move_on_after(_CLEANUP_S):
                    await self._run(_abort_put_command(self.path(name)))
                raise
            if failed is not None:
                # A-13 Better: a failed put leaves no part file (best effort; the put's error wins).
                await self._run(_abort_put_command(self.path(name)))
                return Failure(failed)
        return Success(Artifact(name=name, size=len(payload), ref=self.path(name)))

    async def delete(self, name: str) -> Result[None, SessionError]:
        checked = check_name(name)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        ran = await self._run(delete_command(self.base_path, name))
        if isinstance(ran, Failure):
            return Failure(ran.failure())
        parsed = parse_delete(name, ran.unwrap())
        if isinstance(parsed, Failure):
            return Failure(parsed.failure())
        if parsed.unwrap() is not None:
            return Failure(NotFound(resource="artifact", name=name))
        return Success(None)
