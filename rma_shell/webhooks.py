"""A webhook receiver: the host's signed ``session.*`` deliveries resume journaled sessions.

``WebhookReceiver`` is a plain ASGI app (no web framework needed: mount it in Starlette,
FastAPI or any ASGI server, or serve it alone with uvicorn/hypercorn). A ``POST`` is verified
(``rma.webhooks.verify``: Standard Webhooks signature, timestamp tolerance) and checked against
the deliveries already taken (``DeliveryLog``: a replay is refused); then a
``session.requires_action`` or ``session.status_idled`` event resumes the journaled session
it names — the journal maps the host's session id to the journal key (its ``Opened`` event) —
with ``agent.resume(key)`` in a task group the app's lifespan owns, and the delivery is
answered ``202`` at once: the host never waits on a tool. One resume per key at a time; a
delivery for a key being resumed asks for one more resume after it (never two at once).

Answers: ``202`` resuming; ``200`` taken but nothing to do (another event type, a session no
journal holds, a delivery already taken — a host retry reuses its id, and a retry after a
lost ``2xx`` must not fail); ``400`` refused (forged, stale, malformed; the body names the
reason); ``503`` when the lifespan has not started (no task group to run a resume in).

Not the verification (``rma.webhooks``, pure) and not a resume policy: what a resume does —
run tools, pause again on undecided approvals, end — is ``rma_shell.resuming``'s.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final

import anyio
import anyio.abc
from returns.result import Failure, Result

from rma.errors import SessionError
from rma.vocabulary import SessionResult
from rma.webhooks import (
    DEFAULT_TOLERANCE_S,
    SESSION_REQUIRES_ACTION,
    SESSION_STATUS_IDLED,
    DeliveryLog,
    WebhookEvent,
    WebhookRejected,
    signing_key,
    verify,
)
from rma_shell.journal.setup import opened

log = logging.getLogger("rma.webhooks")

RESUMING_EVENTS: Final = frozenset({SESSION_REQUIRES_ACTION, SESSION_STATUS_IDLED})
"""The event types that resume the session they name."""

MAX_BODY_BYTES: Final = 1024 * 1024
"""A delivery's body is a small JSON event; more is refused unread (413)."""

Outcome = Result[SessionResult, SessionError]
OnOutcome = Callable[[str, WebhookEvent, Outcome], Awaitable[None] | None]


def journal_key_of(journal: object, session_id: str) -> str | None:
    """The key of the journal whose session is the host's ``session_id``, or None.

    Reads each key's records up to its ``Opened`` event (the first events of a journal), so a
    lookup costs a few records per key; the receiver caches what it found.
    """
    held = opened(journal)
    if isinstance(held, Failure):
        return None
    store = held.unwrap().store
    try:
        for key in store.keys():  # noqa: SIM118 - a JournalStore's keys, not a dict's
            if _opened_session(store.rows(key)) == session_id:
                return key
    finally:
        held.unwrap().release()
    return None


def _opened_session(rows: Any) -> str | None:
    for _seq, text, _chain in rows:
        record = json.loads(text)
        if record.get("kind") != "event":
            continue
        event = record.get("event")
        if isinstance(event, dict) and event.get("$type") == "Opened":
            found = event.get("session_id")
            return found if isinstance(found, str) else None
    return None


