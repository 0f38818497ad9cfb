"""Verifying Claude Managed Agents webhook deliveries: the Standard Webhooks scheme. Pure.

The host signs each delivery as the ``anthropic`` SDK's ``client.beta.webhooks.unwrap`` checks
it (through the ``standardwebhooks`` package): headers ``webhook-id``, ``webhook-timestamp``
(Unix seconds) and ``webhook-signature`` — one or more space-separated ``v1,<base64>``
signatures, each an HMAC-SHA256 under the signing key of ``"<id>.<timestamp>.<body>"``. The
key is the secret's base64 after its ``whsec_`` prefix. A timestamp more than ``tolerance``
seconds (5 minutes) from now, before or after, is refused; so is a body that is not a webhook
event. ``verify`` takes the clock's reading as an argument — the core has no clock — and
returns the event or a ``WebhookRejected`` naming why.

Replays: a signature stays valid for as long as its timestamp is within the tolerance, so a
captured delivery could be sent again in that window. ``DeliveryLog`` remembers the ids of the
deliveries taken for two tolerances (a replay after that is refused as stale) and refuses
an id seen again. Not the receiver (``rma_shell.webhooks``): no HTTP, no resume.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
from collections.abc import Mapping
from typing import Final, Literal

import attrs
from returns.result import Failure, Result, Success

from rma.vocabulary import JSON

SECRET_PREFIX: Final = "whsec_"
DEFAULT_TOLERANCE_S: Final = 300.0
"""How far a delivery's timestamp may be from now (the SDK's: 5 minutes, either way)."""

SESSION_REQUIRES_ACTION: Final = "session.requires_action"
SESSION_STATUS_IDLED: Final = "session.status_idled"

Reason = Literal[
    "missing_headers", "bad_timestamp", "stale", "too_new", "bad_signature", "malformed", "replayed"
]


@attrs.frozen(auto_exc=False)
class WebhookRejected(Exception):
    """A delivery refused: ``reason`` is the stable tag (``bad_signature``, ``stale``,
    ``replayed`` …), ``detail`` the words."""

    reason: Reason
    detail: str = ""
    delivery_id: str | None = None

    def __str__(self) -> str:
        return (
            f"webhook rejected ({self.reason}): {self.detail}"
            if self.detail
            else f"webhook rejected ({self.reason})"
        )


@attrs.frozen
class WebhookEvent:
    """A verified delivery: the event's ``type`` (``data.type``, e.g. ``session.requires_action``),
    the resource it names (``data.id``: a session id for ``session.*`` events), the event's own
    ``id`` and ``created_at``, the delivery's id and timestamp, and the payload whole."""

    type: str
    resource_id: str | None
    id: str | None
    created_at: str | None
    delivery_id: str
    timestamp: int
    raw: JSON = attrs.field(eq=False, repr=False)

    @property
    def session_id(self) -> str | None:
        """The session the event is about, for ``session.*`` events."""
        return self.resource_id if self.type.startswith("session.") else None


class InvalidSecret(ValueError):
    """The signing secret is not ``whsec_`` + base64 (or bytes), or is empty."""


def signing_key(secret: str | bytes) -> bytes:
    """The HMAC key of ``secret``: bytes as they are; a string's base64 after ``whsec_``."""
    if isinstance(secret, bytes):
        key = secret
    elif isinstance(secret, str):
        text = secret[len(SECRET_PREFIX) :] if secret.startswith(SECRET_PREFIX) else secret
        try:
            key = base64.b64decode(text + "==")  # unpadded base64 is accepted, as the SDK does
        except (binascii.Error, ValueError) as exc:
            raise InvalidSecret(f"webhook secret is not whsec_ + base64 ({exc})") from exc
    else:
        raise InvalidSecret(f"webhook secret must be str or bytes, got {type(secret).__name__}")
    if not key:
        raise InvalidSecret("webhook secret may not be empty")
    return key


