"""The Claude Managed Agents emulator: ``CMAEmulator``, its start-up, test controls and HTTP plumbing.

The class a test uses: its options, the loopback server (``_loopback``), the controls a test
calls (``inject``, ``script_session``, ``emit``, ``history``, ``wait_for_event`` …), and the
handling of every request — the keep-alive, cut-answer and status faults, authentication, the
``anthropic-version`` / ``anthropic-beta`` checks, routing, the error envelope and slow
(trickled) answers. The routes themselves are in ``resources`` and ``streams``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import socket
import threading
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from rma_shell.testing._loopback import LoopbackHandler, reset_after_delivery
from rma_shell.testing.claude.events import ServerEvent, Turn
from rma_shell.testing.claude.faults import CMAFault, _Armed
from rma_shell.testing.claude.resources import _Resources
from rma_shell.testing.claude.state import (
    _DISCONNECTS,
    _END,
    BETA,
    DEFAULT_API_KEY,
    _Agent,
    _File,
    _HangupWatch,
    _Reply,
    _Resource,
    _Session,
)
from rma_shell.testing.claude.webhooks import Delivery, WebhookSender, build, new_secret
from rma_shell.testing.claude.wire import _ERROR_TYPES, _invalid, _Query, _Rejected
from rma_shell.testing.claude.work_queue import _WorkQueue
from rma_shell.testing.local.emulator import RecordedRequest

JSONDict = dict[str, Any]


class CMAEmulator(_Resources, _WorkQueue):
    """The emulator; use as a context manager (``with CMAEmulator(script=…) as emu``)."""

    handler_class = LoopbackHandler
    thread_name = "cma-emulator"
    label = "cma emulator"

    def __init__(
        self,
        script: Iterable[Turn] = (),
        *,
        api_key: str | None = DEFAULT_API_KEY,
        bearer_tokens: Iterable[str] = (),
        faults: Iterable[CMAFault] = (),
        require_beta: bool = True,
        require_version: bool = True,
        uploads_downloadable: bool = False,
        ping_interval: float | None = None,
        delta_chars: int = 8,
        unique_names: bool = False,
        webhook_url: str | None = None,
        webhook_secret: str | None = None,
    ) -> None:
        """``api_key``: requests must carry it as ``x-api-key`` or ``Authorization: Bearer``
        (the SDK 2.10.0 sends the latter); ``None`` disables the check. ``bearer_tokens``: extra
        tokens accepted as ``Authorization: Bearer <token>``. ``require_beta``: agents,
        environments and sessions calls must name ``managed-agents-2026-04-01`` in
        ``anthropic-beta`` (else 400). ``require_version``: every call must send
        ``anthropic-version``. ``uploads_downloadable``: let ``GET /v1/files/{id}/content`` serve
        uploads (the API answers 400 ``file_not_downloadable``; only agent outputs are
        downloadable — add those with ``add_output_file``). ``ping_interval``: send
        ``event: ping`` frames on idle streams. ``delta_chars``: text per ``event_delta`` preview.
        ``unique_names``: answer a create of an agent or environment whose name an existing one
        (live or archived) already holds with 409 ``conflict_error`` — whether the real API
        does is unverified, so this is opt-in (it makes name-collision recovery testable).
        ``webhook_url``: POST a signed webhook (``webhooks``) there whenever a session goes idle
        (``session.requires_action`` / ``session.status_idled``) or terminates, signed with
        ``webhook_secret`` (default: a fresh ``whsec_`` secret, ``self.webhook_secret``)."""
        self._script = list(script)
        self.api_key = api_key
        self._bearer_tokens = frozenset(bearer_tokens)
        self._require_beta = require_beta
        self._require_version = require_version
        self._uploads_downloadable = uploads_downloadable
        self._ping_interval = ping_interval
        self._delta_chars = max(1, delta_chars)
        self._unique_names = unique_names
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._init_loopback()
        self._faults: list[_Armed] = [_Armed(f, f.times, None) for f in faults]
        self.closed_idle = 0
        """Requests dropped unanswered by ``close_idle_connection``."""
        self.cut_heads = 0
        """Answers cut after their first bytes by ``cut_response_head``."""
        self._hangups = _HangupWatch(self._stopping)
        self._counter = 0
        self._ids: dict[str, int] = {}
        self._last_time = datetime.now(UTC)
        self._agents: dict[str, _Agent] = {}
        self._environments: dict[str, _Resource] = {}
        self._sessions: dict[str, _Session] = {}
        self._files: dict[str, _File] = {}
        self._timers: list[threading.Timer] = []
        self.requests: list[RecordedRequest] = []
        self.webhook_secret = webhook_secret or new_secret()
        """The secret deliveries are signed with (``build`` one with ``webhook_delivery``)."""
        self.webhooks = WebhookSender(webhook_url, self.webhook_secret) if webhook_url else None
        """The automatic deliveries (``webhooks.sent``, ``webhooks.wait(n)``), with ``webhook_url``."""
        self._work_init()  # the self-hosted work queue (``work_queue``)

    # -- lifecycle --

    def _before_close(self) -> None:
        if self.webhooks is not None:
            self.webhooks.close()
        with self._lock:
            for timer in self._timers:
                timer.cancel()
            for session in self._sessions.values():
                for sub in session.subscribers:
                    sub.queue.put(_END)
                session.subscribers.clear()
            self._changed.notify_all()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` — the SDK's ``base_url`` form (paths carry ``/v1``)."""
        return f"http://127.0.0.1:{self.port}"

    # -- test controls --

    def webhook_delivery(
        self,
        event_type: str,
        session_id: str,
        *,
        delivery_id: str | None = None,
        timestamp: float | None = None,
        secret: str | None = None,
    ) -> Delivery:
        """A signed delivery as the host would send it, not sent (tests send it, forge it,
        date it, replay it); signed with the emulator's secret unless ``secret`` is given."""
        return build(
            secret or self.webhook_secret,
            event_type,
            session_id,
            delivery_id=delivery_id,
            timestamp=timestamp,
        )

    def inject(self, *faults: CMAFault, session_id: str | None = None) -> None:
        """Arm faults, for every session (``session_id=None``) or for one."""
        with self._lock:
            self._faults.extend(_Armed(f, f.times, session_id) for f in faults)

    def script_session(self, session_id: str, script: Iterable[Turn]) -> None:
        """Give one session its own script (its next turn is the first of ``script``)."""
        with self._lock:
            session = self._session(session_id)
            session.script = list(script)
            session.turn_index = 0

    def emit(self, session_id: str, *events: ServerEvent) -> list[JSONDict]:
        """Emit server events now (outside any turn), e.g. to terminate a session."""
        with self._lock:
            session = self._session(session_id)
            return [self._emit(session, e) for e in events]

    def history(self, session_id: str) -> list[JSONDict]:
        """A copy of the session's stored events, oldest first."""
        with self._lock:
            return copy.deepcopy([e for _, e in self._session(session_id).history])

    def interrupts(self, session_id: str) -> list[JSONDict]:
        """The session's ``user.interrupt`` events as stored, oldest first (what a client sent to
        stop the agent: rma does when a run times out or is cancelled mid-request)."""
        with self._lock:
            events = [e for _, e in self._session(session_id).history if e["type"] == "user.interrupt"]
            return copy.deepcopy(events)

    def session(self, session_id: str) -> JSONDict:
        """A copy of the session object."""
        with self._lock:
            return copy.deepcopy(self._session_out(self._session(session_id)))

    @property
    def session_ids(self) -> list[str]:
        """Ids of the live (not deleted) sessions, oldest first."""
        with self._lock:
            return list(self._sessions)

    def subscribers(self, session_id: str) -> int:
        """How many event streams of the session are open."""
        with self._lock:
            return len(self._session(session_id).subscribers)

    def thread_subscribers(self, session_id: str, thread_id: str) -> int:
        """How many streams of one sub-agent thread are open."""
        with self._lock:
            thread = self._session(session_id).threads.get(thread_id)
            return 0 if thread is None else len(thread.subscribers)

    def thread_history(self, session_id: str, thread_id: str) -> list[JSONDict]:
        """A copy of one sub-agent thread's stored events, oldest first."""
        with self._lock:
            thread = self._session(session_id).threads.get(thread_id)
            return [] if thread is None else copy.deepcopy([e for _, e in thread.history])

    def wait_for_subscribers(self, session_id: str, count: int = 1, timeout: float = 5.0) -> None:
        """Block until at least ``count`` streams of the session are open."""
        with self._changed:
            if not self._changed.wait_for(
                lambda: session_id in self._sessions and len(self._sessions[session_id].subscribers) >= count,
                timeout,
            ):
                raise TimeoutError(f"fewer than {count} stream(s) on {session_id} after {timeout}s")

    def wait_for_event(
        self, session_id: str, event_type: str, timeout: float = 5.0, *, nth: int = 1
    ) -> JSONDict:
        """Block until the session's history holds ``nth`` events of ``event_type``; return the last."""

        def found() -> list[JSONDict]:
            session = self._sessions.get(session_id)
            events = [e for _, e in session.history] if session else []
            return [e for e in events if e.get("type") == event_type]

        with self._changed:
            if not self._changed.wait_for(lambda: len(found()) >= nth, timeout):
                raise TimeoutError(f"no {event_type} #{nth} on {session_id} after {timeout}s")
            return copy.deepcopy(found()[nth - 1])

    def add_output_file(
        self,
        session_id: str,
        filename: str,
        content: bytes | str,
        *,
        mime_type: str | None = None,
    ) -> JSONDict:
        """Store a file as if the agent wrote it under ``/mnt/session/outputs/``: scoped to the
        session and downloadable. Returns its metadata."""
        data = content.encode() if isinstance(content, str) else content
        with self._lock:
            self._session(session_id)
            meta = self._new_file(filename, data, mime_type, downloadable=True)
            meta["scope"] = {"type": "session", "id": session_id}
            return copy.deepcopy(meta)

    # -- request handling (server threads) --

    def _handle(self, h: LoopbackHandler) -> None:
        raw = h.read_body()
        headers = {k.lower(): v for k, v in h.headers.items()}
        body: Any = None
        if raw and headers.get("content-type", "").startswith("application/json"):
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
        url = urlsplit(h.path)
        path = url.path.rstrip("/") or "/"
        query = parse_qsl(url.query, keep_blank_values=True)
        reused = getattr(h, "_emu_served", 0) > 0
        h._emu_served = getattr(h, "_emu_served", 0) + 1  # type: ignore[attr-defined]
        with self._lock:
            idle_close = reused and self._take("close_idle", None, h.command, path) is not None
            if idle_close:
                self.closed_idle += 1
        if idle_close:
            h.close_connection = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(socket.SHUT_RDWR)
            return
        with self._lock:
            h.request_id = request_id = self._id("req")
            self.requests.append(RecordedRequest(h.command, h.path, headers, body, raw, request_id))
        try:
            reply = self._serve(h, path, query, headers, body, raw, request_id)
        except _Rejected as rejected:
            reply = self._error_reply(rejected, request_id)
        except _DISCONNECTS:
            h.close_connection = True
            return
        # Anything else (a scripted callable that raised, a bug) is answered by the loopback
        # handler: a 500 in ``_crash_reply``'s shape, or a cut connection mid-stream.
        if reply is None:
            return
        with self._lock:
            cut = self._take("cut_head", None, h.command, path)
            if cut is not None:
                self.cut_heads += 1
        if cut is not None:
            self._cut_head(h, cut)
            return
        with self._lock:
            slow = self._take("trickle", None, h.command, path)
        body = reply.body
        if slow is not None:
            body = body.ljust(slow.size, b" ")
        try:
            h.send_response(reply.status)
            h.send_header("Content-Type", reply.content_type)
            h.send_header("Content-Length", str(len(body)))
            h.send_header("request-id", request_id)
            for name, value in reply.headers.items():
                h.send_header(name, value)
            h.end_headers()
            if slow is None:
                h.wfile.write(body)
                return
            for i in range(len(body)):
                if self._stopping.wait(slow.delay or 0.0):
                    h.close_connection = True
                    return
                h.wfile.write(body[i : i + 1])
                h.wfile.flush()
        except _DISCONNECTS:
            h.close_connection = True

    @staticmethod
    def _cut_head(h: LoopbackHandler, fault: CMAFault) -> None:
        """``cut_response_head``: the first bytes of the head, then the connection reset (or
        closed) — after the request was processed, as a host that died mid-answer."""
        h.close_connection = True
        with contextlib.suppress(OSError):
            h.wfile.write(fault.head.encode("latin-1"))
            h.wfile.flush()
            if fault.reset:
                reset_after_delivery(h.connection)
            else:
                h.connection.shutdown(socket.SHUT_RDWR)

    def _serve(
        self,
        h: LoopbackHandler,
        path: str,
        query: list[tuple[str, str]],
        headers: Mapping[str, str],
        body: Any,
        raw: bytes,
        request_id: str,
    ) -> _Reply | None:
        method = h.command
        with self._lock:
            fault = self._take("status", None, method, path)
        if fault is not None:
            raise self._status_fault(fault)
        self._check_auth(headers)
        if self._require_version and not headers.get("anthropic-version"):
            raise _invalid("anthropic-version: header is required")
        parts = path.strip("/").split("/")
        if len(parts) < 2 or parts[0] != "v1":
            raise _Rejected(404, f"Not found: {method} {path}")
        if parts[1] in ("agents", "environments", "sessions") and self._require_beta:
            betas = {b.strip() for b in headers.get("anthropic-beta", "").split(",")}
            if BETA not in betas:
                raise _invalid(f"This endpoint requires the anthropic-beta header to include {BETA!r}.")
        if parts[1:] == ["files"] and method == "POST":
            with self._lock:
                return self._json(200, self._upload(headers, raw))
        if len(parts) == 5 and parts[1:3] == ["sessions", parts[2]] and parts[3:] == ["events", "stream"]:
            if method != "GET":
                raise _Rejected(404, f"Not found: {method} {path}")
            self._stream(h, parts[2], query, request_id)
            return None
        if len(parts) == 6 and parts[1] == "sessions" and parts[3] == "threads" and parts[5] == "stream":
            if method != "GET":
                raise _Rejected(404, f"Not found: {method} {path}")
            self._stream(h, parts[2], query, request_id, thread_id=parts[4])
            return None
        params = _Query(query)
        with self._lock:
            if parts[1] == "agents":
                return self._json(200, self._route_agents(method, parts[2:], params, body))
            if parts[1] == "environments" and len(parts) >= 5 and parts[3] == "work":
                return self._route_work(method, parts[2], parts[4:], params, body)
            if parts[1] == "environments":
                return self._json(200, self._route_environments(method, parts[2:], params, body))
            if parts[1] == "sessions":
                return self._json(200, self._route_sessions(method, parts[2:], params, body))
            if parts[1] == "files":
                return self._route_files(method, parts[2:], params)
        raise _Rejected(404, f"Not found: {method} {path}")

    def _check_auth(self, headers: Mapping[str, str]) -> None:
        if self.api_key is None and not self._bearer_tokens:
            return
        key = headers.get("x-api-key")
        authorization = headers.get("authorization", "")
        token = authorization[7:] if authorization[:7].lower() == "bearer " else None
        if self.api_key is not None and self.api_key in (key, token):
            return
        if token is not None and token in self._bearer_tokens:
            return
        if key is None and token is None:
            raise _Rejected(401, "x-api-key header is required", "authentication_error")
        raise _Rejected(401, "invalid x-api-key", "authentication_error")

    def _status_fault(self, fault: CMAFault) -> _Rejected:
        kind, message = _ERROR_TYPES.get(fault.status, ("api_error", "Error."))
        extra: dict[str, str] = {}
        if fault.retry_after is not None:
            extra["retry-after"] = fault.retry_after
        if fault.retry_after_ms is not None:
            extra["retry-after-ms"] = fault.retry_after_ms
        return _Rejected(fault.status, fault.message or message, fault.error_type or kind, headers=extra)

    def _crash_reply(self, h: LoopbackHandler, message: str) -> tuple[dict[str, str], bytes]:
        reply = self._error_reply(_Rejected(500, message, "api_error"), h.request_id)
        headers = {"Content-Type": reply.content_type, **reply.headers}
        if h.request_id is not None:
            headers["request-id"] = h.request_id
        return headers, reply.body

    def _error_reply(self, rejected: _Rejected, request_id: str | None) -> _Reply:
        error: JSONDict = {"type": rejected.error_type, "message": rejected.message}
        if rejected.error_code is not None:
            error["details"] = {"error_code": rejected.error_code}
        envelope = {"type": "error", "error": error, "request_id": request_id}
        return _Reply(rejected.status, json.dumps(envelope).encode(), headers=rejected.headers)
