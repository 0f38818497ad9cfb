"""Test seams: what a test may replace of an object's randomness, clock, sleeping, token-file
reads and generated ids, without any of it in a public signature (issue #22).

Every object or function that has seams takes them as one private keyword, ``_seams=Seams(...)``;
a field left None is the object's own default (``random.random``, ``anyio.sleep``, its clock …).
Nothing outside tests should pass it: it is not an option, and it may change without notice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs


@attrs.frozen
class Seams:
    """Replacements for a test; None keeps the object's own (see the module doc)."""

    rand: Callable[[], float] | None = None
    """Jitter in [0, 1) (``random.random``)."""
    sleep: Callable[[float], Awaitable[None]] | None = None
    """Backoff and poll sleeps (``anyio.sleep``)."""
    clock: Callable[[], float] | None = None
    """The object's clock: wall-clock seconds for ``Retry-After`` dates, token expiry and
    store leases (``time.time``); the event loop's clock for provisioning budgets
    (``anyio.current_time``)."""
    now: Callable[[], Any] | None = None
    """The UTC ``datetime`` a request is signed at (AgentCore's SigV4)."""
    read_file: Callable[[str], str] | None = None
    """Reads a bearer token file (Claude's ``bearer_token_file``)."""
    session_id_factory: Callable[[], str] | None = None
    """A fresh session id (Local)."""
    client_token: Callable[[], str] | None = None
    """An idempotency token (AgentCore's control plane)."""


NO_SEAMS = Seams()
"""The default: every object's own."""


def pick(seams: Seams | None, name: str, default: Any) -> Any:
    """The seam ``name`` of ``seams``, or ``default`` when it is not replaced."""
    value = getattr(seams, name, None) if seams is not None else None
    return default if value is None else value
