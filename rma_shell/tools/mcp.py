"""``MCPServer``: the tools of an MCP server (stdio or streamable HTTP) as a ``ToolSource``.

Built on the official ``mcp`` Python SDK (the ``mcp`` extra). A source connects when it is
entered (a toolbox enters its sources in its own ``__aenter__``): it spawns the server or
opens the HTTP session, runs ``initialize`` and ``tools/list`` (every page) under
``connect_timeout``, and declares each tool like a local one (its ``inputSchema`` as the
input schema, its name with ``prefix`` in front). A call is forwarded as ``tools/call``
under ``call_timeout``; its content comes back as text (text blocks joined, structured
content as JSON when there is no text, other blocks as short placeholders) and ``isError``
as a ``Failure``.

The connection lives in a background task of a task group the source owns (entered in
``__aenter__``, closed in ``__aexit__``), so the SDK's own task groups and cancel scopes
stay in one task; calls from any task talk to it through the SDK's streams. That task is
shielded: teardown — closing the server's stdin, then SIGTERM/SIGKILL of its process group
(the SDK's shutdown) — runs to its end also when the session is cancelled, so no server
process outlives the source. A connection that ends fails its calls in flight at once: over
stdio the server's stdout ends when it exits; over HTTP an answer (a POST's response body)
that breaks off mid-way — the server died or the connection to it was cut — counts as the
connection lost, since the SDK ends such a stream silently and the call would otherwise wait
for ``call_timeout``. (A broken stream is not resumed with ``Last-Event-ID``.) A call that
hangs past ``call_timeout`` is cancelled on the server (``notifications/cancelled``) and,
when the server does not answer a ping either, the connection is dropped. Either way that
call is an ``is_error`` result and the next call starts a new connection (respawns the
server, or opens a new HTTP session).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import sys
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self, TextIO

import anyio
import anyio.abc
import attrs
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from returns.result import Failure, Success

from rma_shell.tools.source import ToolOutput, ToolSpec
from rma_shell.tools.toolbox import ToolboxError
from rma_shell.transport.http import user_agent

try:
    import mcp.types as mt
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    try:  # mcp 2.x renamed it
        from mcp.shared.exceptions import MCPError as McpError  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # mcp 1.x
        from mcp.shared.exceptions import McpError  # type: ignore[attr-defined,no-redef,unused-ignore]
    from mcp.shared.message import SessionMessage
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        'MCP tool sources need the mcp extra: pip install "rma-agents[mcp]"', name=exc.name
    ) from exc

__all__ = ["DEFAULT_CALL_TIMEOUT", "DEFAULT_CONNECT_TIMEOUT", "MCPServer", "MCPServerError"]

log = logging.getLogger("rma.tools.mcp")

DEFAULT_CONNECT_TIMEOUT: Final = 10.0
"""Seconds for spawning/opening, ``initialize`` and listing the tools."""
DEFAULT_CALL_TIMEOUT: Final = 60.0
"""Seconds one ``tools/call`` may take before it is an ``is_error`` result."""
_PING_TIMEOUT: Final = 5.0
_TEARDOWN_GRACE: Final = 10.0
_SESSION_TERMINATED: Final = 32600
"""The code the SDK's HTTP transport gives a request answered 404 (the server does not know
the session: it restarted, or expired the session)."""
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What every host accepts as a tool name (OpenAI, Anthropic and Bedrock agree on this)."""


class _Marker:
    pass


_SESSION_ENDED: Final = _Marker()


class MCPServerError(ToolboxError):
    """An MCP source that cannot start: bad options, a server that fails or does not answer."""


@attrs.define(eq=False)
class _Connection:
    """One connection (one server process for stdio), held by one background task."""

    ready: anyio.Event = attrs.field(factory=anyio.Event)
    closing: anyio.Event = attrs.field(factory=anyio.Event)
    done: anyio.Event = attrs.field(factory=anyio.Event)
    scope: anyio.CancelScope = attrs.field(factory=anyio.CancelScope)
    session: ClientSession | None = None
    tools: list[mt.Tool] = attrs.field(factory=list)
    error: str | None = None
    lost: str | None = None
    calls: set[anyio.CancelScope] = attrs.field(factory=set)

    def drop(self, reason: str) -> None:
        """Mark the connection gone, release its calls in flight, let its task tear it down."""
        if self.lost is None:
            self.lost = reason
        for scope in self.calls:
            scope.cancel()
        self.closing.set()


