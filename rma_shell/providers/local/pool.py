"""The Local provider's own connections: single-connection lanes handed out by a fair queue.

``Local`` shares one pool per provider between its sessions. httpcore's pool keeps its waiting
requests and its connections in lists and, whenever a request starts or ends, re-scans them —
the waiting requests against the connections, and every idle connection against all the
others — so its cost per request grows with queued requests × connections: with 700–1,000
concurrent sessions on one provider and a server slower than the client, the event loop spent
its time in that bookkeeping and no session finished within 40 s. ``LocalPool`` keeps httpcore
out of the queueing: up to ``max_connections`` httpx clients of **one** keep-alive connection
each ("lanes", opened as needed), handed out by a FIFO ``anyio.CapacityLimiter`` with that
many tokens. A request holds its lane for its whole life (a streamed body included), so each
httpcore pool sees one request at a time and its bookkeeping is O(1); the rest wait in arrival
order, a wait bounded by the request timeout exactly as httpx's pool timeout bounds it. The
most recently used lane is handed out first (its connection is the warmest).

What it is not: it does not wrap a caller's ``http_client`` (that client's limits are the
caller's), and it makes no retry decision — a request that found no free lane in time is a
``TransportError`` of kind ``timeout``, which the provider's retry policy treats like httpx's
``PoolTimeout``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import anyio
import attrs
import httpx
from returns.result import Failure, Result, Success

from rma.errors import InvalidOpts
from rma_shell.transport.http import async_client

DEFAULT_MAX_CONNECTIONS: Final = 100
"""httpx's own default: requests in flight per provider (and idle connections kept)."""


class SlotTimeout(Exception):
    """No connection slot came free within the request timeout."""


def check_max_connections(value: object, *, http_client: object, chat: object) -> Result[int, InvalidOpts]:
    """``None`` is the default; an explicit value must be an integer >= 1 and only sizes the
    provider's own client (with ``http_client=`` or ``chat=`` there is no such client)."""
    if value is None:
        return Success(DEFAULT_MAX_CONNECTIONS)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        detail = f"must be an integer >= 1, got {value!r}"
        return Failure(InvalidOpts(option="max_connections", detail=detail))
    if http_client is not None:
        return Failure(
            InvalidOpts(
                option="max_connections",
                detail="sizes the provider's own HTTP client; with http_client= set your client's limits",
            )
        )
    if chat is not None:
        return Failure(InvalidOpts(option="max_connections", detail="chat= replaces HTTP: there is no pool"))
    return Success(value)


@attrs.define
class LocalPool:
    """One provider's connections as single-connection lanes behind a fair queue (built
    inside an event loop). ``client`` is the first lane: what the provider's conns carry."""

    client: httpx.AsyncClient
    limiter: anyio.CapacityLimiter
    max_connections: int
    timeout_s: float
    lanes: list[httpx.AsyncClient] = attrs.Factory(list)
    free: list[httpx.AsyncClient] = attrs.Factory(list)
    """Idle lanes, the most recently used last (its connection is the warmest)."""

    @classmethod
    def build(cls, max_connections: int, timeout_s: float) -> LocalPool:
        first = _lane(timeout_s)
        return cls(
            first, anyio.CapacityLimiter(max_connections), max_connections, timeout_s, [first], [first]
        )

    @asynccontextmanager
    async def lane(self, timeout_s: float) -> AsyncIterator[httpx.AsyncClient]:
        """A lane to itself for a whole request (its body read or streamed included): at
        most ``max_connections`` at once, handed out in arrival order; raises
        ``SlotTimeout`` when none frees up within ``timeout_s``."""
        borrower = object()  # one token per request, whichever task sends it
        acquired = False
        with anyio.move_on_after(timeout_s):
            await self.limiter.acquire_on_behalf_of(borrower)
            acquired = True
        if not acquired:
            raise SlotTimeout(
                f"no free connection within {timeout_s:g} s (max_connections={self.max_connections})"
            )
        try:
            if self.free:
                client = self.free.pop()
            else:  # fewer lanes than tokens: the limiter caps them at max_connections
                client = _lane(self.timeout_s)
                self.lanes.append(client)
            try:
                yield client
            finally:
                self.free.append(client)
        finally:
            self.limiter.release_on_behalf_of(borrower)

    async def aclose(self) -> None:
        """Close every lane, even when one fails to close (the first failure is raised)."""
        lanes, self.lanes, self.free = self.lanes, [], []
        failed: BaseException | None = None
        for client in lanes:
            try:
                await client.aclose()
            except (httpx.HTTPError, OSError) as exc:
                failed = failed or exc
        if failed is not None:
            raise failed


def _lane(timeout_s: float) -> httpx.AsyncClient:
    """One keep-alive connection: httpcore's pool bookkeeping is then O(1) per request."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    return async_client(timeout=httpx.Timeout(timeout_s), limits=limits)