class WebhookReceiver:
    """An ASGI app resuming ``agent``'s journaled sessions on the host's webhook deliveries.

    ``agent``: an ``rma_shell.Agent`` with ``journal=`` (or any object with ``resume(key)``
    and a ``journal``). ``secret``: the endpoint's signing secret (``whsec_…``). ``journal``:
    where to look session ids up (default: the agent's). ``on_outcome(key, event, outcome)``:
    called (sync or async) with each resume's outcome. ``clock``: Unix seconds (tests).
    """

    def __init__(
        self,
        agent: Any,
        *,
        secret: str | bytes,
        journal: object = None,
        path: str = "/",
        tolerance: float = DEFAULT_TOLERANCE_S,
        on_outcome: OnOutcome | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not callable(getattr(agent, "resume", None)):
            raise TypeError(f"agent must have a resume(journal_key) method, got {type(agent).__name__}")
        signing_key(secret)  # a bad secret is refused now, not on the first delivery
        self._journal = journal if journal is not None else getattr(agent, "journal", None)
        if self._journal is None:
            raise TypeError("the receiver needs a journal: Agent(journal=...) or journal=")
        self._agent = agent
        self._secret = secret
        self._path = path
        self._on_outcome = on_outcome
        self._clock = clock
        self._log = DeliveryLog(tolerance)
        self._tolerance = tolerance
        self._keys: dict[str, str] = {}
        self._running: dict[str, bool] = {}  # key -> another resume asked for meanwhile
        self._group: anyio.abc.TaskGroup | None = None
        self._idle: anyio.Event | None = None  # made in the lifespan: built outside a loop is fine

    # ── the lifespan: the task group the resumes run in ──

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[WebhookReceiver]:
        """Own the task group resumes run in. An ASGI server's lifespan enters this; enter it
        yourself when you drive the app another way. Leaving cancels resumes in flight — each
        is journaled, so the next delivery (or a ``resume``) carries it on."""
        async with anyio.create_task_group() as group:
            self._group = group
            self._idle = anyio.Event()
            self._idle.set()
            try:
                yield self
            finally:
                self._group = None
                group.cancel_scope.cancel()

    async def settled(self) -> None:
        """Wait until no resume is running or asked for (tests, graceful shutdowns)."""
        while self._idle is not None and not self._idle.is_set():
            await self._idle.wait()

    # ── one delivery ──

    async def deliver(self, headers: Mapping[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        """Verify one delivery and act on it: ``(status, JSON body)`` to answer with."""
        now = self._clock()
        verified = verify(self._secret, headers, body, now=now, tolerance=self._tolerance)
        if isinstance(verified, Failure):
            return self._refused(verified.failure())
        event = verified.unwrap()
        taken = self._log.take(event, now)
        if isinstance(taken, Failure):
            log.info("webhook delivery %s refused: replayed", event.delivery_id)
            return 200, {"status": "duplicate", "reason": "replayed"}
        if event.type not in RESUMING_EVENTS or event.session_id is None:
            self._log = taken.unwrap()
            return 200, {"status": "ignored", "type": event.type}
        if self._group is None:
            # Not taken: the host retries the same delivery once the app is up.
            return 503, {"status": "unavailable", "detail": "the receiver's lifespan has not started"}
        self._log = taken.unwrap()
        key = await self._key_of(event.session_id)
        if key is None:
            return 200, {"status": "ignored", "detail": f"no journal holds session {event.session_id}"}
        if key in self._running:
            self._running[key] = True  # one more resume once the current one ends
            return 202, {"status": "resuming", "journal_key": key}
        self._running[key] = False
        if self._idle is None or self._idle.is_set():
            self._idle = anyio.Event()
        self._group.start_soon(self._resume, key, event)
        return 202, {"status": "resuming", "journal_key": key}

    def _refused(self, rejected: WebhookRejected) -> tuple[int, dict[str, Any]]:
        log.warning("webhook delivery refused: %s", rejected)
        return 400, {"status": "refused", "reason": rejected.reason, "detail": rejected.detail}

    async def _key_of(self, session_id: str) -> str | None:
        key = self._keys.get(session_id)
        if key is None:
            key = await anyio.to_thread.run_sync(journal_key_of, self._journal, session_id)
            if key is not None:
                self._keys[session_id] = key
        return key

    async def _resume(self, key: str, event: WebhookEvent) -> None:
        try:
            while True:
                try:
                    outcome = await self._agent.resume(key)
                except Exception:  # a resume's failures are values; anything else is a bug, logged
                    log.exception("resume of %s raised; the receiver carries on", key)
                    break
                await self._report(key, event, outcome)
                if not self._running.get(key):
                    break
                self._running[key] = False
        finally:
            self._running.pop(key, None)
            if not self._running and self._idle is not None:
                self._idle.set()

    async def _report(self, key: str, event: WebhookEvent, outcome: Outcome) -> None:
        if isinstance(outcome, Failure):
            log.info("resume of %s after %s: %s", key, event.type, outcome.failure())
        if self._on_outcome is None:
            return
        try:
            done = self._on_outcome(key, event, outcome)
            if done is not None:
                await done
        except Exception:
            log.exception("on_outcome raised; the receiver carries on")

    # ── ASGI ──

    async def __call__(self, scope: Mapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope.get("path") != self._path:
            await _answer(send, 404, {"status": "not_found"})
            return
        if scope.get("method") != "POST":
            await _answer(send, 405, {"status": "method_not_allowed"})
            return
        body = await _body(receive)
        if body is None:
            await _answer(send, 413, {"status": "too_large"})
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        status, answer = await self.deliver(headers, body)
        await _answer(send, status, answer)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        async with self.running():
            await send({"type": "lifespan.startup.complete"})
            while (await receive())["type"] != "lifespan.shutdown":
                pass
        await send({"type": "lifespan.shutdown.complete"})


async def _body(receive: Any) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _answer(send: Any, status: int, body: Mapping[str, Any]) -> None:
    data = json.dumps(dict(body)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})
