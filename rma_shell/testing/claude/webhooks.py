"""The emulator's webhook deliveries: signed ``session.*`` events POSTed to a loopback URL.

As the host does (Standard Webhooks, as the ``anthropic`` SDK's ``webhooks.unwrap`` verifies):
each delivery has a ``webhook-id`` (``msg_…``), a ``webhook-timestamp`` (Unix seconds) and a
``webhook-signature`` ``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">`` under the
secret's key (the base64 after ``whsec_``). The body is a ``BetaWebhookEvent``: ``{"type":
"event", "id", "created_at", "data": {"type", "id", "organization_id", "workspace_id"}}``.

Written from the scheme, not from rma's verifier, so the tests cross-check the two. Automatic
deliveries (an emulator given ``webhook_url``) go out from one worker thread in the order the
events happened, never under the emulator's lock: a receiver may call the emulator back.
``build`` makes a delivery without sending it (forged, stale and replayed ones for tests).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import queue
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import attrs

ORGANIZATION_ID = "org_emulator"
WORKSPACE_ID = "wrkspc_emulator"


def new_secret() -> str:
    """A fresh signing secret in the host's form: ``whsec_`` + base64 of 24 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode("ascii")


@attrs.frozen
class Delivery:
    """One delivery: its headers and body, and — once sent — the receiver's answer."""

    headers: Mapping[str, str]
    body: bytes
    status: int | None = None
    answer: bytes = b""

    @property
    def payload(self) -> Any:
        return json.loads(self.body)


def build(
    secret: str,
    event_type: str,
    resource_id: str,
    *,
    delivery_id: str | None = None,
    timestamp: float | None = None,
    now: Callable[[], float] = time.time,
) -> Delivery:
    """A signed delivery of ``event_type`` about ``resource_id`` (a session id for ``session.*``)."""
    sent = int(now() if timestamp is None else timestamp)
    body = json.dumps(
        {
            "type": "event",
            "id": "wevt_" + secrets.token_hex(12),
            "created_at": datetime.fromtimestamp(sent, UTC).isoformat().replace("+00:00", "Z"),
            "data": {
                "type": event_type,
                "id": resource_id,
                "organization_id": ORGANIZATION_ID,
                "workspace_id": WORKSPACE_ID,
            },
        }
    ).encode()
    msg_id = delivery_id or "msg_" + secrets.token_hex(12)
    text = secret[len("whsec_") :] if secret.startswith("whsec_") else secret
    key = base64.b64decode(text + "==")
    digest = hmac.new(key, f"{msg_id}.{sent}.".encode() + body, hashlib.sha256).digest()
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(sent),
        "webhook-signature": "v1," + base64.b64encode(digest).decode("ascii"),
        "content-type": "application/json",
    }
    return Delivery(headers, body)


def post(url: str, delivery: Delivery, *, timeout: float = 10.0) -> Delivery:
    """Send ``delivery`` to ``url`` (http on loopback) and return it with the answer."""
    where = urllib.parse.urlsplit(url)
    if where.scheme != "http" or where.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"the emulator delivers webhooks to loopback http URLs only, got {url!r}")
    conn = http.client.HTTPConnection(where.hostname, where.port or 80, timeout=timeout)
    try:
        conn.request("POST", where.path or "/", body=delivery.body, headers=dict(delivery.headers))
        response = conn.getresponse()
        return attrs.evolve(delivery, status=response.status, answer=response.read())
    finally:
        conn.close()


class WebhookSender:
    """Automatic deliveries of one emulator, sent in order from a worker thread."""

    def __init__(self, url: str, secret: str) -> None:
        self.url = url
        self.secret = secret
        self.sent: list[Delivery] = []
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._done = threading.Condition()
        self._pending = 0
        self._thread = threading.Thread(target=self._work, name="cma-webhooks", daemon=True)
        self._thread.start()

    def enqueue(self, event_type: str, resource_id: str) -> None:
        with self._done:
            self._pending += 1
        self._queue.put((event_type, resource_id))

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            delivery = build(self.secret, *item)
            try:
                delivery = post(self.url, delivery)
            except OSError as exc:  # the receiver is down: recorded unanswered, as a failed try
                delivery = attrs.evolve(delivery, answer=repr(exc).encode())
            with self._done:
                self.sent.append(delivery)
                self._pending -= 1
                self._done.notify_all()

    def wait(self, count: int, timeout: float = 10.0) -> list[Delivery]:
        """The first ``count`` deliveries once they are answered (or ``TimeoutError``)."""
        with self._done:
            if not self._done.wait_for(lambda: len(self.sent) >= count, timeout):
                raise TimeoutError(f"{len(self.sent)} of {count} webhook deliveries after {timeout} s")
            return list(self.sent[:count])

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)


def event_for(server_event: Mapping[str, Any]) -> str | None:
    """The webhook event type a session's server event causes, if any."""
    kind = server_event.get("type")
    if kind == "session.status_idle":
        stop = server_event.get("stop_reason") or {}
        return "session.requires_action" if stop.get("type") == "requires_action" else "session.status_idled"
    if kind == "session.status_terminated":
        return "session.status_terminated"
    return None
