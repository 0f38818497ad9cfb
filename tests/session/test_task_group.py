"""The driver's task group (``rma_shell.machinery.tasks``): on both backends it behaves as anyio's — a
child's error reaches the owner in an exception group, an outer scope's cancellation reaches
every child, ``cancel_scope.cancel()`` ends them, and each task starts in a copy of the
spawner's context (a contextvar one task sets is not seen by the next)."""

from __future__ import annotations

import contextvars

import anyio
import pytest

from rma_shell.machinery.tasks import open_task_group

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


async def test_a_childs_error_reaches_the_owner_in_a_group() -> None:
    async def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(BaseExceptionGroup) as caught:
        async with open_task_group() as tasks:
            tasks.start_soon(fail)
            await anyio.sleep_forever()
    assert caught.group_contains(ValueError, match="boom")


async def test_an_outer_deadline_cancels_every_child_and_the_owner() -> None:
    ended: list[str] = []

    async def wait(name: str) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            ended.append(name)

    with anyio.move_on_after(0.01) as scope:
        async with open_task_group() as tasks:
            tasks.start_soon(wait, "a")
            tasks.start_soon(wait, "b")
            await anyio.sleep_forever()
    assert scope.cancelled_caught and sorted(ended) == ["a", "b"]


async def test_cancel_scope_cancel_ends_the_children() -> None:
    ended: list[str] = []

    async def wait() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            ended.append("child")

    async with open_task_group() as tasks:
        tasks.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        tasks.cancel_scope.cancel()
    assert ended == ["child"]


async def test_each_task_starts_from_the_spawners_context() -> None:
    seen: list[str] = []

    async def job(value: str) -> None:
        seen.append(request_id.get())
        request_id.set(value)

    async with open_task_group() as tasks:
        tasks.start_soon(job, "first")
        await anyio.wait_all_tasks_blocked()
        tasks.start_soon(job, "second")
    assert seen == ["none", "none"]
