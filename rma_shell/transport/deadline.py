"""A stream's silence deadline: one cancel scope's deadline, kept ahead of the last data.

An event stream fails when nothing arrives for ``wait`` seconds. A timeout around every read
enters and leaves a cancel scope per chunk and registers a deadline with the event loop each
time; instead the stream's one scope has its deadline moved on as data arrives, and only
when it has come within ``wait`` of now — at most once per tenth of ``wait``. Silence then
fails the stream after between 1 and 1.1 times ``wait``. Used by the Claude Managed Agents
event stream and AgentCore's lean invoke stream.

Not a timeout API: the caller owns the scope and says what its expiry means.
"""

from __future__ import annotations

import math

import anyio


def arm(scope: anyio.CancelScope, wait: float) -> None:
    """Start ``scope``'s silence deadline (``math.inf``: never)."""
    if wait != math.inf:
        scope.deadline = anyio.current_time() + wait + wait / 10


def keep_ahead(scope: anyio.CancelScope, wait: float) -> None:
    """Data arrived: push the deadline on if it has come within ``wait`` of now."""
    if wait != math.inf:
        now = anyio.current_time()
        if scope.deadline - now < wait:
            scope.deadline = now + wait + wait / 10
