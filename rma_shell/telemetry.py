"""Telemetry: a small synchronous dispatcher for ``rma.*`` events (M-10).

Subscribers attach by id to a set of event names (or a prefix ending in ``*``). Emission
is synchronous and cheap when nobody listens; a subscriber that raises is logged and
detached, exactly once, so a broken metrics hook can never break a session. Event names,
measurements and metadata are listed in ``docs/telemetry.md``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

Handler = Callable[[str, Mapping[str, Any], Mapping[str, Any]], None]

log = logging.getLogger("rma.telemetry")

# Keys that must never reach a subscriber, whatever a caller put in its metadata.
_SECRET_KEYS = frozenset(
    {"api_key", "apikey", "x-api-key", "authorization", "bearer_token", "aws_secret_access_key"}
)


class Telemetry:
    """A registry of subscribers. ``rma_shell.telemetry.default`` is the process-wide one."""

    def __init__(self) -> None:
        self._handlers: dict[str, tuple[tuple[str, ...], Handler]] = {}

    def attach(self, handler_id: str, names: str | Iterable[str], handler: Handler) -> None:
        """Subscribe ``handler(name, measurements, metadata)`` to ``names`` (``"rma.tool.*"`` ok)."""
        if handler_id in self._handlers:
            raise ValueError(f"telemetry handler {handler_id!r} is already attached")
        patterns = (names,) if isinstance(names, str) else tuple(names)
        self._handlers[handler_id] = (patterns, handler)

    def detach(self, handler_id: str) -> bool:
        return self._handlers.pop(handler_id, None) is not None

    def listening(self) -> bool:
        return bool(self._handlers)

    def emit(self, name: str, measurements: Mapping[str, Any], metadata: Mapping[str, Any]) -> None:
        if not self._handlers:
            return
        if any(k.lower() in _SECRET_KEYS for k in metadata):
            metadata = {k: v for k, v in metadata.items() if k.lower() not in _SECRET_KEYS}
        for handler_id, (patterns, handler) in list(self._handlers.items()):
            if not _matches(name, patterns):
                continue
            try:
                handler(name, measurements, metadata)
            except Exception:
                log.exception("telemetry handler %r raised on %s; detaching it", handler_id, name)
                self._handlers.pop(handler_id, None)

    @contextmanager
    def span(self, prefix: str, metadata: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """Emit ``prefix.start``, then ``prefix.stop`` (or ``prefix.exception``) with a duration.

        The yielded dict is merged into the stop metadata, for facts known only at the end.
        """
        start = time.perf_counter()
        self.emit(f"{prefix}.start", {"system_time": time.time()}, metadata)
        extra: dict[str, Any] = {}
        try:
            yield extra
        except BaseException as exc:
            self.emit(
                f"{prefix}.exception",
                {"duration": time.perf_counter() - start},
                {**metadata, **extra, "kind": type(exc).__name__},
            )
            raise
        self.emit(f"{prefix}.stop", {"duration": time.perf_counter() - start}, {**metadata, **extra})


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(p == name or (p.endswith("*") and name.startswith(p[:-1])) for p in patterns)


default = Telemetry()
"""The process-wide dispatcher used when a session is not given its own."""


def attach(handler_id: str, names: str | Iterable[str], handler: Handler) -> None:
    default.attach(handler_id, names, handler)


def detach(handler_id: str) -> bool:
    return default.detach(handler_id)
