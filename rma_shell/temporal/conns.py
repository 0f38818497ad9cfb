"""Provider connections on a fleet of workers: JSON snapshots, reattach, a per-worker cache.

A provider's connection value (``conn``) holds sockets and clients: it cannot be recorded in a
workflow's history, and the next activity of a session may run on any worker. So each
activity is handed the session's last **snapshot** — the provider's own reattach snapshot
(``Provider.snapshot``, the one a journal keeps: the host's session id, or Local's whole
conversation) — with its version. A worker whose cache holds that version uses its live conn;
any other worker rebuilds one with ``Provider.restore`` and caches it. An activity that
changes the conn (a Local turn grows its conversation) returns the new snapshot, which the
workflow records. Never a credential: keys stay in the worker's provider objects.

The one thing added to the provider's snapshot: on Claude Managed Agents, whether the session
was reattached (``session_id=``) and has not consolidated yet — a worker taking over such a
session's first reconnect must consolidate as a first attach, as the opening worker would have.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

import anyio
import attrs
from returns.result import Failure, Result, Success

from rma.errors import SessionError, Unsupported
from rma.vocabulary import JSON
from rma_shell.providers.base import OpenRequest, Provider

log = logging.getLogger("rma.temporal")


def snapshot(provider: Provider[Any], conn: Any) -> JSON:
    """The JSON a worker needs to rebuild ``conn``, or None when the provider has none. Its logs
    are the provider's (``rma.snapshots``): ``plain`` before it goes into a payload."""
    own = provider.snapshot(conn)
    if own is None:
        return None
    snap: dict[str, JSON] = {"provider": own}
    attached = getattr(conn, "attached", None)
    if isinstance(attached, bool):
        snap["first_attach"] = provider.resumed(conn) and not attached
    return snap


async def restore(provider: Provider[Any], request: OpenRequest, snap: Any) -> Result[Any, SessionError]:
    """A live conn for the session ``snap`` describes, on this worker (a reattach)."""
    if not isinstance(snap, dict) or not isinstance(snap.get("provider"), dict):
        return Failure(
            Unsupported(operation=f"continuing a {type(provider).__name__} session on another worker")
        )
    restored = await provider.restore(request, snap["provider"])
    if isinstance(restored, Success) and snap.get("first_attach"):
        restored.unwrap().attached = False
    return restored


@attrs.define
class _Entry:
    version: int
    conn: Any
    provider: Provider[Any]
    snap: JSON = None
    """The snapshot the workflow holds for this version: what the next change is told against."""
    size: int = 0
    """About how many bytes of JSON ``snap`` is (the workflow sends a large one by reference)."""


class ConnCache:
    """The live conns of this worker, by workflow run, least recently used dropped first.

    Bounded (``size`` sessions): a worker serves many sessions over its life, and a session
    whose other activities ran elsewhere leaves a stale entry here. A dropped or replaced
    conn is closed (``Provider.aclose``).
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def get(self, key: str, version: int) -> Any | None:
        entry = self.entry(key, version)
        return None if entry is None else entry.conn

    def entry(self, key: str, version: int) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is None or entry.version != version:
            return None
        self._entries.move_to_end(key)
        return entry

    async def put(
        self, key: str, version: int, provider: Provider[Any], conn: Any, snap: JSON = None, size: int = 0
    ) -> None:
        old = self._entries.pop(key, None)
        self._entries[key] = _Entry(version, conn, provider, snap, size)
        if old is not None and old.conn is not conn:
            await _close(old)
        while len(self._entries) > self._size:
            _, dropped = self._entries.popitem(last=False)
            await _close(dropped)

    async def drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            await _close(entry)

    async def aclose(self) -> None:
        while self._entries:
            _, entry = self._entries.popitem()
            await _close(entry)


async def _close(entry: _Entry) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(5):
        try:
            await entry.provider.aclose(entry.conn)
        except Exception:
            log.exception("provider aclose failed")


__all__ = ["ConnCache", "restore", "snapshot"]
