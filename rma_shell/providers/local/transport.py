"""The Local provider's request path: one chat-completions POST over httpx or the lean lanes.

``RequestPath`` is the part of ``Local`` that sends a body and reads the answer: the provider's
own httpx lanes (queued fairly, ``LocalPool``) or lean h11 lanes, or a caller's client; a whole
JSON reply or an SSE stream fed live chunk by chunk (``rma.providers.local.stream``), read to
its end after ``data: [DONE]``; a failure named by its origin (host, code, ``x-request-id``).
``LocalConn`` is the session value it reads (URL, key, client). Not the retries, the
conversation or the context window: those are ``rma_shell.providers.local.provider``'s and
``rma_shell.providers.local.window``'s.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping

import anyio
import attrs
import httpx
from returns.result import Failure, Result, Success

from rma.errors import (
    AuthenticationError,
    HttpError,
    MalformedResponse,
    SessionError,
    StreamDropped,
    TransportError,
    error_text,
)
from rma.live import attempt_discarded_event
from rma.origin import error_code, request_id, with_origin
from rma.providers.local.codec import Conversation
from rma.providers.local.stream import StreamedReply
from rma.redact import redact_error, redact_text
from rma.vocabulary import JSON
from rma.wire.sse import SSEDecoder
from rma_shell.providers.base import LiveSink
from rma_shell.providers.local.pool import LocalPool, SlotTimeout
from rma_shell.transport.http import host_of
from rma_shell.transport.lean_http import LeanPool, Timeouts
from rma_shell.transport.lean_http import PoolTimeout as LanePoolTimeout
from rma_shell.transport.lean_http import Response as LeanResponse

DEFAULT_BASE_URL = "http://localhost:11434/v1"
"""Ollama's OpenAI-compatible endpoint: the common "local model" default."""

_BODY_PREVIEW = 2000
_CHUNK_PREVIEW = 120
_DRAIN_S = 1.0
"""How long the rest of a stream may take to end after ``data: [DONE]``."""


@attrs.frozen
class LocalConn:
    """A Local session: its id and conversation, plus the HTTP client it talks through."""

    session_id: str
    conversation: Conversation
    client: httpx.AsyncClient | LeanPool | None = attrs.field(default=None, eq=False, repr=False)
    """The caller's client, the provider's own httpx lanes, or its own lean lanes."""
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = attrs.field(default=None, repr=False)
    """Per session: ``run(model_config=...)`` may carry a gateway lane's URL and granted key."""
    tokenize_url: str | None = None
    """Where the server counts a request's tokens (vLLM's ``/tokenize``), when it said so."""
    target: httpx.URL | str = attrs.field(default="", eq=False, repr=False)
    """``url`` parsed once (httpx parses a string URL twice per request); ``url`` itself when
    it does not parse, so the request fails as it would have."""

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def redact(self, text: str) -> str:
        return redact_text(text, (self.api_key,))

    def redact_error(self, error: SessionError) -> SessionError:
        """The error with the key masked wherever a server may have echoed it (bodies included)."""
        return redact_error(error, (self.api_key,))


@attrs.define
class LiveAttempt:
    """Where one poll's streamed chunks go, and how many events its current attempt sent."""

    live: LiveSink
    poll: int
    sent: int = 0
    attempt: int = 0


def target_of(url: str) -> httpx.URL | str:
    try:
        return httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return url


