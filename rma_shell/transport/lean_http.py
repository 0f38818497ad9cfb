"""A lean HTTP/1.1 client for the providers' hot request paths: ``h11`` framing on anyio streams.

A Local chat-completions call and an AgentCore ``InvokeHarness`` each cost about twice as much
CPU through httpx as on the wire (``bench/local_loop.py``, ``bench/agentcore_tool_loop.py``:
the httpx client layer — URL merging, cookies, auth and redirect flows, event hooks — and
httpcore's pool around one h11 connection). ``LeanPool`` is what those two paths use when the
provider owns its connections: up to ``max_connections`` keep-alive connections ("lanes"),
each carrying one request at a time, handed out in arrival order (a request waits at most its
pool timeout, as httpx's pool timeout bounds it), the most recently used first.

It behaves as httpx does where the providers can tell: the same timeouts per operation (connect,
each write, each read), TLS with the process's shared verification context (SNI, no
close_notify wait, like httpcore), the same default headers (rma's ``User-Agent``, as the
httpx clients rma builds send: ``rma_shell.transport.http.user_agent``), ``Accept-Encoding: gzip,
deflate`` decoded, keep-alive connections dropped after 5 s idle or when the server has closed
them, a connection closed whenever a response is not read to its end; and every failure
raises the httpx exception class httpx would (``ConnectError``, ``ConnectTimeout``,
``ReadTimeout``, ``WriteError``, ``RemoteProtocolError``, ``DecodingError``, ``PoolTimeout`` …),
so the providers' error handling is one code path for both. One thing it knows that httpx
does not: whether any byte of a failed request's answer had arrived (a ``Connection``'s
``response_began``) — a head cut short is ``RemoteProtocolError("Server disconnected in the
middle of the response head.")`` — so a caller can tell the keep-alive race (the server never
read the request) from a server that read it and then lost the connection.

What it is not: no proxies (the providers fall back to httpx when the environment configures
one), no HTTP/2, no redirects, no cookie jar, no auth flows, no client certificates — a caller
who needs any of them passes their own ``httpx.AsyncClient``. See docs/decisions.md.
"""

from __future__ import annotations

import math
import select
import socket
import ssl
import time
import zlib
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, Final

import anyio
import anyio.abc
import attrs
import h11
import httpx
from anyio.streams.tls import TLSStream

from rma_shell.transport.http import user_agent

KEEPALIVE_EXPIRY_S: Final = 5.0
"""httpx's default: an idle connection older than this is closed instead of reused."""

_READ_SIZE: Final = 65536
_JOIN_LIMIT: Final = 65536
_ACCEPT_ENCODING: Final = ("Accept-Encoding", "gzip, deflate")
_KEEP_ALIVE: Final = ("Connection", "keep-alive")


@attrs.frozen
class Timeouts:
    """Seconds per operation, as ``httpx.Timeout``: connecting, each write, each read."""

    connect: float
    read: float
    write: float

    @classmethod
    def of(cls, seconds: float) -> Timeouts:
        return cls(seconds, seconds, seconds)


@attrs.frozen
class Origin:
    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: httpx.URL) -> Origin:
        port = url.port or (443 if url.scheme == "https" else 80)
        return cls(url.scheme, url.host, port)


