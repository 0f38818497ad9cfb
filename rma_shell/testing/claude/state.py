"""The Claude Managed Agents emulator's state, and the base its request handlers share.

The stored records (agents and their versions, environments, files, sessions with their
history, pending tool uses and open streams), the stream subscribers with the one thread
that notices hang-ups, and ``_Core``: the emulator's lock, ids, clock, fault lookup, session
lookup and pagination, which the control-plane (``resources``) and data-plane (``streams``)
handlers build on. Not the handlers themselves.
"""

from __future__ import annotations

import contextlib
import copy
import json
import queue
import re
import select
import selectors
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from rma_shell.testing._loopback import LoopbackEmulator
from rma_shell.testing.claude.events import Turn
from rma_shell.testing.claude.faults import CMAFault, FaultKind, _Armed
from rma_shell.testing.claude.webhooks import WebhookSender
from rma_shell.testing.claude.wire import _decode_cursor, _encode_cursor, _not_found, _Query
from rma_shell.testing.local.emulator import RecordedRequest

JSONDict = dict[str, Any]

BETA = "managed-agents-2026-04-01"
"""The beta every agents/environments/sessions call must name in ``anthropic-beta``."""

DEFAULT_API_KEY = "sk-ant-emulator-key"


class _Subscriber:
    def __init__(self, connection: socket.socket, deltas: frozenset[str]) -> None:
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.connection = connection
        self.deltas = deltas
        self.drop_after: int | None = None
        self.error: CMAFault | None = None
        self.cut_preview: CMAFault | None = None
        self.watched = False
        """Whether ``_HangupWatch`` tells this stream when its client hangs up."""


_DROP = object()
_END = object()
_GONE = object()
_WAKE = object()


class _HangupWatch:
    """One thread that notices clients hanging up on their event streams.

    Without it every stream thread would wake up ten times a second to look at its socket;
    with thousands of streams open those wake-ups alone saturate the GIL. The watcher waits on
    all stream sockets at once and puts ``_GONE`` in a stream's queue when its client has closed
    the connection, so stream threads block on their queues until there is something to do.
    A socket that turns readable with data instead (a client writing on its stream) is handed
    back to its stream thread (``_WAKE``), which then polls it itself as before.
    """

    def __init__(self, stopping: threading.Event) -> None:
        self._stopping = stopping
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, sub: _Subscriber) -> None:
        with self._lock:
            try:
                self._selector.register(sub.connection, selectors.EVENT_READ, sub)
            except (KeyError, ValueError, OSError):
                return  # not watchable: the stream thread keeps polling its socket
            sub.watched = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="cma-emulator-hangups", daemon=True)
                self._thread.start()

    def unwatch(self, sub: _Subscriber) -> None:
        with self._lock:
            if sub.watched:
                sub.watched = False
                with contextlib.suppress(KeyError, ValueError, OSError):
                    self._selector.unregister(sub.connection)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                ready = self._selector.select(timeout=0.1)
            except (OSError, ValueError):
                continue
            for key, _ in ready:
                sub: _Subscriber = key.data
                if not sub.watched:
                    continue
                gone = _client_gone(sub.connection)  # never raises: a broken socket is gone
                self.unwatch(sub)
                sub.queue.put(_GONE if gone else _WAKE)


@attrs.define
class _Agent:
    seq: int
    versions: list[JSONDict]


@attrs.define
class _Resource:
    seq: int
    data: JSONDict


@attrs.define
class _File:
    seq: int
    meta: JSONDict
    content: bytes


@attrs.define
class _Session:
    seq: int
    data: JSONDict
    script: list[Turn]
    self_hosted: bool
    turn_index: int = 0
    history: list[tuple[int, JSONDict]] = attrs.Factory(list)
    tool_kinds: dict[str, str] = attrs.Factory(dict)
    pending: dict[str, str] = attrs.Factory(dict)
    answered: set[str] = attrs.Factory(set)
    awaiting_action: bool = False
    subscribers: list[_Subscriber] = attrs.Factory(list)
    deferred: list[JSONDict] = attrs.Factory(list)
    deferred_token: int = 0
    paused: list[JSONDict] = attrs.Factory(list)
    """The rest of a turn waiting behind a ``pause`` (the host still working on it)."""
    paused_token: int = 0
    open_model_request: str | None = None
    last_outcome_id: str | None = None
    outcome_iterations: dict[str, int] = attrs.Factory(dict)
    outcome_starts: dict[str, str] = attrs.Factory(dict)
    resources: list[tuple[int, JSONDict]] = attrs.Factory(list)
    created: float = 0.0
    threads: dict[str, _Thread] = attrs.Factory(dict)
    """Sub-agent threads by id, in creation order (``session.thread_created``)."""


