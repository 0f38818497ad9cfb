"""Provider connections on a fleet of workers: JSON snapshots, reattach, a per-worker cache.

A provider's connection value (``conn``) holds sockets and clients: it cannot be recorded in a
workflow's history, and the next activity of a session may run on any worker. So each
activity is handed the session's last **snapshot** — a JSON value naming the remote session
and whatever the provider keeps client-side — with its version. A worker whose cache holds
that version uses its live conn; any other worker rebuilds one from the snapshot, through the
provider's public ``open`` (a reattach), and caches it. An activity that changes the conn
(a Local turn grows its conversation) returns the new snapshot, which the workflow records.

What a snapshot holds, per host:

- Claude Managed Agents: the session id and the reattach flags (the session lives remotely).
- Bedrock AgentCore: the runtime session id (the harness keeps the conversation).
- Local: the whole conversation — its messages (``transcript``, which is also the result's
  transcript) and the request-scoped loop-guard state — because Local keeps no session
  anywhere else. It grows with the conversation.
- Any other provider: ``temporal_snapshot(conn) -> JSON`` and
  ``async temporal_restore(request, snapshot) -> Result[conn, SessionError]`` when it has
  them, else the session id alone (reattached with ``open(session_id=…)``).

Never a credential: keys stay in the worker's provider objects.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

import anyio
import attrs
from returns.result import Failure, Result, Success

from rma._persistent import GrowOnlySet
from rma.errors import SessionError
from rma.vocabulary import JSON
from rma_shell.providers.base import OpenRequest, Provider

log = logging.getLogger("rma.temporal")

_LOCAL_SCOPED = ("polls", "error_counts", "held_answers", "call_order", "poll_events", "nudged", "resumed")


def snapshot(provider: Provider[Any], conn: Any) -> JSON:
    """The JSON a worker needs to rebuild ``conn`` (see the module docstring)."""
    own = getattr(provider, "temporal_snapshot", None)
    if callable(own):
        value: JSON = own(conn)
        return value
    kind = type(conn).__name__
    if kind == "LocalConn":
        conv = conn.conversation
        return {
            "kind": "local",
            "session_id": conn.session_id,
            "transcript": list(conv.history.to_tuple()),
            "seen_calls": [list(pair) for pair in conv.seen_calls],
            "pending_calls": [list(pair) for pair in conv.pending_calls],
            **{name: _plain(getattr(conv, name)) for name in _LOCAL_SCOPED},
        }
    if kind == "CMAConn":
        return {
            "kind": "cma",
            "session_id": conn.session_id,
            "resumed": conn.resumed,
            "attached": conn.attached,
            "session": conn.session,
        }
    if kind == "AgentCoreConn":
        return {"kind": "agentcore", "session_id": conn.runtime_session_id, "resumed": conn.resumed}
    return {"kind": "generic", "session_id": provider.session_id(conn), "resumed": provider.resumed(conn)}


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


async def restore(provider: Provider[Any], request: OpenRequest, snap: Any) -> Result[Any, SessionError]:
    """A live conn for the session ``snap`` describes, on this worker (a reattach)."""
    own = getattr(provider, "temporal_restore", None)
    if callable(own):
        restored: Result[Any, SessionError] = await own(request, snap)
        return restored
    kind = snap.get("kind")
    if kind == "local":
        extra = {**request.extra, "history": list(snap["transcript"]) or None}
        opened = await provider.open(attrs.evolve(request, session_id=None, extra=extra))
        if isinstance(opened, Failure):
            return opened
        conn = opened.unwrap()
        conv = attrs.evolve(
            conn.conversation,
            seen_calls=GrowOnlySet(tuple(pair) for pair in snap["seen_calls"]),
            pending_calls=tuple(tuple(pair) for pair in snap["pending_calls"]),
            polls=snap["polls"],
            error_counts=dict(snap["error_counts"]),
            held_answers=tuple(snap["held_answers"]),
            call_order=tuple(snap["call_order"]),
            poll_events=tuple(snap["poll_events"]),
            nudged=snap["nudged"],
            resumed=snap["resumed"],
        )
        return Success(attrs.evolve(conn, session_id=snap["session_id"], conversation=conv))
    # The remote hosts: reattach by id; fresh-session-only options cannot apply on a reattach.
    extra = {k: v for k, v in request.extra.items() if k not in ("title", "session_metadata", "resources")}
    opened = await provider.open(
        attrs.evolve(request, session_id=snap["session_id"], budget=None, extra=extra)
    )
    if isinstance(opened, Failure):
        return opened
    conn = opened.unwrap()
    if kind == "cma":
        # The flags say how the *first* open went (a fresh session or a reattach, and whether
        # it consolidated since): a worker taking over must consolidate as the first one would.
        conn.resumed, conn.attached, conn.session = snap["resumed"], snap["attached"], snap["session"]
    elif kind == "agentcore":
        conn = attrs.evolve(conn, resumed=snap["resumed"])
    return Success(conn)


@attrs.define
class _Entry:
    version: int
    conn: Any
    provider: Provider[Any]


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
        entry = self._entries.get(key)
        if entry is None or entry.version != version:
            return None
        self._entries.move_to_end(key)
        return entry.conn

    async def put(self, key: str, version: int, provider: Provider[Any], conn: Any) -> None:
        old = self._entries.pop(key, None)
        self._entries[key] = _Entry(version, conn, provider)
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
