"""Ctrl-C and closed pipes at the process boundary.

``keyboard_interrupt`` finds the ``KeyboardInterrupt`` an exception group carries:
anyio's task groups (on trio and asyncio) wrap what a child task raised in a
``BaseExceptionGroup``; a ``KeyboardInterrupt`` raised inside a tool or a stream task would
reach the caller wrapped. ``run()``, ``open_session`` and the CLI unwrap it, so the caller
sees the plain ``KeyboardInterrupt`` it expects. ``silence_stdout`` is for a reader that went
away (``rma … | head``): the rest of the output, and the exit-time flush, go nowhere quietly.
"""

from __future__ import annotations

import os
import sys


def keyboard_interrupt(exc: BaseException) -> KeyboardInterrupt | None:
    """``exc`` itself if it is a KeyboardInterrupt, else the first one nested in its groups."""
    if isinstance(exc, KeyboardInterrupt):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = keyboard_interrupt(inner)
            if found is not None:
                return found
    return None


def silence_stdout() -> None:
    """Point stdout at the null device: its reader has gone, and the exit-time flush must not fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file descriptor (an in-process capture)
        pass
