"""AgentCore session-storage artifacts: list, fetch, put and delete over runtime commands.

A harness declares a ``sessionStorage`` mount (``/mnt/data`` by default) that persists for
the runtime session. ``SessionStorage`` reaches it through ``InvokeAgentRuntimeCommand``:
each verb runs a small ``python3 -c`` script in the session's microVM (wire §7.1), bytes
travel as base64 through the command's stdout (fetch) or its arguments (put, in 48,000-
character pieces). Names are validated before anything is sent, so a name can never
become shell syntax. Puts of one name are serialized within this object.

What it is not: a general file system client — one flat directory, report-scale payloads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
from returns.result import Failure, Result, Success

from rma.errors import InvalidOpts, NotFound, SessionError
from rma.providers.agentcore_commands import (
    DEFAULT_MOUNT_PATH,
    CommandResult,
    StoredArtifact,
    check_base_path,
    check_name,
    delete_command,
    fetch_command,
    list_command,
    parse_delete,
    parse_fetch,
    parse_list,
    parse_put,
    put_commands,
)

RunCommand = Callable[[str], Awaitable[Result[CommandResult, SessionError]]]


class SessionStorage:
    """The artifact verbs over one runtime session's storage mount."""

    def __init__(self, run: RunCommand, *, base_path: str = DEFAULT_MOUNT_PATH) -> None:
        checked = check_base_path(base_path)
        if isinstance(checked, Failure):
            raise ValueError(checked.failure().message)
        self.base_path = checked.unwrap()
        self._run = run
        self._put_lock = trio.Lock()

    async def list(self) -> Result[tuple[StoredArtifact, ...], SessionError]:
        """The regular files in the mount (not recursive), sorted by name."""
        ran = await self._run(list_command(self.base_path))
        return ran.bind(parse_list)

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

    async def put(self, name: str, data: bytes) -> Result[None, SessionError]:
        checked = check_name(name)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        if not isinstance(data, bytes | bytearray | memoryview):
            return Failure(InvalidOpts(option="data", detail=f"bytes expected, got {type(data).__name__}"))
        async with self._put_lock:
            for command in put_commands(self.base_path, name, bytes(data)):
                ran = await self._run(command)
                if isinstance(ran, Failure):
                    return Failure(ran.failure())
                done = parse_put(ran.unwrap())
                if isinstance(done, Failure):
                    return done
        return Success(None)

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
