"""The session driver's task group: trio's own nursery under trio, anyio's under asyncio.

Why not anyio's everywhere: since anyio 4.14 its ``start_soon`` wraps every task in a
``TaskHandle`` — a cancel scope of its own entered around the task, an event set when it ends,
two ``Coroutine`` ABC checks and two task names — about 113,000 instructions per task on trio
beyond trio's own spawn (docs/benchmarks.md, "Request paths against the wire"), and the driver
spawns two tasks a turn (the poll or push, the tool batch). Under trio anyio's task group *is*
a trio nursery underneath (anyio's cancel scopes are trio's), so the driver takes the nursery
itself: the same structured concurrency, the same cancellation, the same exception groups.
Under asyncio anyio's task group is what lets anyio's cancel scopes reach a task, so it stays
(asyncio's own ``TaskGroup`` cancels with ``Task.cancel()``, through a tool's shielded scope:
measured and rejected, docs/decisions.md).

Not a task API: the driver's ``start_soon`` and ``cancel_scope.cancel()``, nothing more.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import anyio


class _Scope(Protocol):
    def cancel(self) -> None: ...


class TaskGroup(Protocol):
    """What the driver uses of a task group (anyio's and trio's nursery both have it)."""

    @property
    def cancel_scope(self) -> _Scope: ...

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> Any: ...


def open_task_group() -> AbstractAsyncContextManager[TaskGroup]:
    """A task group for the running event loop (``async with open_task_group() as tg``)."""
    trio = sys.modules.get("trio")  # not imported: not running under trio
    if trio is not None and trio.lowlevel.in_trio_task():
        nursery: AbstractAsyncContextManager[TaskGroup] = trio.open_nursery()
        return nursery
    return anyio.create_task_group()