_Transport = Callable[[Callable[[str], None]], contextlib.AbstractAsyncContextManager[Any]]
"""Opens one connection: the SDK's (read, write, …) streams. It is given ``lost(reason)`` to
call when it learns, besides its read stream ending, that the connection is gone."""


class MCPServer:
    """An MCP server's tools as a tool source. Build one with ``stdio`` or ``http``."""

    def __init__(
        self,
        transport: _Transport,
        *,
        name: str,
        prefix: str = "",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        call_timeout: float | None = DEFAULT_CALL_TIMEOUT,
        allowed_tools: Collection[str] | Callable[[str], bool] | None = None,
        kind: str = "stdio",
        repeatable: bool | Collection[str] = False,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise MCPServerError(f"MCP server name must be a non-empty string, got {name!r}")
        if not isinstance(prefix, str):
            raise MCPServerError(f"MCP server {name!r}: prefix must be a string, got {prefix!r}")
        self._transport = transport
        self.kind = kind
        self._again = "reconnected" if kind == "http" else "restarted"  # what the next call does
        self.name = name
        self.prefix = prefix
        self.connect_timeout = _seconds(name, "connect_timeout", connect_timeout)
        self.call_timeout = None if call_timeout is None else _seconds(name, "call_timeout", call_timeout)
        if isinstance(allowed_tools, str):
            raise MCPServerError(
                f"MCP server {name!r}: allowed_tools must be a collection of names or a predicate, "
                f"not one string ({allowed_tools!r})"
            )
        self.allowed_tools = allowed_tools
        if isinstance(repeatable, str):
            raise MCPServerError(
                f"MCP server {name!r}: repeatable is True or a collection of the server's tool names, "
                f"not one string ({repeatable!r})"
            )
        self.repeatable: bool | frozenset[str] = (
            repeatable if isinstance(repeatable, bool) else frozenset(repeatable)
        )
        """Tools whose identical calls each run on Local (a clock, a status poll): all (True) or
        the named ones (the server's names, before ``prefix``)."""
        self._specs: list[ToolSpec] = []
        self._remote: dict[str, str] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._conn: _Connection | None = None
        self._conns: set[_Connection] = set()
        self._lock: anyio.Lock | None = None

    # ── constructors ──

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stderr: TextIO | None = None,
        name: str | None = None,
        prefix: str = "",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        call_timeout: float | None = DEFAULT_CALL_TIMEOUT,
        allowed_tools: Collection[str] | Callable[[str], bool] | None = None,
        repeatable: bool | Collection[str] = False,
    ) -> MCPServer:
        """A server spawned as ``command args…`` and spoken to over its stdin/stdout.

        ``env`` is added to the SDK's minimal default environment (``PATH``, ``HOME``, …: not
        the whole of ``os.environ``); ``stderr`` is where the server's stderr goes (default
        ``sys.stderr``). The process runs in its own process group and is stopped with the
        source (stdin closed, then SIGTERM, then SIGKILL to the group).
        """
        label = name if name is not None else Path(str(command)).name
        if not isinstance(command, str) or not command:
            raise MCPServerError(f"MCP server {label!r}: command must be a non-empty string, got {command!r}")
        if isinstance(args, str) or not all(isinstance(a, str) for a in args):
            raise MCPServerError(f"MCP server {label!r}: args must be a sequence of strings, got {args!r}")
        if env is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise MCPServerError(f"MCP server {label!r}: env must map strings to strings")
        params = StdioServerParameters(
            command=command,
            args=list(args),
            env=dict(env) if env is not None else None,
            cwd=os.fspath(cwd) if cwd is not None else None,
        )

        def transport(lost: Callable[[str], None]) -> contextlib.AbstractAsyncContextManager[Any]:
            # A server that exits ends its stdout, hence the read stream: nothing more to watch.
            return stdio_client(params, errlog=stderr if stderr is not None else sys.stderr)

        return cls(
            transport,
            name=label,
            prefix=prefix,
            connect_timeout=connect_timeout,
            call_timeout=call_timeout,
            allowed_tools=allowed_tools,
            repeatable=repeatable,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        prefix: str = "",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        call_timeout: float | None = DEFAULT_CALL_TIMEOUT,
        allowed_tools: Collection[str] | Callable[[str], bool] | None = None,
        repeatable: bool | Collection[str] = False,
    ) -> MCPServer:
        """A server at ``url`` spoken to over streamable HTTP, with ``headers`` on every request."""
        try:
            parsed = httpx.URL(str(url))
        except httpx.InvalidURL as exc:
            raise MCPServerError(f"MCP server {name or 'http'!r}: url is not a URL: {exc}") from exc
        # The default name leaves out credentials and the query: it is in every error the model sees.
        port = f":{parsed.port}" if parsed.port is not None else ""
        label = name if name is not None else f"{parsed.scheme}://{parsed.host}{port}{parsed.path}"
        if not isinstance(url, str) or parsed.scheme not in ("http", "https") or not parsed.host:
            raise MCPServerError(f"MCP server {label!r}: url must be an http(s) URL")
        if headers is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise MCPServerError(f"MCP server {label!r}: headers must map strings to strings")
        fixed_headers = dict(headers or {})
        # rma's User-Agent, as on the hosts' connections, unless the caller's headers name one.
        if not any(name.lower() == "user-agent" for name in fixed_headers):
            fixed_headers["User-Agent"] = user_agent()
        # Connect/write/pool bounded by connect_timeout; reads are bounded per call by
        # call_timeout (an SSE response or the listening GET stream may stay open long).
        timeout = httpx.Timeout(connect_timeout, read=None) if _positive(connect_timeout) else None

        @contextlib.asynccontextmanager
        async def transport(lost: Callable[[str], None]) -> AsyncIterator[Any]:
            async def watch(response: httpx.Response) -> None:
                # A POST's body carries the answers to the request it sent (JSON or an SSE
                # stream); the GET stream for server-initiated messages is left to the SDK,
                # which reconnects it.
                if response.request.method == "POST":
                    response.stream = _BreakWatch(response.stream, lost)

            async with (
                httpx.AsyncClient(
                    headers=fixed_headers, timeout=timeout, event_hooks={"response": [watch]}
                ) as client,
                streamable_http_client(url, http_client=client) as streams,
            ):
                yield streams

        return cls(
            transport,
            name=label,
            prefix=prefix,
            connect_timeout=connect_timeout,
            call_timeout=call_timeout,
            allowed_tools=allowed_tools,
            kind="http",
            repeatable=repeatable,
        )

    # ── ToolSource ──

    async def __aenter__(self) -> Self:
        if self._tg is not None:
            raise MCPServerError(f"MCP server {self.name!r} is already started")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg, self._lock = tg, anyio.Lock()
        try:
            conn = await self._open()
            self._declare(conn.tools)
        except BaseException as exc:
            await self._close(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._close(exc_type, exc, tb)

    def tools(self) -> Sequence[ToolSpec]:
        if self._tg is None:
            raise MCPServerError(f"MCP server {self.name!r}: tools() is valid once the source is started")
        return list(self._specs)

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolOutput:
        remote = self._remote.get(name)
        if remote is None or self._tg is None:
            return Failure(f"MCP server {self.name}: no tool {name!r} (or the source is not started)")
        output = await self._call_once(name, remote, arguments)
        if output is _SESSION_ENDED:
            # The server did not know our HTTP session (it restarted between calls): it never
            # saw the call, so it is made once more on a new session.
            output = await self._call_once(name, remote, arguments)
        if output is _SESSION_ENDED:
            return Failure(f"MCP server {self.name} ended the session twice during {name}")
        assert not isinstance(output, _Marker)
        return output

    async def _call_once(self, name: str, remote: str, arguments: dict[str, Any]) -> ToolOutput | _Marker:
        try:
            conn = await self._connected()
        except MCPServerError as exc:
            return Failure(f"{exc}; the call to {name} was not made")
        session = conn.session
        assert session is not None
        # mcp 1.x: the id call_tool is about to use (assigned before any await), for the
        # cancellation we send on a timeout; mcp 2.x sends that itself when a call is abandoned.
        request_id: int | None = getattr(session, "_request_id", None)
        timeout = math.inf if self.call_timeout is None else self.call_timeout
        with anyio.CancelScope() as released:
            conn.calls.add(released)
            try:
                with anyio.move_on_after(timeout) as waited:
                    result = await session.call_tool(remote, arguments)
            except McpError as exc:
                if _session_ended(exc.error.code, exc.error.message):
                    conn.drop("ended the session")
                    return _SESSION_ENDED
                if exc.error.code == mt.CONNECTION_CLOSED:
                    conn.drop("closed the connection")
                    return Failure(self._lost_text(name, conn))
                return Failure(f"MCP server {self.name}: {name} failed: {exc.error.message}")
            except (RuntimeError, ValueError) as exc:
                # the SDK refusing the answer (structured content against the outputSchema, a
                # malformed result): the connection is fine
                return Failure(f"MCP server {self.name} answered {name} with an invalid result: {exc}")
            except Exception as exc:
                conn.drop(f"failed: {_describe(exc)}")
                return Failure(self._lost_text(name, conn))
            finally:
                conn.calls.discard(released)
        if released.cancelled_caught:
            return Failure(self._lost_text(name, conn))
        if waited.cancelled_caught:
            return Failure(await self._timed_out(name, conn, session, request_id))
        return _output(self.name, name, result)

    # ── connections ──

    async def _open(self) -> _Connection:
        assert self._tg is not None
        conn = _Connection()
        self._conn = conn
        self._conns.add(conn)
        self._tg.start_soon(self._hold, conn, name=f"rma MCP server {self.name}")
        await conn.ready.wait()
        if conn.error is not None:
            conn.drop(conn.error)
            raise MCPServerError(f"MCP server {self.name!r} {conn.error}")
        return conn

    async def _connected(self) -> _Connection:
        assert self._lock is not None
        async with self._lock:
            conn = self._conn
            if conn is None or conn.lost is not None:
                conn = await self._open()
            return conn

    async def _hold(self, conn: _Connection) -> None:
        """The connection's task: open, hand the session over, wait, tear down (shielded)."""
        try:
            with anyio.CancelScope(shield=True), conn.scope:
                async with contextlib.AsyncExitStack() as stack:
                    try:
                        streams = await stack.enter_async_context(self._transport(conn.drop))
                    except OSError as exc:
                        conn.error = f"could not be started: {_describe(exc)}"
                        conn.ready.set()
                        return
                    read = await stack.enter_async_context(_watched(streams[0], conn))
                    session = await stack.enter_async_context(ClientSession(read, streams[1]))
                    with anyio.move_on_after(self.connect_timeout) as waited:
                        await session.initialize()
                        conn.tools = await _list_tools(session)
                    if waited.cancelled_caught:
                        conn.error = (
                            f"did not answer initialize and tools/list within {self.connect_timeout:g} s"
                        )
                        conn.ready.set()  # report now; the teardown below runs in the background
                        return
                    conn.session = session
                    conn.ready.set()
                    await conn.closing.wait()
        except Exception as exc:
            if conn.error is None and not conn.ready.is_set():
                conn.error = f"failed to connect: {_describe(exc)}"
            elif conn.lost is None:
                log.warning("MCP server %s: the connection ended: %s", self.name, _describe(exc))
            conn.drop(f"failed: {_describe(exc)}")
        finally:
            if conn.error is None and conn.session is None:
                conn.error = "closed the connection before it was ready"
            conn.drop("closed the connection")
            conn.ready.set()
            conn.done.set()
            self._conns.discard(conn)

    async def _close(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        tg, self._tg = self._tg, None
        self._conn = None
        conns = list(self._conns)
        for conn in conns:
            conn.drop("was stopped")
        # Shielded: a cancelled session still waits for its servers to stop (bounded).
        with anyio.CancelScope(shield=True), anyio.move_on_after(_TEARDOWN_GRACE):
            for conn in conns:
                await conn.done.wait()
        for conn in conns:
            if not conn.done.is_set():
                log.warning("MCP server %s: teardown took over %g s, cancelled", self.name, _TEARDOWN_GRACE)
                conn.scope.cancel()
        if tg is not None:
            # Its tasks catch everything, so the task group has nothing to add to what is
            # propagating; exiting it clean keeps the caller's exception as it is (a task
            # group given one would wrap it in an ExceptionGroup).
            await tg.__aexit__(None, None, None)

    async def _timed_out(
        self, name: str, conn: _Connection, session: ClientSession, request_id: int | None
    ) -> str:
        timeout = f"{self.call_timeout:g}"
        with (
            contextlib.suppress(Exception),
            anyio.move_on_after(_PING_TIMEOUT if request_id is not None else 0),
        ):
            await session.send_notification(
                mt.ClientNotification(
                    mt.CancelledNotification(
                        params=mt.CancelledNotificationParams(
                            requestId=request_id, reason=f"no answer within {timeout} s"
                        )
                    )
                )
            )
        alive = False
        ping_timeout = min(_PING_TIMEOUT, self.connect_timeout, self.call_timeout or _PING_TIMEOUT)
        with contextlib.suppress(Exception), anyio.move_on_after(ping_timeout):
            await session.send_ping()
            alive = True
        if alive:
            return f"MCP server {self.name}: {name} did not answer within {timeout} s and was cancelled"
        conn.drop(f"did not answer {name} within {timeout} s nor a ping after it")
        return (
            f"MCP server {self.name}: {name} did not answer within {timeout} s and the server did not "
            f"answer a ping either; it will be {self._again} on the next call"
        )

    def _lost_text(self, name: str, conn: _Connection) -> str:
        return (
            f"MCP server {self.name} {conn.lost or 'closed the connection'} during {name}; "
            f"it will be {self._again} on the next call"
        )

    # ── declarations ──

    def _declare(self, tools: Sequence[mt.Tool]) -> None:
        offered = {tool.name for tool in tools}
        allowed = self.allowed_tools
        if allowed is not None and not callable(allowed):
            missing = sorted(set(allowed) - offered)
            if missing:
                raise MCPServerError(
                    f"MCP server {self.name!r}: allowed_tools names {missing}, which the server does not "
                    f"offer (it offers: {', '.join(sorted(offered)) or 'none'})"
                )
        specs: list[ToolSpec] = []
        remote: dict[str, str] = {}
        for tool in tools:
            if allowed is not None and not (
                allowed(tool.name) if callable(allowed) else tool.name in allowed
            ):
                continue
            local = self.prefix + tool.name
            if not _TOOL_NAME.match(local):
                raise MCPServerError(
                    f"MCP server {self.name!r}: tool name {local!r} is not one every host accepts "
                    "(1-64 of A-Z a-z 0-9 _ -); leave it out with allowed_tools or change prefix"
                )
            if local in remote:
                raise MCPServerError(f"MCP server {self.name!r} lists tool {tool.name!r} twice")
            schema = dict(_field(tool, "inputSchema") or {})
            schema.setdefault("type", "object")
            description = tool.description or tool.title or ""
            repeats = self.repeatable is True or (
                isinstance(self.repeatable, frozenset) and tool.name in self.repeatable
            )
            specs.append(
                ToolSpec(name=local, description=description, input_schema=schema, repeatable=repeats)
            )
            remote[local] = tool.name
        self._specs, self._remote = specs, remote

    def __repr__(self) -> str:
        return f"MCPServer({self.name!r}, prefix={self.prefix!r})"


# ── helpers ──


@contextlib.asynccontextmanager
async def _watched(
    source: MemoryObjectReceiveStream[SessionMessage | Exception], conn: _Connection
) -> AsyncIterator[MemoryObjectReceiveStream[SessionMessage | Exception]]:
    """The transport's read stream relayed, so that its end marks the connection lost."""
    send: MemoryObjectSendStream[SessionMessage | Exception]
    send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

    async def relay() -> None:
        try:
            async with send:
                async for item in source:
                    await send.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass
        conn.drop("closed the connection")

    async with anyio.create_task_group() as tg:
        tg.start_soon(relay)
        try:
            yield receive
        finally:
            tg.cancel_scope.cancel()


class _BreakWatch(httpx.AsyncByteStream):
    """A response body that reports breaking off mid-way (``lost``), then fails as before.

    The SDK ends an SSE answer that breaks without a word (it logs at debug level), leaving the
    requests it was to answer waiting; this is how the source learns the connection is gone.
    A body that ends cleanly, or is closed by its reader, reports nothing.
    """

    def __init__(self, inner: httpx.SyncByteStream | httpx.AsyncByteStream, lost: Callable[[str], None]):
        assert isinstance(inner, httpx.AsyncByteStream)  # an AsyncClient's responses
        self._inner = inner
        self._lost = lost

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except httpx.TransportError as exc:
            self._lost(f"cut the connection mid-answer ({_describe(exc)})")
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


def _session_ended(code: int, message: str) -> bool:
    """Whether an error says the server does not know the HTTP session: mcp 1.x gives a 404 the
    code ``32600``; mcp 2.x passes on the server's own 404 body (``-32600``, "Session not
    found") or says "Session terminated"."""
    if code == _SESSION_TERMINATED:
        return True
    text = message.lower()
    return code == -_SESSION_TERMINATED and ("session not found" in text or "session terminated" in text)


_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")


def _field(value: object, camel: str) -> Any:
    """A field of an SDK type under either SDK's name: mcp 1.x keeps the wire's camelCase
    (``inputSchema``), mcp 2.x snake_case attributes (``input_schema``)."""
    snake = _SNAKE.sub("_", camel).lower()
    if hasattr(value, snake):
        return getattr(value, snake)
    return getattr(value, camel, None)


async def _list_tools(session: ClientSession) -> list[mt.Tool]:
    tools: list[mt.Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        params = mt.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = _field(page, "nextCursor")
        if cursor is None or cursor in seen:
            return tools
        seen.add(cursor)


def _output(server: str, tool: str, result: mt.CallToolResult) -> ToolOutput:
    parts = [_block_text(block) for block in result.content]
    texts = [part for part in parts if part is not None]
    has_text = any(isinstance(block, mt.TextContent) for block in result.content)
    structured = _field(result, "structuredContent")
    if not has_text and structured is not None:
        texts.insert(0, json.dumps(structured, ensure_ascii=False, separators=(",", ":")))
    text = "\n".join(texts)
    if _field(result, "isError"):
        return Failure(text or f"MCP server {server}: {tool} failed (no details)")
    return Success(text)


def _block_text(block: mt.ContentBlock) -> str | None:
    if isinstance(block, mt.TextContent):
        return block.text
    if isinstance(block, mt.ImageContent | mt.AudioContent):
        return f"[{block.type}: {_field(block, 'mimeType')}, {_b64_size(block.data)} bytes]"
    if isinstance(block, mt.ResourceLink):
        return f"[resource link: {block.name} <{block.uri}>]"
    if isinstance(block, mt.EmbeddedResource):
        res = block.resource
        if isinstance(res, mt.TextResourceContents):
            return res.text
        return f"[resource: {res.uri}, {_field(res, 'mimeType') or 'binary'}, {_b64_size(res.blob)} bytes]"
    return f"[{getattr(block, 'type', 'content')}]"  # pragma: no cover - future block types


def _b64_size(data: str) -> int:
    stripped = data.rstrip("=")
    return len(stripped) * 3 // 4


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _describe(exc.exceptions[0])
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf


def _seconds(server: str, field: str, value: object) -> float:
    if not _positive(value):
        raise MCPServerError(
            f"MCP server {server!r}: {field} must be a positive number of seconds, got {value!r}"
        )
    assert isinstance(value, int | float)
    return float(value)