@attrs.define
class _Thread:
    """A session thread: its resource, its own history and the streams reading it."""

    data: JSONDict
    history: list[tuple[int, JSONDict]] = attrs.Factory(list)
    subscribers: list[_Subscriber] = attrs.Factory(list)


_SESSION_AGENT_KEYS = (
    "id",
    "type",
    "name",
    "description",
    "model",
    "system",
    "tools",
    "mcp_servers",
    "skills",
    "multiagent",
    "execution_identity",
    "version",
)


@attrs.frozen
class _Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Mapping[str, str] = attrs.Factory(dict)


_DISCONNECTS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


def _client_gone(connection: socket.socket) -> bool:
    try:
        # poll, not select: select() refuses file descriptors past 1023, which a few thousand
        # open streams reach.
        poller = select.poll()
        poller.register(connection, select.POLLIN)
        return bool(poller.poll(0)) and connection.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


class _Core(LoopbackEmulator):
    """What every handler of the emulator relies on; ``CMAEmulator.__init__`` fills it in."""

    api_key: str | None
    requests: list[RecordedRequest]
    closed_idle: int
    _script: list[Turn]
    _bearer_tokens: frozenset[str]
    _require_beta: bool
    _require_version: bool
    _uploads_downloadable: bool
    _ping_interval: float | None
    _delta_chars: int
    _unique_names: bool
    _lock: threading.RLock
    _changed: threading.Condition
    _faults: list[_Armed]
    _hangups: _HangupWatch
    _counter: int
    _ids: dict[str, int]
    _last_time: datetime
    _agents: dict[str, _Agent]
    _environments: dict[str, _Resource]
    _sessions: dict[str, _Session]
    _files: dict[str, _File]
    _timers: list[threading.Timer]
    webhooks: WebhookSender | None
    webhook_secret: str

    # -- ids, clock, faults --

    def _next(self) -> int:
        self._counter += 1
        return self._counter

    def _id(self, prefix: str) -> str:
        self._ids[prefix] = self._ids.get(prefix, 0) + 1
        return f"{prefix}_emu{self._ids[prefix]:06d}"

    def _now(self) -> str:
        now = datetime.now(UTC)
        if now <= self._last_time:
            now = self._last_time + timedelta(microseconds=1)
        self._last_time = now
        return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def _take(
        self, kind: FaultKind, session_id: str | None = None, method: str = "", path: str = ""
    ) -> CMAFault | None:
        for armed in self._faults:
            fault = armed.fault
            if fault.kind != kind or armed.remaining <= 0:
                continue
            other_session = armed.session_id is not None and armed.session_id != session_id
            if other_session and (
                kind not in ("status", "close_idle", "cut_head") or str(armed.session_id) not in path
            ):
                continue
            if kind in ("status", "trickle", "close_idle", "cut_head"):
                if fault.method is not None and fault.method != method:
                    continue
                if fault.path is not None and not re.search(fault.path, path):
                    continue
            armed.remaining -= 1
            return fault
        return None

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise _not_found("Session", session_id)
        return session

    def _session_out(self, session: _Session) -> JSONDict:
        data = session.data
        data["stats"]["duration_seconds"] = round(time.monotonic() - session.created, 3)
        data["resources"] = [r for _, r in session.resources]
        return data

    @staticmethod
    def _json(status: int, data: Any) -> _Reply:
        return _Reply(status, json.dumps(data).encode())

    # -- pagination --

    def _page(
        self,
        items: Sequence[tuple[int, JSONDict]],
        q: _Query,
        *,
        kind: str,
        ascending: bool,
        bidirectional: bool = False,
        default_limit: int = 20,
        max_limit: int = 100,
    ) -> JSONDict:
        limit = q.int("limit", default_limit, 1, max_limit)
        assert limit is not None
        start = 0
        page = q.get("page")
        if page:
            direction, key = _decode_cursor(page, kind)

            def after(seq: int) -> bool:
                return seq > key if ascending else seq < key

            if direction == "n":
                start = next((i for i, (seq, _) in enumerate(items) if after(seq)), len(items))
            else:
                end = next((i for i, (seq, _) in enumerate(items) if after(seq) or seq == key), len(items))
                start = max(0, end - limit)
                items = items[:end]
        chosen = items[start : start + limit]
        more = start + len(chosen) < len(items)
        out: JSONDict = {
            "data": [copy.deepcopy(d) for _, d in chosen],
            "next_page": _encode_cursor("n", chosen[-1][0], kind) if chosen and more else None,
        }
        if bidirectional:
            out["prev_page"] = _encode_cursor("p", chosen[0][0], kind) if chosen and start > 0 else None
        return out