def sign(secret: str | bytes, delivery_id: str, timestamp: int, body: bytes) -> str:
    """The ``v1,<base64>`` signature of ``body`` sent as delivery ``delivery_id`` at ``timestamp``."""
    signed = f"{delivery_id}.{timestamp}.".encode() + body
    digest = hmac.new(signing_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def verify(
    secret: str | bytes,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float,
    tolerance: float = DEFAULT_TOLERANCE_S,
) -> Result[WebhookEvent, WebhookRejected]:
    """The event ``body`` carries, if ``headers`` sign it under ``secret`` at a time within
    ``tolerance`` seconds of ``now``; else why not. Header names are matched in any case."""
    lower = {k.lower(): v for k, v in headers.items()}
    delivery_id, stamp, signatures = (
        lower.get("webhook-id"),
        lower.get("webhook-timestamp"),
        lower.get("webhook-signature"),
    )
    if not (delivery_id and stamp and signatures):
        return Failure(
            WebhookRejected("missing_headers", "webhook-id, webhook-timestamp and webhook-signature")
        )
    try:
        sent = float(stamp)
        if not math.isfinite(sent):
            raise ValueError(stamp)
    except ValueError:
        return Failure(WebhookRejected("bad_timestamp", f"not a Unix time: {stamp[:40]!r}", delivery_id))
    if sent < now - tolerance:
        return Failure(
            WebhookRejected("stale", f"sent {now - sent:.0f} s ago (tolerance {tolerance:g} s)", delivery_id)
        )
    if sent > now + tolerance:
        return Failure(
            WebhookRejected(
                "too_new", f"dated {sent - now:.0f} s ahead (tolerance {tolerance:g} s)", delivery_id
            )
        )
    timestamp = math.floor(sent)
    expected = sign(secret, delivery_id, timestamp, body).encode()
    if not any(hmac.compare_digest(expected, given.encode()) for given in signatures.split(" ")):
        return Failure(WebhookRejected("bad_signature", "no signature matches", delivery_id))
    return parse(body, delivery_id, timestamp)


def parse(body: bytes, delivery_id: str, timestamp: int) -> Result[WebhookEvent, WebhookRejected]:
    """The event of a verified body (``{"type": "event", "id", "created_at", "data": {"type", "id", …}}``)."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        return Failure(WebhookRejected("malformed", f"body is not JSON ({exc})", delivery_id))
    data = payload.get("data") if isinstance(payload, dict) else None
    kind = data.get("type") if isinstance(data, dict) else None
    if not isinstance(kind, str) or not kind:
        return Failure(
            WebhookRejected("malformed", "body is not a webhook event (no data.type)", delivery_id)
        )
    assert isinstance(data, dict) and isinstance(payload, dict)
    resource = data.get("id")
    event_id, created = payload.get("id"), payload.get("created_at")
    return Success(
        WebhookEvent(
            type=kind,
            resource_id=resource if isinstance(resource, str) else None,
            id=event_id if isinstance(event_id, str) else None,
            created_at=created if isinstance(created, str) else None,
            delivery_id=delivery_id,
            timestamp=timestamp,
            raw=payload,
        )
    )


@attrs.frozen
class DeliveryLog:
    """The delivery ids taken, with their timestamps, kept for ``2 × tolerance``: ``take``
    returns the log with the delivery added, or ``WebhookRejected("replayed")`` for an id it
    holds. A frozen value: the receiver keeps the latest."""

    tolerance: float = DEFAULT_TOLERANCE_S
    seen: Mapping[str, int] = attrs.field(factory=dict)

    def take(self, event: WebhookEvent, now: float) -> Result[DeliveryLog, WebhookRejected]:
        if event.delivery_id in self.seen:
            return Failure(WebhookRejected("replayed", "this delivery was taken already", event.delivery_id))
        horizon = now - 2 * self.tolerance
        kept = {k: t for k, t in self.seen.items() if t >= horizon}
        kept[event.delivery_id] = event.timestamp
        return Success(DeliveryLog(self.tolerance, kept))
