"""The raw-socket floor of the request benchmarks: one keep-alive connection, ``h11`` framing.

What a request costs on the wire with nothing between the caller and the socket: no pool, no
client object, no timeouts, no redirects, no proxies — one ``anyio`` TCP stream (so it runs on
trio and asyncio alike) and one ``h11.Connection`` cycled per request. ``bench/local_loop.py``
and ``bench/agentcore_tool_loop.py`` run their conversations over it beside the httpx floor,
so the tables show how far each client is from the wire. It is a measuring stick, not a
client: a closed connection is reopened, anything else unexpected raises.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from urllib.parse import urlsplit

import anyio
import anyio.abc
import h11

_READ = 65536


class H11Floor:
    """One HTTP/1.1 connection to ``base_url``'s host, reused for every request."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.authority = parts.netloc
        self.stream: anyio.abc.ByteStream | None = None
        self.conn = h11.Connection(h11.CLIENT)

    async def _connect(self) -> anyio.abc.ByteStream:
        if self.stream is None:
            self.stream = await anyio.connect_tcp(self.host, self.port)
            self.conn = h11.Connection(h11.CLIENT)
        return self.stream

    async def request(
        self, method: str, target: str, headers: Sequence[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], AsyncIterator[bytes]]:
        """Send one request; the status, the headers and the body as it arrives (read it to
        the end before the next request)."""
        stream = await self._connect()
        conn = self.conn
        head = [("Host", self.authority), *headers, ("Content-Length", str(len(body)))]
        await stream.send(
            conn.send(h11.Request(method=method, target=target, headers=head))  # type: ignore[arg-type]
            + conn.send(h11.Data(data=body))
            + conn.send(h11.EndOfMessage())
        )
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive(_READ))
                continue
            if isinstance(event, h11.Response):
                return event.status_code, list(event.headers), self._body(stream, conn)
            raise RuntimeError(f"unexpected h11 event {event!r}")

    async def _body(self, stream: anyio.abc.ByteStream, conn: h11.Connection) -> AsyncIterator[bytes]:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive(_READ))
            elif isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                raise RuntimeError(f"unexpected h11 event {event!r}")
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
        else:  # the server closes: the next request reconnects
            await stream.aclose()
            self.stream = None

    async def read(self, body: AsyncIterator[bytes]) -> bytes:
        return b"".join([chunk async for chunk in body])

    async def aclose(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()
            self.stream = None
