"""A streaming host's turn as one activity: subscribe, push, read to the turn boundary.

Claude Managed Agents' loop talks over a long-lived event stream plus posted inputs. A
Temporal activity returns once, so the stream is read a turn at a time: ``exchange``
subscribes, posts the turn's input once the stream is connected (so nothing the host answers
can fall before the subscription), and reads until the codec's ``turn_boundary`` — the
``session.status_idle`` that ends the turn — or until the stream ends. Between turns no stream
is open: an idle session emits nothing until it is given input.

Retried on another worker after a crash (``attempt > 1``; a local activity, which cannot tell,
every time), it first consolidates with the host's listed history (``Provider.reconnect``)
from the last boundary the workflow processed:
what the host did meanwhile is replayed, and the input is posted again only when the history
shows it never arrived (``landed``). ``resync`` is the machine's own reconnect (after a real
drop): subscribe, consolidate against every id the machine saw, and — if the remote turn is
still running — read on to its boundary.

This module moves events; it decides nothing the session machine decides.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import attrs
from returns.result import Failure, Result, Success

from rma.errors import ProviderError, SessionError, StreamDropped
from rma.provider import ProviderCodec
from rma.session.events import Reconnected
from rma.vocabulary import JSON
from rma_shell.providers.base import Provider

CONNECT_TIMEOUT_S = 30.0

_END = object()


@attrs.frozen
class Read:
    """What one stream read brought back: events in order, and how the stream ended.

    ``end`` is None when the read stopped at a turn boundary (the stream was then closed by
    us), ``Success(None)`` for a clean close by the server, ``Failure(error)`` for a drop.
    """

    events: tuple[JSON, ...]
    end: Result[None, SessionError] | None


def _id(event: JSON) -> str | None:
    value = event.get("id") if isinstance(event, dict) else None
    return value if isinstance(value, str) else None


def landed(replay: Sequence[JSON]) -> bool:
    """Whether the host recorded an input after the last processed boundary: on Claude Managed
    Agents every posted event is echoed into the session's history as a ``user.*`` event."""
    return any(isinstance(e, dict) and str(e.get("type", "")).startswith("user.") for e in replay)


class _Subscription:
    """The provider's ``stream`` running in a task, its events queued for the reader."""

    def __init__(self, provider: Provider[Any], conn: Any) -> None:
        self.provider, self.conn = provider, conn
        self.connected = anyio.Event()
        self.send, self.receive = anyio.create_memory_object_stream[Any](math.inf)
        self.ended: Result[None, SessionError] | None = None

    async def run(self) -> None:
        async def on_connected() -> None:
            self.connected.set()

        async def on_event(raw: JSON) -> None:
            self.send.send_nowait(raw)

        try:
            ended = await self.provider.stream(self.conn, on_connected, on_event)
        except Exception as exc:  # a crashed transport is a failed stream (S-86)
            ended = Failure(ProviderError(detail=str(exc)[:2000], error_type=type(exc).__name__))
        self.ended = ended
        self.connected.set()
        self.send.send_nowait((_END, ended))

    def unusable(self) -> SessionError | None:
        """Why the subscription cannot carry a turn (it ended, or never connected), or None."""
        if self.ended is not None:
            return self.ended.failure() if isinstance(self.ended, Failure) else lost("stream closed at once")
        if not self.connected.is_set():
            return lost(f"the stream did not connect within {CONNECT_TIMEOUT_S:g} s")
        return None

    async def read_to_boundary(
        self, codec: ProviderCodec, skip: set[str], beat: Callable[[], None], first: Sequence[JSON] = ()
    ) -> Read:
        events: list[JSON] = []
        for raw in first:
            events.append(raw)
            if codec.turn_boundary(raw):
                return Read(tuple(events), None)
        while True:
            item = await self.receive.receive()
            if isinstance(item, tuple) and len(item) == 2 and item[0] is _END:
                return Read(tuple(events), item[1])
            beat()
            eid = _id(item)
            if eid is not None:
                if eid in skip:
                    continue
                skip.add(eid)
            events.append(item)
            if codec.turn_boundary(item):
                return Read(tuple(events), None)


async def exchange(
    provider: Provider[Any],
    conn: Any,
    input: JSON,
    after: str | None,
    *,
    retried: bool,
    beat: Callable[[], None],
    after_at: str | None = None,
) -> tuple[Result[None, SessionError], Read, Any]:
    """Post ``input`` and read the turn it starts; see the module docstring. Returns the
    push's outcome, the read, and the conn (a consolidation may update it). ``after_at``:
    the host's time on the boundary ``after``, so the consolidation lists from there."""
    sub = _Subscription(provider, conn)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(sub.run)
        with anyio.move_on_after(CONNECT_TIMEOUT_S):
            await sub.connected.wait()
        broken = sub.unusable()
        if broken is not None:  # nothing was posted: the request ends as a refused push would
            tasks.cancel_scope.cancel()
            return Failure(broken), Read((), None), conn
        replay: tuple[JSON, ...] = ()
        if retried:  # a worker died mid-exchange: what did the host get and do meanwhile?
            found = await (
                provider.reconnect(conn, ())
                if after is None
                else provider.reconnect_after(conn, after, after_at)
            )
            if isinstance(found, Failure):
                tasks.cancel_scope.cancel()
                return Failure(found.failure()), Read((), None), conn
            conn, reconnected = found.unwrap()
            replay = tuple(reconnected.replay)
        pushed: Result[None, SessionError] = Success(None)
        if not landed(replay):
            pushed = await provider.push_input(conn, input)
            if isinstance(pushed, Failure):
                tasks.cancel_scope.cancel()
                return pushed, Read(replay, None), conn
            if after is None:  # a new session's first turn: nothing listed before it is the turn's
                replay = ()
        skip = {eid for e in replay if (eid := _id(e)) is not None}
        read = await sub.read_to_boundary(provider.codec, skip, beat, replay)
        tasks.cancel_scope.cancel()
    return pushed, read, conn


async def resync(
    provider: Provider[Any], conn: Any, seen: tuple[str, ...], *, streaming: bool, beat: Callable[[], None]
) -> tuple[Result[Reconnected, SessionError], Read, Any]:
    """The machine's ``Reconnect``: subscribe (streaming hosts), consolidate against ``seen``,
    and read on to the boundary when the remote turn is still running."""
    if not streaming:
        found = await provider.reconnect(conn, seen)
        if isinstance(found, Failure):
            return Failure(found.failure()), Read((), None), conn
        conn, reconnected = found.unwrap()
        return Success(reconnected), Read((), None), conn
    sub = _Subscription(provider, conn)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(sub.run)
        with anyio.move_on_after(CONNECT_TIMEOUT_S):
            await sub.connected.wait()
        try:
            found = await provider.reconnect(conn, seen)
        except Exception as exc:
            found = Failure(ProviderError(detail=str(exc)[:2000], error_type=type(exc).__name__))
        if isinstance(found, Failure):
            tasks.cancel_scope.cancel()
            return Failure(found.failure()), Read((), None), conn
        conn, reconnected = found.unwrap()
        read = Read((), None)
        if not reconnected.idle and not any(provider.codec.turn_boundary(e) for e in reconnected.replay):
            skip = set(seen) | {eid for e in reconnected.replay if (eid := _id(e)) is not None}
            read = await sub.read_to_boundary(provider.codec, skip, beat)
        tasks.cancel_scope.cancel()
    return Success(reconnected), read, conn


def lost(detail: str) -> SessionError:
    """The stream error a workflow reports when a stream read could not be completed."""
    return StreamDropped(detail=detail)
