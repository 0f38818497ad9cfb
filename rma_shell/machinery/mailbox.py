"""A session's mailbox: an unbounded FIFO that tasks put into without waiting and one loop reads.

What the driver's inbox (every fact for the session loop) and a live session's results queue
are. It replaces an anyio memory object stream there because a stream's ``receive`` yields to
the scheduler before every item and parks on a fresh waiter object after every empty read:
two reschedules per stream event, where a burst of events now costs one wake-up
(``bench/driver_cost.py``; figures in docs/benchmarks.md). Not a channel: no back-pressure
(``put`` never waits), no clones, and readers that race share one wake-up and re-check.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


class Mailbox(Generic[T]):
    """``put`` from anywhere in the event loop's thread; ``get`` from a task."""

    __slots__ = ("_closed", "_head", "_items", "_waiter")

    def __init__(self) -> None:
        # A list read from ``_head`` and emptied once drained, not a deque: an empty deque
        # keeps a 64-slot block (~0.7 KiB per mailbox, two per live session), an empty list
        # none, and either way an item costs one append and one read.
        self._items: list[T | None] = []
        self._head = 0
        self._waiter: anyio.Event | None = None
        self._closed = False

    def put(self, item: T) -> None:
        """Queue ``item`` and wake the reader; once closed, ``item`` is dropped."""
        if self._closed:
            return
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            waiter.set()

    def close(self) -> None:
        """No more items: readers get what is queued, then ``anyio.EndOfStream``."""
        self._closed = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            waiter.set()

    async def get(self) -> T:
        """The next item, waiting for one; ``anyio.EndOfStream`` once closed and drained.

        A queued item is returned without yielding to the scheduler, so a burst is read
        in one go: the loop reading it must reach a checkpoint elsewhere (it waits here
        whenever the mailbox is empty).
        """
        items = self._items
        while not items:
            if self._closed:
                raise anyio.EndOfStream
            waiter = self._waiter
            if waiter is None:
                waiter = self._waiter = anyio.Event()
            await waiter.wait()
        head = self._head
        item = items[head]
        items[head] = None  # the mailbox keeps no reference to what it handed out
        if head + 1 == len(items):
            items.clear()
            self._head = 0
        else:
            self._head = head + 1
        return item  # type: ignore[return-value]  # a T: None is only written to consumed slots

    async def next(self) -> T:
        """``get`` that is always a checkpoint (a cancellation point), for public APIs."""
        if self._items:
            await anyio.lowlevel.checkpoint()
        return await self.get()
