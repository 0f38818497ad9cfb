"""Live-update fan-out for a session: ``handle_update``'s siblings, the ``updates()`` iterators.

``UpdateHub`` belongs to one session driver. It keeps one unbounded memory stream per open
``UpdateStream`` (what ``LiveSession.updates()`` returns), publishes each ``DeliverUpdate``
the core emits to all of them, and tells the core — through the session's mailbox, as an
``UpdatesWanted`` event — when the first iterator opens and the last one closes, so updates
are computed only while someone reads them. No loop decisions here.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from rma.live import LiveUpdate
from rma.session.events import Event, UpdatesWanted


class UpdateHub:
    """The open update iterators of one session; ``post`` feeds the session's mailbox."""

    def __init__(self, post: Callable[[Event], None]) -> None:
        self._post = post
        self._streams: dict[int, MemoryObjectSendStream[LiveUpdate]] = {}
        self._closed = False

    @property
    def wanted(self) -> bool:
        """Whether an iterator is open (the core was told, or is about to be, to compute updates)."""
        return bool(self._streams)

    def publish(self, update: LiveUpdate) -> None:
        for stream in self._streams.values():
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                stream.send_nowait(update)

    def subscribe(self, *, ended: bool = False) -> MemoryObjectReceiveStream[LiveUpdate]:
        """A stream of the updates from now on (one that ends at once when the session is over)."""
        send, receive = anyio.create_memory_object_stream[LiveUpdate](math.inf)
        if ended or self._closed:
            send.close()
            return receive
        self._streams[id(receive)] = send
        if len(self._streams) == 1:
            self._post(UpdatesWanted(True))
        return receive

    def unsubscribe(self, receive: MemoryObjectReceiveStream[LiveUpdate]) -> None:
        send = self._streams.pop(id(receive), None)
        if send is not None:
            send.close()
        receive.close()
        if send is not None and not self._streams:
            self._post(UpdatesWanted(False))

    def close(self) -> None:
        """The session is over: every iterator ends once it has read what it was sent."""
        self._closed = True
        for stream in self._streams.values():
            stream.close()
        self._streams = {}


class UpdateStream:
    """An async iterator of a live session's updates (``LiveSession.updates()``); updates not
    read yet are kept for it (without bound) until it is read or closed."""

    def __init__(self, hub: UpdateHub, *, ended: bool = False) -> None:
        self._hub = hub
        self._receive = hub.subscribe(ended=ended)

    def __aiter__(self) -> UpdateStream:
        return self

    async def __anext__(self) -> LiveUpdate:
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Stop receiving updates (the iterator then ends)."""
        self._hub.unsubscribe(self._receive)
        await anyio.lowlevel.checkpoint()

    async def __aenter__(self) -> UpdateStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
