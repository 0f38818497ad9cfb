"""Scheduler counters for ``bench/scale.py --count``: what the event loop does per event.

Wraps, for the rest of the process, the functions each unit of scheduling work goes through
and counts their calls: a task **reschedule** (trio: ``Runner.reschedule``, every wake-up of a
sleeping task; asyncio: a ready callback run by the loop, ``Handle._run``, which is what a
task step, a future's done callback or a ``call_soon`` costs), a **task spawn** (trio:
``Runner.spawn_impl``; asyncio: ``Task.__init__`` is C, so ``loop.create_task``), a **cancel
scope** entered (trio's ``CancelScope.__enter__``, which anyio's trio scopes use too; anyio's
asyncio ``CancelScope.__enter__``) and an httpcore **pool assignment**
(``AsyncConnectionPool._assign_requests_to_connections``: once when a request starts, once
when its response closes). Counting costs time: a ``--count`` run's CPU figures are not
comparable with an uncounted run's.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

counts: Counter[str] = Counter()


def _wrap(owner: Any, name: str, key: str) -> None:
    original: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[key] += 1
        return original(*args, **kwargs)

    setattr(owner, name, counted)


def install(backend: str) -> None:
    import httpcore._async.connection_pool as pool

    _wrap(pool.AsyncConnectionPool, "_assign_requests_to_connections", "pool_assignments")
    if backend == "trio":
        import trio._core._run as run

        _wrap(run.Runner, "reschedule", "reschedules")
        _wrap(run.Runner, "spawn_impl", "spawns")
        _wrap(run.CancelScope, "__enter__", "cancel_scopes")
    else:
        import asyncio.base_events
        import asyncio.events

        from anyio._backends import _asyncio

        _wrap(asyncio.events.Handle, "_run", "reschedules")
        _wrap(asyncio.base_events.BaseEventLoop, "create_task", "spawns")
        _wrap(_asyncio.CancelScope, "__enter__", "cancel_scopes")


def snapshot() -> dict[str, int]:
    return dict(counts)
