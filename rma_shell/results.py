"""Where the shell's exceptions meet its ``Result``s: raise inside, return a ``Result`` once.

Inside the shell's entry layer (``session``, ``resuming``, ``agent``) a check that fails raises
its typed ``SessionError`` — every rma error is an exception (issue #13) — so the preparation
of a run reads as straight-line code instead of a ``Failure`` test after every step. ``ok``
unwraps a ``Result`` from the core or a host into its value, or raises its error as itself.
The public entry points turn a raised ``SessionError`` back into ``Failure`` exactly once
(``run``, ``resume``, ``Agent.run``); the live ones (``open_session``, ``resume_session``)
let it propagate, as they always have.

What stays a ``Result``: the pure core (its rules and codecs return values, never raise) and
the hosts (the ``Provider`` protocol is a public extension point whose methods return
``Result``s, and a custom provider or ``ScriptedProvider`` implements it).
"""

from __future__ import annotations

from typing import TypeVar

from returns.result import Failure, Result

from rma.errors import SessionError

T = TypeVar("T")


def ok(result: Result[T, SessionError]) -> T:
    """The value of a ``Success``; a ``Failure``'s ``SessionError`` raised as itself."""
    if isinstance(result, Failure):
        raise result.failure().with_traceback(None)
    return result.unwrap()
