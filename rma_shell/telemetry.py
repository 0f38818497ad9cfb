"""Telemetry: a small synchronous dispatcher for ``rma.*`` events (M-10).

Subscribers attach by id to a set of event names (or a prefix ending in ``*``). Emission
is synchronous and cheap when nobody listens; a subscriber that raises is logged and
detached, exactly once, so a broken metrics hook can never break a session. Event names,
measurements and metadata are listed in ``docs/telemetry.md``.

Content — prompts, model output, tool arguments and results — is private by default: it
reaches only subscribers attached with ``content=True``, under the metadata key
``"content"``; every other subscriber never sees it.
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
        self._handlers: dict[str, tuple[tuple[str, ...], Handler, bool]] = {}

    def attach(
        self, handler_id: str, names: str | Iterable[str], handler: Handler, *, content: bool = False
    ) -> None:
        """Subscribe ``handler(name, measurements, metadata)`` to ``names`` (``"rma.tool.*"`` ok).

        ``content=True`` opts this subscriber into content capture: events that carry content
        (prompts, model output, tool arguments and results) arrive with it under
        ``metadata["content"]``.
        """
        if handler_id in self._handlers:
            raise ValueError(f"telemetry handler {handler_id!r} is already attached")
        patterns = (names,) if isinstance(names, str) else tuple(names)
        self._handlers[handler_id] = (patterns, handler, content)

    def detach(self, handler_id: str) -> bool:
        return self._handlers.pop(handler_id, None) is not None

    def listening(self, name: str | None = None) -> bool:
        """Whether anyone subscribes at all, or, given ``name``, to that event (emitters skip
        building an event nobody would receive)."""
        if name is None or not self._handlers:
            return bool(self._handlers)
        return any(_matches(name, patterns) for patterns, _, _ in self._handlers.values())

    @property
    def wants_content(self) -> bool:
        """Whether any subscriber opted into content (emitters skip building it otherwise)."""
        return any(wants for _, _, wants in self._handlers.values())

    def emit(
        self,
        name: str,
        measurements: Mapping[str, Any],
        metadata: Mapping[str, Any],
        content: Mapping[str, Any] | None = None,
    ) -> None:
        if not self._handlers:
            return
        if any(k.lower() in _SECRET_KEYS for k in metadata):
            metadata = {k: v for k, v in metadata.items() if k.lower() not in _SECRET_KEYS}
        with_content: Mapping[str, Any] | None = None
        for handler_id, (patterns, handler, wants_content) in list(self._handlers.items()):
            if not _matches(name, patterns):
                continue
            delivered = metadata
            if wants_content and content:
                if with_content is None:
                    with_content = {**metadata, "content": content}
                delivered = with_content
            try:
                handler(name, measurements, delivered)
            except Exception:
                log.exception(
                    "telemetry handler %r raised on %s; detaching it",
                    handler_id,
                    name,
                    extra={"handler_id": handler_id, "event": name},
                )
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


def attach(handler_id: str, names: str | Iterable[str], handler: Handler, *, content: bool = False) -> None:
    default.attach(handler_id, names, handler, content=content)


def detach(handler_id: str) -> bool:
    return default.detach(handler_id)
