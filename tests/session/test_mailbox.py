"""The session's mailbox (``rma_shell.machinery.mailbox``): FIFO across bursts, one wake-up shared by racing
readers, close semantics, and ``next`` as a checkpoint."""

from __future__ import annotations

import anyio
import pytest

from rma_shell.machinery.mailbox import Mailbox


async def test_items_come_out_in_order_across_bursts_and_waits() -> None:
    box: Mailbox[int] = Mailbox()
    got: list[int] = []

    async def read(n: int) -> None:
        for _ in range(n):
            got.append(await box.get())

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read, 7)
        await anyio.wait_all_tasks_blocked()  # the reader waits on an empty mailbox
        box.put(1)
        box.put(2)
        await anyio.wait_all_tasks_blocked()
        for i in range(3, 8):
            box.put(i)
    assert got == [1, 2, 3, 4, 5, 6, 7]
    box.put(8)
    assert await box.get() == 8


async def test_racing_readers_share_a_wake_up_and_each_item_goes_to_one() -> None:
    box: Mailbox[str] = Mailbox()
    got: list[str] = []

    async def read() -> None:
        got.append(await box.get())

    async with anyio.create_task_group() as tasks:
        for _ in range(3):
            tasks.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        box.put("a")
        await anyio.wait_all_tasks_blocked()
        assert got == ["a"]  # the other two woke, found nothing, and wait again
        box.put("b")
        box.put("c")
    assert sorted(got) == ["a", "b", "c"]


async def test_close_drains_what_is_queued_then_ends_and_drops_later_items() -> None:
    box: Mailbox[int] = Mailbox()
    box.put(1)
    box.close()
    box.put(2)  # after close: dropped, never an error
    assert await box.get() == 1
    with pytest.raises(anyio.EndOfStream):
        await box.get()


async def test_close_wakes_a_waiting_reader() -> None:
    box: Mailbox[int] = Mailbox()
    ended: list[bool] = []

    async def read() -> None:
        with pytest.raises(anyio.EndOfStream):
            await box.get()
        ended.append(True)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        box.close()
    assert ended == [True]


async def test_next_is_a_cancellation_point_even_with_an_item_queued() -> None:
    box: Mailbox[int] = Mailbox()
    box.put(1)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await box.next()
    assert scope.cancelled_caught
    assert await box.next() == 1  # still there