class RequestPath:
    """One POST of a chat-completions body and the reading of its answer (mixed into ``Local``)."""

    timeout: float
    _timeouts: Timeouts
    _pool: LocalPool | None

    def _headers(self, conn: LocalConn, *, stream: bool) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
        }
        if conn.api_key:
            headers["Authorization"] = f"Bearer {conn.api_key}"
        return headers

    async def _post(
        self, conn: LocalConn, body: bytes, *, stream: bool, sink: LiveAttempt | None = None
    ) -> tuple[Result[JSON, SessionError], Mapping[str, str] | None]:
        """One POST; a failure names the host (and port), the code and the ``x-request-id``."""
        result, headers = await self._post_once(conn, body, stream=stream, sink=sink)
        if isinstance(result, Failure):
            error = result.failure()
            code = error_code(error.body) if isinstance(error, HttpError) else None
            stamped = with_origin(error, url=conn.url, request_id=request_id(headers), code=code)
            return Failure(stamped), headers
        return result, headers

    async def _post_once(
        self, conn: LocalConn, body: bytes, *, stream: bool, sink: LiveAttempt | None
    ) -> tuple[Result[JSON, SessionError], Mapping[str, str] | None]:
        client = conn.client
        if client is None:
            return Failure(
                TransportError(detail="the Local conn has no HTTP client", error_type="no_client")
            ), None
        pool = self._pool if self._pool is not None and client is self._pool.client else None
        if pool is not None:  # the provider's httpx lanes: queue fairly for one of its connections
            try:
                async with pool.lane(self.timeout) as lane:
                    return await self._send(conn, lane, body, stream=stream, sink=sink)
            except SlotTimeout as exc:
                return Failure(TransportError(detail=str(exc), error_type="timeout")), None
        return await self._send(conn, client, body, stream=stream, sink=sink)

    async def _send(
        self,
        conn: LocalConn,
        client: httpx.AsyncClient | LeanPool,
        body: bytes,
        *,
        stream: bool,
        sink: LiveAttempt | None,
    ) -> tuple[Result[JSON, SessionError], Mapping[str, str] | None]:
        """One POST over httpx or the provider's lean lanes (which raise httpx's exception
        classes, so a failure is reported the same either way)."""
        headers = self._headers(conn, stream=stream)
        try:
            if isinstance(client, LeanPool):
                url = conn.target if isinstance(conn.target, httpx.URL) else httpx.URL(conn.url)
                try:
                    lean = await client.request("POST", url, headers, body, self._timeouts)
                except LanePoolTimeout as exc:
                    return Failure(TransportError(detail=str(exc), error_type="timeout")), None
                try:
                    if stream:
                        return await self._read_stream(conn, lean, sink)
                    return self._decode(conn, lean.status_code, await lean.aread()), lean.headers
                finally:
                    await lean.aclose()
            target, timeout = conn.target or conn.url, self.timeout
            if stream:
                async with client.stream(
                    "POST", target, content=body, headers=headers, timeout=timeout
                ) as response:
                    return await self._read_stream(conn, response, sink)
            response = await client.post(target, content=body, headers=headers, timeout=timeout)
            return self._decode(conn, response.status_code, response.content), response.headers
        except httpx.DecodingError as exc:
            return Failure(MalformedResponse(detail=f"undecodable response body: {exc}")), None
        except httpx.HTTPError as exc:
            return Failure(
                TransportError(detail=conn.redact(f"{type(exc).__name__}: {exc}"), error_type=_kind(exc))
            ), None

    async def _read_stream(
        self, conn: LocalConn, response: httpx.Response | LeanResponse, sink: LiveAttempt | None
    ) -> tuple[Result[JSON, SessionError], Mapping[str, str] | None]:
        """An SSE reply read chunk by chunk, each decoded chunk fed live as it arrives."""
        content_type = response.headers.get("content-type", "")
        if not 200 <= response.status_code < 300 or "text/event-stream" not in content_type:
            # An error, or a server that ignored "stream": decode it as a plain body.
            return self._decode(conn, response.status_code, await response.aread()), response.headers
        decoder = SSEDecoder()
        reply = StreamedReply(sink.poll if sink is not None else 0)
        chunks = response.aiter_bytes()
        try:
            async for data in chunks:
                for message in decoder.feed(data):
                    if message.data == "[DONE]":
                        await _drain(chunks)
                        return reply.finish(), response.headers
                    try:
                        chunk = json.loads(message.data)
                    except ValueError:
                        # A corrupt chunk could have been any part of the reply: the attempt
                        # fails like a drop, so the request is re-sent (bounded by
                        # max_retries) and nothing of this stream's partial reply is kept.
                        detail = f"a stream chunk is not JSON: {message.data[:_CHUNK_PREVIEW]!r}"
                        return Failure(StreamDropped(detail=detail)), response.headers
                    fed = reply.feed(chunk)
                    if isinstance(fed, Failure):
                        return Failure(fed.failure()), response.headers
                    if sink is not None:
                        for event in fed.unwrap():
                            sink.sent += 1
                            await sink.live(event)
        except httpx.DecodingError:
            raise  # an undecodable body: MalformedResponse in _send
        except httpx.HTTPError as exc:  # the stream broke after the response began
            broke = TransportError(detail=conn.redact(f"{type(exc).__name__}: {exc}"), error_type=_kind(exc))
            return Failure(broke), response.headers
        finally:
            # Closed here, not whenever the event loop gets to finalise it.
            await _aclose(chunks)
        decoder.close()
        if reply.finish_reason is not None:
            # The server closed cleanly after the last choice without "data: [DONE]"
            # (some do); the reply is complete.
            return reply.finish(), response.headers
        return Failure(
            StreamDropped(detail="stream closed before data: [DONE]", clean_close=True)
        ), response.headers

    def _decode(self, conn: LocalConn, status: int, content: bytes) -> Result[JSON, SessionError]:
        try:
            decoded: JSON = json.loads(content) if content else None
            is_json = True
        except ValueError:
            decoded, is_json = content[:_BODY_PREVIEW].decode("utf-8", errors="replace"), False
        if 200 <= status < 300:
            if not is_json:
                return Failure(MalformedResponse(detail="response body is not JSON", response=decoded))
            return Success(decoded)
        if status == 401:
            message = conn.redact(error_text(decoded))
            error = decoded.get("error") if isinstance(decoded, Mapping) else None
            code = (error.get("code") or error.get("type")) if isinstance(error, Mapping) else None
            return Failure(
                AuthenticationError(
                    detail=f"HTTP 401: {message}",
                    status=401,
                    error_code=code if isinstance(code, str) else None,
                    error_message=message,
                    host=host_of(conn.target),
                )
            )
        return Failure(HttpError(status=status, body=decoded, method="POST", url=conn.redact(conn.url)))


async def discarded(sink: LiveAttempt | None, error: SessionError) -> None:
    """Tell the session the attempt's streamed events are void (only if it streamed any)."""
    if sink is not None and sink.sent:
        sink.sent = 0
        await sink.live(attempt_discarded_event(sink.attempt, error.kind))


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read a stream that sent ``data: [DONE]`` to its end (servers end the body right after).

    The response then completes: httpx's stream iterators finish here instead of being
    finalised later by the event loop, and the connection goes back to the pool rather than
    being closed half-read. Bounded by ``_DRAIN_S``; whatever follows [DONE] is ignored, and a
    failure to read it does not matter — the reply is whole.
    """
    with anyio.move_on_after(_DRAIN_S), contextlib.suppress(httpx.HTTPError):
        async for _ in chunks:
            pass


async def _aclose(chunks: AsyncIterator[bytes]) -> None:
    """Close an async byte iterator now (a no-op once it is exhausted)."""
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()


def _kind(exc: httpx.HTTPError) -> str:
    """The rma.retry transport kind of an httpx failure."""
    if isinstance(exc, httpx.ConnectTimeout):
        return "connect_timeout"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        return "econnrefused"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "closed"
    if isinstance(exc, (httpx.ReadError, httpx.WriteError, httpx.CloseError)):
        return "econnreset"
    return "protocol"
