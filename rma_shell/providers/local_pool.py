"""The Local provider's own connection pool: one httpx client plus a fair queue in front of it.

``Local`` builds one ``httpx.AsyncClient`` per provider, shared by its sessions. httpcore's
pool keeps every waiting request in one list and, whenever a connection frees up, walks the
waiting requests against the connections — work that grows with queued requests ×
connections, so with 700–1,000 concurrent sessions on one provider the event loop spent its
time in that bookkeeping and no session finished within 40 s. ``LocalPool`` puts a FIFO
``anyio.CapacityLimiter`` sized to the pool's ``max_connections`` in front of the client: at
most that many requests ever reach httpcore (each finds a connection at once), the rest wait
their turn in arrival order, and a wait is bounded by the request timeout exactly as httpx's
pool timeout bounds it. Idle connections kept alive = ``max_connections``, so a burst does not
close and reopen most of its connections.

What it is not: it does not wrap a caller's ``http_client`` (that client's limits are the
caller's), and it makes no retry decision — a request that found no free slot in time is a
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
from rma_shell.http import async_client

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
    """One provider's client and the fair queue in front of it (built inside an event loop)."""

    client: httpx.AsyncClient
    limiter: anyio.CapacityLimiter
    max_connections: int

    @classmethod
    def build(cls, max_connections: int, timeout_s: float) -> LocalPool:
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        client = async_client(timeout=httpx.Timeout(timeout_s), limits=limits)
        return cls(client, anyio.CapacityLimiter(max_connections), max_connections)

    @asynccontextmanager
    async def slot(self, timeout_s: float) -> AsyncIterator[None]:
        """Hold one of the pool's slots for a whole request (its body read or streamed)
        included; raises ``SlotTimeout`` when none frees up within ``timeout_s``."""
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
            yield
        finally:
            self.limiter.release_on_behalf_of(borrower)