class Headers(dict[str, str]):
    """A response's headers: lower-cased names, repeated ones comma-joined (as
    ``httpx.Headers.items()`` gives them), looked up case-insensitively."""

    def get(self, key: str, default: Any = None) -> Any:
        return dict.get(self, key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return dict.__getitem__(self, key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and dict.__contains__(self, key.lower())

    @classmethod
    def of(cls, raw: Iterable[tuple[bytes, bytes]]) -> Headers:
        out = cls()
        for name, value in raw:
            key, text = name.decode("latin-1"), value.decode("latin-1")
            prev = dict.get(out, key)
            dict.__setitem__(out, key, text if prev is None else f"{prev}, {text}")
        return out


async def _timed(seconds: float, awaitable: Any) -> Any:
    """``await awaitable`` under a deadline (no cancel scope at all when there is none)."""
    if seconds == math.inf:
        return await awaitable
    with anyio.fail_after(seconds):
        return await awaitable


def _deadline(seconds: float) -> float:
    return math.inf if seconds == math.inf else anyio.current_time() + seconds


def _readable(sock: socket.socket | None) -> bool:
    """Whether an idle connection's socket has something to read: the server closed it (or
    sent what no request asked for), so it must not carry the next request (httpcore's check)."""
    if sock is None or sock.fileno() < 0:
        return True
    if not hasattr(select, "poll"):  # Windows
        return bool(select.select([sock], [], [], 0)[0])
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class Connection:
    """One keep-alive HTTP/1.1 connection (a lane): one request at a time, opened on first use
    and reopened when it went stale or the previous exchange did not end cleanly."""

    def __init__(
        self,
        ssl_context: ssl.SSLContext | None = None,
        socket_options: Sequence[tuple[int, int, int]] = (),
    ) -> None:
        self._ssl = ssl_context
        self._options = tuple(socket_options)
        self._stream: anyio.abc.ByteStream | None = None
        self._socket: socket.socket | None = None
        """The stream's socket, for the stale check (anyio builds its attribute map per look-up)."""
        self._h11 = h11.Connection(h11.CLIENT)
        self.origin: Origin | None = None
        self._idle_since = 0.0
        self.requests = 0
        """Requests sent (for tests: connections are reused, not reopened)."""
        self.connects = 0
        # The headers httpx sends by default, with rma's User-Agent in place of httpx's (as
        # the httpx clients rma builds send it): read once, when the first lane is made.
        self._defaults = (_ACCEPT_ENCODING, _KEEP_ALIVE, ("User-Agent", user_agent()))
        self.response_began = False
        """Whether any byte of the current request's response has arrived — a partial head
        included, which httpx cannot tell from none (httpcore raises the same error for
        both). A request that failed with this False got no answer at all; with it True, the
        server had begun answering, so it had read the request (and may have acted on it)."""

    @property
    def is_open(self) -> bool:
        return self._stream is not None

    async def _connect(self, origin: Origin, timeout: float) -> anyio.abc.ByteStream:
        try:
            stream: anyio.abc.ByteStream = await _timed(timeout, anyio.connect_tcp(origin.host, origin.port))
            if self._options:
                sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
                for level, option, value in self._options:
                    sock.setsockopt(level, option, value)
            if origin.scheme == "https":
                context = self._ssl or ssl.create_default_context()
                try:
                    stream = await _timed(
                        timeout,
                        TLSStream.wrap(
                            stream, ssl_context=context, hostname=origin.host, standard_compatible=False
                        ),
                    )
                except BaseException:
                    await anyio.aclose_forcefully(stream)
                    raise
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "timed out connecting") from exc
        except (OSError, ssl.SSLError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        self.connects += 1
        return stream

    async def _ready(self, origin: Origin, timeout: float) -> anyio.abc.ByteStream:
        stream = self._stream
        if stream is not None and (
            origin != self.origin
            or time.monotonic() - self._idle_since > KEEPALIVE_EXPIRY_S
            or _readable(self._socket)
        ):
            await self.aclose()
            stream = None
        if stream is None:
            stream = self._stream = await self._connect(origin, timeout)
            self._socket = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
            self._h11 = h11.Connection(h11.CLIENT)
            self.origin = origin
        return stream

    async def request(
        self,
        method: str,
        url: httpx.URL,
        headers: Mapping[str, str],
        body: bytes,
        timeouts: Timeouts,
    ) -> Response:
        """Send one request and read the response head; the body is the caller's to read
        (``Response.aread``/``aiter_bytes``) or to drop (``Response.aclose``)."""
        origin = Origin.of(url)
        stream = await self._ready(origin, timeouts.connect)
        conn = self._h11
        authority = url.netloc.decode("ascii")
        target = url.raw_path
        head: list[tuple[str, str]] = [("Host", authority), *self._defaults]
        head += headers.items()
        head.append(("Content-Length", str(len(body))))
        self.response_began = False
        try:
            try:
                data = conn.send(h11.Request(method=method, target=target, headers=head))
            except h11.LocalProtocolError as exc:
                raise httpx.LocalProtocolError(str(exc)) from exc
            assert data is not None
            # Content-Length framing: the body goes out as it is.
            conn.send_with_data_passthrough(h11.Data(data=body))
            conn.send(h11.EndOfMessage())
            self.requests += 1
            # One cancel scope for the exchange, its deadline moved per operation (the write,
            # then each read), as httpx times each operation (a scope per operation costs
            # ~11 µs on trio, moving a deadline ~2.5 µs).
            writing = True
            with anyio.CancelScope() as deadline:
                deadline.deadline = _deadline(timeouts.write)
                try:
                    if len(body) <= _JOIN_LIMIT:  # one write (one segment, one syscall)
                        await stream.send(data + body)
                    else:  # a big body is not copied to be joined (httpcore writes them apart)
                        await stream.send(data)
                        await stream.send(body)
                except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                    raise httpx.WriteError(str(exc) or type(exc).__name__) from exc
                writing = False
                while True:
                    event = await self._next_event(stream, timeouts.read, deadline)
                    if isinstance(event, h11.Response):
                        return Response(self, event.status_code, Headers.of(event.headers), timeouts.read)
                    if isinstance(event, h11.ConnectionClosed):
                        raise httpx.RemoteProtocolError(_disconnected(self.response_began))
                    # an InformationalResponse (1xx): the real one follows
            if writing:
                raise httpx.WriteTimeout("timed out writing the request")
            raise httpx.ReadTimeout("timed out reading the response")
        except BaseException:
            await self.aclose()
            raise

    async def _next_event(
        self, stream: anyio.abc.ByteStream, timeout: float, scope: anyio.CancelScope | None = None
    ) -> Any:
        """The next h11 event, reading as needed, each read within ``timeout`` (under its own
        scope, or by moving the deadline of ``scope``, whose owner reports the timeout)."""
        conn = self._h11
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from exc
            if event is not h11.NEED_DATA:
                return event
            try:
                if scope is None:
                    data = await _timed(timeout, stream.receive(_READ_SIZE))
                else:
                    scope.deadline = _deadline(timeout)
                    data = await stream.receive(_READ_SIZE)
            except anyio.EndOfStream:
                data = b""
            except TimeoutError as exc:
                raise httpx.ReadTimeout("timed out reading the response") from exc
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
            if data:
                self.response_began = True
            elif conn.their_state is h11.SEND_RESPONSE:
                raise httpx.RemoteProtocolError(_disconnected(self.response_began))
            conn.receive_data(data)

    async def _finished(self) -> None:
        """The response ended: keep the connection for the next request when h11 allows."""
        conn = self._h11
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            self._idle_since = time.monotonic()
        else:  # the server closes after this one (Connection: close, HTTP/1.0)
            await self.aclose()

    async def aclose(self) -> None:
        stream, self._stream, self._socket = self._stream, None, None
        if stream is not None:
            await anyio.aclose_forcefully(stream)


def _disconnected(began: bool) -> str:
    """What a connection closed before a whole response head says: httpx's words when nothing
    had arrived, else that the head was cut (which httpx would report in the same words)."""
    if began:
        return "Server disconnected in the middle of the response head."
    return "Server disconnected without sending a response."


class Response:
    """A response whose head has arrived; read its body, or close it, before the next request.
    From a ``LeanPool``, ``aclose`` also hands its lane back: always close it."""

    def __init__(
        self, connection: Connection, status_code: int, headers: Headers, read_timeout: float
    ) -> None:
        self._connection = connection
        self.status_code = status_code
        self.headers = headers
        self._timeout = read_timeout
        self._done = False
        self._decoder = _decoder(headers.get("content-encoding"))
        self._pool: LeanPool | None = None
        self._next: Any = None
        """What ended the last run of body pieces (``_with_parsed``), not handled yet."""

    async def receive(self, timeout: float | None = None) -> bytes:
        """The next piece of the body (decoded: all that has arrived), ``b""`` once it ended.
        ``timeout`` bounds this read instead of the read timeout (an idle timeout, say)."""
        if self._done:
            return b""
        connection = self._connection
        stream = connection._stream
        if stream is None:
            raise httpx.ReadError("the connection is closed")
        try:
            while True:
                event, self._next = self._next, None
                if event is None:
                    wait = self._timeout if timeout is None else timeout
                    event = await connection._next_event(stream, wait)
                elif isinstance(event, h11.RemoteProtocolError):
                    raise httpx.RemoteProtocolError(str(event)) from event
                if isinstance(event, h11.Data):
                    data = self._with_parsed(event.data)
                    if self._decoder is not None:
                        data = self._decode(data)
                        if not data:
                            continue
                    return data
                if isinstance(event, h11.EndOfMessage):
                    self._done = True
                    await connection._finished()
                    return self._flush()
                if isinstance(event, h11.ConnectionClosed):
                    self._done = True
                    await connection._finished()
                    return b""
        except BaseException:
            self._done = True
            await connection.aclose()
            raise

    def _with_parsed(self, first: bytes) -> bytes:
        """``first`` and the body pieces h11 has already parsed after it, as one: a read often
        carries several chunks (an AgentCore turn's frames come as one chunk each, mostly in
        one or two reads), and each piece taken alone cost a pass through this method, the
        caller's deadline and decoder (issue #17). The event that ends the run waits in
        ``_next``, and so does a protocol error: raised by the next read, after the pieces
        that came before it."""
        conn = self._connection._h11
        parts: list[bytes] | None = None
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                self._next = exc
                break
            if type(event) is h11.Data:
                if parts is None:
                    parts = [first]
                parts.append(event.data)
                continue
            if event is not h11.NEED_DATA:
                self._next = event
            break
        return bytes(first) if parts is None else b"".join(parts)

    def _decode(self, data: bytes) -> bytes:
        assert self._decoder is not None
        try:
            return bytes(self._decoder.decompress(data))
        except zlib.error as exc:
            raise httpx.DecodingError(
                f"undecodable {self.headers.get('content-encoding')} body: {exc}"
            ) from exc

    def _flush(self) -> bytes:
        if self._decoder is None:
            return b""
        try:
            return bytes(self._decoder.flush())
        except zlib.error as exc:
            raise httpx.DecodingError(
                f"undecodable {self.headers.get('content-encoding')} body: {exc}"
            ) from exc

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        while data := await self.receive():
            yield data

    async def aread(self) -> bytes:
        parts = []
        while data := await self.receive():
            parts.append(data)
        return b"".join(parts)

    async def aclose(self) -> None:
        """Done with it: a body not read to its end closes the connection (as httpcore does),
        and the lane goes back to its pool."""
        pool, self._pool = self._pool, None
        try:
            if not self._done:
                self._done = True
                await self._connection.aclose()
        finally:
            if pool is not None:
                pool.release(self._connection)


def _decoder(encoding: str | None) -> Any:
    """A zlib decoder for the encodings asked for (``gzip``, ``deflate``); None for identity
    and for encodings not asked for, which pass through as httpx passes unknown ones."""
    if not encoding:
        return None
    encoding = encoding.strip().lower()
    if encoding == "gzip":
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if encoding == "deflate":
        return _Deflate()
    return None


class _Deflate:
    """``deflate`` as httpx reads it: zlib-wrapped, or raw deflate from servers that send that."""

    def __init__(self) -> None:
        self._first = True
        self._obj = zlib.decompressobj()

    def decompress(self, data: bytes) -> bytes:
        if self._first:
            self._first = False
            try:
                return self._obj.decompress(data)
            except zlib.error:
                self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
        return self._obj.decompress(data)

    def flush(self) -> bytes:
        return self._obj.flush()


class PoolTimeout(httpx.PoolTimeout):
    """No lane came free within the pool timeout."""


@attrs.define
class _Waiter:
    event: anyio.Event
    lane: Connection | None = None


class LeanPool:
    """Up to ``max_connections`` lanes, handed out first come, first served."""

    def __init__(
        self,
        max_connections: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        socket_options: Sequence[tuple[int, int, int]] = (),
    ) -> None:
        self.max_connections = max_connections
        self._ssl = ssl_context
        self._options = tuple(socket_options)
        self.lanes: list[Connection] = []
        self._free: list[Connection] = []
        """Idle lanes, the most recently used last (its connection is the warmest)."""
        self._waiters: deque[_Waiter] = deque()
        self.is_closed = False

    async def acquire(self, timeout: float) -> Connection:
        """A lane to itself until ``release``; raises ``PoolTimeout`` after ``timeout``."""
        if self._free:
            return self._free.pop()
        if len(self.lanes) < self.max_connections:
            lane = Connection(self._ssl, self._options)
            self.lanes.append(lane)
            return lane
        waiter = _Waiter(anyio.Event())
        self._waiters.append(waiter)
        try:
            with anyio.move_on_after(timeout):
                await waiter.event.wait()
        except BaseException:
            self._give_back(waiter)
            raise
        if waiter.lane is None:
            self._give_back(waiter)
            raise PoolTimeout(
                f"no free connection within {timeout:g} s (max_connections={self.max_connections})"
            )
        return waiter.lane

    def _give_back(self, waiter: _Waiter) -> None:
        """A waiter that leaves: out of the queue, and a lane it was handed goes on."""
        if waiter in self._waiters:
            self._waiters.remove(waiter)
        lane, waiter.lane = waiter.lane, None
        if lane is not None:
            self.release(lane)

    def release(self, lane: Connection) -> None:
        """Hand the lane to the longest waiter, or keep it idle."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.event.is_set():
                waiter.lane = lane
                waiter.event.set()
                return
        self._free.append(lane)

    async def request(
        self, method: str, url: httpx.URL, headers: Mapping[str, str], body: bytes, timeouts: Timeouts
    ) -> Response:
        """``acquire`` a lane (waiting at most the read timeout: httpx's pool timeout is the
        read timeout here) and send; ``Response.aclose`` gives the lane back."""
        lane = await self.acquire(timeouts.read)
        try:
            response = await lane.request(method, url, headers, body, timeouts)
        except BaseException:
            self.release(lane)
            raise
        response._pool = self
        return response

    async def aclose(self) -> None:
        self.is_closed = True
        lanes, self.lanes, self._free = self.lanes, [], []
        for lane in lanes:
            await lane.aclose()
